//! Project automation, in Rust so that it runs wherever cargo does, on clap:
//! `cargo xtask --help` lists the tasks, `cargo xtask TASK --help` their options.
//!
//! ```text
//! cargo xtask ci                 every check CI runs: system packages, fmt, clippy, tests,
//!                                the guests (numa, clock, arm64), the aarch64 build,
//!                                simd's scalar paths under Miri
//! cargo xtask fuzz [SECONDS]     a short run of every cargo-fuzz target (nightly)
//! cargo xtask loadtest [--quick]  ioserve against nginx and Go's FileServer (wrk);
//!                                 --cold: hot requests beside cold downloads
//! cargo xtask numa-vm            numa in 2- and 4-node qemu guests
//! cargo xtask clock-vm           probe's clock checks under tsc, hpet and acpi_pm guests
//! cargo xtask arm64-vm           simd, numa, probe and ioserve on Debian's arm64 kernel
//! cargo xtask bench [--quick]    criterion benches + Go peers -> target/bench-report
//! cargo xtask cross [--smoke]    aarch64 binaries and bench executables in a tarball
//! cargo xtask vmlinux [--btf F]  regenerate probe's vmlinux.h from the kernel's BTF
//! cargo xtask dist [--out DIR]   shell completions and man pages of ioserve, numa, probe
//! cargo xtask udpload [--quick]  SNTP servers under load: timeserve, chrony, Go (seed 002)
//! cargo xtask probe-overhead     dd under probe, strace -c and perf trace (as root)
//! cargo xtask hash-quality       simd's hash beside foldhash-quality and gxhash
//! ```

mod aarch64;
mod arm64_vm;
mod bench;
mod clock_vm;
mod cpio;
mod cross;
mod guest;
mod hash_quality;
mod loadtest;
mod numa_serving;
mod numa_vm;
mod probe_overhead;
mod stats;
mod svg;
mod udpload;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

/// Debian packages the checks need, with the command each provides.
/// probe's build needs clang (its BPF programs), libelf, zlib, pkg-config and make
/// (the vendored libbpf); its tests compare with strace and list programs with bpftool.
/// The simd bench's simdutf peer is C++ (g++; clippy builds it with all targets).
/// timeserve's tests query it with chronyd -Q and ntpdig (the latter inside a network
/// namespace made with unshare and ip).
const SYSTEM_PACKAGES: &[(&str, &str)] = &[
    ("chrony", "/usr/sbin/chronyd"),
    ("ntpsec-ntpdig", "ntpdig"),
    ("iproute2", "ip"),
    ("haproxy", "/usr/sbin/haproxy"),
    ("goaccess", "goaccess"),
    ("curl", "curl"),
    ("man-db", "man"),
    ("brotli", "brotli"),
    ("systemd", "systemd-socket-activate"),
    ("prometheus", "promtool"),
    ("strace", "strace"),
    ("numactl", "numactl"),
    ("clang", "clang"),
    ("libelf-dev", "/usr/include/libelf.h"),
    ("zlib1g-dev", "/usr/include/zlib.h"),
    ("pkg-config", "pkg-config"),
    ("make", "make"),
    ("g++", "g++"),
    ("bpftool", "/usr/sbin/bpftool"),
];

/// The cargo-fuzz targets: (crate directory, target).
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("crates/ioserve", "range_header"),
    ("crates/ioserve", "request_path"),
    ("crates/simd", "base64_decode"),
    ("crates/simd", "base64_encode"),
    ("crates/simd", "count"),
    ("crates/simd", "adler32"),
    ("crates/simd", "hash"),
    ("crates/timeserve", "ntp_packet"),
];

/// `cargo xtask`: the command line, one subcommand per task, each with its own
/// `--help`.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Project automation: CI, benchmarks, load tests, guests, cross builds",
    disable_help_subcommand = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) task: Task,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Task {
    /// Every check CI runs: packages, fmt, clippy, tests, guests, aarch64, Miri
    ///
    /// Install missing system packages (as root), then cargo fmt --check, clippy -D
    /// warnings, cargo test for the whole workspace, the numa-vm and clock-vm guests,
    /// the workspace built for aarch64, the arm64-vm guest (simd's tests run there,
    /// with AES and with SIMD_DISABLE=aes), and simd's scalar paths under Miri
    /// (nightly, installed when missing)
    Ci,
    /// Criterion benches and Go peers -> target/bench-report
    ///
    /// Run the criterion benches (and Go's sync.Map) and the read-strategy bench, then
    /// write target/bench-report/report.md (a table per group with the ratio of ours to
    /// the best peer), results.json and an SVG chart per group
    Bench(bench::Options),
    /// aarch64 binaries and bench executables in a tarball
    ///
    /// Build ioserve, numa and the criterion bench executables for aarch64 (with cross
    /// when a container engine runs, else rustup target + gcc cross linker) into
    /// target/cross/ioserve-toolkit-aarch64.tar.gz with a run script
    Cross(cross::Options),
    /// A short run of every cargo-fuzz target (nightly)
    ///
    /// Run each cargo-fuzz target for SECONDS; needs nightly, installs cargo-fuzz when
    /// missing
    Fuzz {
        /// Seconds per target
        #[arg(default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
    },
    /// ioserve against nginx and Go's FileServer (wrk), and memory per connection
    ///
    /// ioserve (every strategy) against nginx and Go's FileServer with wrk on 127.0.0.1:
    /// 8 MiB and 4 KiB files at 100 connections, random 1 MiB ranges at 16; medians over
    /// rounds, ratios to nginx; then memory per connection with idle and downloading
    /// clients; writes target/loadtest/{report.md,results.json,chart.svg}
    Loadtest(loadtest::Args),
    /// SNTP servers under load: timeserve, chrony, Go (seed 002)
    ///
    /// SNTP servers under offered load on 127.0.0.1 (seed 002): timeserve with 1 and N
    /// SO_REUSEPORT sockets, chrony, the seed's Go server (1 and N); answered/s, loss,
    /// p50/p99 and the kernel's RcvbufErrors per step (medians of runs), into
    /// target/udpload/{report.md,results.json,chart.svg}
    Udpload(udpload::Args),
    /// dd under probe, strace -c and perf trace (as root)
    ///
    /// What tracing costs: dd bs=4k bare and under probe syscalls (count-only and
    /// --latency), strace -c and perf trace -s, interleaved rounds, median GB/s and
    /// ratio to bare; as root
    ProbeOverhead(probe_overhead::Options),
    /// Regenerate probe's vmlinux.h from the kernel's BTF
    ///
    /// Regenerate crates/probe/src/bpf/vmlinux.h (committed, so that building probe
    /// needs clang but not bpftool) from a BTF file; installs bpftool when missing
    Vmlinux {
        /// The BTF to dump
        #[arg(long, value_name = "PATH", default_value = "/sys/kernel/btf/vmlinux")]
        btf: PathBuf,
    },
    /// Shell completions and man pages of ioserve, numa and probe
    ///
    /// Write bash, zsh and fish completions and man pages (one per probe command, and
    /// numa stat's) from the programs' clap definitions, with the cli-docs crate, under
    /// OUT: man/man1/*.1 and completions/{bash,zsh,fish}/ (the cross tarball carries
    /// them under share/)
    Dist {
        /// Output directory
        #[arg(long, value_name = "DIR", default_value = "target/dist")]
        out: PathBuf,
    },
    /// numa in 2- and 4-node qemu guests
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) with 2 and 4 NUMA nodes and
    /// check numa's binding, --hardware/--show and stat inside (installs
    /// qemu-system-x86 and busybox-static; part of ci)
    NumaVm,
    /// probe's clock checks in guests booted with tsc, hpet and acpi_pm (seed 004)
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) three times, with
    /// clocksource=tsc (tsc=reliable), hpet and acpi_pm: probe clock and probe doctor
    /// must tell the vDSO from the syscall fallback, a static Go program's time.Now
    /// traced with probe syscalls --comm must make clock_gettime syscalls only under
    /// hpet and acpi_pm, CachedClock is timed against Instant::now, and probe's BPF
    /// programs must load and count exactly on that kernel (part of ci)
    ClockVm,
    /// simd, numa, probe and ioserve on Debian's arm64 kernel (qemu TCG)
    ///
    /// Boot Debian's arm64 kernel under qemu-system-aarch64 (TCG, virt, -cpu max, two
    /// NUMA nodes) with static aarch64 builds: simd's tests natively and with
    /// SIMD_DISABLE=aes, numa-vm's checks, probe's programs loading and counting on
    /// that kernel, probe clock, and ioserve serving over loopback while probe judges
    /// sendfile zero-copy and read copying (part of ci)
    Arm64Vm,
    /// The simd hash's full quality suite beside foldhash-quality and gxhash
    ///
    /// Run simd's quality suite (avalanche at every key length to 128 and beyond, seed
    /// avalanche, bit independence, sparse keys with up to 3 bits set, appended zeros,
    /// cyclic keys, (key, seed) grids) on ours, foldhash's quality variant and gxhash,
    /// built for this CPU; print the table and write it to
    /// <target dir>/hash-quality/table.md
    HashQuality(hash_quality::Options),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Ci => ci(),
        Task::Fuzz { seconds } => fuzz(seconds),
        Task::NumaVm => numa_vm::run(),
        Task::ClockVm => clock_vm::run(),
        Task::Arm64Vm => arm64_vm::run().map(drop),
        Task::Vmlinux { btf } => vmlinux(&btf),
        Task::Dist { out } => dist(&out),
        Task::ProbeOverhead(options) => probe_overhead::run(&options),
        Task::Bench(options) => bench::run(&options),
        Task::Cross(options) => cross::run(&options),
        Task::Loadtest(args) => loadtest::run(&args.resolve()),
        Task::Udpload(args) => udpload::run(&args.resolve()),
        Task::HashQuality(options) => hash_quality::run(&options),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> Result<()> {
    let started = Instant::now();
    ensure_packages(SYSTEM_PACKAGES)?;
    ensure_rustup_components(&["rustfmt", "clippy"])?;
    step("cargo fmt", cargo(&["fmt", "--all", "--", "--check"]))?;
    step(
        "cargo clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    publishable()?;
    // probe's tests load BPF programs: as root they must run, not skip.
    let probe_env: &[(&str, &str)] = if is_root() {
        &[("PROBE_TESTS_REQUIRE_ROOT", "1")]
    } else {
        eprintln!("xtask: not root: probe's BPF tests will skip themselves");
        &[]
    };
    let mut totals = cargo_test(&["test", "--workspace"], probe_env)?;
    totals.add(&simd_for_this_cpu()?);
    hash_quality::ci_embedding_checks()?;
    numa_vm::run()?;
    clock_vm::run()?;
    aarch64::ci_lane()?;
    totals.add(&arm64_vm::run()?);
    totals.add(&miri()?);
    eprintln!("xtask ci: all checks passed in {:.0?}", started.elapsed());
    // The closing line: the sum over every test binary and doc-test run.
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    Ok(())
}

/// The libraries as they are published: numa and probe lint clean without their `cli`
/// feature (what an embedding service builds), and duration-arg, ioserve-simd and
/// ioserve-numa package and build from their packaged sources (`cargo publish
/// --dry-run`, which builds each against the others' packages).
fn publishable() -> Result<()> {
    step(
        "cargo clippy --no-default-features (ioserve-numa, ioserve-probe libraries)",
        cargo(&[
            "clippy",
            "--package",
            "ioserve-numa",
            "--package",
            "ioserve-probe",
            "--no-default-features",
            "--lib",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    step(
        "cargo publish --dry-run (duration-arg, ioserve-simd, ioserve-numa)",
        cargo(&[
            "publish",
            "--dry-run",
            // A local run may have uncommitted changes; what is checked is the package.
            "--allow-dirty",
            "--package",
            "duration-arg",
            "--package",
            "ioserve-simd",
            "--package",
            "ioserve-numa",
        ]),
    )
}

/// Test counts summed over the `test result:` lines of a cargo test run.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TestTotals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestTotals {
    pub(crate) fn add(&mut self, other: &TestTotals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }

    /// Adds the counts of one `test result: ok. 3 passed; 0 failed; 1 ignored; ...` line.
    pub(crate) fn add_line(&mut self, line: &str) {
        let Some(counts) = line.strip_prefix("test result: ") else {
            return;
        };
        for field in counts.split(['.', ';']) {
            let mut words = field.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}

/// Runs cargo test with extra environment variables, echoing its output, and sums
/// its results.
pub(crate) fn cargo_test(args: &[&str], env: &[(&str, &str)]) -> Result<TestTotals> {
    let shown_env: String = env
        .iter()
        .map(|(name, value)| format!("{name}={value} "))
        .collect();
    let mut command = cargo(args);
    command.envs(env.iter().copied());
    run_tests(command, &format!("{shown_env}cargo {}", args.join(" ")))
}

/// Runs a test command (`shown` is how to print it), echoing its output, and sums
/// its results.
pub(crate) fn run_tests(mut command: Command, shown: &str) -> Result<TestTotals> {
    use std::io::BufRead as _;
    eprintln!("xtask: {shown}");
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let mut totals = TestTotals::default();
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "cargo test failed ({status}): {} passed, {} failed",
            totals.passed,
            totals.failed
        );
    }
    if totals.passed == 0 {
        bail!("cargo test ran no test");
    }
    eprintln!("xtask: cargo test ok ({:.1?})", started.elapsed());
    Ok(totals)
}

/// The simd tests Miri runs: the scalar paths (under Miri, CPU detection reports only
/// the baseline features, so the kernels dispatch to scalar code, and SSE2 for count),
/// with inputs small enough to interpret.
const MIRI_TESTS: &[&str] = &[
    "rfc_4648",
    "lengths_no_encoding",
    "set_bits_below",
    "short_outputs",
    "errors_say",
    "the_alphabets",
    "adler32_equals_zlib",
    "adler32_streams",
    "dispatch_reports",
    "a_choice_starts_at_detect",
    "round_matches_fips",
];

/// Runs simd's tests built with `-C target-cpu=native`: the paths that such builds call
/// in line instead of through the dispatcher (the hash's AES path, the AVX-512 VBMI
/// base64 encoder, where this CPU has them) are compiled only there.
fn simd_for_this_cpu() -> Result<TestTotals> {
    let args = ["test", "--package", "ioserve-simd"];
    let mut command = cargo(&args);
    for_this_cpu(&mut command);
    run_tests(
        command,
        &format!(
            "RUSTFLAGS=\"-C target-cpu=native\" cargo {}",
            args.join(" ")
        ),
    )
}

/// Builds for this CPU (`-C target-cpu=native`, and `-march=native` for C++ such as
/// simdutf), appended to any flags already set, in `target/native` so that neither
/// build invalidates the other.
pub(crate) fn for_this_cpu(command: &mut Command) -> &mut Command {
    let append = |name: &str, flag: &str| match env::var(name) {
        Ok(existing) if !existing.trim().is_empty() => format!("{existing} {flag}"),
        _ => flag.to_owned(),
    };
    command
        .env("RUSTFLAGS", append("RUSTFLAGS", "-C target-cpu=native"))
        .env("CXXFLAGS", append("CXXFLAGS", "-march=native"))
        .env("CARGO_TARGET_DIR", project_root().join("target/native"))
}

/// Runs simd's scalar paths under Miri (undefined behaviour, out-of-bounds and
/// alignment checks), installing a minimal nightly with Miri when missing.
fn miri() -> Result<TestTotals> {
    let has_miri =
        succeeds(Command::new("rustup").args(["run", "nightly", "cargo", "miri", "--version"]));
    if has_miri {
        return run_miri_tests();
    }
    let mut install = Command::new("rustup");
    install.args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
        "--component",
        "miri,rust-src",
    ]);
    step("rustup toolchain install nightly (miri)", install)?;
    run_miri_tests()
}

fn run_miri_tests() -> Result<TestTotals> {
    let mut command = Command::new("rustup");
    command.current_dir(project_root()).args([
        "run",
        "nightly",
        "cargo",
        "miri",
        "test",
        "--package",
        "ioserve-simd",
        "--lib",
        "--test",
        "base64",
        "--test",
        "kernels",
        "--",
    ]);
    command.args(MIRI_TESTS);
    run_tests(
        command,
        "cargo +nightly miri test --package ioserve-simd (scalar paths)",
    )
}

/// Where probe's BPF programs include the kernel's types from.
const VMLINUX_H: &str = "crates/probe/src/bpf/vmlinux.h";

/// `cargo xtask vmlinux [--btf PATH]`: dumps the kernel's BTF as C into VMLINUX_H.
/// Writes the completions and man pages under `out` (relative to the project root).
pub(crate) fn dist(out: &Path) -> Result<()> {
    let out = project_root().join(out);
    let mut generate = cargo(&["run", "--quiet", "--package", "cli-docs", "--"]);
    generate.arg(&out);
    step(
        &format!("completions and man pages -> {}", out.display()),
        generate,
    )
}

fn vmlinux(btf: &Path) -> Result<()> {
    if !btf.exists() {
        bail!(
            "{} does not exist: the kernel needs CONFIG_DEBUG_INFO_BTF, or give --btf PATH",
            btf.display()
        );
    }
    ensure_packages(&[("bpftool", "/usr/sbin/bpftool")])?;
    let bpftool = which("bpftool").unwrap_or_else(|| PathBuf::from("/usr/sbin/bpftool"));
    let output = Command::new(&bpftool)
        .args(["btf", "dump", "file"])
        .arg(btf)
        .args(["format", "c"])
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    if !output.status.success() {
        bail!(
            "bpftool btf dump {} failed: {}",
            btf.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let target = project_root().join(VMLINUX_H);
    std::fs::write(&target, &output.stdout)
        .with_context(|| format!("cannot write {}", target.display()))?;
    eprintln!(
        "xtask: wrote {} ({} KiB) from {}",
        VMLINUX_H,
        output.stdout.len() / 1024,
        btf.display()
    );
    Ok(())
}

fn fuzz(seconds: u64) -> Result<()> {
    if !succeeds(Command::new("cargo").args(["+nightly", "--version"])) {
        bail!("cargo fuzz needs a nightly toolchain: rustup toolchain install nightly");
    }
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        step(
            "install cargo-fuzz",
            cargo(&["install", "--locked", "cargo-fuzz"]),
        )?;
    }
    for (dir, target) in FUZZ_TARGETS {
        let mut command = Command::new("cargo");
        command.current_dir(project_root().join(dir)).args([
            "+nightly",
            "fuzz",
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
        ]);
        step(&format!("fuzz {target} for {seconds}s"), command)?;
    }
    Ok(())
}

/// Installs the Debian packages that are missing, with apt-get when running as root;
/// otherwise names them. `packages` pairs a package with a command it provides or, for
/// a package without one, an absolute path it installs.
pub(crate) fn ensure_packages(packages: &[(&str, &str)]) -> Result<()> {
    let present = |provided: &str| {
        if provided.starts_with('/') {
            Path::new(provided).exists()
        } else {
            on_path(provided)
        }
    };
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(_, provided)| !present(provided))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing system packages: {} (run as root to install them, or: sudo apt-get install {})",
            missing.join(" "),
            missing.join(" ")
        );
    }
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    step("apt-get update", update)?;
    let mut install = Command::new("apt-get");
    install
        .args(["-q", "install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    step(&format!("apt-get install {}", missing.join(" ")), install)
}

fn ensure_rustup_components(components: &[&str]) -> Result<()> {
    for component in components {
        let probe = match *component {
            "rustfmt" => ["fmt", "--version"],
            _ => ["clippy", "--version"],
        };
        if !succeeds(Command::new("cargo").args(probe)) {
            let mut add = Command::new("rustup");
            add.args(["component", "add", component]);
            step(&format!("rustup component add {component}"), add)?;
        }
    }
    Ok(())
}

pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(project_root()).args(args);
    command
}

/// Runs a command with inherited output; an error names the step and its exit status.
pub(crate) fn step(name: &str, mut command: Command) -> Result<()> {
    eprintln!("xtask: {name}");
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("{name}: cannot start {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    eprintln!("xtask: {name} ok ({:.1?})", started.elapsed());
    Ok(())
}

pub(crate) fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// Where `program` is on PATH.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let paths = env::var_os("PATH")?;
    env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

pub(crate) fn is_root() -> bool {
    // Reading the effective uid from /proc keeps xtask free of libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_test_result_lines() {
        let mut totals = TestTotals::default();
        totals.add_line("test result: ok. 37 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.45s");
        totals.add_line(
            "test result: FAILED. 1 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        totals.add_line("running 4 tests");
        assert_eq!(
            totals,
            TestTotals {
                passed: 38,
                failed: 3,
                ignored: 2
            }
        );
    }
}

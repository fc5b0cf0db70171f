//! `cargo xtask ci`: every check CI runs, in order, and the checks of its own that no
//! other task runs (probe built without clang, in the aarch64 lane's check, a guest
//! under another target directory, the published libraries, simd in a native build
//! and under Miri).

pub(crate) mod bpf;
pub(crate) mod fuzz;
pub(crate) mod h2spec;
pub(crate) mod hash_quality;
pub(crate) mod https_server;
pub(crate) mod modules;
pub(crate) mod ntpd_rs;
pub(crate) mod provision;
pub(crate) mod testssl;
pub(crate) mod workflows;

use std::env;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _, Result};

use crate::guests::{arm64_vm, clock_vm, faults_vm, systemd_vm, tls_vm};
use crate::util::beside::Beside;
use crate::util::ioserve_process::IoserveBinary;
use crate::util::test_run::{cargo_test, run_tests, TestTotals};
use crate::util::{
    at_lowest_priority, cargo, ensure_packages, ensure_rustup_components, for_this_cpu, is_root,
    project_root, step, succeeds, target_dir,
};

/// Debian packages the checks need, with the command each provides (what compiling
/// needs is [`COMPILE_PACKAGES`]).
/// clang and bpftool rebuild probe's committed BPF objects for `cargo xtask bpf
/// --check`; its tests compare with strace and list programs with bpftool.
/// timeserve's tests query it with chronyd -Q and ntpdig (the latter inside a network
/// namespace made with unshare and ip), and have chronyd synchronise over NTS (and
/// ntpd-rs, which [`ntpd_rs`] installs).
/// ioserve's tar downloads are fetched with curl, wget and aria2c, unpacked with tar
/// and compared with diff.
/// ioserve's RFC 9530 digest tests download with wget and aria2c (aria2c --checksum).
/// ioserve's Basic authentication tests make htpasswd files with htpasswd and download
/// with curl, wget and aria2c.
/// ioserve's pacing tests download with curl, wget and aria2c.
/// ioserve's kTLS guest (`cargo xtask tls-vm`) makes its certificate with openssl and
/// downloads with curl under strace; its failing-disk guest (`cargo xtask faults-vm`)
/// makes the failing device with dmsetup and finds files on it with filefrag.
/// ioserve's HTTPS tests handshake with `openssl s_client`; `cargo xtask testssl` runs
/// testssl.sh; `cargo xtask loadtest --tls` loads HTTP/2 with h2load (nghttp2-client).
/// ioserve's listing is checked in Chromium (`cargo xtask browser`, the last four).
/// `cargo xtask upgrade` loads ioserve with wrk through a live upgrade.
/// The c100k smoke (`cargo xtask loadtest --c100k`'s, a few thousand connections)
/// holds them against ioserve and nginx.
/// The round smoke (one short round of `cargo xtask loadtest`'s judged workloads)
/// loads ioserve and nginx with wrk.
/// `cargo xtask acme` checks certificates with openssl and curl, and has Chromium
/// trust pebble's root through certutil's NSS database.
/// `cargo xtask http3` installs aioquic with pip and hashes the test certificate's key
/// with openssl for Chromium.
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
    ("bpftool", "/usr/sbin/bpftool"),
    ("wget", "wget"),
    ("aria2", "aria2c"),
    ("tar", "tar"),
    ("diffutils", "diff"),
    ("apache2-utils", "htpasswd"),
    ("openssl", "openssl"),
    ("testssl.sh", "testssl"),
    ("nghttp2-client", "h2load"),
    ("wrk", "wrk"),
    ("nginx", "nginx"),
    ("dmsetup", "dmsetup"),
    ("python3-pip", "/usr/lib/python3/dist-packages/pip"),
    ("e2fsprogs", "filefrag"),
    // Chromium, for the listing's browser check (`cargo xtask browser`).
    crate::browser::CHROMIUM,
    // chromedriver, the WebDriver server that the browser check drives Chromium through.
    crate::browser::CHROMIUM_DRIVER,
    // Selenium for /usr/bin/python3, the browser check's WebDriver client.
    crate::browser::PYTHON_SELENIUM,
    // certutil, through which Chromium trusts pebble's root (`cargo xtask acme`).
    crate::acme::NSS_TOOLS,
    // npm, which installs axe-core for the browser check's accessibility audit.
    crate::browser::NPM,
];

/// What compiling the workspace needs (the README's set-up line): probe's vendored
/// libbpf builds with make, pkg-config, libelf and zlib, the simd bench's simdutf peer
/// with g++. CI installs the missing ones before clippy, which compiles them all;
/// everything else waits for [`provision`] beside it.
const COMPILE_PACKAGES: &[(&str, &str)] = &[
    ("gcc", "gcc"),
    ("g++", "g++"),
    ("make", "make"),
    ("pkg-config", "pkg-config"),
    ("libelf-dev", "/usr/include/libelf.h"),
    ("zlib1g-dev", "/usr/include/zlib.h"),
];

/// Installs the [`COMPILE_PACKAGES`] and [`SYSTEM_PACKAGES`] that are missing (`cargo
/// xtask packages`).
pub(crate) fn install_packages() -> Result<()> {
    ensure_packages(COMPILE_PACKAGES)?;
    ensure_packages(SYSTEM_PACKAGES)
}

/// How many tests each test binary of `cargo test --workspace` runs at once.
const TEST_THREADS: &str = "4";

/// Runs every check; the closing lines list the time each stage took and sum the tests
/// of every test run.
pub(crate) fn run() -> Result<()> {
    // Every build of a CI run starts from nothing and is never edited again: the
    // incremental caches only cost disk (1.9 GB of target/debug from a fresh clone,
    // on hosts whose free space varies) and time. Set before any thread starts, so
    // that every cargo this run starts inherits it.
    if env::var_os("CARGO_INCREMENTAL").is_none() {
        env::set_var("CARGO_INCREMENTAL", "0");
    }
    let mut stages = Stages::default();
    // rustfmt and clippy first, and what compiling needs: apt-get and rustup must not
    // run beside the provisioning's.
    stages.time("fmt", || {
        ensure_packages(COMPILE_PACKAGES)?;
        ensure_rustup_components(&["rustfmt", "clippy"])?;
        step("cargo fmt", cargo(&["fmt", "--all", "--", "--check"]))
    })?;
    let (provisioning, miri_installed) = provision::start();
    stages.time("clippy and modules", || {
        step(
            "cargo clippy",
            // With the packaged ioserve's allocator (clippy does not link, so
            // libjemalloc-dev is not needed yet).
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--features",
                "ioserve/jemalloc",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        modules::run()
    })?;
    stages.time("publishable libraries", publishable)?;
    // Miri interprets simd's scalar paths for about 140 s of one core. Once its toolchain
    // is in, it runs at the lowest CPU priority, taking only what the stages leave idle
    // (the packages' lintian and dpkg, numa-vm, cargo test's run), instead of a core of
    // its own at the end, where it was the last check to finish (2026-11-30: done
    // during the packages, and the run 1410 s instead of 1618 s, with clock-vm's
    // packaged probe).
    let miri = Beside::start("miri", move || {
        ensure!(
            miri_installed.reached(),
            "the provisioning ended before Miri's toolchain was installed"
        );
        miri()
    });
    let provisioning = stages.time("provisioning's packages installed", || {
        provisioning.packages_installed()
    })?;
    stages.time("bpf objects", || bpf::run(&bpf::Options { check: true }))?;
    // The packages first: the checks that serve (numa-vm, the browser, ACME, h2spec,
    // testssl.sh, tls-vm) run the packaged ioserve instead of building a debug one
    // each, whose dependencies' features resolve differently from `cargo test`'s.
    let packaged = stages.time("packages built and installed", crate::release::dist::ci)?;
    let ioserve = IoserveBinary::at(&packaged.join("ioserve"));
    stages.time("provisioning finished", || provisioning.result())?;
    stages.time("workflows", workflows::lint)?;
    // ACME's renewal scenario waits out 60-second certificates for minutes: it runs
    // beside the stages that follow, and is joined before the report.
    let acme_renewal = stages.time("acme renewal started", || {
        crate::acme::start_background(&packaged.join("ioserve"))
    })?;
    // Before cargo test fills target/debug, so that a binary looked for there instead
    // of where cargo put it is missing, not found by accident.
    stages.time("numa-vm", || numa_vm_elsewhere(&ioserve))?;
    // probe's tests load BPF programs: as root they must run, not skip.
    let probe_env: &[(&str, &str)] = if is_root() {
        &[("PROBE_TESTS_REQUIRE_ROOT", "1")]
    } else {
        eprintln!("xtask: not root: probe's BPF tests will skip themselves");
        &[]
    };
    // Four tests at a time, on two CPUs: most of ioserve's server tests wait (for
    // timeouts, drains, paced downloads, guests' answers), and its suite used 1.2 CPUs
    // with two at a time; with four it took 101 s instead of 151 s (2026-11-30).
    let test_env = [probe_env, &[("RUST_TEST_THREADS", TEST_THREADS)]].concat();
    // simd's native build (about 60 s of CPU, in a target directory of its own) at the
    // lowest priority beside cargo test, whose run left 0.6 of a CPU idle for 140 s
    // with Miri done by then (2026-11-30, paired: cargo test's run took 141 s alone,
    // 146 and 138 s with the native build and tests from nothing beside it, which
    // finished inside both).
    let simd_native = Beside::start("simd for this CPU", simd_for_this_cpu);
    let mut totals = stages.time("cargo test", || {
        cargo_test(&["test", "--workspace"], &test_env)
    })?;
    totals.add(&stages.join(
        "simd for this CPU finished",
        "simd for this CPU (lowest priority)",
        simd_native,
    )?);
    stages.time("hash quality", hash_quality::ci_embedding_checks)?;
    // Checks that use about one core (the packaged server under the browser's, the
    // HTTP/3 clients' and h2spec's requests, the smokes' short loads, the live upgrade's
    // and the soak's load, testssl.sh's handshakes, pebble's validations, the small
    // guests) run on a thread beside the multi-core guests and the aarch64 builds, with
    // both CPUs busy throughout. None of them judges a margin that a busy neighbour
    // could move (the smokes fail only when nothing is served).
    let one_core = {
        let (ioserve, packaged) = (ioserve.clone(), packaged.clone());
        // cargo test built it.
        let debug = target_dir()?.join("debug/ioserve");
        Beside::start("the one-core checks", move || {
            let mut beside = Stages::default();
            let outcome = (|| {
                let served = packaged.join("ioserve");
                beside.time("browser", || crate::browser::ci(&served))?;
                beside.time("h2spec", || h2spec::run(&ioserve))?;
                beside.time("http3 clients", || crate::http3::ci(&served))?;
                beside.time("c100k smoke", || crate::load::loadtest::c100k_ci(&served))?;
                beside.time("round smoke", || crate::load::loadtest::rounds_ci(&served))?;
                beside.time("live upgrade", || {
                    crate::operations::upgrade::ci(&served, &debug)
                })?;
                beside.time("soak (2 minutes)", || crate::operations::soak::ci(&served))?;
                beside.time("testssl.sh", || testssl::run(&ioserve))?;
                beside.time("acme", || crate::acme::ci(&served))?;
                // The small guests. While Miri ran on this thread, tls-vm ran on the
                // main one, whose guests this thread outlasted by 100 s; without Miri
                // it ended 87 s before them (2026-11-30).
                beside.time("tls-vm", || tls_vm::run(&ioserve))?;
                beside.time("faults-vm", || faults_vm::run(&ioserve))?;
                beside.time("systemd-vm", || {
                    systemd_vm::upgrade_under_systemd(&served, &debug)
                })
            })();
            Ok((outcome, beside))
        })
    };
    stages.time("clock-vm", || {
        clock_vm::run(&clock_vm::Options::probe_in(&packaged))
    })?;
    // Every build script's first run for aarch64 (probe's, which makes the skeletons
    // of the committed BPF objects, and libbpf-sys's C build) is in this check.
    stages.time("aarch64 check", || {
        arm64_vm::check_workspace(&tools_that_fail(&["clang", "clang-14", "bpftool"])?)
    })?;
    totals.add(&stages.time("arm64-vm", arm64_vm::run)?);
    let (outcome, beside) = stages.time("one-core checks finished", || one_core.result())?;
    stages.add_beside(beside);
    outcome?;
    totals.add(&stages.join("miri finished", "miri (lowest priority)", miri)?);
    stages.time("acme renewal finished", || acme_renewal.result())?;
    stages.report();
    // The closing line: the sum over every test binary and doc-test run.
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    Ok(())
}

/// How long each stage of [`run`] took, in order: CI's budget is its wall time, and
/// these lines say where it went, and how busy the machine's CPUs were meanwhile
/// (where a stage left cores idle, another could run beside it).
#[derive(Default)]
struct Stages {
    started: Option<Instant>,
    /// [`cpu_seconds`] when the first stage started.
    cpu_started: Option<f64>,
    /// Each stage's name, time, the CPUs busy on average meanwhile (`None` where
    /// /proc/stat could not be read), and whether it ran beside the main thread's.
    took: Vec<(&'static str, Duration, Option<f64>, bool)>,
}

/// The seconds the machine's CPUs have spent busy, summed, from /proc/stat's `cpu`
/// line (busy: everything but idle and iowait).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let all: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    // In USER_HZ, 100 on x86_64 and aarch64.
    Some(all.checked_sub(idle)? as f64 / 100.0)
}

/// The average number of CPUs busy between two [`cpu_seconds`] readings that `wall`
/// apart.
fn cpus_busy(before: Option<f64>, after: Option<f64>, wall: Duration) -> Option<f64> {
    let (before, after) = (before?, after?);
    (wall.as_secs_f64() > 0.0).then(|| (after - before) / wall.as_secs_f64())
}

impl Stages {
    /// Runs `stage`, named `name`, and keeps its time (also when it fails, printed
    /// with the error).
    fn time<T>(&mut self, name: &'static str, stage: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = Instant::now();
        let cpu_before = cpu_seconds();
        if self.started.is_none() {
            self.started = Some(started);
            self.cpu_started = cpu_before;
        }
        let result = stage();
        let took = started.elapsed();
        let busy = cpus_busy(cpu_before, cpu_seconds(), took);
        self.took.push((name, took, busy, false));
        eprintln!(
            "xtask ci: stage {name} {} after {:.1?}{}",
            if result.is_ok() { "done" } else { "failed" },
            took,
            busy.map_or(String::new(), |cpus| format!(" ({cpus:.1} CPUs busy)"))
        );
        result
    }

    /// Keeps the times of the stages that ran on another thread, `beside`.
    fn add_beside(&mut self, beside: Stages) {
        self.took.extend(
            beside
                .took
                .into_iter()
                .map(|(name, took, busy, _)| (name, took, busy, true)),
        );
    }

    /// Waits for `job`, which ran beside the stages: the wait is stage `waited`, the
    /// job's own time is kept as `ran` (beside), and its result is returned, an error
    /// naming `ran`.
    fn join<T: Send + 'static>(
        &mut self,
        waited: &'static str,
        ran: &'static str,
        job: Beside<T>,
    ) -> Result<T> {
        let (result, took) = self.time(waited, || Ok(job.finish()))?;
        self.took.push((ran, took, None, true));
        result.context(ran)
    }

    /// Prints each stage's time and the total (the stages that ran beside the others
    /// are marked: their time is not part of the total's).
    fn report(&self) {
        let total = self
            .started
            .map_or(Duration::ZERO, |started| started.elapsed());
        eprintln!("xtask ci: time per stage, and the CPUs busy meanwhile (the machine's)");
        for (name, took, busy, beside) in &self.took {
            eprintln!(
                "  {name:<28} {:>7.1} s  {:>3.0} %  {:>5}{}",
                took.as_secs_f64(),
                100.0 * took.as_secs_f64() / total.as_secs_f64().max(f64::EPSILON),
                busy.map_or("-".to_string(), |cpus| format!("{cpus:.1}")),
                if *beside { "  (beside)" } else { "" }
            );
        }
        let busy = cpus_busy(self.cpu_started, cpu_seconds(), total);
        eprintln!(
            "xtask ci: all checks passed in {total:.0?}{}",
            busy.map_or(String::new(), |cpus| format!(
                ", {cpus:.1} CPUs busy on average"
            ))
        );
    }
}

/// A directory of programs named `names` that fail when run, saying so: first on PATH,
/// it makes a build that still compiled probe's BPF programs (clang) or generated their
/// objects (bpftool) fail, where the committed objects must be all it needs.
fn tools_that_fail(names: &[&str]) -> Result<PathBuf> {
    let shims = target_dir()?.join("failing-tools");
    std::fs::create_dir_all(&shims)?;
    for name in names {
        let shim = shims.join(name);
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\necho \"{name} was run: building probe must not need it\" >&2\nexit 1\n"
            ),
        )?;
        std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    Ok(shims)
}

/// `cargo xtask numa-vm` in a child xtask whose `CARGO_TARGET_DIR` is a directory
/// outside the workspace, so that every binary a guest check runs must be found where
/// cargo put it (cargo metadata's `target_directory`), not under a fixed `target/`.
/// The directory is `numa-vm-target/` under the default target directory (so that a
/// second run reuses its builds), reached through a symbolic link in the temporary
/// directory: nothing it builds lands in `target/debug` or `target/release`. The guests'
/// ioserve is `ioserve`, the packaged one.
fn numa_vm_elsewhere(ioserve: &IoserveBinary) -> Result<()> {
    let elsewhere = env::temp_dir().join(format!("ioserve-numa-vm-target-{}", std::process::id()));
    let kept = target_dir()?.join("numa-vm-target");
    std::fs::create_dir_all(&kept).with_context(|| format!("cannot create {}", kept.display()))?;
    std::os::unix::fs::symlink(&kept, &elsewhere)
        .with_context(|| format!("cannot link {}", elsewhere.display()))?;
    // This very xtask, not `cargo xtask`: that would first build xtask again under the
    // other target directory (a minute of CI) without checking anything more.
    let xtask = env::current_exe().context("cannot find the running xtask")?;
    let mut command = Command::new(xtask);
    command
        .arg("numa-vm")
        .args(ioserve.args())
        .env("CARGO_TARGET_DIR", &elsewhere);
    let result = step(
        &format!(
            "CARGO_TARGET_DIR={} cargo xtask numa-vm",
            elsewhere.display()
        ),
        command,
    );
    let _ = std::fs::remove_file(&elsewhere);
    result
}

/// The libraries as they are published: numa and probe lint clean without their `cli`
/// feature (what an embedding service builds), and duration-arg, ioserve-clock,
/// ioserve-simd and ioserve-numa package and build from their packaged sources (`cargo publish
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
        "cargo publish --dry-run (duration-arg, ioserve-clock, ioserve-simd, ioserve-numa)",
        cargo(&[
            "publish",
            "--dry-run",
            // A local run may have uncommitted changes; what is checked is the package.
            "--allow-dirty",
            "--package",
            "duration-arg",
            "--package",
            "ioserve-clock",
            "--package",
            "ioserve-simd",
            "--package",
            "ioserve-numa",
        ]),
    )
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
/// base64 encoder, where this CPU has them) are compiled only there. At the lowest CPU
/// priority: CI runs it beside cargo test (it has a target directory of its own).
fn simd_for_this_cpu() -> Result<TestTotals> {
    let args = ["test", "--package", "ioserve-simd"];
    let mut command = cargo(&args);
    for_this_cpu(&mut command)?;
    run_tests(
        at_lowest_priority(&command),
        &format!(
            "RUSTFLAGS=\"-C target-cpu=native\" cargo {}",
            args.join(" ")
        ),
    )
}

/// Runs simd's scalar paths under Miri (undefined behaviour, out-of-bounds and
/// alignment checks), installing a minimal nightly with Miri when missing.
fn miri() -> Result<TestTotals> {
    ensure_miri()?;
    run_miri_tests()
}

/// Installs nightly with Miri (and the standard library's source, which Miri builds
/// its sysroot from) when missing.
pub(crate) fn ensure_miri() -> Result<()> {
    let has_miri =
        succeeds(Command::new("rustup").args(["run", "nightly", "cargo", "miri", "--version"]));
    if has_miri {
        return Ok(());
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
    step("rustup toolchain install nightly (miri)", install)
}

/// Builds Miri's sysroot (the standard library for the interpreter) when it is not
/// built yet: `cargo miri test` would build it first (37 s of a core here, 2026-11-30)
/// at the lowest CPU priority, where it could wait for idle time until the run's end;
/// [`provision`] builds it at the start instead, beside clippy.
pub(crate) fn ensure_miri_sysroot() -> Result<()> {
    let mut setup = Command::new("rustup");
    setup
        .current_dir(project_root())
        .args(["run", "nightly", "cargo", "miri", "setup"]);
    step("cargo +nightly miri setup", setup)
}

/// At the lowest CPU priority: CI runs it beside the other stages, in the CPU time they
/// leave idle.
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
        at_lowest_priority(&command),
        "cargo +nightly miri test --package ioserve-simd (scalar paths)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_busy_is_busy_seconds_over_wall_seconds() {
        let wall = Duration::from_secs(10);
        assert_eq!(cpus_busy(Some(10.0), Some(25.0), wall), Some(1.5));
        assert_eq!(cpus_busy(None, Some(25.0), wall), None);
        assert_eq!(cpus_busy(Some(10.0), Some(25.0), Duration::ZERO), None);
    }

    #[test]
    fn this_machine_reports_its_busy_cpu_seconds() {
        let busy = cpu_seconds().expect("/proc/stat's cpu line");
        let since_boot: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // Every CPU /proc/stat counts (a process may be allowed fewer).
        let cpus = std::fs::read_to_string("/proc/stat")
            .unwrap()
            .lines()
            .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
            .count() as f64;
        // Busy since boot, and at most every CPU's whole time (with a tick of slack).
        assert!(
            busy > 0.0 && busy <= since_boot * cpus + 1.0,
            "{busy} s busy in {since_boot} s of uptime"
        );
    }
}

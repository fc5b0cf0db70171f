//! `cargo xtask arm64-vm`: the toolkit on an arm64 kernel. Debian's stock arm64
//! kernel under qemu-system-aarch64 (TCG, `-machine virt -cpu max`, two NUMA nodes of
//! 512 MiB, one CPU each) with statically linked aarch64 builds of simd's tests, numa,
//! probe and ioserve. Inside: simd's tests natively (NEON and AES) and with
//! `SIMD_DISABLE=aes` (of the hash quality suite, the equality with the software round
//! and the sanity checks: [`GUEST_HASH_QUALITY_TESTS`]); numa-vm's checks (the same commands and checks); probe's
//! programs loading through CO-RE on the 6.1 arm64 kernel (the committed vmlinux.h is
//! an x86_64 one), counting exactly, and `probe clock` finding every vDSO clock in the
//! vDSO; ioserve serving a file over loopback while `probe syscalls` calls sendfile
//! zero-copy and read copying.
//!
//! This proves function on an arm64 kernel, under emulation; speed needs ARM hardware
//! (`cargo xtask cross` builds the tarball for that).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use crate::guests::clock_vm::{self, ProbeBinaries};
use crate::guests::numa_vm;
use crate::guests::{self as guest, expect, Arch, Checks, Initramfs, Outcome, Script, Sections};
use crate::util::test_run::TestTotals;

/// Bytes of the file ioserve serves in the guest.
const SERVED_MIB: u32 = 8;

/// The CPU features the NEON and AES paths need, as /proc/cpuinfo names them.
const CPU_FEATURES: &[&str] = &["asimd", "aes", "pmull"];

/// How ioserve moves bytes under each strategy, as `probe syscalls` judges it.
const STRATEGIES: &[(&str, &str)] = &[("sendfile", "zero-copy"), ("read", "copying")];

/// CI's aarch64 lane: checks every crate and target of the workspace for aarch64 (type
/// checks, the `aarch64`-only code paths, and every build script, whose C and C++ are
/// compiled with the cross compiler), so that an ARM regression cannot land unseen.
/// What runs on ARM is built with code generation and linked by [`run`], which CI runs
/// next: simd's tests, numa, probe and ioserve, run on an arm64 kernel (with AES, and
/// as on a core without it). A full `build` here would generate and link every test
/// and bench binary a second time for nothing that runs: about five minutes of CI. The
/// check has [`run`]'s flags, so that the two share their build scripts' runs. The
/// programs in `first_on_path` are found before the system's (CI puts a clang that
/// fails there: the build scripts run here for the first time).
pub(crate) fn check_workspace(first_on_path: &Path) -> Result<()> {
    let arch = Arch::Aarch64;
    arch.ensure_tools()?;
    guest::static_check(
        arch,
        "--workspace --all-targets",
        &["--workspace", "--all-targets"],
        first_on_path,
    )
}

/// Boots the guest, checks everything and returns the totals of simd's tests run in
/// it (`cargo xtask ci` adds them to its count).
pub(crate) fn run() -> Result<TestTotals> {
    let arch = Arch::Aarch64;
    arch.ensure_tools()?;
    let kernel = guest::debian_kernel(arch)?;
    let simd_tests = guest::static_test_binaries(arch, "ioserve-simd")?;
    // One cargo invocation for the programs: their shared dependencies are built once,
    // with one feature set, and both cores stay busy to the end.
    let mut programs = numa_vm::Binaries::ARGS.to_vec();
    programs.extend_from_slice(ProbeBinaries::ARGS);
    programs.extend_from_slice(&["--package", "ioserve", "--bin", "ioserve"]);
    let out = guest::static_build(arch, "numa, touch, probe and ioserve", &programs)?;
    let numa = numa_vm::Binaries::at(&out);
    let probe = ProbeBinaries::at(arch, &out);
    let ioserve = out.join("ioserve");

    let shape = numa_vm::Guest { nodes: 2, cpus: 2 };
    let mut initramfs = Initramfs::new(arch)?;
    numa.add_to(&mut initramfs)?;
    probe.add_to(&mut initramfs)?;
    initramfs.program("ioserve", &ioserve)?;
    let simd_names = add_simd_tests(&mut initramfs, &simd_tests)?;

    let mut script = Script::default();
    script
        .run("kernel", "uname -rm")
        .run("cpu", "grep -m1 Features /proc/cpuinfo");
    for name in &simd_names {
        let filter = guest_filter(name);
        script
            .run(name, &format!("{name} --test-threads 2{filter}"))
            .run(
                &format!("{name}-noaes"),
                &format!("env SIMD_DISABLE=aes {name} --test-threads 2{filter}"),
            );
    }
    shape.add_commands(&mut script);
    clock_vm::add_probe_commands(&mut script);
    let calls = clock_vm::GUEST_CLOCK_CALLS;
    script.run("clock", &format!("probe clock --json --calls {calls}"));
    script.run("clock-table", &format!("probe clock --calls {calls}"));
    script.run("doctor-text", "probe doctor");
    add_serving_commands(&mut script);

    let mut machine = shape.machine(arch, "");
    machine.timeout = Duration::from_secs(900);
    let sections = machine.boot("arm64-vm", &kernel, &initramfs.finish(&script))?;

    let mut checks = Checks::new("arm64-vm");
    checks.add(
        "arm64",
        vec![
            ("Debian's arm64 kernel".into(), check_kernel(&sections)),
            (
                format!("CPU has {}", CPU_FEATURES.join(" ")),
                check_features(&sections),
            ),
        ],
    );
    checks.add("arm64 simd", simd_checks(&sections, &simd_names));
    checks.add("arm64 numa", shape.check(&sections));
    let mut probe_results = clock_vm::probe_checks(&sections);
    probe_results.push((
        "probe clock: every vDSO clock with 0 syscalls per call".into(),
        sections
            .json("clock")
            .and_then(|report| clock_vm::check_clock_report(&report, false)),
    ));
    checks.add("arm64 probe", probe_results);
    checks.add("arm64 ioserve", serving_checks(&sections));
    checks.finish()?;
    Ok(simd_totals(&sections, &simd_names))
}

/// The `test result:` counts of every simd test run in the guest.
fn simd_totals(s: &Sections, names: &[String]) -> TestTotals {
    let mut totals = TestTotals::default();
    for name in names {
        for section in [name.clone(), format!("{name}-noaes")] {
            for line in s.ok(&section).into_iter().flatten() {
                totals.add_line(line);
            }
        }
    }
    totals
}

/// The hash quality tests the guest runs: that every implementation, the NEON and AES
/// ones among them, gives the software round's value at every length, and the sanity
/// checks. The statistical tests (avalanche, sparse keys, the peers' comparisons) are
/// properties of those same values, which the host's run already checks natively;
/// under TCG they took most of the guest's time and, on a busy host, more than its
/// deadline.
const GUEST_HASH_QUALITY_TESTS: &[&str] = &[
    "every_implementation_equals_the_software_round",
    "sanity_and_every_byte_matters_at_every_length",
];

/// The test filter (with its leading space) for simd's test binary `name` in the guest:
/// none but for the hash quality suite.
fn guest_filter(name: &str) -> String {
    match name {
        "simd-hash_quality" => format!(" --exact {}", GUEST_HASH_QUALITY_TESTS.join(" ")),
        _ => String::new(),
    }
}

/// Adds simd's test executables as /bin/simd-<name>; returns those names.
fn add_simd_tests(initramfs: &mut Initramfs, tests: &[PathBuf]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for test in tests {
        let stem = test
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.rsplit_once('-'))
            .map_or("tests", |(stem, _hash)| stem);
        let name = format!("simd-{stem}");
        initramfs.program(&name, test)?;
        names.push(name);
    }
    Ok(names)
}

/// For each strategy: ioserve serving an 8 MiB file, `probe syscalls -p` on it while
/// busybox wget downloads it over loopback, then the checksums.
fn add_serving_commands(script: &mut Script) {
    script
        .shell(&format!(
            "dd if=/dev/urandom of=/srv/file bs=1M count={SERVED_MIB} 2>/dev/null"
        ))
        .run("served-sha", "sha256sum /srv/file")
        // Each wait polls for the state it needs (the server answering, probe attached)
        // and says which one it gave up on, with what it saw, instead of going on.
        .shell(
            "serve() {\n\
             \x20 rc=0\n\
             \x20 ioserve /srv --listen 127.0.0.1:8080 --workers 1 --strategy $1 2>/tmp/ioserve.err &\n\
             \x20 server=$!\n\
             \x20 ready=no; for i in $(seq 300); do wget -q -O /dev/null http://127.0.0.1:8080/file && ready=yes && break; sleep 0.2; done\n\
             \x20 [ $ready = yes ] || { echo \"ioserve did not answer in 60 s: $(cat /tmp/ioserve.err)\"; rc=1; }\n\
             \x20 probe syscalls --pid $server --json -o /tmp/trace.json 2>/tmp/trace.err &\n\
             \x20 tracer=$!\n\
             \x20 ready=no; for i in $(seq 600); do grep -q Tracing /tmp/trace.err && ready=yes && break; sleep 0.1; done\n\
             \x20 [ $ready = yes ] || { echo \"probe did not attach in 60 s: $(cat /tmp/trace.err)\"; rc=1; }\n\
             \x20 wget -q -O /tmp/got http://127.0.0.1:8080/file || { echo \"the download failed\"; rc=1; }\n\
             \x20 kill -INT $tracer; wait $tracer\n\
             \x20 kill $server; wait $server\n\
             \x20 return $rc\n\
             }",
        );
    for (strategy, _) in STRATEGIES {
        script
            .run(&format!("{strategy}-serve"), &format!("serve {strategy}"))
            .run(&format!("{strategy}-trace"), "cat /tmp/trace.json")
            .run(&format!("{strategy}-sha"), "sha256sum /tmp/got")
            .shell("rm -f /tmp/got");
    }
}

fn check_kernel(s: &Sections) -> Outcome {
    let line = s.ok("kernel")?.join(" ");
    expect(
        line.ends_with("-arm64 aarch64"),
        format!("uname -rm: {line:?}"),
    )
}

fn check_features(s: &Sections) -> Outcome {
    let line = s.ok("cpu")?.join(" ");
    let features: Vec<&str> = line.split_whitespace().collect();
    let missing: Vec<&&str> = CPU_FEATURES
        .iter()
        .filter(|f| !features.contains(f))
        .collect();
    expect(
        missing.is_empty(),
        format!("missing {missing:?} in {line:?}"),
    )
}

/// Each test executable passed, natively and without AES.
fn simd_checks(s: &Sections, names: &[String]) -> Vec<(String, Outcome)> {
    let mut results = Vec::new();
    for name in names {
        for (section, how) in [
            (name.clone(), "NEON+AES"),
            (format!("{name}-noaes"), "SIMD_DISABLE=aes"),
        ] {
            results.push((
                format!("{name} ({how})"),
                s.ok(&section).and_then(|lines| {
                    let summary = lines
                        .iter()
                        .rev()
                        .find(|l| l.starts_with("test result: "))
                        .ok_or("no test result line")?;
                    expect(
                        summary.starts_with("test result: ok.") && !summary.contains(" 0 passed"),
                        summary.clone(),
                    )
                }),
            ));
        }
    }
    results
}

fn serving_checks(s: &Sections) -> Vec<(String, Outcome)> {
    let sha = |name: &str| -> Result<String, String> {
        s.ok(name)?
            .first()
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
            .ok_or(format!("{name}: no checksum"))
    };
    let mut results = Vec::new();
    for (strategy, movement) in STRATEGIES {
        results.push((
            format!("--strategy {strategy}: served, traced and downloaded"),
            s.ok(&format!("{strategy}-serve")).map(drop),
        ));
        results.push((
            format!("--strategy {strategy}: download checksum matches"),
            sha("served-sha").and_then(|want| {
                let got = sha(&format!("{strategy}-sha"))?;
                expect(got == want, format!("got {got}, served {want}"))
            }),
        ));
        results.push((
            format!("--strategy {strategy}: probe says {movement}"),
            s.json(&format!("{strategy}-trace")).and_then(|report| {
                let verdict = &report["verdict"];
                let moved = verdict["zero_copy_bytes"].as_u64().unwrap_or(0)
                    + verdict["copied_out_bytes"].as_u64().unwrap_or(0);
                expect(
                    verdict["movement"] == *movement && moved >= u64::from(SERVED_MIB) << 20,
                    format!("verdict {verdict}"),
                )
            }),
        ));
    }
    results
}

//! `cargo xtask clock-vm`: seed 004's VM clock, for real. x86_64 guests on Debian's
//! stock kernel booted with `clocksource=tsc` (with `tsc=reliable`, since TCG's TSC is
//! not trusted otherwise), `clocksource=hpet` and `clocksource=acpi_pm`; under the
//! last two `clock_gettime` leaves the vDSO for a real syscall. In each guest:
//! `probe clock` and `probe doctor` must tell the three apart, a static Go program
//! calling `time.Now()` traced with `probe syscalls --comm` must show clock_gettime
//! syscalls only without a vDSO mode, ioserve-clock's `CachedClock` is timed against
//! `Instant::now()`, and every probe program must load and count exactly on the 6.1
//! kernel (see [`probe_checks`], shared with arm64-vm).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Result};
use serde_json::Value;

use crate::guests::{
    self as guest, expect, Arch, Checks, Initramfs, Machine, Outcome, Script, Sections,
};
use crate::util::step;

/// The clocksources booted, with the kernel arguments that select them.
const CLOCKSOURCES: &[(&str, &str)] = &[
    ("tsc", "clocksource=tsc tsc=reliable"),
    ("hpet", "clocksource=hpet"),
    ("acpi_pm", "clocksource=acpi_pm"),
];

/// The clock ids the vDSO serves when the clocksource has a vDSO mode.
const VDSO_CLOCKS: &[&str] = &[
    "CLOCK_REALTIME",
    "CLOCK_MONOTONIC",
    "CLOCK_MONOTONIC_RAW",
    "CLOCK_BOOTTIME",
    "CLOCK_TAI",
];

/// The clock ids the vDSO serves under every clocksource (from the kernel's tick, no
/// counter read).
const COARSE_CLOCKS: &[&str] = &["CLOCK_REALTIME_COARSE", "CLOCK_MONOTONIC_COARSE"];

/// Seconds the guest waits for the clocksource it was booted with to be the current one.
const CLOCKSOURCE_SECONDS: u32 = 60;

/// Calls per clock id of the guests' `probe clock`: plenty to tell 0 syscalls per call
/// from 1, which is what the checks read. Under TCG every counter read is emulated:
/// 20000 calls took 20-24 s per run in the arm64 guest (two runs there); 2000, counted
/// and then timed, about a fifth of that.
pub(crate) const GUEST_CLOCK_CALLS: u32 = 2000;

/// Seconds probe traces the Go program, which runs from a second before probe starts
/// until SIGTERM after probe ends (GO_MAX_SECONDS at most, should the kill not come).
const GO_TRACE_SECONDS: u32 = 2;
const GO_MAX_SECONDS: u32 = 120;

/// Which probe the x86_64 guests run.
#[derive(clap::Args, Debug, Default, Clone)]
pub(crate) struct Options {
    /// Run probe and probe-calibrate from this directory (a release or packaged
    /// build's) instead of building the debug ones
    #[arg(long = "probe-dir", value_name = "DIR")]
    probe_dir: Option<PathBuf>,
}

impl Options {
    /// probe and probe-calibrate from `dir` (what `cargo xtask ci` has just packaged:
    /// building probe alone again would resolve its dependencies' features anew and
    /// compile them once more, 34 s of both cores in CI).
    pub(crate) fn probe_in(dir: &Path) -> Options {
        Options {
            probe_dir: Some(dir.to_path_buf()),
        }
    }
}

/// Boots one guest per clocksource and checks each.
pub(crate) fn run(options: &Options) -> Result<()> {
    ensure!(
        cfg!(target_arch = "x86_64"),
        "clock-vm boots x86_64 guests with x86_64 binaries: run it on x86_64"
    );
    let arch = Arch::X86_64;
    arch.ensure_tools()?;
    let kernel = guest::debian_kernel(arch)?;
    let probe = ProbeBinaries::for_x86_64(options.probe_dir.as_deref())?;
    let clock_cost = clock_cost()?;
    let gotime = go_program()?;
    let mut checks = Checks::new("clock-vm");
    let mut guests = Vec::new();
    for &(source, append) in CLOCKSOURCES {
        let mut initramfs = Initramfs::new(arch)?;
        probe.add_to(&mut initramfs)?;
        initramfs.host_program("clock_cost", &clock_cost)?;
        initramfs.program("gotime", &gotime)?;
        let mut script = Script::default();
        // The kernel starts on tsc-early and switches to tsc only when its delayed
        // calibration work runs (a second or more into boot under TCG, often after
        // init has started): wait for the switch instead of reading it once.
        script.settle(
            "clocksource",
            "cat /sys/devices/system/clocksource/clocksource0/current_clocksource",
            source,
            CLOCKSOURCE_SECONDS,
        );
        add_clock_commands(&mut script);
        add_probe_commands(&mut script);
        let machine = Machine {
            arch,
            name: format!("clock-{source}"),
            nodes: vec![(2, 1024)],
            append: append.to_string(),
            timeout: Duration::from_secs(300),
            single_threaded: true,
        };
        guests.push((machine, initramfs.finish(&script)));
    }
    // Each guest runs on one host thread: booted side by side they use every core.
    let booted = guest::boot_together("clock-vm", &kernel, &guests);
    for (&(source, _), sections) in CLOCKSOURCES.iter().zip(booted) {
        let sections = sections?;
        let mut results = vec![(
            format!("clocksource is {source}"),
            sections.settled("clocksource", source).map(drop),
        )];
        results.extend(clock_checks(&sections, source != "tsc"));
        results.extend(probe_checks(&sections));
        let guest = format!("x86_64 {source}");
        checks.add(&guest, results);
        if let Ok(costs) = clock_costs(&sections) {
            checks.measured(&guest, &format!("per read: {costs}"));
        }
        if let Ok(go) = go_counts(&sections) {
            checks.measured(
                &guest,
                &format!(
                    "Go: {} time.Now calls in {} s; {} clock_gettime syscalls in the \
                     {GO_TRACE_SECONDS} s traced",
                    go.calls, go.seconds, go.clock_gettime
                ),
            );
        }
    }
    checks.finish()
}

/// probe and probe-calibrate: the host's build for x86_64 guests (with its libraries),
/// a static cross build for aarch64 ones.
pub(crate) struct ProbeBinaries {
    arch: Arch,
    dir: PathBuf,
}

impl ProbeBinaries {
    /// The programs, as cargo names them.
    const NAMES: [&'static str; 2] = ["probe", "probe-calibrate"];

    /// The cargo arguments that select them.
    pub(crate) const ARGS: &'static [&'static str] = &["--package", "ioserve-probe", "--bins"];

    /// The host's programs, for x86_64 guests: those in `dir`, or the debug build,
    /// built now (aarch64 guests get theirs from arm64-vm's one static build of every
    /// guest program, through [`ProbeBinaries::at`]).
    pub(crate) fn for_x86_64(dir: Option<&Path>) -> Result<ProbeBinaries> {
        let dir = match dir {
            Some(dir) => {
                for name in Self::NAMES {
                    let program = dir.join(name);
                    ensure!(
                        program.is_file(),
                        "--probe-dir {}: no {name} in it; give the directory of a build \
                         of ioserve-probe's programs (probe and probe-calibrate)",
                        dir.display()
                    );
                }
                dir.to_path_buf()
            }
            None => guest::host_build("probe", ProbeBinaries::ARGS)?,
        };
        Ok(ProbeBinaries::at(Arch::X86_64, &dir))
    }

    /// Where a build for `arch` with [`ProbeBinaries::ARGS`] put them (its profile
    /// directory `dir`).
    pub(crate) fn at(arch: Arch, dir: &Path) -> ProbeBinaries {
        ProbeBinaries {
            arch,
            dir: dir.to_path_buf(),
        }
    }

    pub(crate) fn add_to(&self, initramfs: &mut Initramfs) -> Result<()> {
        for name in Self::NAMES {
            match self.arch {
                Arch::X86_64 => initramfs.host_program(name, &self.dir.join(name))?,
                Arch::Aarch64 => initramfs.program(name, &self.dir.join(name))?,
            };
        }
        Ok(())
    }
}

/// ioserve-clock's `clock_cost` example, optimised (a debug build's CachedClock read
/// is a chain of unoptimised calls, hundreds of ns under TCG). The crate has no
/// dependencies, so this takes seconds.
fn clock_cost() -> Result<PathBuf> {
    let dir = guest::host_build(
        "ioserve-clock's clock_cost (release)",
        &[
            "--release",
            "--package",
            "ioserve-clock",
            "--example",
            "clock_cost",
        ],
    )?;
    Ok(dir.join("examples/clock_cost"))
}

/// xtask/guest/gotime built with CGO_ENABLED=0 (a static binary, as the seed's
/// service would ship in a scratch container).
fn go_program() -> Result<PathBuf> {
    let go = crate::util::find_go()?;
    let out = guest::work_dir()?.join("gotime");
    let mut build = Command::new(go);
    build
        .current_dir(crate::util::project_root().join("xtask/guest/gotime"))
        .args(["build", "-o"])
        .arg(&out)
        .arg("main.go")
        .env("CGO_ENABLED", "0")
        .env("GOOS", "linux")
        .env("GOARCH", "amd64");
    step("go build gotime (CGO_ENABLED=0)", build)?;
    Ok(out)
}

/// `probe clock`, `probe doctor`, the Go program under `probe syscalls --comm`, and
/// the cached clock's cost.
fn add_clock_commands(script: &mut Script) {
    script
        .run(
            "clock",
            &format!("probe clock --json --calls {GUEST_CLOCK_CALLS}"),
        )
        .run(
            "clock-table",
            &format!("probe clock --calls {GUEST_CLOCK_CALLS}"),
        )
        .run("doctor", "probe doctor --json")
        .run("doctor-text", "probe doctor")
        .shell(&format!("gotime {GO_MAX_SECONDS} > /tmp/gotime.out 2>&1 &"))
        .shell("GOTIME=$!")
        // Traced by name: wait until the exec has given the process its name.
        .settle("gotime-started", "cat /proc/$GOTIME/comm", "gotime", 60)
        .run(
            "go-traced",
            &format!(
                "probe syscalls --comm gotime --duration {GO_TRACE_SECONDS} --json -o /dev/stdout"
            ),
        )
        .shell("kill -TERM $GOTIME")
        .shell("wait $GOTIME")
        .run("go-calls", "cat /tmp/gotime.out")
        .run("clock-cost", "clock_cost 100000");
}

/// Checks of the clock commands; `fallback` says whether the clocksource has no
/// vDSO mode (hpet, acpi_pm).
fn clock_checks(s: &Sections, fallback: bool) -> Vec<(String, Outcome)> {
    let (way, doctor, go) = if fallback {
        (
            "syscall",
            "warns of the fallback with evidence and fix",
            "clock_gettime syscalls",
        )
    } else {
        ("vDSO", "no clock warning", "no clock_gettime syscall")
    };
    vec![
        (
            format!("probe clock: wall/monotonic clocks by {way}"),
            s.json("clock")
                .and_then(|report| check_clock_report(&report, fallback)),
        ),
        (
            format!("probe doctor: {doctor}"),
            s.json("doctor")
                .and_then(|report| check_doctor(&report, fallback)),
        ),
        (
            format!("Go time.Now under probe --comm: {go}"),
            check_go(s, fallback),
        ),
        (
            "clock_cost timed CachedClock and Instant::now".into(),
            clock_costs(s).map(drop),
        ),
    ]
}

/// `probe clock --json`'s report from a guest: every call of a clock the vDSO serves
/// made no syscall, every other call exactly one (the counts are exact: one syscall
/// too many or too few over [`GUEST_CLOCK_CALLS`] calls fails), and the verdict says
/// whether the wall and monotonic clocks fall back (`fallback`).
pub(crate) fn check_clock_report(report: &Value, fallback: bool) -> Outcome {
    let measurements = report["measurements"].as_array().ok_or("no measurements")?;
    let per_call = |clock: &str, key: &str, want: f64| -> Outcome {
        let m = measurements
            .iter()
            .find(|m| m["clock"] == clock)
            .ok_or(format!("no {clock}"))?;
        let syscalls = m[key].as_f64().ok_or(format!("{clock}: no {key}"))?;
        let off_by = (syscalls - want) * f64::from(GUEST_CLOCK_CALLS);
        expect(
            off_by.abs() < 0.5,
            format!(
                "{clock}: {key} {syscalls} over {GUEST_CLOCK_CALLS} calls ({off_by:+.0} \
                 syscalls), want exactly {want}"
            ),
        )
    };
    for clock in VDSO_CLOCKS {
        per_call(
            clock,
            "libc_syscalls_per_call",
            if fallback { 1.0 } else { 0.0 },
        )?;
        per_call(clock, "raw_syscalls_per_call", 1.0)?;
    }
    for clock in COARSE_CLOCKS {
        per_call(clock, "libc_syscalls_per_call", 0.0)?;
    }
    expect(
        report["verdict"]["ok"] == !fallback,
        format!("verdict {}", report["verdict"]),
    )
}

fn check_doctor(report: &Value, fallback: bool) -> Outcome {
    let clock = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["area"] == "clock"))
        .ok_or("no clock finding")?;
    if !fallback {
        return expect(clock["severity"] == "ok", format!("clock finding {clock}"));
    }
    let text = |key: &str| clock[key].as_str().unwrap_or_default().to_string();
    expect(
        clock["severity"] == "warn"
            && text("evidence").contains("1.000 syscalls/call")
            && text("fix").contains("tsc=reliable")
            && text("fix").contains("CachedClock"),
        format!("clock finding {clock}"),
    )
}

/// What the Go program did: its clock_gettime syscalls while traced, its time.Now
/// calls and the seconds it ran.
struct GoRun {
    clock_gettime: u64,
    calls: u64,
    seconds: f64,
}

fn go_counts(s: &Sections) -> Result<GoRun, String> {
    let report = s.json("go-traced")?;
    let clock_gettime = report["syscalls"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == "clock_gettime"))
        .and_then(|r| r["calls"].as_u64())
        .unwrap_or(0);
    let lines = s.ok("go-calls")?;
    let value = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .ok_or(format!("gotime printed no {key}line: {lines:?}"))
    };
    let calls = value("calls ")?;
    let seconds = value("seconds ")?;
    Ok(GoRun {
        clock_gettime,
        calls: calls
            .parse()
            .map_err(|_| format!("gotime's calls {calls:?}"))?,
        seconds: seconds
            .parse()
            .map_err(|_| format!("gotime's seconds {seconds:?}"))?,
    })
}

fn check_go(s: &Sections, fallback: bool) -> Outcome {
    s.settled("gotime-started", "gotime")?;
    let GoRun {
        clock_gettime,
        calls,
        seconds,
    } = go_counts(s)?;
    // The kill after the trace ended it: it ran through the whole trace.
    expect(
        seconds > f64::from(GO_TRACE_SECONDS) && seconds < f64::from(GO_MAX_SECONDS),
        format!("gotime ran {seconds} s, want it stopped after the {GO_TRACE_SECONDS} s trace"),
    )?;
    let per_second = clock_gettime as f64 / f64::from(GO_TRACE_SECONDS);
    if fallback {
        // time.Now reads the wall and the monotonic clock: two syscalls per call.
        expect(
            per_second > 10_000.0,
            format!(
                "{clock_gettime} clock_gettime syscalls in {GO_TRACE_SECONDS} s \
                 ({calls} time.Now calls in {seconds} s)"
            ),
        )
    } else {
        expect(
            clock_gettime == 0 && calls > 0,
            format!("{clock_gettime} clock_gettime syscalls ({calls} time.Now calls)"),
        )
    }
}

/// ns per read of each clock `clock_cost` timed, as one line.
fn clock_costs(s: &Sections) -> Result<String, String> {
    let lines = s.ok("clock-cost")?;
    let costs: Vec<String> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(name, _)| name.contains("::"))
        .map(|(name, ns)| format!("{name} {ns} ns"))
        .collect();
    expect(
        costs.iter().any(|c| c.starts_with("CachedClock::now ")),
        format!("no CachedClock::now line in {lines:?}"),
    )?;
    Ok(costs.join(", "))
}

/// The probe commands that prove its BPF programs load and count on the guest's
/// kernel: exact syscall counts (also by thread, with every option of the syscalls
/// program on), page faults, run-queue delay.
pub(crate) fn add_probe_commands(script: &mut Script) {
    script
        .run(
            "probe-syscalls",
            "probe syscalls --json -o /dev/stdout -- probe-calibrate syscalls --count 5000",
        )
        .run(
            "probe-syscalls-per-tid",
            "probe syscalls --json -o /dev/stdout --per-tid -L -f -e trace=getppid -- \
             probe-calibrate syscalls --count 1000 --threads 2",
        )
        .run(
            "probe-faults",
            "probe faults --json -o /dev/stdout -- probe-calibrate faults --pages 2000",
        )
        .run("probe-runq", "probe runq --duration 1 --json");
}

/// Checks of [`add_probe_commands`]'s output.
pub(crate) fn probe_checks(s: &Sections) -> Vec<(String, Outcome)> {
    vec![
        (
            "probe syscalls counts 5000 getppid exactly".into(),
            s.json("probe-syscalls").and_then(|report| {
                let calls = report["syscalls"]
                    .as_array()
                    .and_then(|rows| rows.iter().find(|r| r["name"] == "getppid"))
                    .and_then(|r| r["calls"].as_u64());
                expect(calls == Some(5000), format!("getppid calls {calls:?}"))
            }),
        ),
        (
            "probe syscalls --per-tid -L -f counts 1000 getppid in each thread".into(),
            s.json("probe-syscalls-per-tid").and_then(|report| {
                let threads: Vec<(Option<u64>, Option<u64>)> = report["tasks"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|task| {
                        let row = &task["syscalls"][0];
                        (row["calls"].as_u64(), row["total_ns"].as_u64())
                    })
                    .collect();
                let exact = threads.len() == 2
                    && threads
                        .iter()
                        .all(|&(calls, ns)| calls == Some(1000) && ns.is_some_and(|ns| ns > 0));
                expect(exact, format!("(calls, total_ns) by thread: {threads:?}"))
            }),
        ),
        (
            "probe faults counts 2000 touched pages".into(),
            s.json("probe-faults").and_then(|report| {
                let minor = report["processes"]
                    .as_array()
                    .and_then(|p| p.first())
                    .and_then(|p| p["minor"].as_u64())
                    .unwrap_or(0);
                expect(
                    (2000..2600).contains(&minor),
                    format!("{minor} minor faults for 2000 pages"),
                )
            }),
        ),
        (
            "probe runq loads and samples".into(),
            s.json("probe-runq").and_then(|report| {
                let samples = report["runq"]["samples"].as_u64().unwrap_or(0);
                expect(samples > 0, format!("{samples} wakeups sampled in 1 s"))
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `probe clock --json` report: the wall and monotonic clocks' libc calls made
    /// `libc` syscalls each over the guests' calls, the coarse clocks none.
    fn report(libc: f64, fallback: bool) -> Value {
        let mut measurements: Vec<Value> = VDSO_CLOCKS
            .iter()
            .map(|clock| {
                serde_json::json!({
                    "clock": clock,
                    "libc_syscalls_per_call": libc,
                    "raw_syscalls_per_call": 1.0,
                })
            })
            .collect();
        measurements.extend(COARSE_CLOCKS.iter().map(|clock| {
            serde_json::json!({
                "clock": clock,
                "libc_syscalls_per_call": 0.0,
                "raw_syscalls_per_call": 1.0,
            })
        }));
        serde_json::json!({ "measurements": measurements, "verdict": { "ok": !fallback } })
    }

    #[test]
    fn the_clock_report_must_count_every_syscall_exactly() {
        let calls = f64::from(GUEST_CLOCK_CALLS);
        assert!(check_clock_report(&report(1.0, true), true).is_ok());
        assert!(check_clock_report(&report(0.0, false), false).is_ok());
        // Two syscalls too many over all the calls (the timer's own reads, once).
        let error = check_clock_report(&report((calls + 2.0) / calls, true), true).unwrap_err();
        assert!(error.contains("(+2 syscalls), want exactly 1"), "{error}");
        assert!(check_clock_report(&report(1.0 / calls, false), false).is_err());
        assert!(
            check_clock_report(&report(1.0, true), false).is_err(),
            "no fallback expected"
        );
    }
}

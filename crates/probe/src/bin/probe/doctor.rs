//! `probe doctor`: the system checks of [`ioserve_probe::doctor`] plus the measured ones:
//! the clock's syscalls, and for a pid its sendfile verdict, page-fault rate,
//! clock_gettime syscall rate and run-queue delay.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use serde_json::json;

use ioserve_probe::bpf::Scope;
use ioserve_probe::cli::DoctorArgs;
use ioserve_probe::clock::{self, Clocksources, VdsoMapping};
use ioserve_probe::doctor::{self, Finding, Severity};
use ioserve_probe::error::ProbeError;
use ioserve_probe::faults::FaultTracer;
use ioserve_probe::runq::RunqTracer;
use ioserve_probe::session::{Prepared, TargetSpec};
use ioserve_probe::signals::Signals;
use ioserve_probe::syscalls::{SyscallOptions, SyscallTracer};
use ioserve_probe::verdict::FileServingVerdict;

/// The shortest window over which UDP receive-buffer errors are watched.
const UDP_WINDOW: Duration = Duration::from_secs(1);

pub fn run(args: &DoctorArgs, signals: &Signals) -> anyhow::Result<()> {
    let bpf = crate::require_bpf();
    if args.pid.is_some() {
        // The process checks need the probes: fail early and clearly.
        if let Err(err) = &bpf {
            anyhow::bail!("{err} (needed for --pid)");
        }
    }
    // UDP drops are counted over the whole run (at least UDP_WINDOW).
    let udp_before = (doctor::UdpCounters::read(&args.root), Instant::now());
    let mut findings = vec![clock_finding(args, &bpf)];
    findings.push(doctor::cpufreq(&args.root));
    findings.push(doctor::numa(&args.root));
    findings.push(doctor::transparent_huge_pages(&args.root));
    if let Some(pid) = args.pid {
        findings.extend(process_findings(pid, args.duration, signals)?);
    }
    std::thread::sleep(UDP_WINDOW.saturating_sub(udp_before.1.elapsed()));
    findings.push(doctor::udp_receive_buffers(
        &udp_before.0,
        &doctor::UdpCounters::read(&args.root),
        udp_before.1.elapsed(),
    ));
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "findings": findings }))?
        );
        return Ok(());
    }
    for finding in &findings {
        out!("{}", finding.render());
    }
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warn)
        .count();
    outln!("\n{warnings} warning(s) in {} checks", findings.len());
    Ok(())
}

/// The clocksource and vDSO finding: measured with the syscall counter when BPF is
/// available, else by timing alone (a vDSO call is several times cheaper than a
/// syscall), saying why.
fn clock_finding(args: &DoctorArgs, bpf: &Result<(), ProbeError>) -> Finding {
    let sources = Clocksources::read(&args.root);
    let vdso = VdsoMapping::of("self").unwrap_or_default();
    let source_text = sources.as_ref().map_or("unknown".to_string(), |s| {
        format!(
            "clocksource {} (available: {})",
            s.current,
            s.available.join(" ")
        )
    });
    let why_timed = match bpf {
        Ok(()) => match measured_clock_finding(sources.as_ref(), &vdso, &source_text) {
            Ok(finding) => return finding,
            Err(err) => format!("the syscall counter failed: {err}"),
        },
        Err(err) => err.to_string(),
    };
    let time = |f: &dyn Fn() -> libc::c_long| {
        let start = Instant::now();
        for _ in 0..20_000 {
            std::hint::black_box(f());
        }
        start.elapsed().as_nanos() as f64 / 20_000.0
    };
    let libc_ns = time(&|| clock::libc_clock_gettime(libc::CLOCK_MONOTONIC));
    let raw_ns = time(&|| clock::raw_clock_gettime(libc::CLOCK_MONOTONIC));
    let syscall_like = !vdso.vdso || libc_ns > 0.5 * raw_ns;
    Finding {
        area: "clock",
        severity: if syscall_like {
            Severity::Warn
        } else {
            Severity::Ok
        },
        summary: if syscall_like {
            "clock_gettime(CLOCK_MONOTONIC) costs about as much as a syscall: the vDSO \
             likely falls back"
                .into()
        } else {
            "clock_gettime(CLOCK_MONOTONIC) is served by the vDSO".into()
        },
        evidence: format!(
            "{source_text}; {libc_ns:.0} ns/call vs {raw_ns:.0} ns for a real syscall \
             (timed only, syscalls not counted: {why_timed})"
        ),
        fix: syscall_like.then(|| "count the syscalls with `probe clock` where BPF loads (root or CAP_BPF + CAP_PERFMON, a kernel with BTF)".into()),
    }
}

/// The clock finding from `probe clock`'s measurement.
fn measured_clock_finding(
    sources: Option<&Clocksources>,
    vdso: &VdsoMapping,
    source_text: &str,
) -> Result<Finding, ProbeError> {
    let mut storage = MaybeUninit::uninit();
    let options = SyscallOptions {
        scope: Scope::Processes(vec![std::process::id()]),
        ..Default::default()
    };
    let tracer = SyscallTracer::start(&mut storage, &options)?;
    let measurements = clock::measure_clocks(&tracer, 20_000)?;
    let verdict = clock::verdict(sources, vdso, &measurements);
    let evidence = match measurements.iter().find(|m| m.clock == "CLOCK_MONOTONIC") {
        Some(m) => format!(
            "{source_text}; CLOCK_MONOTONIC {:.0} ns/call with {:.3} syscalls/call \
             (a real syscall: {:.0} ns)",
            m.libc_ns_per_call, m.libc_syscalls_per_call, m.syscall_ns_per_call
        ),
        None => source_text.to_string(),
    };
    Ok(Finding {
        area: "clock",
        severity: if verdict.ok {
            Severity::Ok
        } else {
            Severity::Warn
        },
        summary: verdict.summary,
        evidence,
        fix: verdict.fix,
    })
}

/// The findings about one process, from watching it for `duration`.
fn process_findings(
    pid: u32,
    duration: Duration,
    signals: &Signals,
) -> anyhow::Result<Vec<Finding>> {
    let prepared = Prepared::new(&TargetSpec::Pids(vec![pid]))?;
    let scope = prepared.scope();
    let (mut s1, mut s2, mut s3) = (
        MaybeUninit::uninit(),
        MaybeUninit::uninit(),
        MaybeUninit::uninit(),
    );
    let mut syscalls = SyscallTracer::start(
        &mut s1,
        &SyscallOptions {
            scope: scope.clone(),
            ..SyscallOptions::default()
        },
    )?;
    let mut faults = FaultTracer::start(&mut s2, &scope)?;
    let mut runq = RunqTracer::start(&mut s3, &scope)?;
    note!("Watching pid {pid} for {:.1} s...", duration.as_secs_f64());
    let (ending, elapsed) = prepared.run(signals, Some(duration))?;
    syscalls.stop();
    faults.stop();
    runq.stop();
    let seconds = elapsed.as_secs_f64();
    let calls = syscalls.snapshot()?;
    let fault_rows = faults.snapshot()?;
    let delays = runq.snapshot()?;
    let window = format!("pid {pid}, {seconds:.1} s ({})", ending.describe());
    let minor: u64 = fault_rows.iter().map(|f| f.minor).sum();
    let major: u64 = fault_rows.iter().map(|f| f.major).sum();
    Ok(vec![
        doctor::data_movement(&window, FileServingVerdict::judge(&calls).as_ref()),
        doctor::page_faults(&window, minor, major, seconds),
        doctor::clock_syscalls(&window, &calls.clock_ids, seconds),
        doctor::run_queue(&window, &delays),
    ])
}

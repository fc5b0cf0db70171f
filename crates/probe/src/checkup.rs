//! The doctor's measured checks, beside the system checks of [`doctor`]: the clock's
//! cost counted with the syscall probe (or timed alone where BPF does not load), and
//! for a process its sendfile verdict, page faults, clock_gettime syscalls and
//! run-queue delay, watched for a while.
//!
//! [`doctor`]: crate::doctor

use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::bpf::Scope;
use crate::clock::{self, Clocksources, VdsoMapping};
use crate::doctor::{self, Finding, Severity};
use crate::error::ProbeError;
use crate::faults::FaultTracer;
use crate::runq::RunqTracer;
use crate::session::{Prepared, TargetSpec};
use crate::signals::Signals;
use crate::syscalls::{SyscallOptions, SyscallTracer};
use crate::verdict::FileServingVerdict;

/// The clocksource and vDSO finding: measured with the syscall counter when BPF is
/// available, else by timing alone (a vDSO call is several times cheaper than a
/// syscall), saying why.
pub fn clock_finding(root: &Path, bpf: &Result<(), ProbeError>) -> Finding {
    let sources = Clocksources::read(root);
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

/// The findings about one process, from watching it for `duration` (or until
/// SIGINT/SIGTERM, collected through `signals`); `attached` is called once the probes
/// are attached, before the wait.
pub fn process_findings(
    pid: u32,
    duration: Duration,
    signals: &Signals,
    attached: impl FnOnce(),
) -> Result<Vec<Finding>, ProbeError> {
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
    attached();
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

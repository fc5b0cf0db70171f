//! `probe`: eBPF diagnostics for file-serving and latency-sensitive services.

use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use ioserve_probe::bpf::Scope;
use ioserve_probe::cli::{Cli, ClockArgs, Command, FaultsArgs, Format, RunqArgs, SyscallsArgs};
use ioserve_probe::clock::{self, Clocksources, VdsoMapping, WatchedClock};
use ioserve_probe::error::ProbeError;
use ioserve_probe::faults::FaultTracer;
use ioserve_probe::present::clock::ClockReport;
use ioserve_probe::present::faults::FaultReport;
use ioserve_probe::present::runq::RunqReport;
use ioserve_probe::present::syscalls::TracedSyscalls;
use ioserve_probe::present::{self, ReportSink};
use ioserve_probe::privilege;
use ioserve_probe::row_filter::RowFilter;
use ioserve_probe::runq::RunqTracer;
use ioserve_probe::session::{Prepared, TargetSpec};
use ioserve_probe::signals::Signals;
use ioserve_probe::syscalls::{SyscallOptions, SyscallSnapshot, SyscallTracer};
use ioserve_probe::sysnames;
use ioserve_probe::verdict::FileServingVerdict;

/// Writes to stdout. A closed stdout (`probe ... | head`) is not an error worth a
/// panic: the output is simply dropped.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

/// Writes a progress or log line to stderr, ignoring a closed stderr: a daemon whose
/// log reader went away must still detach cleanly on SIGTERM.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod daemon;
mod doctor;

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Syscalls(args) => with_blocked_signals(|signals| syscalls(&args, signals)),
        Command::Clock(args) => with_blocked_signals(|signals| clock_command(&args, signals)),
        Command::Faults(args) => with_blocked_signals(|signals| faults(&args, signals)),
        Command::Runq(args) => with_blocked_signals(|signals| runq(&args, signals)),
        Command::Doctor(args) => with_blocked_signals(|signals| doctor::run(&args, signals)),
        // The daemon catches its signals on its runtime, like the toolkit's other
        // daemons.
        Command::Daemon(args) => daemon::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err),
    }
}

/// Runs a command that traces for a while, with SIGINT, SIGTERM and SIGCHLD blocked
/// before any thread exists: it collects them with sigtimedwait, prints its summary
/// and detaches.
fn with_blocked_signals(
    command: impl FnOnce(&Signals) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    command(&Signals::block()?)
}

/// Prints `err` as one line (with its causes) and picks the exit code: 2 for what
/// the user must fix first (privileges, missing kernel support, bad target), else 1.
fn fail(err: &anyhow::Error) -> ExitCode {
    note!("probe: {err:#}");
    match err.downcast_ref::<ProbeError>() {
        Some(
            ProbeError::NotPrivileged { .. }
            | ProbeError::NoBtf { .. }
            | ProbeError::Attach { .. }
            | ProbeError::NoSuchProcess { .. }
            | ProbeError::Spawn { .. },
        ) => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    }
}

fn syscalls(args: &SyscallsArgs, signals: &Signals) -> anyhow::Result<()> {
    // Bad filters and report files are refused before anything is traced.
    let filter = RowFilter::parse(&args.expressions)?;
    let mut sink = ReportSink::open(args.output.as_deref())?;
    privilege::require_bpf()?;
    let layout = args.layout();
    let spec = args.target.spec();
    let prepared = Prepared::new(&spec)?;
    let target = present::describe_target(&spec, &prepared);
    let mut storage = MaybeUninit::uninit();
    let options = SyscallOptions {
        scope: prepared.scope(),
        // strace's summary has a time column.
        latency: args.latency || args.format == Format::Strace,
        follow_forks: args.follow_forks,
        per_task: args.per_task(),
    };
    let mut tracer = SyscallTracer::start(&mut storage, &options)?;
    // On stderr also with --json: it tells a script that the probes are attached.
    if !matches!(spec, TargetSpec::Command(_)) {
        note!("Tracing syscalls of {target}... Ctrl-C to stop.");
    }
    let (ending, elapsed) = match args.interval {
        None => prepared.run(signals, args.duration)?,
        Some(interval) => {
            let mut earlier = SyscallSnapshot::default();
            let mut from = Duration::ZERO;
            prepared.run_in_intervals(signals, args.duration, interval, |to| {
                let now = tracer.snapshot()?;
                let mut change = now.since(&earlier);
                filter.keep_shown_rows(&mut change, args.top);
                sink.write(&present::syscalls::interval(&layout, &change, from, to)?)?;
                (earlier, from) = (now, to);
                anyhow::Ok(())
            })?
        }
    };
    tracer.stop();
    let mut snapshot = tracer.snapshot()?;
    drop(tracer);
    // The verdict sees every syscall, whatever --top shows.
    let verdict = FileServingVerdict::judge(&snapshot);
    filter.keep_shown_rows(&mut snapshot, args.top);
    let traced = TracedSyscalls {
        target,
        ending,
        elapsed,
        snapshot,
        verdict,
    };
    sink.write(&traced.render(&layout, args.interval.is_some())?)?;
    Ok(())
}

fn clock_command(args: &ClockArgs, signals: &Signals) -> anyhow::Result<()> {
    privilege::require_bpf()?;
    let sources = Clocksources::read(std::path::Path::new("/"));
    let vdso = VdsoMapping::of("self").unwrap_or_default();
    let me = std::process::id();
    let measurements = {
        let mut storage = MaybeUninit::uninit();
        let options = SyscallOptions {
            scope: Scope::Processes(vec![me]),
            ..SyscallOptions::default()
        };
        let tracer = SyscallTracer::start(&mut storage, &options)?;
        clock::measure_clocks(&tracer, args.calls)?
    };
    let verdict = clock::verdict(sources.as_ref(), &vdso, &measurements);
    let watched = match args.pid {
        Some(pid) => Some(watch_clock_syscalls(pid, args.duration, signals)?),
        None => None,
    };
    let report = ClockReport {
        sources,
        vdso,
        measurements,
        calls: args.calls,
        verdict,
        watched,
    };
    out!("{}", report.render(args.json)?);
    Ok(())
}

fn watch_clock_syscalls(
    pid: u32,
    duration: Duration,
    signals: &Signals,
) -> anyhow::Result<WatchedClock> {
    let prepared = Prepared::new(&TargetSpec::Pids(vec![pid]))?;
    let nr = sysnames::number("clock_gettime").expect("clock_gettime exists");
    let mut storage = MaybeUninit::uninit();
    let options = SyscallOptions {
        scope: prepared.scope(),
        ..Default::default()
    };
    let mut tracer = SyscallTracer::start(&mut storage, &options)?;
    let (_, elapsed) = prepared.run(signals, Some(duration))?;
    tracer.stop();
    let snapshot = tracer.snapshot()?;
    let syscalls = tracer.calls_of(nr)?;
    Ok(WatchedClock::new(
        pid,
        elapsed.as_secs_f64(),
        syscalls,
        &snapshot.clock_ids,
        VdsoMapping::of(&pid.to_string()).is_some_and(|m| m.vdso),
    ))
}

fn faults(args: &FaultsArgs, signals: &Signals) -> anyhow::Result<()> {
    let mut sink = ReportSink::open(args.output.as_deref())?;
    privilege::require_bpf()?;
    let spec = args.target.spec();
    let prepared = Prepared::new(&spec)?;
    let target = present::describe_target(&spec, &prepared);
    let command_name = match &spec {
        TargetSpec::Command(argv) => std::path::Path::new(&argv[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        _ => None,
    };
    let mut storage = MaybeUninit::uninit();
    let mut tracer = FaultTracer::start(&mut storage, &prepared.scope())?;
    // On stderr also with --json: it tells a script that the probes are attached.
    if !matches!(spec, TargetSpec::Command(_)) {
        note!("Counting page faults of {target}... Ctrl-C to stop.");
    }
    let (ending, elapsed) = prepared.run(signals, args.duration)?;
    tracer.stop();
    let mut rows = tracer.snapshot()?;
    drop(tracer);
    if let Some(name) = &command_name {
        // Its first faults happen before its execve, under probe's name.
        rows.iter_mut().for_each(|row| row.comm = name.clone());
    }
    rows.truncate(args.top);
    let report = FaultReport {
        target,
        ending,
        seconds: elapsed.as_secs_f64(),
        rows,
    };
    sink.write(&report.render(args.json)?)?;
    Ok(())
}

fn runq(args: &RunqArgs, signals: &Signals) -> anyhow::Result<()> {
    privilege::require_bpf()?;
    let spec = if args.pid.is_empty() {
        TargetSpec::System
    } else {
        TargetSpec::Pids(args.pid.clone())
    };
    let prepared = Prepared::new(&spec)?;
    let target = present::describe_target(&spec, &prepared);
    let mut storage = MaybeUninit::uninit();
    let mut tracer = RunqTracer::start(&mut storage, &prepared.scope())?;
    if !args.json {
        note!("Tracing run-queue latency of {target}... Ctrl-C to stop.");
    }
    let (ending, elapsed) = prepared.run(signals, args.duration)?;
    tracer.stop();
    let snapshot = tracer.snapshot()?;
    drop(tracer);
    let report = RunqReport {
        target,
        ending,
        seconds: elapsed.as_secs_f64(),
        snapshot,
    };
    out!("{}", report.render(args.json)?);
    Ok(())
}

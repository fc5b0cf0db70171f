//! `probe`: eBPF diagnostics for file-serving and latency-sensitive services.

use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use ioserve_probe::bpf::Scope;
use ioserve_probe::cli::{Cli, ClockArgs, Command, FaultsArgs, Format, RunqArgs, SyscallsArgs};
use ioserve_probe::clock::{self, ClockMeasurement, Clocksources, VdsoMapping, WatchedClock};
use ioserve_probe::error::ProbeError;
use ioserve_probe::faults::FaultTracer;
use ioserve_probe::histogram::Log2Histogram;
use ioserve_probe::privilege;
use ioserve_probe::report::{self, Table};
use ioserve_probe::row_filter::RowFilter;
use ioserve_probe::runq::RunqTracer;
use ioserve_probe::session::{Ending, Prepared, TargetSpec};
use ioserve_probe::signals::Signals;
use ioserve_probe::strace_format::strace_summary;
use ioserve_probe::syscalls::{
    SyscallOptions, SyscallRow, SyscallSnapshot, SyscallTracer, TASK_PAIRS,
};
use ioserve_probe::sysnames;
use ioserve_probe::verdict::FileServingVerdict;

/// Writes a line to stdout. A closed stdout (`probe ... | head`) is not an error
/// worth a panic: the output is simply dropped.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Writes to stdout, ignoring a closed stdout (see `outln!`).
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

/// Checks privileges and BTF before anything is started.
pub(crate) fn require_bpf() -> Result<(), ProbeError> {
    privilege::require_bpf_privileges()?;
    privilege::require_kernel_btf()
}

/// A description of what is watched, for headers ("dd (pid 42)", "pid 42", "all
/// processes").
fn describe_target(spec: &TargetSpec, prepared: &Prepared) -> String {
    match (spec, prepared) {
        (TargetSpec::Command(argv), Prepared::Command(paused)) => {
            let words: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
            format!("`{}` (pid {})", words.join(" "), paused.pid())
        }
        (TargetSpec::Named(name), _) => format!("tasks named '{}'", name.to_string_lossy()),
        (TargetSpec::Pids(pids), _) => {
            let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            format!("pid {}", pids.join(", "))
        }
        _ => "all processes".into(),
    }
}

fn syscalls(args: &SyscallsArgs, signals: &Signals) -> anyhow::Result<()> {
    // Bad filters are refused before anything is traced.
    let filter = RowFilter::parse(&args.expressions)?;
    require_bpf()?;
    let spec = args.target.spec();
    let prepared = Prepared::new(&spec)?;
    let target = describe_target(&spec, &prepared);
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
                keep_shown_rows(&mut change, &filter, args.top);
                print_interval(args, &change, from, to)?;
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
    keep_shown_rows(&mut snapshot, &filter, args.top);
    let traced = TracedSyscalls {
        target,
        ending,
        elapsed,
        snapshot,
        verdict,
    };
    if args.json {
        print_syscalls_json(args, &traced)
    } else {
        print_syscalls_text(args, &traced);
        Ok(())
    }
}

/// What `probe syscalls` found, ready to print.
struct TracedSyscalls {
    target: String,
    ending: Ending,
    elapsed: Duration,
    /// The rows to show (filtered).
    snapshot: SyscallSnapshot,
    /// Judged on every row.
    verdict: Option<FileServingVerdict>,
}

fn print_syscalls_json(args: &SyscallsArgs, traced: &TracedSyscalls) -> anyhow::Result<()> {
    let mut out = json!({
        "target": traced.target,
        "seconds": traced.elapsed.as_secs_f64(),
        "ending": traced.ending,
        "syscalls": traced.snapshot.rows,
        "verdict": traced.verdict.as_ref().map(|v| json!({
            "movement": v.movement, "summary": v.describe(),
            "zero_copy_bytes": v.zero_copy_bytes,
            "copied_in_bytes": v.copied_in_bytes,
            "copied_out_bytes": v.copied_out_bytes,
        })),
    });
    add_tasks_json(args, &traced.snapshot, &mut out)?;
    if args.interval.is_some() {
        // With intervals, every object is one line.
        outln!("{}", serde_json::to_string(&out)?);
    } else {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}

fn print_syscalls_text(args: &SyscallsArgs, traced: &TracedSyscalls) {
    let snapshot = &traced.snapshot;
    if args.format == Format::Strace {
        // As strace -c prints it: the table alone (then each task's).
        out!("{}", strace_summary(&snapshot.rows, args.sort_by));
        out!("{}", task_tables(args, snapshot));
        return;
    }
    outln!(
        "Syscalls of {} over {:.3} s ({}):",
        traced.target,
        traced.elapsed.as_secs_f64(),
        traced.ending.describe()
    );
    out!("{}", syscall_table(&snapshot.rows, args.latency));
    if args.latency {
        for row in &snapshot.rows {
            if let Some(hist) = row.latency.as_ref().filter(|h| h.total() > 0) {
                outln!("\n{} latency:", row.name);
                out!("{}", hist.render());
            }
        }
    }
    out!("{}", task_tables(args, snapshot));
    if let Some(verdict) = &traced.verdict {
        outln!("\nFile serving: {}", verdict.describe());
    }
}

/// The rows a table shows: those `-e` selects, at most `--top` of them; the same in
/// each task's table, and a task left without a row is left out.
fn keep_shown_rows(snapshot: &mut SyscallSnapshot, filter: &RowFilter, top: Option<usize>) {
    let keep = |rows: &mut Vec<SyscallRow>| {
        rows.retain(|row| filter.keeps(row));
        if let Some(top) = top {
            rows.truncate(top);
        }
    };
    keep(&mut snapshot.rows);
    snapshot
        .tasks
        .iter_mut()
        .for_each(|task| keep(&mut task.rows));
    snapshot.tasks.retain(|task| !task.rows.is_empty());
}

/// With --per-pid or --per-tid: a heading and a table for each task, in the layout
/// asked for, and a line for calls no task's table holds.
fn task_tables(args: &SyscallsArgs, snapshot: &SyscallSnapshot) -> String {
    let Some(breakdown) = args.per_task() else {
        return String::new();
    };
    let mut text = String::new();
    for task in &snapshot.tasks {
        text += &format!(
            "\n{} ({} {}): {} calls, {} errors\n",
            task.comm,
            breakdown.id_name(),
            task.id,
            task.calls,
            task.errors
        );
        text += &match args.format {
            Format::Strace => strace_summary(&task.rows, args.sort_by),
            Format::Table => syscall_table(&task.rows, args.latency),
        };
    }
    if snapshot.untasked_calls > 0 {
        text += &format!(
            "\n{} calls are in the totals only: all {TASK_PAIRS} (task, syscall) pairs \
             probe counts were taken.\n",
            snapshot.untasked_calls
        );
    }
    text
}

/// With --per-pid or --per-tid, adds the tasks to a JSON object: "per_task"
/// ("process" or "thread"), "tasks" and "untasked_calls".
fn add_tasks_json(
    args: &SyscallsArgs,
    snapshot: &SyscallSnapshot,
    object: &mut serde_json::Value,
) -> anyhow::Result<()> {
    if let Some(breakdown) = args.per_task() {
        object["per_task"] = serde_json::to_value(breakdown)?;
        object["tasks"] = serde_json::to_value(&snapshot.tasks)?;
        object["untasked_calls"] = snapshot.untasked_calls.into();
    }
    Ok(())
}

/// One interval's table (`-i`): the change between `from` and `to` seconds into the
/// trace, in the layout asked for.
fn print_interval(
    args: &SyscallsArgs,
    change: &SyscallSnapshot,
    from: Duration,
    to: Duration,
) -> anyhow::Result<()> {
    let (from, to) = (from.as_secs_f64(), to.as_secs_f64());
    if args.json {
        let mut line = json!({ "from_seconds": from, "to_seconds": to, "syscalls": change.rows });
        add_tasks_json(args, change, &mut line)?;
        outln!("{}", serde_json::to_string(&line)?);
    } else if args.format == Format::Strace {
        outln!("{from:.3}-{to:.3} s:");
        out!("{}", strace_summary(&change.rows, args.sort_by));
        out!("{}\n", task_tables(args, change));
    } else {
        outln!("{from:.3}-{to:.3} s:");
        out!("{}", syscall_table(&change.rows, args.latency));
        out!("{}\n", task_tables(args, change));
    }
    Ok(())
}

/// The per-syscall table: calls, errors, bytes, and with latency the time columns (a
/// task's rows have no histogram: their average is over all calls, no p99).
fn syscall_table(rows: &[SyscallRow], latency: bool) -> String {
    let mut headers = vec!["syscall", "calls", "errors", "bytes"];
    if latency {
        headers.extend(["total", "avg", "p99 <"]);
    }
    let mut table = Table::new(&headers);
    for row in rows {
        let moves_bytes = sysnames::data_path(&row.name).is_some();
        let mut cells = vec![
            row.name.clone(),
            row.calls.to_string(),
            row.errors.to_string(),
            if moves_bytes {
                report::bytes(row.bytes)
            } else {
                "-".into()
            },
        ];
        if latency {
            let total = row.total_ns.unwrap_or(0);
            let timed = row.latency.as_ref().map_or(row.calls, Log2Histogram::total);
            cells.push(report::nanos(total));
            cells.push(total.checked_div(timed).map_or("-".into(), report::nanos));
            cells.push(
                row.latency
                    .as_ref()
                    .and_then(|h| h.quantile_upper_bound(0.99))
                    .map_or("-".into(), report::nanos),
            );
        }
        table.row(cells);
    }
    table.render()
}

fn clock_command(args: &ClockArgs, signals: &Signals) -> anyhow::Result<()> {
    require_bpf()?;
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
    if args.json {
        let out = json!({
            "clocksources": sources,
            "vdso": vdso,
            "measurements": measurements,
            "verdict": verdict,
            "pid": watched,
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print_clock_setup(sources.as_ref(), &vdso, &measurements);
    outln!(
        "\nPer call, measured in this process ({} calls each):",
        args.calls
    );
    out!("{}", clock_cost_table(&measurements));
    outln!("\nVerdict: {}", verdict.summary);
    if let Some(fix) = &verdict.fix {
        outln!("Fix: {fix}");
    }
    if let Some(w) = watched {
        outln!("\n{}", w.describe());
    }
    Ok(())
}

/// `probe clock`'s first lines: the clocksource, the vDSO mapping and the clocks the
/// vDSO served.
fn print_clock_setup(
    sources: Option<&Clocksources>,
    vdso: &VdsoMapping,
    measurements: &[ClockMeasurement],
) {
    match sources {
        Some(s) => outln!(
            "Clocksource: {} (available: {})",
            s.current,
            s.available.join(" ")
        ),
        None => outln!("Clocksource: unknown (no /sys/devices/system/clocksource)"),
    }
    outln!(
        "vDSO: {}{}",
        if vdso.vdso { "mapped" } else { "NOT mapped" },
        if vdso.vvar.is_empty() {
            String::new()
        } else {
            format!(" ({})", vdso.vvar.join(" "))
        }
    );
    let served: Vec<&str> = measurements
        .iter()
        .filter(|m| m.served_by_vdso())
        .map(|m| m.clock.as_str())
        .collect();
    outln!(
        "Served by the vDSO here: {}",
        if served.is_empty() {
            "none".into()
        } else {
            served.join(", ")
        }
    );
}

/// Each clock's cost and syscalls per call, through libc and as a raw syscall.
fn clock_cost_table(measurements: &[ClockMeasurement]) -> String {
    let mut table = Table::new(&[
        "clock",
        "libc ns",
        "syscalls/call",
        "raw syscall ns",
        "syscalls/call",
    ]);
    for m in measurements {
        table.row(vec![
            m.clock.clone(),
            format!("{:.1}", m.libc_ns_per_call),
            format!("{:.3}", m.libc_syscalls_per_call),
            format!("{:.1}", m.syscall_ns_per_call),
            format!("{:.3}", m.raw_syscalls_per_call),
        ]);
    }
    table.render()
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
    require_bpf()?;
    let spec = args.target.spec();
    let prepared = Prepared::new(&spec)?;
    let target = describe_target(&spec, &prepared);
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
    let seconds = elapsed.as_secs_f64();
    let mut rows = tracer.snapshot()?;
    drop(tracer);
    if let Some(name) = &command_name {
        // Its first faults happen before its execve, under probe's name.
        rows.iter_mut().for_each(|row| row.comm = name.clone());
    }
    rows.truncate(args.top);
    if args.json {
        let out =
            json!({"target": target, "seconds": seconds, "ending": ending, "processes": rows});
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!(
        "Page faults of {target} over {seconds:.3} s ({}):",
        ending.describe()
    );
    let mut table = Table::new(&["pid", "comm", "minor", "major", "minor/s", "major/s"]);
    for row in &rows {
        table.row(vec![
            row.pid.to_string(),
            row.comm.clone(),
            row.minor.to_string(),
            row.major.to_string(),
            format!("{:.0}", row.minor as f64 / seconds),
            format!("{:.0}", row.major as f64 / seconds),
        ]);
    }
    out!("{}", table.render());
    Ok(())
}

fn runq(args: &RunqArgs, signals: &Signals) -> anyhow::Result<()> {
    require_bpf()?;
    let spec = if args.pid.is_empty() {
        TargetSpec::System
    } else {
        TargetSpec::Pids(args.pid.clone())
    };
    let prepared = Prepared::new(&spec)?;
    let target = describe_target(&spec, &prepared);
    let mut storage = MaybeUninit::uninit();
    let mut tracer = RunqTracer::start(&mut storage, &prepared.scope())?;
    if !args.json {
        note!("Tracing run-queue latency of {target}... Ctrl-C to stop.");
    }
    let (ending, elapsed) = prepared.run(signals, args.duration)?;
    tracer.stop();
    let seconds = elapsed.as_secs_f64();
    let snapshot = tracer.snapshot()?;
    drop(tracer);
    if args.json {
        let out = json!({"target": target, "seconds": seconds, "ending": ending, "runq": snapshot,
                         "mean_us": snapshot.mean_us(),
                         "p99_us_upper_bound": snapshot.histogram.quantile_upper_bound(0.99)});
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    outln!(
        "Run-queue latency of {target} over {seconds:.3} s ({}): {} samples, mean {:.1} us, p99 < {} us",
        ending.describe(),
        snapshot.samples,
        snapshot.mean_us(),
        snapshot.histogram.quantile_upper_bound(0.99).map_or("-".into(), |v| v.to_string())
    );
    out!("{}", snapshot.histogram.render());
    Ok(())
}

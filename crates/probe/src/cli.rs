//! The command line of the `probe` binary, here so that tools (completions, man pages)
//! can read it; the binary holds what each command does with it.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::bpf::TaskName;
use crate::present::syscalls::Layout;
use crate::session::TargetSpec;
use crate::strace_format::SortKey;
use crate::syscalls::TaskBreakdown;

pub mod calibrate;

/// eBPF diagnostics: syscalls (sendfile vs read+write), vDSO clock fallback, page
/// faults, run-queue delay; a Prometheus daemon and a doctor. Needs root or
/// CAP_BPF + CAP_PERFMON.
#[derive(Parser, Debug)]
#[command(name = "probe", version, about)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// probe's commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Per-syscall counts, errors, bytes (and latency) of a process or a command,
    /// like syscount and strace -c, with the sendfile-vs-copying verdict.
    Syscalls(SyscallsArgs),
    /// Clocksource, vDSO, and the cost and real syscalls of each clock id.
    Clock(ClockArgs),
    /// Minor and major page faults per process.
    Faults(FaultsArgs),
    /// Run-queue latency histogram (wakeup or preemption to running), like runqlat.
    Runq(RunqArgs),
    /// Keep the probes attached and serve Prometheus metrics.
    Daemon(DaemonArgs),
    /// One report over everything: clocks, governor, NUMA, THP, sendfile, faults.
    Doctor(DoctorArgs),
}

/// Which processes to watch.
#[derive(Args, Debug)]
pub struct TargetArgs {
    /// Trace this process (all its threads); repeatable.
    #[arg(short, long = "pid", value_name = "PID", conflicts_with = "command")]
    pub pid: Vec<u32>,
    /// Trace every task named NAME (its comm, as `ps -o comm` shows it; the kernel
    /// keeps the first 15 bytes), including those started while tracing, like
    /// syscount's --comm.
    #[arg(short, long, value_name = "NAME", value_parser = parse_task_name,
          conflicts_with_all = ["pid", "command"])]
    pub comm: Option<TaskName>,
    /// Start this command and trace it (everything after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl TargetArgs {
    /// What to watch, from the flags.
    pub fn spec(&self) -> TargetSpec {
        if !self.command.is_empty() {
            TargetSpec::Command(self.command.clone())
        } else if !self.pid.is_empty() {
            TargetSpec::Pids(self.pid.clone())
        } else if let Some(name) = self.comm {
            TargetSpec::Named(name)
        } else {
            TargetSpec::System
        }
    }
}

fn parse_task_name(text: &str) -> Result<TaskName, String> {
    TaskName::new(text).map_err(|e| e.to_string())
}

/// `probe syscalls`.
#[derive(Args, Debug)]
pub struct SyscallsArgs {
    /// What to trace.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this many seconds (default: when the target exits, or Ctrl-C).
    #[arg(short, long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<Duration>,
    /// Also time every syscall: total time and log2 latency histograms (costs several
    /// hundred ns per syscall).
    #[arg(short = 'L', long)]
    pub latency: bool,
    /// Also trace the processes the traced ones fork, from their first syscall, as
    /// strace's -f does (with -p or a command).
    #[arg(short = 'f', long)]
    pub follow_forks: bool,
    /// Also break the counts down by process: a table per pid (named as it last ran),
    /// most calls first, like perf trace -s per thread.
    #[arg(long, conflicts_with = "per_tid")]
    pub per_pid: bool,
    /// Also break the counts down by thread: a table per tid.
    #[arg(long)]
    pub per_tid: bool,
    /// Show only the N syscalls with the most calls.
    #[arg(short = 'n', long, value_name = "N")]
    pub top: Option<usize>,
    /// Also print a table for each interval of this length while tracing (the change
    /// over the interval), then the totals; with --json, one JSON object per line.
    #[arg(short = 'i', long, value_name = "DURATION", value_parser = parse_seconds)]
    pub interval: Option<Duration>,
    /// Select rows as strace's -e does: trace=NAME,... (or a bare list; !NAME,... leaves
    /// them out) and status=failed|successful; may be repeated, all apply.
    #[arg(short = 'e', long = "expr", value_name = "EXPR", action = clap::ArgAction::Append)]
    pub expressions: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Table layout: probe's own, or strace -c's summary (% time, seconds, usecs/call,
    /// calls, errors; times measured as with --latency).
    #[arg(long, value_enum, value_name = "LAYOUT", default_value_t = Format::Table)]
    pub format: Format,
    /// With --format strace: sort by time, calls, errors, name or nothing, as strace's
    /// -S does.
    #[arg(short = 'S', long = "sort-by", value_enum, value_name = "KEY",
          default_value_t = SortKey::Time)]
    pub sort_by: SortKey,
    /// Write the report to FILE instead of stderr (strace's -o), so that a traced
    /// command's stdout and stderr stay its own.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

impl SyscallsArgs {
    /// The report's layout, from the flags.
    pub fn layout(&self) -> Layout {
        Layout {
            json: self.json,
            format: self.format,
            latency: self.latency,
            sort_by: self.sort_by,
            per_task: self.per_task(),
        }
    }

    /// The breakdown by task asked for (--per-pid, --per-tid).
    pub fn per_task(&self) -> Option<TaskBreakdown> {
        match (self.per_pid, self.per_tid) {
            (true, _) => Some(TaskBreakdown::Process),
            (_, true) => Some(TaskBreakdown::Thread),
            _ => None,
        }
    }
}

pub use crate::present::syscalls::Format;

/// `probe clock`.
#[derive(Args, Debug)]
pub struct ClockArgs {
    /// Also count this process's real clock_gettime syscalls (the fallback
    /// signature) for --duration seconds.
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<u32>,
    /// How long to watch --pid.
    #[arg(short, long, value_name = "S", default_value = "5", value_parser = parse_seconds)]
    pub duration: Duration,
    /// Calls per clock id and path for the in-process measurement (made twice: once
    /// counted, once timed).
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u32).range(100..=100_000_000))]
    pub calls: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `probe faults`.
#[derive(Args, Debug)]
pub struct FaultsArgs {
    /// What to trace.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this many seconds (default: when the target exits, or Ctrl-C).
    #[arg(short, long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<Duration>,
    /// Show only the N processes with the most faults.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of stderr (strace's -o), so that a traced
    /// command's stdout and stderr stay its own.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `probe runq`.
#[derive(Args, Debug)]
pub struct RunqArgs {
    /// Only tasks of this process; repeatable.
    #[arg(short, long = "pid", value_name = "PID")]
    pub pid: Vec<u32>,
    /// Stop after this many seconds (default: Ctrl-C, or when the processes exit).
    #[arg(short, long, value_name = "S", value_parser = parse_seconds)]
    pub duration: Option<Duration>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// A duration above zero and at most a day: seconds (`2`, `0.5`) or with a unit
/// (`500ms`, `5s`, `1m`), the toolkit's one syntax.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    duration_arg::parse_positive_at_most(text, Duration::from_secs(86_400))
        .map_err(|e| e.to_string())
}

/// `probe daemon`.
#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// Address to serve /metrics on.
    #[arg(short, long, value_name = "ADDR", default_value = "127.0.0.1:9435")]
    pub listen: SocketAddr,
    /// Only these processes (repeatable); they may exit, the daemon stays.
    #[arg(short, long = "pid", value_name = "PID")]
    pub pid: Vec<u32>,
    /// Also every process whose command name (/proc/PID/comm) is NAME, including
    /// ones started later (checked every second); repeatable.
    #[arg(long = "comm", value_name = "NAME")]
    pub comm: Vec<String>,
}

/// `probe doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Also check this process: sendfile verdict, page faults, clock syscalls and
    /// run-queue delay, watched for --duration seconds.
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<u32>,
    /// How long to watch --pid.
    #[arg(short, long, value_name = "S", default_value = "5", value_parser = parse_seconds)]
    pub duration: Duration,
    /// Read the system settings (cpufreq, NUMA, THP, clocksource) from a snapshot of
    /// /proc and /sys under DIR instead of this host's.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

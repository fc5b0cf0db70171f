//! The command lines of the `numa` binary, here so that tools (completions, man pages)
//! can read them: `numa` spelled as numactl spells it, and `numa stat` as numastat.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// Control NUMA policy for processes, numactl-compatible.
#[derive(Debug, Parser)]
#[command(
    name = "numa",
    version,
    after_help = "<nodes> and <cpus>: comma-separated numbers or A-B ranges, or all; a leading ! \
                  inverts the list, a leading + makes numbers relative to the allowed set.\n\
                  Example: numa --cpunodebind=0 --membind=0 -- ./server"
)]
pub struct Cli {
    /// Show the nodes, their CPUs, memory and distances
    #[arg(short = 'H', long)]
    pub hardware: bool,
    /// Show the NUMA policy and bindings of this process
    #[arg(short = 's', long)]
    pub show: bool,
    /// With --hardware: print JSON
    #[arg(long)]
    pub json: bool,
    /// Interleave memory allocations over <nodes>
    #[arg(short = 'i', long, value_name = "NODES")]
    pub interleave: Option<String>,
    /// Interleave weighted by the kernel's node weights (Linux 6.9+)
    #[arg(short = 'w', long = "weighted-interleave", value_name = "NODES")]
    pub weighted_interleave: Option<String>,
    /// Prefer allocating memory on <node>
    #[arg(short = 'p', long, value_name = "NODE")]
    pub preferred: Option<String>,
    /// Prefer allocating memory on <nodes> (Linux 5.15+)
    #[arg(short = 'P', long = "preferred-many", value_name = "NODES")]
    pub preferred_many: Option<String>,
    /// Allocate memory only on <nodes>
    #[arg(short = 'm', long, value_name = "NODES")]
    pub membind: Option<String>,
    /// Allocate memory on the node of the CPU that runs the thread
    #[arg(short = 'l', long)]
    pub localalloc: bool,
    /// Run only on the CPUs of <nodes>
    #[arg(short = 'N', long, value_name = "NODES")]
    pub cpunodebind: Option<String>,
    /// Deprecated spelling of --cpunodebind
    #[arg(short = 'c', long, value_name = "NODES", hide = true)]
    pub cpubind: Option<String>,
    /// Run only on <cpus>
    #[arg(short = 'C', long, value_name = "CPUS")]
    pub physcpubind: Option<String>,
    /// Ignore this process's cpuset: nodes and CPUs outside it may be named
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Read sysfs and procfs under this directory instead of / (for snapshots)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
    /// The command to run, and its arguments
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Per-node memory statistics, as numastat shows them.
#[derive(Debug, Parser)]
#[command(name = "numa stat", version)]
pub struct StatCli {
    /// Per-node meminfo in MB (numastat -m)
    #[arg(short = 'm')]
    pub meminfo: bool,
    /// Memory of process PID per node, in MB (numastat -p)
    #[arg(short = 'p', value_name = "PID")]
    pub pid: Option<u32>,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Print the change over each interval instead of the totals: seconds (2, 0.5) or
    /// with a unit (500ms, 1m)
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    pub interval: Option<std::time::Duration>,
    /// With --interval: how many intervals
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub count: u32,
    /// Read sysfs and procfs under this directory instead of /
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// `--interval`: a duration above zero, in the toolkit's one syntax.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    duration_arg::parse_positive(text).map_err(|e| e.to_string())
}

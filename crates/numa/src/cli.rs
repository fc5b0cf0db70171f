//! The command lines of the `numa` binary, here so that tools (completions, man pages)
//! can read them: `numa` spelled as numactl spells it, and `numa stat` as numastat.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, ArgMatches, Parser};

use crate::numactl::Step;

/// Control NUMA policy for processes or shared memory, numactl-compatible: options
/// take effect in the order given, with numactl's rules.
#[derive(Debug, Parser)]
#[command(
    name = "numa",
    version,
    // numactl's -V is --verify: the version flag is long only (below).
    disable_version_flag = true,
    infer_long_args = true,
    after_help = "<nodes> and <cpus>: comma-separated numbers or A-B ranges, or all; a leading ! \
                  inverts the list, a leading + makes numbers relative to the allowed set; \
                  same repeats the previous node list. <size>: bytes, 0x hex, or with k, m, g.\n\
                  Shared memory: [--length] [--offset] [--shmmode] [--shmid] [--huge] then \
                  --shm KEYFILE or --file FILE, then a policy, --touch, --dump, --dump-nodes.\n\
                  Installed or linked as numactl (or numastat), numa is that tool.\n\
                  Example: numa --cpunodebind=0 --membind=0 -- ./server"
)]
pub struct Cli {
    /// Show the nodes, their CPUs, memory and distances
    #[arg(short = 'H', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub hardware: Vec<bool>,
    /// Show the NUMA policy and bindings of this process
    #[arg(short = 's', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub show: Vec<bool>,
    /// With --hardware: print JSON
    #[arg(long)]
    pub json: bool,
    /// Interleave memory allocations over <nodes>
    #[arg(short = 'i', long, value_name = "NODES", action = ArgAction::Append)]
    pub interleave: Vec<String>,
    /// Interleave weighted by the kernel's node weights (Linux 6.9+)
    #[arg(short = 'w', long = "weighted-interleave", value_name = "NODES", action = ArgAction::Append)]
    pub weighted_interleave: Vec<String>,
    /// Prefer allocating memory on <node>
    #[arg(short = 'p', long, value_name = "NODE", action = ArgAction::Append)]
    pub preferred: Vec<String>,
    /// Prefer allocating memory on <nodes> (Linux 5.15+)
    #[arg(short = 'P', long = "preferred-many", value_name = "NODES", action = ArgAction::Append)]
    pub preferred_many: Vec<String>,
    /// Allocate memory only on <nodes>
    #[arg(short = 'm', long, value_name = "NODES", action = ArgAction::Append)]
    pub membind: Vec<String>,
    /// Allocate memory on the node of the CPU that runs the thread
    #[arg(short = 'l', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub localalloc: Vec<bool>,
    /// With --membind: let the kernel's NUMA balancing move pages among its nodes
    #[arg(short = 'b', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub balancing: Vec<bool>,
    /// Run only on the CPUs of <nodes>
    #[arg(short = 'N', long, value_name = "NODES", action = ArgAction::Append)]
    pub cpunodebind: Vec<String>,
    /// Deprecated spelling of --cpunodebind
    #[arg(short = 'c', long, value_name = "NODES", hide = true, action = ArgAction::Append)]
    pub cpubind: Vec<String>,
    /// Run only on <cpus>
    #[arg(short = 'C', long, value_name = "CPUS", action = ArgAction::Append)]
    pub physcpubind: Vec<String>,
    /// Ignore this process's cpuset: nodes and CPUs outside it may be named
    #[arg(short = 'a', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub all: Vec<bool>,
    /// Shared memory: the System V segment keyed by <keyfile> (created with --length)
    #[arg(short = 'S', long, value_name = "KEYFILE", action = ArgAction::Append)]
    pub shm: Vec<PathBuf>,
    /// Shared memory: the file <file> in tmpfs or hugetlbfs (created with --length)
    #[arg(short = 'f', long, value_name = "FILE", action = ArgAction::Append)]
    pub file: Vec<PathBuf>,
    /// Shared memory: the region starts <size> bytes into the segment or file
    #[arg(short = 'o', long, value_name = "SIZE", action = ArgAction::Append)]
    pub offset: Vec<String>,
    /// Shared memory: the region's length
    #[arg(short = 'L', long, value_name = "SIZE", action = ArgAction::Append)]
    pub length: Vec<String>,
    /// Shared memory: fail if pages already lie outside the policy's nodes
    #[arg(short = 't', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub strict: Vec<bool>,
    /// Shared memory: permissions (octal) of what --shm or --file creates
    #[arg(short = 'M', long, value_name = "MODE", action = ArgAction::Append)]
    pub shmmode: Vec<String>,
    /// Shared memory: the project id mixed into --shm's key
    #[arg(short = 'I', long, value_name = "ID", action = ArgAction::Append)]
    pub shmid: Vec<String>,
    /// Shared memory: a segment of huge pages
    #[arg(short = 'u', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub huge: Vec<bool>,
    /// Shared memory: fault the region's pages in under its policy
    #[arg(short = 'T', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub touch: Vec<bool>,
    /// Shared memory: print the policy of each range of the region
    #[arg(short = 'd', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub dump: Vec<bool>,
    /// Shared memory: print the node of each range of the region
    #[arg(short = 'D', long = "dump-nodes", action = ArgAction::Append, num_args = 0, default_missing_value = "true")]
    pub dump_nodes: Vec<bool>,
    /// Shared memory: check the region against the policy (numactl's debugging aid)
    #[arg(short = 'V', long, action = ArgAction::Append, num_args = 0, default_missing_value = "true", hide = true)]
    pub verify: Vec<bool>,
    /// Print the version
    #[arg(long, action = ArgAction::Version)]
    pub version: Option<bool>,
    /// Read sysfs and procfs under this directory instead of / (for snapshots)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
    /// The command to run, and its arguments
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl Cli {
    /// The options as numactl takes them: one step per occurrence, in command-line
    /// order (clap gathers them per option; their indices restore the order).
    pub fn steps(&self, matches: &ArgMatches) -> Vec<Step> {
        let mut steps: Vec<(usize, Step)> = Vec::new();
        let mut flag = |id: &str, step: Step| {
            for index in matches.indices_of(id).into_iter().flatten() {
                steps.push((index, step.clone()));
            }
        };
        let json = self.json;
        flag("hardware", Step::Hardware { json });
        flag("show", Step::Show);
        flag("localalloc", Step::LocalAlloc);
        flag("balancing", Step::Balancing);
        flag("all", Step::All);
        flag("strict", Step::Strict);
        flag("huge", Step::Huge);
        flag("touch", Step::Touch);
        flag("dump", Step::Dump);
        flag("dump_nodes", Step::DumpNodes);
        flag("verify", Step::Verify);
        let mut valued = |id: &str, values: Vec<Step>| {
            let indices = matches.indices_of(id).into_iter().flatten();
            steps.extend(indices.zip(values));
        };
        let each = |values: &[String], make: fn(String) -> Step| -> Vec<Step> {
            values.iter().cloned().map(make).collect()
        };
        valued("interleave", each(&self.interleave, Step::Interleave));
        valued(
            "weighted_interleave",
            each(&self.weighted_interleave, Step::WeightedInterleave),
        );
        valued("preferred", each(&self.preferred, Step::Preferred));
        valued(
            "preferred_many",
            each(&self.preferred_many, Step::PreferredMany),
        );
        valued("membind", each(&self.membind, Step::Membind));
        valued("cpunodebind", each(&self.cpunodebind, Step::CpuNodeBind));
        valued("cpubind", each(&self.cpubind, Step::CpuNodeBind));
        valued("physcpubind", each(&self.physcpubind, Step::PhysCpuBind));
        valued("offset", each(&self.offset, Step::Offset));
        valued("length", each(&self.length, Step::Length));
        valued("shmmode", each(&self.shmmode, Step::ShmMode));
        valued("shmid", each(&self.shmid, Step::ShmId));
        valued("shm", self.shm.iter().cloned().map(Step::Shm).collect());
        valued("file", self.file.iter().cloned().map(Step::File).collect());
        steps.sort_by_key(|(index, _)| *index);
        steps.into_iter().map(|(_, step)| step).collect()
    }
}

/// Per-node memory statistics, numastat-compatible (installed or linked as `numastat`,
/// `numa` is numastat).
#[derive(Debug, Parser)]
#[command(
    name = "numa stat",
    disable_version_flag = true,
    args_override_self = true,
    after_help = "Without options: the kernel's per-node counters in numastat's old layout. \
                  Operands are PIDs or patterns, as with -p.\n\
                  NUMASTAT_WIDTH sets the width at which columns fold (80 on a terminal)."
)]
pub struct StatCli {
    /// Narrow columns (as wide as their contents)
    #[arg(short = 'c')]
    pub compress: bool,
    /// Per-node meminfo in MB
    #[arg(short = 'm')]
    pub meminfo: bool,
    /// The per-node counters in MB, with a total
    #[arg(short = 'n')]
    pub numastat: bool,
    /// Memory per node of a process: a PID, or a pattern matched against the names and
    /// command lines of all processes (may be repeated)
    #[arg(short = 'p', value_name = "PID|PATTERN", action = clap::ArgAction::Append)]
    pub pid: Vec<String>,
    /// Sort rows by the Total column, or by NODE's (-s2); attach NODE to the option
    #[arg(
        short = 's',
        long = "sort",
        value_name = "NODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub sort: Option<String>,
    /// One table per process, even for several
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Print the version
    #[arg(short = 'V')]
    pub version: bool,
    /// Hide rows and columns that are all zero
    #[arg(short = 'z')]
    pub skip_zero: bool,
    /// More processes: PIDs or patterns, as with -p
    #[arg(value_name = "PID|PATTERN")]
    pub processes: Vec<String>,
    /// Print JSON (with -m or one -p PID: that table; else the counters)
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

impl StatCli {
    /// numastat's `-s[NODE]` takes its node only attached (`-s2`, `-cs2`), as getopt's
    /// optional arguments do, while `-s 2` sorts by the total and names process 2;
    /// clap has no such short option, so this rewrites `-s...` clusters to
    /// `--sort[=NODE]` before parsing. Arguments after `--`, and the value of a
    /// separate `-p`, are left alone.
    pub fn getopt_args(args: &[OsString]) -> Vec<OsString> {
        let mut out = Vec::with_capacity(args.len());
        let mut value_next = false;
        let mut options_done = false;
        for (index, arg) in args.iter().enumerate() {
            let text = arg.to_str().unwrap_or_default();
            if index == 0
                || options_done
                || value_next
                || !text.starts_with('-')
                || text.len() < 2
                || text.starts_with("--")
            {
                options_done |= !value_next && text == "--";
                value_next = false;
                out.push(arg.clone());
                continue;
            }
            let cluster = &text[1..];
            let mut kept = String::from("-");
            let mut sort = None;
            for (at, c) in cluster.char_indices() {
                match c {
                    'p' => {
                        // The rest of the cluster, or the next argument, is -p's.
                        kept.push_str(&cluster[at..]);
                        value_next = at + 1 == cluster.len();
                        break;
                    }
                    's' => {
                        sort = Some(&cluster[at + 1..]);
                        break;
                    }
                    c => kept.push(c),
                }
            }
            if kept.len() > 1 {
                out.push(kept.into());
            }
            match sort {
                Some("") => out.push("--sort".into()),
                Some(node) => out.push(format!("--sort={node}").into()),
                None => {}
            }
        }
        out
    }
}

/// `--interval`: a duration above zero, in the toolkit's one syntax.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    duration_arg::parse_positive(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn steps(args: &[&str]) -> Vec<Step> {
        let matches = Cli::command().try_get_matches_from(args).unwrap();
        Cli::from_arg_matches(&matches).unwrap().steps(&matches)
    }

    #[test]
    fn numastat_sort_takes_only_an_attached_node() {
        let args = |list: &[&str]| -> Vec<String> {
            let os: Vec<OsString> = list.iter().map(OsString::from).collect();
            StatCli::getopt_args(&os)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect()
        };
        assert_eq!(
            args(&["numastat", "-s2", "-s", "3"]),
            ["numastat", "--sort=2", "--sort", "3"]
        );
        assert_eq!(
            args(&["numastat", "-cs1m"]),
            ["numastat", "-c", "--sort=1m"]
        );
        assert_eq!(
            args(&["numastat", "-p", "-s2", "-zps"]),
            ["numastat", "-p", "-s2", "-zps"]
        );
        assert_eq!(args(&["numastat", "--", "-s2"]), ["numastat", "--", "-s2"]);
    }

    #[test]
    fn steps_keep_the_command_lines_order() {
        assert_eq!(
            steps(&["numa", "-l", "-m", "0", "-lb", "--inter=1", "x"]),
            vec![
                Step::LocalAlloc,
                Step::Membind("0".into()),
                Step::LocalAlloc,
                Step::Balancing,
                Step::Interleave("1".into()),
            ]
        );
    }
}

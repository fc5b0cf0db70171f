//! `numa`: numactl's command line in Rust. Run a command under a NUMA memory policy and
//! CPU binding, or show the machine (`--hardware`) and the current state (`--show`).
//!
//! Spelled as numactl spells it, so that scripts keep working when `numa` is installed
//! or linked as `numactl`; `--json` is added for programs.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use clap::Parser;
use numa::cli::{Cli, StatCli};
use numa::numastat::{self, Table};
use numa::policy::{self, MemPolicy, Mode};
use numa::{hardware, show, Allowed, IdSet, Topology};

fn main() -> ExitCode {
    // `numa stat ...` is numastat; anything else is numactl's command line (use
    // `numa -- stat FILE` to run the stat program).
    let args: Vec<OsString> = std::env::args_os().collect();
    let result = if args.get(1).is_some_and(|a| a == "stat") {
        stat(StatCli::parse_from(&args[1..]))
    } else {
        run(Cli::parse_from(&args))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("numa: {message}");
            ExitCode::from(1)
        }
    }
}

fn stat(cli: StatCli) -> Result<(), String> {
    let sample = || -> Result<(Table, String), String> {
        if let Some(pid) = cli.pid {
            let comm = std::fs::read_to_string(cli.root.join(format!("proc/{pid}/comm")))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            let table = numastat::process(&cli.root, pid).map_err(|e| e.to_string())?;
            return Ok((
                table,
                format!("Per-node process memory usage (in MBs) for PID {pid} ({comm})"),
            ));
        }
        let topology = Topology::read(&cli.root).map_err(|e| e.to_string())?;
        if cli.meminfo {
            Ok((
                Table::meminfo(&topology),
                "Per-node system memory usage (in MBs):".into(),
            ))
        } else {
            Ok((Table::counters(&topology), String::new()))
        }
    };
    let print = |table: &Table, title: &str| -> Result<(), String> {
        if cli.json {
            println!(
                "{}",
                serde_json::to_string(table).map_err(|e| e.to_string())?
            );
        } else if cli.meminfo || cli.pid.is_some() {
            print!("{}", table.text_with_total(title));
        } else {
            print!("{}", table.legacy_text());
        }
        Ok(())
    };
    let Some(interval) = cli.interval else {
        let (table, title) = sample()?;
        return print(&table, &title);
    };
    let (mut earlier, _) = sample()?;
    for _ in 0..cli.count {
        std::thread::sleep(interval);
        let (later, title) = sample()?;
        print(&later.delta(&earlier), &title)?;
        earlier = later;
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), String> {
    let topology = Topology::read(&cli.root).map_err(|e| e.to_string())?;
    if cli.hardware {
        if cli.json {
            let json = serde_json::to_string_pretty(&hardware::HardwareJson::new(&topology))
                .map_err(|e| e.to_string())?;
            println!("{json}");
        } else {
            print!("{}", hardware::report(&topology));
        }
        return Ok(());
    }
    let allowed = Allowed::read(&cli.root).map_err(|e| e.to_string())?;
    let present_nodes = topology.node_ids();
    let present_cpus: IdSet = topology.nodes.iter().flat_map(|n| n.cpus.iter()).collect();
    let (usable_nodes, usable_cpus) = if cli.all {
        (present_nodes.clone(), present_cpus.clone())
    } else {
        (allowed.nodes.clone(), allowed.cpus.clone())
    };
    let nodes = |spec: &str| {
        IdSet::parse_spec(spec, "node", &usable_nodes, &present_nodes).map_err(|e| e.to_string())
    };

    if cli.show {
        let policy = policy::get_mempolicy().map_err(|e| e.to_string())?;
        let next_interleave_node = match policy.mode {
            Mode::Interleave | Mode::WeightedInterleave => policy::next_interleave_node().ok(),
            _ => None,
        };
        let state = show::State {
            policy,
            next_interleave_node,
            cpus: policy::cpu_affinity().map_err(|e| format!("sched_getaffinity: {e}"))?,
            mems_allowed: allowed.nodes,
        };
        print!("{}", show::report(&topology, &state));
        return Ok(());
    }

    // CPU binding first, then the memory policy, then exec: both are inherited.
    if let Some(spec) = cli.cpunodebind.as_deref().or(cli.cpubind.as_deref()) {
        let bound = nodes(spec)?;
        policy::bind_cpus_to_nodes(&topology, &bound).map_err(|e| e.to_string())?;
    }
    if let Some(spec) = &cli.physcpubind {
        let cpus = IdSet::parse_spec(spec, "cpu", &usable_cpus, &present_cpus)
            .map_err(|e| e.to_string())?;
        policy::set_cpu_affinity(&cpus).map_err(|e| e.to_string())?;
    }
    let mut policies = Vec::new();
    if let Some(spec) = &cli.interleave {
        policies.push((Mode::Interleave, nodes(spec)?));
    }
    if let Some(spec) = &cli.weighted_interleave {
        policies.push((Mode::WeightedInterleave, nodes(spec)?));
    }
    if let Some(spec) = &cli.preferred {
        let node = nodes(spec)?;
        if node.len() != 1 {
            return Err(format!(
                "--preferred takes one node, not '{spec}'; use --preferred-many for several"
            ));
        }
        policies.push((Mode::Preferred, node));
    }
    if let Some(spec) = &cli.preferred_many {
        policies.push((Mode::PreferredMany, nodes(spec)?));
    }
    if let Some(spec) = &cli.membind {
        policies.push((Mode::Bind, nodes(spec)?));
    }
    if cli.localalloc {
        policies.push((Mode::Local, IdSet::new()));
    }
    if policies.len() > 1 {
        return Err(
            "give at most one memory policy: --interleave, --weighted-interleave, \
                    --preferred, --preferred-many, --membind or --localalloc"
                .into(),
        );
    }
    if let Some((mode, nodes)) = policies.pop() {
        policy::set_mempolicy(&MemPolicy { mode, nodes }).map_err(|e| e.to_string())?;
    }
    let Some((program, args)) = cli.command.split_first() else {
        return Err("no command to run (see numa --help); --show and --hardware need none".into());
    };
    let error = std::process::Command::new(program).args(args).exec();
    Err(format!("cannot run {}: {error}", program.to_string_lossy()))
}

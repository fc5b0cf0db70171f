//! `numa`: a numactl-compatible command line (so far `--hardware`, with `--json`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use numa::{hardware, Topology};

/// NUMA topology, numactl-compatible.
#[derive(Debug, Parser)]
#[command(name = "numa", version)]
struct Cli {
    /// Show the nodes, their CPUs, memory and distances, as numactl --hardware does
    #[arg(short = 'H', long)]
    hardware: bool,
    /// Print JSON instead of numactl's text
    #[arg(long)]
    json: bool,
    /// Read sysfs and procfs under this directory instead of / (for snapshots)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    root: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.hardware {
        eprintln!("numa: nothing to do; so far: numa --hardware [--json]");
        return ExitCode::from(1);
    }
    let topology = match Topology::read(&cli.root) {
        Ok(topology) => topology,
        Err(error) => {
            eprintln!("numa: {error}");
            return ExitCode::from(1);
        }
    };
    if cli.json {
        match serde_json::to_string_pretty(&hardware::HardwareJson::new(&topology)) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("numa: {error}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", hardware::report(&topology));
    }
    ExitCode::SUCCESS
}

//! `numa`: numactl's command line in Rust. Run a command under a NUMA memory policy and
//! CPU binding, or show the machine (`--hardware`) and the current state (`--show`).
//!
//! Spelled as numactl spells it, so that scripts keep working when `numa` is installed
//! or linked as `numactl`; `--json` is added for programs.

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use ioserve_numa::cli::{Cli, StatCli};
use ioserve_numa::numactl::{self, NumactlError, Outcome};
use ioserve_numa::numastat::{self, report, Table};
use ioserve_numa::Topology;

fn main() -> ExitCode {
    // Installed or linked as numactl or numastat, `numa` is that tool. Otherwise
    // `numa stat ...` is numastat and anything else numactl's command line (use
    // `numa -- stat FILE` to run the stat program).
    let args: Vec<OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|name| name.to_str())
        .unwrap_or("numa")
        .to_string();
    let (name, result) = if invoked_as == "numastat" {
        (
            "numastat",
            parse::<StatCli>("numastat", &StatCli::getopt_args(&args))
                .and_then(|cli| stat(cli, "numastat", args.len() == 1)),
        )
    } else if invoked_as != "numactl" && args.get(1).is_some_and(|a| a == "stat") {
        (
            "numa",
            parse::<StatCli>("numa stat", &StatCli::getopt_args(&args[1..]))
                .and_then(|cli| stat(cli, "numa stat", args.len() == 2)),
        )
    } else {
        let name = if invoked_as == "numactl" {
            "numactl"
        } else {
            "numa"
        };
        (name, run(name, &args))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Message(message)) => {
            eprintln!("{name}: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Exit(status)) => ExitCode::from(status),
        Err(Failure::Usage(error)) => {
            // numactl and numastat answer a bad command line with exit 1, not clap's 2.
            let _ = error.print();
            ExitCode::from(if error.use_stderr() { 1 } else { 0 })
        }
    }
}

/// Why the binary stops early.
enum Failure {
    /// A command line clap refused (or --help and --version, which exit 0).
    Usage(clap::Error),
    /// Anything else, printed after the tool's name.
    Message(String),
    /// Nothing to print; exit with this status (a failed `--verify`).
    Exit(u8),
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Message(message)
    }
}

/// The command line of `T` under the name the binary runs as.
fn command<T: CommandFactory>(name: &'static str) -> clap::Command {
    T::command().name(name).bin_name(name)
}

fn parse<T: FromArgMatches + CommandFactory>(
    name: &'static str,
    args: &[OsString],
) -> Result<T, Failure> {
    command::<T>(name)
        .try_get_matches_from(args)
        .and_then(|matches| T::from_arg_matches(&matches))
        .map_err(Failure::Usage)
}

fn stat(cli: StatCli, name: &str, legacy: bool) -> Result<(), Failure> {
    if cli.version {
        // numastat prints its source's date and its build date; here the package version.
        println!(
            "{name} version: 20130723: numa {}",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(());
    }
    if cli.json || cli.interval.is_some() {
        return Ok(stat_samples(&cli)?);
    }
    let options = report::Options {
        compress: cli.compress,
        meminfo: cli.meminfo,
        numastat: cli.numastat,
        processes: cli.pid.iter().chain(&cli.processes).cloned().collect(),
        sort: cli.sort.as_deref().map(report::sort_node),
        verbose: cli.verbose,
        skip_zero: cli.skip_zero,
        legacy,
        screen_width: report::screen_width(
            std::env::var("NUMASTAT_WIDTH").ok().as_deref(),
            std::io::stdout().is_terminal(),
        ),
    };
    let output = report::run(&cli.root, &options, std::process::id()).map_err(|e| e.to_string())?;
    print!("{}", output.text);
    eprint!("{}", output.warnings);
    Ok(())
}

/// `--json` and `--interval`: the counters, `-m`'s meminfo or one process's memory as
/// data, once or as the change over each interval.
fn stat_samples(cli: &StatCli) -> Result<(), String> {
    let pid = match cli.pid.iter().chain(&cli.processes).collect::<Vec<_>>()[..] {
        [] => None,
        [pid] => Some(
            pid.parse::<u32>()
                .map_err(|_| format!("with --json or --interval, -p takes a PID, not '{pid}'"))?,
        ),
        _ => return Err("with --json or --interval, give at most one process".into()),
    };
    let sample = || -> Result<(Table, String), String> {
        if let Some(pid) = pid {
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
        } else if cli.meminfo || pid.is_some() {
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

fn run(name: &'static str, args: &[OsString]) -> Result<(), Failure> {
    let matches = command::<Cli>(name)
        .try_get_matches_from(args)
        .map_err(Failure::Usage)?;
    let cli = Cli::from_arg_matches(&matches).map_err(Failure::Usage)?;
    let steps = cli.steps(&matches);
    let session = numactl::Session::new(&cli.root);
    let outcome = session
        .run(
            &steps,
            cli.command,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        )
        .map_err(|e| match e {
            NumactlError::Usage(message) => {
                Failure::Message(format!("{message} (see {name} --help)"))
            }
            other => Failure::Message(other.to_string()),
        })?;
    match outcome {
        Outcome::Exit(0) => Ok(()),
        Outcome::Exit(status) => Err(Failure::Exit(status)),
        Outcome::Exec(command) => {
            let (program, args) = command.split_first().expect("Exec carries a program");
            let error = std::process::Command::new(program).args(args).exec();
            Err(Failure::Message(format!(
                "execution of `{}': {error}",
                program.to_string_lossy()
            )))
        }
    }
}

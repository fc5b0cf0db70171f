//! Project automation, in Rust so that it runs wherever cargo does.
//!
//! ```text
//! cargo xtask ci                 every check CI runs: system packages, fmt, clippy, tests
//! cargo xtask fuzz [SECONDS]     a short run of every cargo-fuzz target (nightly)
//! ```

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};

/// Debian packages the checks need, with the command each provides.
const SYSTEM_PACKAGES: &[(&str, &str)] = &[("curl", "curl"), ("strace", "strace")];

/// The cargo-fuzz targets: (crate directory, target).
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("crates/ioserve", "range_header"),
    ("crates/ioserve", "request_path"),
];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("fuzz") => {
            let seconds = match args.get(1) {
                Some(s) => s
                    .parse()
                    .with_context(|| format!("invalid SECONDS '{s}': expected a whole number")),
                None => Ok(30),
            };
            seconds.and_then(fuzz)
        }
        Some("help" | "--help" | "-h") | None => {
            print!("{}", HELP);
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!("unknown task '{other}'\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "\
usage: cargo xtask <task>

tasks:
  ci              install missing system packages (as root), then cargo fmt --check,
                  clippy -D warnings and cargo test for the whole workspace
  fuzz [SECONDS]  run each cargo-fuzz target for SECONDS (default 30); needs nightly,
                  installs cargo-fuzz when missing
";

fn ci() -> Result<()> {
    let started = Instant::now();
    ensure_system_packages()?;
    ensure_rustup_components(&["rustfmt", "clippy"])?;
    step("cargo fmt", cargo(&["fmt", "--all", "--", "--check"]))?;
    step(
        "cargo clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    step("cargo test", cargo(&["test", "--workspace"]))?;
    eprintln!("xtask ci: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

fn fuzz(seconds: u64) -> Result<()> {
    if !succeeds(Command::new("cargo").args(["+nightly", "--version"])) {
        bail!("cargo fuzz needs a nightly toolchain: rustup toolchain install nightly");
    }
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        step(
            "install cargo-fuzz",
            cargo(&["install", "--locked", "cargo-fuzz"]),
        )?;
    }
    for (dir, target) in FUZZ_TARGETS {
        let mut command = Command::new("cargo");
        command.current_dir(project_root().join(dir)).args([
            "+nightly",
            "fuzz",
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
        ]);
        step(&format!("fuzz {target} for {seconds}s"), command)?;
    }
    Ok(())
}

/// Installs the missing packages with apt-get when running as root; otherwise names them.
fn ensure_system_packages() -> Result<()> {
    let missing: Vec<&str> = SYSTEM_PACKAGES
        .iter()
        .filter(|(_, command)| !on_path(command))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing system packages: {} (run as root to install them, or: sudo apt-get install {})",
            missing.join(" "),
            missing.join(" ")
        );
    }
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    step("apt-get update", update)?;
    let mut install = Command::new("apt-get");
    install
        .args(["-q", "install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    step(&format!("apt-get install {}", missing.join(" ")), install)
}

fn ensure_rustup_components(components: &[&str]) -> Result<()> {
    for component in components {
        let probe = match *component {
            "rustfmt" => ["fmt", "--version"],
            _ => ["clippy", "--version"],
        };
        if !succeeds(Command::new("cargo").args(probe)) {
            let mut add = Command::new("rustup");
            add.args(["component", "add", component]);
            step(&format!("rustup component add {component}"), add)?;
        }
    }
    Ok(())
}

fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(project_root()).args(args);
    command
}

/// Runs a command with inherited output; an error names the step and its exit status.
fn step(name: &str, mut command: Command) -> Result<()> {
    eprintln!("xtask: {name}");
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("{name}: cannot start {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    eprintln!("xtask: {name} ok ({:.1?})", started.elapsed());
    Ok(())
}

fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn is_root() -> bool {
    // Reading the effective uid from /proc keeps xtask free of libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

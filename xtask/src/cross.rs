//! `cargo xtask cross`: the binaries and criterion bench executables for an ARM
//! runner, packed with a run script into target/cross/ioserve-toolkit-<arch>.tar.gz.
//!
//! With `cross` and a working container engine it builds through `cross`; otherwise
//! (as on this project's machines, where Docker does not run) through rustup's target,
//! Debian's gcc cross linker and, for `--smoke`, qemu-user (design.md §6).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::{aarch64, cargo, on_path, project_root, step, succeeds};

/// The command-line options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// The target triple; the fallback toolchain (gcc cross linker, qemu-user) is set
    /// up for aarch64 only
    #[arg(long, value_name = "TRIPLE", default_value = aarch64::TARGET,
          value_parser = [aarch64::TARGET])]
    target: String,
    /// Start every bench once under qemu-aarch64
    #[arg(long)]
    smoke: bool,
}

/// The binaries an ARM runner needs besides the benches.
const BINARIES: &[(&str, &str)] = &[
    ("ioserve", "ioserve"),
    ("numa", "numa"),
    ("probe", "probe"),
    ("probe", "probe-calibrate"),
];

/// Builds, packs and (with `--smoke`) starts every bench executable under qemu.
pub(crate) fn run(options: &Options) -> Result<()> {
    let builder = Builder::detect(&options.target)?;
    let mut packages: Vec<&str> = BINARIES.iter().map(|(package, _)| *package).collect();
    packages.dedup();
    for package in packages {
        step(
            &format!("build {package} for {}", options.target),
            builder.command(&["build", "--release", "--package", package, "--bins"]),
        )?;
    }
    let benches = builder.bench_executables()?;
    if benches.is_empty() {
        bail!("cargo bench --no-run built no bench executable");
    }

    let arch = options.target.split('-').next().unwrap_or("aarch64");
    let name = format!("ioserve-toolkit-{arch}");
    let out = project_root().join("target/cross");
    let staging = out.join(&name);
    if staging.exists() {
        fs::remove_dir_all(&staging)
            .with_context(|| format!("cannot clear {}", staging.display()))?;
    }
    fs::create_dir_all(staging.join("bin"))?;
    fs::create_dir_all(staging.join("benches"))?;
    let release = project_root()
        .join("target")
        .join(&options.target)
        .join("release");
    for (_, binary) in BINARIES {
        copy(&release.join(binary), &staging.join("bin").join(binary))?;
    }
    let mut bench_names = Vec::new();
    for (bench, executable) in &benches {
        copy(executable, &staging.join("benches").join(bench))?;
        bench_names.push(bench.clone());
    }
    write_executable(&staging.join("run-benches.sh"), &run_script(&bench_names))?;
    fs::write(
        staging.join("README.txt"),
        readme(&options.target, &bench_names),
    )?;

    let tarball = out.join(format!("{name}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.current_dir(&out)
        .args(["-czf"])
        .arg(&tarball)
        .arg(&name);
    step(&format!("pack {}", tarball.display()), tar)?;
    eprintln!("xtask cross: wrote {}", tarball.display());

    if options.smoke {
        smoke(&staging, &bench_names)?;
    }
    Ok(())
}

/// How the target is built: `cross` in a container, or cargo with the fallback
/// toolchain.
enum Builder {
    Cross(String),
    Cargo(String),
}

impl Builder {
    fn detect(target: &str) -> Result<Builder> {
        let engine = ["docker", "podman"]
            .into_iter()
            .any(|engine| on_path(engine) && succeeds(Command::new(engine).arg("info")));
        if on_path("cross") && engine {
            eprintln!("xtask cross: building with cross (container engine found)");
            return Ok(Builder::Cross(target.to_owned()));
        }
        eprintln!("xtask cross: no cross/container engine; rustup target + gcc cross linker");
        aarch64::ensure_toolchain()?;
        Ok(Builder::Cargo(target.to_owned()))
    }

    fn command(&self, args: &[&str]) -> Command {
        let (mut command, target) = match self {
            Builder::Cross(target) => {
                let mut command = Command::new("cross");
                command.current_dir(project_root());
                (command, target)
            }
            Builder::Cargo(target) => (cargo(&[]), target),
        };
        command.args(args).args(["--target", target]);
        command
    }

    /// Builds the criterion benches and returns (bench name, executable path).
    fn bench_executables(&self) -> Result<Vec<(String, PathBuf)>> {
        let mut command = self.command(&[
            "bench",
            "--package",
            "benches",
            "--no-run",
            "--message-format=json",
        ]);
        eprintln!("xtask: build the bench executables");
        let output = command
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("cannot run cargo bench --no-run")?;
        if !output.status.success() {
            bail!("cargo bench --no-run failed ({})", output.status);
        }
        let mut benches = Vec::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let is_bench = message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|kind| kind == "bench"));
            if let (true, Some(name), Some(executable)) = (
                is_bench,
                message["target"]["name"].as_str(),
                message["executable"].as_str(),
            ) {
                benches.push((name.to_owned(), PathBuf::from(executable)));
            }
        }
        benches.sort();
        Ok(benches)
    }
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// The script an ARM runner runs: every bench, or those named, with criterion's
/// arguments passed through; results land in ./target/criterion as with cargo bench.
fn run_script(benches: &[String]) -> String {
    format!(
        r#"#!/bin/sh
# Runs the criterion benches on this machine. Usage:
#   ./run-benches.sh [BENCH...] [-- CRITERION-ARGS...]
# e.g. ./run-benches.sh simd -- --quick      (BENCH: {names})
# Results: ./target/criterion (criterion's reports and JSON estimates).
set -eu
cd "$(dirname "$0")"
benches=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do benches="$benches $1"; shift; done
[ "${{1:-}}" = "--" ] && shift
[ -n "$benches" ] || benches="{names}"
echo "machine: $(uname -m), $(nproc) CPUs"
grep -m1 -iE 'model name|CPU part' /proc/cpuinfo || true
grep -m1 -i '^Features' /proc/cpuinfo || true
export CARGO_TARGET_DIR="$PWD/target"
for bench in $benches; do
    [ -x "benches/$bench" ] || {{ echo "no bench '$bench' (have: {names})" >&2; exit 2; }}
    echo "== $bench"
    "benches/$bench" --bench "$@"
done
"#,
        names = benches.join(" ")
    )
}

fn readme(target: &str, benches: &[String]) -> String {
    format!(
        "ioserve toolkit for {target}\n\n\
         bin/ioserve    the download daemon (ioserve --help)\n\
         bin/numa       NUMA topology and binding (numa --help)\n\
         bin/probe      eBPF diagnostics, as root (probe --help)\n\
         bin/probe-calibrate  workloads with known syscall counts, to check probe\n\
         benches/       criterion bench executables: {}\n\
         run-benches.sh runs them: ./run-benches.sh [BENCH...] [-- CRITERION-ARGS...]\n\n\
         The benches read and write ./target/criterion; copy that directory back and\n\
         compare ratios, not absolute times, between machines.\n",
        benches.join(", ")
    )
}

/// Starts every bench executable once under qemu-aarch64 with a tiny sample.
fn smoke(staging: &Path, benches: &[String]) -> Result<()> {
    let scratch = staging.join("target");
    for bench in benches {
        let mut command = Command::new("qemu-aarch64");
        command
            .current_dir(staging)
            .env("CARGO_TARGET_DIR", &scratch)
            // The read-strategy bench writes its data file: the smallest it allows.
            .env("IOSERVE_BENCH_FILE_GB", "0.25")
            .env(
                "IOSERVE_BENCH_RUNNER",
                "qemu-aarch64 -L /usr/aarch64-linux-gnu",
            )
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(staging.join("benches").join(bench))
            .args([
                "--bench",
                "--warm-up-time",
                "0.001",
                "--measurement-time",
                "0.001",
                "--sample-size",
                "10",
                "--noplot",
            ]);
        step(&format!("smoke: {bench} under qemu-aarch64"), command)?;
    }
    fs::remove_dir_all(&scratch).ok();
    eprintln!("xtask cross: every bench executable ran under qemu-aarch64");
    // The binaries start (qemu-user has no bpf(), so probe's probes cannot load here;
    // its calibration workload and doctor's system checks run).
    for args in [
        &["ioserve", "--version"][..],
        &["numa", "--hardware"],
        &["probe", "--version"],
        &["probe-calibrate", "syscalls", "--count", "1000"],
        &["probe", "doctor"],
    ] {
        let mut command = Command::new("qemu-aarch64");
        command
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(staging.join("bin").join(args[0]))
            .args(&args[1..]);
        step(
            &format!("smoke: {} under qemu-aarch64", args.join(" ")),
            command,
        )?;
    }
    Ok(())
}

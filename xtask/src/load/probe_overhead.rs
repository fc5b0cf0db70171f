//! `cargo xtask probe-overhead`: what tracing costs a syscall-heavy program. dd
//! copies /dev/zero to /dev/null in 4 KiB blocks (two syscalls per block) bare and
//! under each tracer a user would pick: probe syscalls (count-only and --latency),
//! strace -c, perf trace -s. Rounds interleave the tracers so that drift on this
//! shared machine hits all of them alike; the report gives the median throughput and
//! its ratio to the bare run.

use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use crate::util::stats::median;
use crate::util::{cargo, ensure_packages, step};

/// Options of the task.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Interleaved rounds over the tracers
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: u64,
    /// 4 KiB blocks dd copies per run
    #[arg(long, value_name = "N", default_value_t = 500_000, value_parser = clap::value_parser!(u64).range(1..))]
    blocks: u64,
}

/// The tracers, by name, with the command prefix that runs dd under them.
fn tracers(probe: &str) -> Vec<(&'static str, Vec<String>)> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("bare", vec![]),
        ("probe syscalls", words(&[probe, "syscalls", "--"])),
        (
            "probe syscalls --latency",
            words(&[probe, "syscalls", "--latency", "--"]),
        ),
        (
            "strace -c",
            words(&["strace", "-c", "-o", "/dev/null", "--"]),
        ),
        (
            "perf trace -s",
            words(&["perf", "trace", "-s", "-o", "/dev/null", "--"]),
        ),
    ]
}

pub(crate) fn run(options: &Options) -> Result<()> {
    ensure_packages(&[("strace", "strace"), ("linux-perf", "perf")])?;
    step(
        "build probe (release)",
        cargo(&["build", "--release", "-p", "ioserve-probe"]),
    )?;
    let probe = crate::util::target_dir()?.join("release/probe");
    let probe = probe.to_str().context("non-UTF-8 path")?;
    let tracers = tracers(probe);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); tracers.len()];
    for round in 1..=options.rounds {
        for (i, (name, prefix)) in tracers.iter().enumerate() {
            match dd_throughput(prefix, options.blocks) {
                Ok(gb_s) => samples[i].push(gb_s),
                Err(err) => eprintln!("xtask probe-overhead: {name}: {err:#}"),
            }
        }
        eprintln!(
            "xtask probe-overhead: round {round}/{} done",
            options.rounds
        );
    }
    let bare = median(samples[0].iter().copied()).context("the bare dd never ran")?;
    println!(
        "dd bs=4k count={} (2 syscalls per 4 KiB), median of {} interleaved rounds:\n",
        options.blocks, options.rounds
    );
    println!("| tracer | GB/s | vs bare |\n|---|---:|---:|");
    for ((name, _), runs) in tracers.iter().zip(&samples) {
        match median(runs.iter().copied()) {
            Some(gb_s) => println!("| {name} | {gb_s:.2} | {:.2}x |", gb_s / bare),
            None => println!("| {name} | unavailable | - |"),
        }
    }
    Ok(())
}

/// dd's own throughput figure (GB/s), run under `prefix`.
fn dd_throughput(prefix: &[String], blocks: u64) -> Result<f64> {
    let mut words: Vec<String> = prefix.to_vec();
    words.extend(
        [
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=4k",
            &format!("count={blocks}"),
        ]
        .map(String::from),
    );
    let output = Command::new(&words[0])
        .args(&words[1..])
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", words[0]))?;
    if !output.status.success() {
        bail!(
            "{} failed: {}",
            words.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    // "409600000 bytes (410 MB, 391 MiB) copied, 0.0731214 s, 5.6 GB/s"
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains(" copied, "))
        .context("no dd summary")?;
    let bytes: f64 = line
        .split_whitespace()
        .next()
        .context("no byte count")?
        .parse()?;
    let seconds: f64 = line
        .split(" copied, ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .context("no duration")?
        .parse()?;
    Ok(bytes / seconds / 1e9)
}

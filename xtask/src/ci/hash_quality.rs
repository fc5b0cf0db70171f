//! `cargo xtask hash-quality`: the simd hash's full quality suite (ours beside
//! foldhash's quality variant and gxhash), and the simd crate's embedding checks that
//! `cargo xtask ci` runs (`no_std` builds for bare-metal targets, the declared MSRV).

use std::process::Command;

use anyhow::{Context as _, Result};

use crate::util::test_run::run_tests;
use crate::util::{cargo, for_this_cpu, step, succeeds, target_dir};

/// Options of `cargo xtask hash-quality`.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// The longest key length of the sparse test (keys with up to 3 bits set at every
    /// length from 1 to this; 128 hashes ~5.7 billion keys per hash, minutes of CPU)
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=128))]
    sparse_max_len: u64,
}

/// Runs the quality suite's full profile in simd's test binary, built for this CPU (so
/// that gxhash, which needs AES at compile time, takes part), prints the table and
/// writes it to `<target directory>/hash-quality/table.md`.
pub(crate) fn run(options: &Options) -> Result<()> {
    let out_dir = target_dir()?.join("hash-quality");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let table = out_dir.join("table.md");
    let args = [
        "test",
        "--package",
        "ioserve-simd",
        "--test",
        "hash_quality",
        "--",
        "--ignored",
        "--exact",
        "full_quality_table",
        "--nocapture",
    ];
    let mut command = cargo(&args);
    for_this_cpu(&mut command)?
        .env("HASH_QUALITY_TABLE", &table)
        .env(
            "HASH_QUALITY_SPARSE_MAX_LEN",
            options.sparse_max_len.to_string(),
        );
    run_tests(
        command,
        &format!(
            "RUSTFLAGS=\"-C target-cpu=native\" cargo {} (sparse keys to {} bytes)",
            args.join(" "),
            options.sparse_max_len
        ),
    )?;
    eprintln!("xtask: hash quality table in {}", table.display());
    Ok(())
}

/// The bare-metal targets simd must build for without `std`.
const NO_STD_TARGETS: [&str; 2] = ["x86_64-unknown-none", "aarch64-unknown-none"];

/// simd's declared minimum Rust version (the workspace's `rust-version`).
pub(crate) const MSRV: &str = "1.89";

/// What `cargo xtask ci` checks for embedders of simd: it builds `no_std` (no default
/// features) for bare-metal x86_64 and aarch64, and with its declared MSRV. (Its
/// short quality suite is part of `cargo test`.)
pub(crate) fn ci_embedding_checks() -> Result<()> {
    for target in NO_STD_TARGETS {
        ensure_target(target)?;
        step(
            &format!("cargo build -p ioserve-simd --no-default-features --target {target}"),
            cargo(&[
                "build",
                "--package",
                "ioserve-simd",
                "--no-default-features",
                "--target",
                target,
            ]),
        )?;
    }
    ensure_toolchain(MSRV)?;
    let toolchain = format!("+{MSRV}");
    // `cargo +1.89` goes through rustup's proxy, which CARGO (the running cargo's own
    // binary) would bypass.
    let mut msrv = Command::new("cargo");
    msrv.current_dir(crate::util::project_root()).args([
        toolchain.as_str(),
        "build",
        "--package",
        "ioserve-simd",
    ]);
    step(&format!("cargo +{MSRV} build -p ioserve-simd (MSRV)"), msrv)
}

fn ensure_target(target: &str) -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running rustup target list")?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|line| line.trim() == target)
    {
        return Ok(());
    }
    let mut add = Command::new("rustup");
    add.args(["target", "add", target]);
    step(&format!("rustup target add {target}"), add)
}

pub(crate) fn ensure_toolchain(toolchain: &str) -> Result<()> {
    if succeeds(Command::new("rustup").args(["run", toolchain, "cargo", "--version"])) {
        return Ok(());
    }
    let mut install = Command::new("rustup");
    install.args(["toolchain", "install", toolchain, "--profile", "minimal"]);
    step(&format!("rustup toolchain install {toolchain}"), install)
}

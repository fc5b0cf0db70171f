//! `cargo xtask fuzz [SECONDS]`: a short run of every cargo-fuzz target.

use std::process::Command;

use anyhow::{bail, Result};

use crate::util::{cargo, project_root, step, succeeds};

/// The cargo-fuzz targets: (crate directory, target).
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("crates/ioserve", "range_header"),
    ("crates/ioserve", "request_path"),
    ("crates/simd", "base64_decode"),
    ("crates/simd", "base64_encode"),
    ("crates/simd", "count"),
    ("crates/simd", "adler32"),
    ("crates/simd", "hash"),
    ("crates/timeserve", "ntp_packet"),
    ("crates/timeserve", "nts_fields"),
];

/// Runs each target for `seconds` (nightly; installs cargo-fuzz when missing).
pub(crate) fn run(seconds: u64) -> Result<()> {
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

//! The aarch64 lane of `cargo xtask ci`: without a container engine (so without
//! `cross`), Debian's gcc cross linker and qemu-user run what rustup's aarch64 target
//! builds (design.md §6; the linker and runner are set in .cargo/config.toml).

use std::process::Command;

use anyhow::{Context as _, Result};

use crate::{cargo, cargo_test, ensure_packages, step, TestTotals};

pub(crate) const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The Debian packages for cross-building and running aarch64 code.
const PACKAGES: &[(&str, &str)] = &[
    ("gcc-aarch64-linux-gnu", "aarch64-linux-gnu-gcc"),
    (
        "libc6-dev-arm64-cross",
        "/usr/aarch64-linux-gnu/lib/libc.so",
    ),
    ("qemu-user", "qemu-aarch64"),
];

/// arm64 libraries probe links against (libbpf needs libelf and zlib); Debian's
/// cross gcc finds them in the multiarch directory.
const ARM64_LIBRARIES: &[(&str, &str)] = &[
    ("libelf-dev:arm64", "/usr/lib/aarch64-linux-gnu/libelf.so"),
    ("zlib1g-dev:arm64", "/usr/lib/aarch64-linux-gnu/libz.so"),
];

/// Installs what the lane needs: the Debian packages and the rustup target.
pub(crate) fn ensure_toolchain() -> Result<()> {
    ensure_packages(PACKAGES)?;
    ensure_arm64_architecture()?;
    ensure_packages(ARM64_LIBRARIES)?;
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run rustup")?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|line| line.trim() == TARGET)
    {
        let mut add = Command::new("rustup");
        add.args(["target", "add", TARGET]);
        step(&format!("rustup target add {TARGET}"), add)?;
    }
    Ok(())
}

/// Lets apt install arm64 packages next to the native ones (multiarch), once.
fn ensure_arm64_architecture() -> Result<()> {
    let foreign = Command::new("dpkg")
        .arg("--print-foreign-architectures")
        .output()
        .context("cannot run dpkg")?;
    if String::from_utf8_lossy(&foreign.stdout)
        .lines()
        .any(|arch| arch.trim() == "arm64")
    {
        return Ok(());
    }
    let mut add = Command::new("dpkg");
    add.args(["--add-architecture", "arm64"]);
    step("dpkg --add-architecture arm64", add)
}

/// Builds every crate and target of the workspace for aarch64 (so that an ARM
/// regression cannot land unseen) and runs simd's tests under qemu-aarch64 twice: on
/// its default CPU (`max`, with NEON and AES), and as on a core without the AES
/// extension (`SIMD_DISABLE=aes`, since every CPU model of Debian's qemu 7.2 has it).
pub(crate) fn ci_lane() -> Result<TestTotals> {
    ensure_toolchain()?;
    step(
        "cargo build --workspace --all-targets (aarch64)",
        cargo(&["build", "--workspace", "--all-targets", "--target", TARGET]),
    )?;
    let simd_tests = ["test", "--package", "simd", "--target", TARGET];
    let mut totals = cargo_test(&simd_tests, &[])?;
    totals.add(&cargo_test(&simd_tests, &[("SIMD_DISABLE", "aes")])?);
    Ok(totals)
}

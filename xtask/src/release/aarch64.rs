//! The aarch64 lane of `cargo xtask ci`: without a container engine (so without
//! `cross`), Debian's gcc cross linker and qemu-user run what rustup's aarch64 target
//! builds. The linker (`aarch64-linux-gnu-gcc`) and the runner (`qemu-aarch64 -L
//! /usr/aarch64-linux-gnu`) are set in .cargo/config.toml, so a plain `cargo test
//! --target aarch64-unknown-linux-gnu` runs the tests under qemu-user too.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::util::{ensure_packages, step};

pub(crate) const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The Debian packages for cross-building and running aarch64 code (g++ for the simd
/// bench's simdutf peer, C++, and its libstdc++).
pub(crate) const PACKAGES: &[(&str, &str)] = &[
    ("gcc-aarch64-linux-gnu", "aarch64-linux-gnu-gcc"),
    ("g++-aarch64-linux-gnu", "aarch64-linux-gnu-g++"),
    (
        "libc6-dev-arm64-cross",
        "/usr/aarch64-linux-gnu/lib/libc.so",
    ),
    ("qemu-user", "qemu-aarch64"),
];

/// The cross sysroot's library directory: Debian's cross gcc links from it and
/// qemu-user (`-L /usr/aarch64-linux-gnu`) loads from it.
const SYSROOT_LIB: &str = "/usr/aarch64-linux-gnu/lib";

/// The arm64 packages whose libraries probe links against (libbpf needs libelf and
/// zlib).
const ARM64_LINK_PACKAGES: &[&str] = &["libelf1", "libelf-dev", "zlib1g", "zlib1g-dev"];

/// Installs what the lane needs: the Debian packages and the rustup target.
pub(crate) fn ensure_toolchain() -> Result<()> {
    ensure_packages(PACKAGES)?;
    ensure_arm64_link_libraries()?;
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

/// Puts arm64 libelf and zlib into the cross sysroot, unpacked from Debian's arm64
/// packages. Installing them with multiarch instead (`apt-get install
/// libelf-dev:arm64`) drags in libc6:arm64, whose libc then shadows the cross libc
/// under qemu-user and hangs every aarch64 test binary (a newer libc.so.6 beside the
/// sysroot's older ld.so).
fn ensure_arm64_link_libraries() -> Result<()> {
    let sysroot = Path::new(SYSROOT_LIB);
    if sysroot.join("libelf.so").exists() && sysroot.join("libz.so").exists() {
        return Ok(());
    }
    if !crate::util::is_root() {
        bail!(
            "arm64 libelf and zlib are missing from {SYSROOT_LIB}: run `cargo xtask ci` (or \
             `cargo xtask cross`) as root once to unpack them there"
        );
    }
    ensure_arm64_architecture()?;
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    step("apt-get update", update)?;
    let work = crate::util::target_dir()?.join("arm64-debs");
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    fs::create_dir_all(&work)?;
    let mut download = Command::new("apt-get");
    download
        .current_dir(&work)
        .arg("download")
        .args(ARM64_LINK_PACKAGES.iter().map(|p| format!("{p}:arm64")));
    step("apt-get download arm64 libelf and zlib", download)?;
    let unpacked = work.join("unpacked");
    for deb in fs::read_dir(&work)? {
        let deb = deb?.path();
        if deb.extension().is_some_and(|e| e == "deb") {
            let mut extract = Command::new("dpkg-deb");
            extract.arg("-x").arg(&deb).arg(&unpacked);
            step(&format!("dpkg-deb -x {}", deb.display()), extract)?;
        }
    }
    for dir in ["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"] {
        let Ok(entries) = fs::read_dir(unpacked.join(dir)) else {
            continue;
        };
        for entry in entries {
            let entry = entry?;
            let target = sysroot.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                // Relink by file name: the packages' links may be absolute
                // (/lib/aarch64-linux-gnu/...), which means nothing in the sysroot.
                let link = fs::read_link(entry.path())?;
                let name = link.file_name().context("symlink without a file name")?;
                let _ = fs::remove_file(&target);
                std::os::unix::fs::symlink(name, &target)
                    .with_context(|| format!("cannot link {}", target.display()))?;
            } else if kind.is_file() {
                fs::copy(entry.path(), &target)
                    .with_context(|| format!("cannot copy to {}", target.display()))?;
            }
        }
    }
    eprintln!("xtask: arm64 libelf and zlib unpacked into {SYSROOT_LIB}");
    Ok(())
}

/// Lets apt download arm64 packages (multiarch), once.
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

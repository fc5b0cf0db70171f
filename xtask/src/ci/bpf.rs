//! `cargo xtask bpf [--check]`: compiles probe's BPF programs (crates/probe/src/bpf/
//! *.bpf.c) with clang into the objects committed under `compiled/ARCH/`, one set per
//! architecture probe builds for, so that building probe needs no clang (its build.rs
//! only turns the committed objects into libbpf-rs skeletons).
//!
//! The objects are made as libbpf-cargo makes them (`clang -g -O2 -target bpf
//! -D__TARGET_ARCH_ARCH -fno-stack-protector`, then libbpf's linker, here through
//! `bpftool gen object`, which drops the DWARF that would name this machine's paths),
//! with the BPF headers of the libbpf that libbpf-sys vendors, so that a rebuild with
//! Debian's clang gives the same bytes: `--check` (run by `cargo xtask ci`) rebuilds
//! them in a scratch directory and fails naming every object that differs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context as _, Result};

use crate::util::{cargo, ensure_packages, project_root, step, which};

/// probe's crate directory, relative to the workspace root.
const PROBE_DIR: &str = "crates/probe";

/// The BPF programs, as `src/bpf/NAME.bpf.c` under [`PROBE_DIR`]. The same list is in
/// crates/probe/build.rs, which turns each object into a skeleton.
pub(crate) const PROGRAMS: &[&str] = &["syscalls", "runq", "faults"];

/// The architectures the objects are compiled for: (directory under `compiled/`, the
/// `__TARGET_ARCH_` name libbpf's bpf_tracing.h knows). build.rs picks the directory
/// from the Rust target's architecture.
const ARCHES: &[(&str, &str)] = &[("x86_64", "x86"), ("aarch64", "arm64")];

/// The libbpf headers the programs include as `<bpf/NAME>`.
const LIBBPF_HEADERS: &[&str] = &[
    "bpf_helpers.h",
    "bpf_helper_defs.h",
    "bpf_core_read.h",
    "bpf_tracing.h",
    "bpf_endian.h",
];

/// The options of `cargo xtask bpf`.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Compile into a scratch directory and compare with the committed objects instead
    /// of writing them; fails naming each object that differs
    #[arg(long)]
    pub(crate) check: bool,
}

/// Compiles every program for every architecture into `compiled/` (or, with
/// `--check`, compares a fresh build with it).
pub(crate) fn run(options: &Options) -> Result<()> {
    ensure_packages(&[("clang", "clang"), ("bpftool", "/usr/sbin/bpftool")])?;
    let probe = project_root().join(PROBE_DIR);
    let work = crate::util::target_dir()?.join("bpf");
    let include = work.join("include");
    copy_libbpf_headers(&include.join("bpf"))?;
    let out = if options.check {
        let scratch = work.join("check");
        if scratch.exists() {
            fs::remove_dir_all(&scratch)
                .with_context(|| format!("cannot clear {}", scratch.display()))?;
        }
        scratch
    } else {
        compiled_dir()
    };
    for &(dir, arch) in ARCHES {
        let arch_out = out.join(dir);
        fs::create_dir_all(&arch_out)
            .with_context(|| format!("cannot create {}", arch_out.display()))?;
        for program in PROGRAMS {
            compile(&probe, &include, &work, program, arch, &arch_out)?;
        }
    }
    if options.check {
        let differing = differing_objects(&out, &compiled_dir())?;
        if !differing.is_empty() {
            bail!(
                "the committed BPF objects differ from a rebuild with this clang ({}): {}; \
                 run `cargo xtask bpf` and commit crates/probe/src/bpf/compiled/",
                clang_version(),
                differing.join(", ")
            );
        }
        eprintln!(
            "xtask bpf: the committed objects equal a rebuild with {}",
            clang_version()
        );
    } else {
        eprintln!(
            "xtask bpf: wrote {} objects under {}",
            ARCHES.len() * PROGRAMS.len(),
            compiled_dir().display()
        );
    }
    Ok(())
}

/// Where the committed objects live: crates/probe/src/bpf/compiled/ARCH/NAME.bpf.o.
fn compiled_dir() -> PathBuf {
    project_root().join(PROBE_DIR).join("src/bpf/compiled")
}

/// One program for one architecture: clang into `work`, then libbpf's linker (which
/// keeps BTF and drops DWARF) into `out/NAME.bpf.o`. clang runs in probe's directory
/// on relative paths, so that the objects name no path of this machine.
fn compile(
    probe: &Path,
    include: &Path,
    work: &Path,
    program: &str,
    arch: &str,
    out: &Path,
) -> Result<()> {
    let unlinked = work.join(format!("{program}.{arch}.unlinked.o"));
    let mut clang = Command::new("clang");
    clang
        .current_dir(probe)
        .args(["-g", "-O2", "-target", "bpf", "-c"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args([
            "-fno-stack-protector",
            "-Wall",
            "-Werror",
            "-Isrc/bpf",
            "-I",
        ])
        .arg(include)
        // BTF's line info names each source file by its absolute path, and the headers'
        // directory is under the target directory: both differ between clones and
        // machines, so map them to fixed names wherever clang records a path.
        .arg(format!("-ffile-prefix-map={}=/libbpf", include.display()))
        .arg(format!("-ffile-prefix-map={}=/probe", probe.display()))
        .arg(format!("src/bpf/{program}.bpf.c"))
        .arg("-o")
        .arg(&unlinked);
    step(&format!("clang {program}.bpf.c ({arch})"), clang)?;
    let mut link = Command::new(bpftool());
    link.args(["gen", "object"])
        .arg(out.join(format!("{program}.bpf.o")))
        .arg(&unlinked);
    step(&format!("bpftool gen object {program} ({arch})"), link)?;
    fs::remove_file(&unlinked).ok();
    Ok(())
}

/// Copies the libbpf headers that libbpf-sys vendors (the libbpf probe links) into
/// `dir`, found through `cargo metadata`.
fn copy_libbpf_headers(dir: &Path) -> Result<()> {
    let source = libbpf_sys_dir()?.join("libbpf/src");
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for header in LIBBPF_HEADERS {
        let from = source.join(header);
        fs::copy(&from, dir.join(header))
            .with_context(|| format!("cannot copy {}", from.display()))?;
    }
    Ok(())
}

/// The source directory of the libbpf-sys package in Cargo.lock.
fn libbpf_sys_dir() -> Result<PathBuf> {
    let output = cargo(&["metadata", "--format-version", "1", "--locked"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    ensure!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let manifest = metadata["packages"]
        .as_array()
        .and_then(|packages| packages.iter().find(|p| p["name"] == "libbpf-sys"))
        .and_then(|package| package["manifest_path"].as_str())
        .context("cargo metadata lists no libbpf-sys package")?;
    Ok(Path::new(manifest)
        .parent()
        .context("libbpf-sys's manifest has no directory")?
        .to_path_buf())
}

/// The objects under `built` whose bytes differ from (or are missing under)
/// `committed`, as `ARCH/NAME.bpf.o`; also committed objects the build did not make.
fn differing_objects(built: &Path, committed: &Path) -> Result<Vec<String>> {
    let mut differing = Vec::new();
    for &(dir, _) in ARCHES {
        for program in PROGRAMS {
            let name = format!("{dir}/{program}.bpf.o");
            let new = fs::read(built.join(&name))
                .with_context(|| format!("cannot read the rebuilt {name}"))?;
            match fs::read(committed.join(&name)) {
                Ok(old) if old == new => {}
                Ok(_) => differing.push(name),
                Err(_) => differing.push(format!("{name} (not committed)")),
            }
        }
    }
    for entry in walk(committed)? {
        let relative = entry
            .strip_prefix(committed)
            .unwrap_or(&entry)
            .to_string_lossy()
            .into_owned();
        if !built.join(&relative).exists() {
            differing.push(format!("{relative} (committed, but no program makes it)"));
        }
    }
    Ok(differing)
}

/// Every file under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(files);
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(walk(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

fn bpftool() -> PathBuf {
    which("bpftool").unwrap_or_else(|| PathBuf::from("/usr/sbin/bpftool"))
}

/// clang's version line, for messages.
fn clang_version() -> String {
    Command::new("clang")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "clang".into())
}

/// Where probe's BPF programs include the kernel's types from.
const VMLINUX_H: &str = "crates/probe/src/bpf/vmlinux.h";

/// `cargo xtask vmlinux [--btf PATH]`: dumps the kernel's BTF as C into VMLINUX_H.
pub(crate) fn vmlinux(btf: &Path) -> Result<()> {
    if !btf.exists() {
        bail!(
            "{} does not exist: the kernel needs CONFIG_DEBUG_INFO_BTF, or give --btf PATH",
            btf.display()
        );
    }
    ensure_packages(&[("bpftool", "/usr/sbin/bpftool")])?;
    let bpftool = bpftool();
    let output = Command::new(&bpftool)
        .args(["btf", "dump", "file"])
        .arg(btf)
        .args(["format", "c"])
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    if !output.status.success() {
        bail!(
            "bpftool btf dump {} failed: {}",
            btf.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let target = project_root().join(VMLINUX_H);
    std::fs::write(&target, &output.stdout)
        .with_context(|| format!("cannot write {}", target.display()))?;
    eprintln!(
        "xtask: wrote {} ({} KiB) from {}",
        VMLINUX_H,
        output.stdout.len() / 1024,
        btf.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_objects_names_changed_missing_and_stray_ones() {
        let built = tempfile::tempdir().unwrap();
        let committed = tempfile::tempdir().unwrap();
        for &(dir, _) in ARCHES {
            for program in PROGRAMS {
                for root in [built.path(), committed.path()] {
                    fs::create_dir_all(root.join(dir)).unwrap();
                    fs::write(root.join(format!("{dir}/{program}.bpf.o")), program).unwrap();
                }
            }
        }
        assert!(differing_objects(built.path(), committed.path())
            .unwrap()
            .is_empty());
        fs::write(committed.path().join("x86_64/runq.bpf.o"), "old").unwrap();
        fs::remove_file(committed.path().join("aarch64/faults.bpf.o")).unwrap();
        fs::write(committed.path().join("x86_64/gone.bpf.o"), "stray").unwrap();
        let mut differing = differing_objects(built.path(), committed.path()).unwrap();
        differing.sort();
        assert_eq!(
            differing,
            [
                "aarch64/faults.bpf.o (not committed)",
                "x86_64/gone.bpf.o (committed, but no program makes it)",
                "x86_64/runq.bpf.o",
            ]
        );
    }
}

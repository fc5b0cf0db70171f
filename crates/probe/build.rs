//! Generates the libbpf-rs skeletons of probe's BPF programs into OUT_DIR from the
//! objects committed under src/bpf/compiled/ARCH/ (made by `cargo xtask bpf` from
//! src/bpf/*.bpf.c, and checked against a rebuild by `cargo xtask ci`), so that
//! building probe needs no clang.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The programs, as in xtask/src/bpf.rs (which compiles them).
const PROGRAMS: &[&str] = &["syscalls", "runq", "faults"];

/// The architectures `cargo xtask bpf` compiles for (its ARCHES).
const ARCHES: &[&str] = &["x86_64", "aarch64"];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    if !ARCHES.contains(&arch.as_str()) {
        eprintln!(
            "error: probe's BPF objects are compiled for {} only, not {arch}: add it to \
             ARCHES in xtask/src/bpf.rs and crates/probe/build.rs, then run `cargo xtask bpf`",
            ARCHES.join(" and ")
        );
        std::process::exit(1);
    }
    for name in PROGRAMS {
        let object = PathBuf::from(format!("src/bpf/compiled/{arch}/{name}.bpf.o"));
        println!("cargo:rerun-if-changed={}", object.display());
        let skeleton = out_dir.join(format!("{name}.skel.rs"));
        if let Err(err) = SkeletonBuilder::new().obj(&object).generate(&skeleton) {
            // One readable message instead of a backtrace.
            eprintln!(
                "error: generating the skeleton of {} failed: {err:#}\n\
                 the objects under src/bpf/compiled/ are made by `cargo xtask bpf`",
                object.display()
            );
            std::process::exit(1);
        }
    }
}

//! Compiles the BPF programs in src/bpf/ with clang and generates their libbpf-rs
//! skeletons into OUT_DIR. Needs clang; vmlinux.h is committed (see
//! `cargo xtask vmlinux`), so bpftool is not needed.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["syscalls", "runq", "faults"];

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf_dir = PathBuf::from("src/bpf");
    println!("cargo:rerun-if-changed=src/bpf/common.h");
    println!("cargo:rerun-if-changed=src/bpf/vmlinux.h");
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");

    for name in PROGRAMS {
        let source = bpf_dir.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", source.display());
        let skeleton = out_dir.join(format!("{name}.skel.rs"));
        if let Err(err) = SkeletonBuilder::new()
            .source(&source)
            .clang(&clang)
            .clang_args(["-Wall", "-Werror", "-Isrc/bpf"])
            .build_and_generate(&skeleton)
        {
            // One readable message instead of a backtrace: the usual cause is a
            // missing clang, which `cargo xtask ci` installs.
            eprintln!(
                "error: compiling {} failed: {err:#}\n\
                 probe's BPF programs need clang (apt install clang libelf-dev zlib1g-dev \
                 pkg-config make); set CLANG to use another one",
                source.display()
            );
            std::process::exit(1);
        }
    }
}

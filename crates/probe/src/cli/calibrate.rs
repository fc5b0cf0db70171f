//! The command line of the `probe-calibrate` binary, here so that its man page and
//! completions (the `cli-docs` crate) come from the definition it parses with.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Workloads with known syscall and fault counts.
#[derive(Parser, Debug)]
#[command(name = "probe-calibrate", version, about)]
pub struct Cli {
    /// The workload to run.
    #[command(subcommand)]
    pub workload: Workload,
}

/// What probe-calibrate does, with counts a tracer must report exactly.
#[derive(Subcommand, Debug)]
pub enum Workload {
    /// Make exactly N syscall(SYS_clock_gettime, CLOCK_MONOTONIC) and N getppid calls.
    Syscalls {
        /// How many of each.
        #[arg(long, value_name = "N")]
        count: u64,
        /// Make them in each of T new threads instead of the main thread (which then
        /// only waits for them).
        #[arg(long, value_name = "T", default_value_t = 0)]
        threads: u32,
    },
    /// Touch N fresh pages of an anonymous mapping (N minor faults).
    Faults {
        /// How many pages.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
        pages: u64,
    },
    /// Send a file to a TCP peer with sendfile or with read+write.
    Copy {
        /// How to move the bytes.
        #[arg(long)]
        via: CopyVia,
        /// The file to send.
        #[arg(long)]
        file: PathBuf,
        /// Where to send it.
        #[arg(long, value_name = "HOST:PORT")]
        connect: String,
    },
}

/// How `copy` moves the file's bytes.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CopyVia {
    /// sendfile(2): zero-copy.
    Sendfile,
    /// read(2) into a 64 KiB buffer, write(2) it out.
    ReadWrite,
}

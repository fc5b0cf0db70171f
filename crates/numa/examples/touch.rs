//! Touches memory under the process's memory policy and reports where it landed.
//!
//! ```text
//! numa --membind=1 target/debug/examples/touch 64
//! ```
//!
//! allocates 64 MiB (default 16), writes one byte per page, and prints three lines:
//!
//! ```text
//! cpu 3
//! cpus 2-3
//! pages 1:16384
//! ```
//!
//! the CPU it ran on, the CPUs it may run on, and `node:count` for every node holding
//! some of its pages. `cargo xtask numa-vm` runs it under numa in multi-node guests.

use std::collections::BTreeMap;
use std::process::ExitCode;

use numa::alloc::NodeBuffer;
use numa::policy::{self, MemPolicy, Mode};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("touch: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mib: usize =
        match std::env::args().nth(1) {
            Some(text) => text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("invalid size '{text}': expected MiB, a whole number > 0")
            })?,
            None => 16,
        };
    // MPOL_DEFAULT on the range: its pages follow the process's policy, set by numa.
    let inherit = MemPolicy {
        mode: Mode::Default,
        nodes: numa::IdSet::new(),
    };
    let buffer = NodeBuffer::new_touched(mib << 20, &inherit).map_err(|e| e.to_string())?;
    let mut per_node: BTreeMap<i32, usize> = BTreeMap::new();
    for node in buffer.page_nodes().map_err(|e| e.to_string())? {
        *per_node.entry(node).or_default() += 1;
    }
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    let cpus = policy::cpu_affinity().map_err(|e| format!("sched_getaffinity: {e}"))?;
    println!("cpu {cpu}");
    println!("cpus {cpus}");
    let pages: Vec<String> = per_node.iter().map(|(n, c)| format!("{n}:{c}")).collect();
    println!("pages {}", pages.join(" "));
    Ok(())
}

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
//! some of its pages. `touch map NODE` instead fills a `ShardedMap` placed on NODE
//! with 100 000 entries and reports the pages its entries lie in.
//! `cargo xtask numa-vm` runs both under numa in multi-node guests.

use std::collections::BTreeMap;
use std::process::ExitCode;

use ioserve_numa::alloc::NodeBuffer;
use ioserve_numa::policy::{self, MemPolicy, Mode};
use ioserve_numa::sharded::{Placement, ShardedMap};
use std::collections::hash_map::RandomState;

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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pages = match args.first().map(String::as_str) {
        Some("map") => {
            let node = args
                .get(1)
                .and_then(|n| n.parse().ok())
                .ok_or("usage: touch map NODE")?;
            map_pages(node)?
        }
        Some(text) => buffer_pages(text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
            format!("invalid size '{text}': expected MiB, a whole number > 0, or 'map NODE'")
        })?)?,
        None => buffer_pages(16)?,
    };
    let mut per_node: BTreeMap<i32, usize> = BTreeMap::new();
    for node in pages {
        *per_node.entry(node).or_default() += 1;
    }
    let (cpu, _) = policy::current_cpu_and_node().map_err(|e| format!("getcpu: {e}"))?;
    let cpus = policy::cpu_affinity().map_err(|e| format!("sched_getaffinity: {e}"))?;
    println!("cpu {cpu}");
    println!("cpus {cpus}");
    let pages: Vec<String> = per_node.iter().map(|(n, c)| format!("{n}:{c}")).collect();
    println!("pages {}", pages.join(" "));
    Ok(())
}

/// The node of each page of `mib` MiB touched under the process's policy.
fn buffer_pages(mib: usize) -> Result<Vec<i32>, String> {
    // MPOL_DEFAULT on the range: its pages follow the process's policy, set by numa.
    let inherit = MemPolicy {
        mode: Mode::Default,
        nodes: ioserve_numa::IdSet::new(),
    };
    let buffer = NodeBuffer::new_touched(mib << 20, &inherit).map_err(|e| e.to_string())?;
    buffer.page_nodes().map_err(|e| e.to_string())
}

/// The node of each page holding entries of a map placed on `node`.
fn map_pages(node: u32) -> Result<Vec<i32>, String> {
    let placement = Placement::Nodes(std::iter::once(node).collect());
    let map: ShardedMap<u64, u64> =
        ShardedMap::placed(16, &placement, RandomState::new()).map_err(|e| e.to_string())?;
    const ENTRIES: u64 = 100_000;
    for key in 0..ENTRIES {
        map.insert(key, key);
    }
    let page_mask = !4095usize;
    let mut pages: Vec<*const u8> = (0..ENTRIES)
        .filter_map(|key| {
            map.read(&key, |v| {
                (v as *const u64 as usize & page_mask) as *const u8
            })
        })
        .collect();
    pages.sort();
    pages.dedup();
    policy::page_nodes(&pages).map_err(|e| e.to_string())
}

//! NUMA topology and binding for Rust: a numactl/libnuma equivalent.
//!
//! What is here so far:
//! - [`IdSet`]: node and CPU sets in the kernel's list and mask forms, and numactl's
//!   specification grammar (`0-3,!2`, `+1`, `all`) with errors that name the input and
//!   the valid nodes.
//! - [`Topology`]: nodes, CPUs, memory, distances and counters from sysfs, read from a
//!   root path so that tests can use snapshots of other machines; [`Allowed`]: what the
//!   process may use.
//! - [`policy`]: memory policies and CPU binding through the kernel's syscalls
//!   (set_mempolicy, get_mempolicy, move_pages, sched_setaffinity), failures explained.
//! - [`hardware::report`] and [`show::report`]: `numactl --hardware` and `--show`, line
//!   for line.
//!
//! - [`numactl`]: numactl's command line, option by option with its order rules;
//!   [`shm`]: shared memory regions with a policy (`--shm`, `--file`).
//! - [`numastat`]: per-node counters and meminfo, a process's memory per node, deltas;
//!   [`numa_maps`]: the parser of `/proc/PID/numa_maps` they read a process with.
//! - [`alloc::NodeBuffer`] and [`alloc::NodeAllocator`]: memory placed on chosen nodes
//!   (mmap + mbind), as a buffer or as an allocator for collections.
//! - [`counter`]: cache-padded values and a striped counter (no false sharing).
//! - [`sharded::ShardedMap`]: a concurrent map of padded, independently locked shards
//!   whose tables can be placed on chosen nodes.

pub mod alloc;
mod c_number;
#[cfg(feature = "cli")]
pub mod cli;
pub mod counter;
pub mod hardware;
mod idset;
pub mod numa_maps;
pub mod numactl;
pub mod numastat;
mod pages;
pub mod policy;
pub mod sharded;
pub mod shm;
pub mod show;
pub mod topology;

pub use idset::{IdSet, IdSetError};
pub use topology::{Allowed, Counters, Node, Topology, TopologyError};

//! NUMA topology and binding for Rust: a numactl/libnuma equivalent.
//!
//! What is here so far:
//! - [`IdSet`]: node and CPU sets in the kernel's list and mask forms, and numactl's
//!   specification grammar (`0-3,!2`, `+1`, `all`) with errors that name the input and
//!   the valid nodes.
//! - [`Topology`]: nodes, CPUs, memory, distances and counters from sysfs, read from a
//!   root path so that tests can use snapshots of other machines; [`Allowed`]: what the
//!   process may use.
//! - [`hardware::report`]: `numactl --hardware`, line for line.
//!
//! Binding (set_mempolicy, mbind, move_pages), numastat, the sharded map and the rest
//! of the `numa` CLI are the subject of the numa issue's next steps.

pub mod hardware;
mod idset;
pub mod topology;

pub use idset::{IdSet, IdSetError};
pub use topology::{Allowed, Counters, Node, Topology, TopologyError};

//! NUMA topology and binding for Rust: a numactl/libnuma equivalent.
//!
//! This crate is being built (see the project's numa issue); it has no public API yet.

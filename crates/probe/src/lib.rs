//! eBPF diagnostics for file-serving and latency-sensitive services.
//!
//! This crate is being built (see the project's probe issue); it has no public API yet.

//! eBPF diagnostics for file-serving and latency-sensitive services: the checks the
//! seeds made by hand, as probes.
//!
//! - [`syscalls`]: per-syscall counts, errors, bytes and latency (raw tracepoints
//!   sys_enter/sys_exit), and from them the [`verdict`] on sendfile vs read+write.
//! - [`clock`]: whether clock_gettime stays in the vDSO, measured.
//! - [`faults`]: minor and major page faults per process.
//! - [`runq`]: run-queue latency.
//! - [`doctor`]: one report over all of them and the system settings the seeds
//!   checked (clocksource, governor, NUMA, transparent huge pages); [`checkup`]: its
//!   measured checks.
//! - [`metrics`] (feature `metrics`, part of `cli`): the Prometheus metrics of all of
//!   them, served by `probe daemon`.
//!
//! - [`present`]: each command's report, as text or JSON, and where it goes.
//!
//! Loading BPF programs needs root or CAP_BPF + CAP_PERFMON
//! ([`privilege::require_bpf_privileges`]) and a kernel with BTF. Every tracer
//! detaches when dropped.

pub mod bpf;
pub mod checkup;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
pub mod doctor;
pub mod error;
pub mod faults;
pub mod histogram;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod perf;
pub mod present;
pub mod privilege;
pub mod report;
pub mod row_filter;
pub mod runq;
pub mod session;
pub mod signals;
pub mod strace_format;
pub mod syscalls;
pub mod sysnames;
pub mod target;
pub mod verdict;

pub use error::{ProbeError, Result};

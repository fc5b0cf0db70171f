//! probe against the truth: workloads with known counts, strace -c, the vDSO, the
//! sendfile verdict, the daemon's metrics, and the error paths.
//!
//! Most tests load BPF programs and need root. Run as another user they are skipped
//! with a note, unless PROBE_TESTS_REQUIRE_ROOT is set (as `cargo xtask ci` does),
//! which makes a missing privilege a failure.
//!
//! One file per topic: [`counting`] (syscalls, clocks, faults, run queue against known
//! workloads and strace), [`lifecycle`] (Ctrl-C, targets that exit), [`daemon`],
//! [`doctor`], [`errors`], [`report_destination`] (stderr or `-o FILE`); [`support`]
//! holds the helpers.

mod counting;
mod daemon;
mod doctor;
mod errors;
mod lifecycle;
mod report_destination;
mod support;

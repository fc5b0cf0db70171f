//! What each command presents: its report, as text or JSON, built from what the
//! tracers measured. The `probe` binary only wires tracers to these and writes the
//! result where the report goes ([`ReportSink`]): stderr, or the file of `-o`, so that
//! a traced command's stdout stays its own, as with strace.

pub mod clock;
pub mod faults;
pub mod runq;
pub mod sink;
pub mod syscalls;

pub use sink::ReportSink;

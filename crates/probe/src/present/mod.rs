//! What each command presents: its report, as text or JSON, built from what the
//! tracers measured. The `probe` binary only wires tracers to these and writes the
//! result where the report goes ([`ReportSink`]): stderr, or the file of `-o`, so that
//! a traced command's stdout stays its own, as with strace.

pub mod clock;
pub mod doctor;
pub mod faults;
pub mod runq;
pub mod sink;
pub mod syscalls;

pub use sink::ReportSink;

use crate::session::{Prepared, TargetSpec};

/// What is watched, for headings: "`dd ...` (pid 42)", "pid 42", "tasks named
/// 'nginx'", "all processes".
pub fn describe_target(spec: &TargetSpec, prepared: &Prepared) -> String {
    match (spec, prepared) {
        (TargetSpec::Command(argv), Prepared::Command(paused)) => {
            let words: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
            format!("`{}` (pid {})", words.join(" "), paused.pid())
        }
        (TargetSpec::Named(name), _) => format!("tasks named '{}'", name.to_string_lossy()),
        (TargetSpec::Pids(pids), _) => {
            let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
            format!("pid {}", pids.join(", "))
        }
        _ => "all processes".into(),
    }
}

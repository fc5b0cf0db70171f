//! Where reports go: stderr by default, a file with `-o FILE` (as strace), so that a
//! traced command's own stdout is exactly its own.

use std::process::Command;

use crate::support::*;

#[test]
fn a_traced_commands_stdout_is_its_own_and_the_report_is_on_stderr() {
    if !privileged() {
        return;
    }
    for command in ["syscalls", "faults"] {
        let out = probe(&[command, "--", "sh", "-c", "echo hello"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n", "{command}");
        let heading = match command {
            "syscalls" => "Syscalls of `sh -c echo hello`",
            _ => "Page faults of `sh -c echo hello`",
        };
        assert!(stderr.starts_with(heading), "{command}: {stderr}");
    }
}

#[test]
fn dash_o_writes_the_report_to_the_file() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.json");
    let out = Command::new(PROBE)
        .args(["syscalls", "--json", "-o"])
        .arg(&file)
        .args(["--", "sh", "-c", "echo hello"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(!stderr.contains("\"syscalls\""), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(calls(&report, "execve") >= 1, "{report:#}");
    assert_eq!(report["ending"]["reason"], "target-exited", "{report:#}");
}

#[test]
fn a_report_file_that_cannot_be_written_is_refused_before_tracing() {
    let out = probe(&["syscalls", "-o", "/nonexistent/dir/report", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write the report to /nonexistent/dir/report (-o)"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

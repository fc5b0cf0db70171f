//! How a trace ends: Ctrl-C, or the target exiting; the programs are detached.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn ctrl_c_prints_the_summary_and_detaches() {
    if !privileged() {
        return;
    }
    let mut target = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let report_file = dir.path().join("report");
    let mut probe = Reaped(
        Command::new(PROBE)
            .args(with_report_file(
                &["syscalls", "-p", &target.id().to_string()],
                &report_file,
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (_, rest) = wait_for_line(&mut probe, "Ctrl-C to stop");
    let ids = bpf_ids(probe.id());
    signal(probe.id(), rustix::process::Signal::INT);
    let mut stdout = String::new();
    probe
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = probe.wait().unwrap();
    let stdout = std::fs::read_to_string(&report_file).unwrap();
    target.kill().unwrap();
    target.wait().unwrap();
    assert!(status.success(), "{status:?} {}", rest.join().unwrap());
    assert!(stdout.contains("interrupted by signal 2"), "{stdout}");
    assert!(stdout.starts_with("Syscalls of pid"), "{stdout}");
    assert_detached(&ids);
}

#[test]
fn a_target_that_exits_ends_the_trace_with_a_summary() {
    if !privileged() {
        return;
    }
    let mut target = Reaped(Command::new("sleep").arg("0.5").spawn().unwrap());
    let (out, report) = probe_report(&[
        "syscalls",
        "-p",
        &target.id().to_string(),
        "--duration",
        "20",
    ]);
    target.wait().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The sleep ends, but as our child it stays a zombie until reaped: probe must
    // treat a zombie as exited. It says why it ended: the target's exit, not the end
    // of its 20 s duration (a state, where a stopwatch would depend on the host).
    assert!(report.contains("(target exited)"), "{report}");
}

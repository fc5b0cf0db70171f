//! Bad input and missing privileges: one line naming the problem, exit 2.

use crate::support::*;

#[test]
fn an_unprivileged_user_gets_one_line_and_exit_2() {
    if !privileged() {
        return; // dropping privileges needs root
    }
    let dir = tempfile::tempdir().unwrap();
    let probe = world_executable_probe(dir.path());
    for args in [
        &["syscalls", "--", "true"][..],
        &["runq", "--duration", "1"],
        &["daemon"],
        &["clock"],
    ] {
        let out = as_nobody(&probe, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{args:?}: one line, got:\n{stderr}"
        );
        assert!(
            stderr.contains("needs root (or CAP_BPF and CAP_PERFMON)"),
            "{stderr}"
        );
        assert!(stderr.contains("uid 65534"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    // doctor's system checks still work without privileges.
    let out = as_nobody(&probe, &["doctor"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    for area in ["clock:", "cpufreq:", "numa:", "thp:", "udp:"] {
        assert!(
            report.contains(area),
            "doctor without root lacks {area}\n{report}"
        );
    }
}

#[test]
fn bad_input_is_named_with_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["syscalls", "--duration", "0"],
            "'0' is not a duration above zero",
        ),
        (
            &["syscalls", "--duration", "soon"],
            "'soon' is not a duration: use seconds (2, 0.5) or a number with a unit",
        ),
        (
            &["syscalls", "--duration", "2d"],
            "longer than the 86400s allowed",
        ),
        (&["syscalls", "--top", "x"], "--top"),
        (&["clock", "--calls", "5"], "--calls"),
        (&["daemon", "--listen", "localhost"], "--listen"),
        (
            &["syscalls", "-p", "1", "--", "true"],
            "cannot be used with",
        ),
        (&["frobnicate"], "frobnicate"),
    ];
    for (args, needle) in cases {
        let out = probe(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: expected `{needle}` in\n{stderr}"
        );
    }
    if !privileged() {
        return;
    }
    let out = probe(&["syscalls", "-p", "4000000"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "probe: no process with pid 4000000"
    );
    let out = probe(&["syscalls", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot run /nonexistent/program"),
        "{stderr}"
    );
}

//! Counts against known workloads and strace -c: syscalls, the vDSO, the sendfile
//! verdict, page faults, run-queue delay.

use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn counts_a_known_workload_exactly() {
    if !privileged() {
        return;
    }
    let report = probe_json(&[
        "syscalls", "--json", "--", CALIBRATE, "syscalls", "--count", "25000",
    ]);
    assert_eq!(calls(&report, "getppid"), 25000, "{report:#}");
    assert_eq!(calls(&report, "clock_gettime"), 25000, "{report:#}");
    assert_eq!(calls(&report, "execve"), 1);
    let getppid = report["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "getppid");
    assert_eq!(getppid.unwrap()["errors"], 0);
    assert_eq!(report["ending"]["reason"], "target-exited");
    assert_eq!(report["ending"]["code"], 0);
}

#[test]
fn dd_counts_equal_strace_c() {
    if !privileged() {
        return;
    }
    let dd = [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=4k",
        "count=100000",
    ];
    let summary = strace_c_summary(&dd);

    let mut args = vec!["syscalls", "--json", "--"];
    args.extend(dd);
    let report = probe_json(&args);
    for name in ["read", "write", "execve"] {
        let expected = strace_calls(&summary, name);
        assert!(expected > 0, "strace saw no {name}:\n{summary}");
        assert_eq!(
            calls(&report, name),
            expected,
            "{name}: probe vs strace -c\n{summary}"
        );
    }
    assert!(calls(&report, "read") >= 100_000);
    let verdict = &report["verdict"];
    assert_eq!(verdict["movement"], "copying", "{verdict:#}");
    // dd's 409,600,000 bytes plus its three status lines on stderr.
    assert!(verdict["copied_out_bytes"].as_u64().unwrap() >= 409_600_000);
}

#[test]
fn the_vdso_serves_wall_clocks_and_raw_syscalls_count_once() {
    if !privileged() {
        return;
    }
    let report = probe_json(&["clock", "--json", "--calls", "2000"]);
    let measurements = report["measurements"].as_array().unwrap();
    assert_eq!(measurements.len(), 9);
    let current = report["clocksources"]["current"].as_str().unwrap_or("");
    let vdso_clocksource = matches!(
        current,
        "tsc" | "kvm-clock" | "arch_sys_counter" | "hyperv_clocksource_tsc_page"
    );
    for m in measurements {
        let clock = m["clock"].as_str().unwrap();
        let libc = m["libc_syscalls_per_call"].as_f64().unwrap();
        assert_eq!(
            m["raw_syscalls_per_call"].as_f64().unwrap(),
            1.0,
            "{clock}: syscall(2) is one syscall"
        );
        if clock.contains("CPUTIME") {
            assert_eq!(libc, 1.0, "{clock} is never served by the vDSO");
        } else if vdso_clocksource && report["vdso"]["vdso"] == true {
            assert_eq!(libc, 0.0, "{clock} on {current}: the vDSO serves it");
        }
    }
    if vdso_clocksource {
        assert_eq!(report["verdict"]["ok"], true, "{:#}", report["verdict"]);
    }
}

#[test]
fn clock_pid_counts_a_process_s_clock_syscalls() {
    if !privileged() {
        return;
    }
    let mut child = busy_clock_caller();
    let pid = child.id().to_string();
    let report = probe_json(&[
        "clock",
        "--json",
        "--calls",
        "1000",
        "--pid",
        &pid,
        "--duration",
        "0.5",
    ]);
    child.kill().unwrap();
    child.wait().unwrap();
    let watched = &report["pid"];
    assert!(watched["syscalls"].as_u64().unwrap() > 1000, "{watched:#}");
    let by_clock = watched["by_clock"].as_array().unwrap();
    assert_eq!(by_clock[0][0], "CLOCK_MONOTONIC", "{watched:#}");
}

#[test]
fn the_verdict_tells_sendfile_from_read_write() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload");
    let size = 3 * 1024 * 1024 + 17;
    std::fs::write(&file, vec![7u8; size as usize]).unwrap();

    let copying = copy_verdict("read-write", &file, size);
    assert_eq!(copying["movement"], "copying", "{copying:#}");
    assert_eq!(copying["copied_out_bytes"], size);
    assert!(copying["copied_in_bytes"].as_u64().unwrap() >= size);
    assert_eq!(copying["zero_copy_bytes"], 0);
    assert!(copying["summary"]
        .as_str()
        .unwrap()
        .starts_with("copying through user space"));

    let zero_copy = copy_verdict("sendfile", &file, size);
    assert_eq!(zero_copy["movement"], "zero-copy", "{zero_copy:#}");
    assert_eq!(zero_copy["zero_copy_bytes"], size);
    assert_eq!(zero_copy["copied_out_bytes"], 0);
}

#[test]
fn faults_count_touched_pages() {
    if !privileged() {
        return;
    }
    let pages = 20_000u64;
    let report = probe_json(&[
        "faults",
        "--json",
        "--",
        CALIBRATE,
        "faults",
        "--pages",
        &pages.to_string(),
    ]);
    let processes = report["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{report:#}");
    let minor = processes[0]["minor"].as_u64().unwrap();
    // Every touched page faults once; the rest is the program's own start-up.
    assert!(
        (pages..pages + 3000).contains(&minor),
        "{minor} minor faults for {pages} pages"
    );
    assert_eq!(processes[0]["comm"], "probe-calibrate");
}

#[test]
fn runq_measures_wakeups() {
    if !privileged() {
        return;
    }
    let mut sleeper = Command::new("sh")
        .args(["-c", "while :; do sleep 0.01; done"])
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let system = probe_json(&["runq", "--json", "--duration", "1"]);
    let filtered = probe_json(&["runq", "--json", "--duration", "1", "-p", &pid]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    for report in [&system, &filtered] {
        let samples = report["runq"]["samples"].as_u64().unwrap();
        let slots: u64 = report["runq"]["histogram"]["slots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert!(samples > 10, "{report:#}");
        assert_eq!(slots, samples, "every sample is in one slot");
    }
    // The shell wakes ~100 times a second; the whole system at least as often.
    assert!(system["runq"]["samples"].as_u64() >= filtered["runq"]["samples"].as_u64());
}

/// `--comm` counts every task of that name, started after the probes attached, and
/// nothing of the same program run under another name. The names are this test's own
/// (links to probe-calibrate), since other tests run probe-calibrate meanwhile.
#[test]
fn comm_selects_tasks_by_name_started_later() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = format!("traced-{}", std::process::id() % 1_000_000);
    let traced = dir.path().join(&name);
    let other = dir
        .path()
        .join(format!("other-{}", std::process::id() % 1_000_000));
    std::os::unix::fs::symlink(CALIBRATE, &traced).unwrap();
    std::os::unix::fs::symlink(CALIBRATE, &other).unwrap();
    let report_file = dir.path().join("report");
    let mut tracer = Reaped(
        Command::new(PROBE)
            .args(with_report_file(
                &["syscalls", "--json", "--comm", &name],
                &report_file,
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut notes = std::io::BufReader::new(tracer.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut notes, &mut line).unwrap();
    assert!(
        line.starts_with(&format!("Tracing syscalls of tasks named '{name}'")),
        "{line}"
    );
    for (program, count) in [(&traced, "3000"), (&other, "7000"), (&traced, "2000")] {
        let status = Command::new(program)
            .args(["syscalls", "--count", count])
            .status()
            .unwrap();
        assert!(status.success());
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&tracer),
        rustix::process::Signal::INT,
    )
    .unwrap();
    assert!(tracer.wait().unwrap().success());
    let out = std::fs::read(&report_file).unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(calls(&report, "getppid"), 5000, "{report:#}");
    assert_eq!(report["ending"]["reason"], "interrupted", "{report:#}");
}

/// `--format strace` prints strace -c's table: the same header, rule and columns, the
/// same calls and errors per syscall for dd, and the total row.
#[test]
fn strace_format_matches_strace_c_column_for_column() {
    if !privileged() {
        return;
    }
    let dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=4k", "count=20000"];
    let theirs = strace_c_summary(&dd);
    let mut args = vec!["syscalls", "--format", "strace", "-S", "calls", "--"];
    args.extend(dd);
    let (out, ours) = probe_report(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = ours.lines().collect();
    let their_lines: Vec<&str> = theirs.lines().collect();
    assert_eq!(
        lines[..2],
        their_lines[..2],
        "header and rule\n{ours}\n{theirs}"
    );
    assert_eq!(lines[lines.len() - 2], their_lines[their_lines.len() - 2]);
    // Sorted by calls: read and write (20003 each) lead in both.
    for line in &lines[2..4] {
        assert!(
            line.ends_with(" read") || line.ends_with(" write"),
            "{ours}"
        );
    }
    for name in ["read", "write", "openat", "execve"] {
        let row = |text: &str| -> (String, String) {
            let line = text
                .lines()
                .find(|l| l.ends_with(&format!(" {name}")))
                .unwrap_or_else(|| panic!("no {name} row in\n{text}"));
            // Columns at strace's fixed offsets: calls 31..40, errors 41..50.
            (line[31..40].trim().into(), line[41..50].trim().into())
        };
        assert_eq!(row(&ours), row(&theirs), "{name}\n{ours}\n{theirs}");
    }
    let total = lines.last().unwrap();
    assert!(
        total.starts_with("100.00 ") && total.ends_with(" total"),
        "{total}"
    );
}

/// `-f` traces what the command forks, as strace -f does: a shell running
/// probe-calibrate twice is counted with both runs' getppid calls; without `-f` the
/// children are not traced.
#[test]
fn follow_forks_counts_the_children() {
    if !privileged() {
        return;
    }
    let script = format!("{CALIBRATE} syscalls --count 3000; {CALIBRATE} syscalls --count 2000");
    let getppid = |follow: bool| {
        let mut args = vec!["syscalls", "--json"];
        if follow {
            args.push("-f");
        }
        args.extend(["--", "sh", "-c", &script]);
        calls(&probe_json(&args), "getppid")
    };
    // The shell itself may call getppid once; the children make 5000.
    let without = getppid(false);
    let with = getppid(true);
    assert!(without <= 1, "{without} getppid without -f");
    assert_eq!(with - without, 5000, "{with} getppid with -f");
}

/// `--per-pid` with `-f`: a table per process, named as it ran after its exec; a
/// shell running probe-calibrate twice shows two processes with their exact getppid
/// counts, and the tasks' calls add up to the total.
#[test]
fn per_pid_breaks_the_counts_down_by_process() {
    if !privileged() {
        return;
    }
    let script = format!("{CALIBRATE} syscalls --count 3000; {CALIBRATE} syscalls --count 2000");
    let report = probe_json(&[
        "syscalls",
        "--json",
        "-f",
        "--per-pid",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(report["per_task"], "process", "{report}");
    let tasks = report["tasks"].as_array().unwrap();
    let calibrators: Vec<u64> = tasks
        .iter()
        .filter(|task| task["comm"] == "probe-calibrate")
        .map(|task| calls(task, "getppid"))
        .collect();
    assert_eq!(calibrators, [3000, 2000], "most calls first: {report}");
    let in_tasks: u64 = tasks.iter().map(|t| t["calls"].as_u64().unwrap()).sum();
    let total: u64 = report["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(in_tasks, total, "{report}");
    assert_eq!(report["untasked_calls"], 0);
}

/// `--per-tid`: a table per thread; each of three threads shows its own 1000 getppid
/// calls, the main thread none; the text layout heads each table with name and tid.
#[test]
fn per_tid_breaks_the_counts_down_by_thread() {
    if !privileged() {
        return;
    }
    let command = [CALIBRATE, "syscalls", "--count", "1000", "--threads", "3"];
    let mut args = vec![
        "syscalls",
        "--json",
        "--per-tid",
        "-e",
        "trace=getppid",
        "--",
    ];
    args.extend(command);
    let report = probe_json(&args);
    let tasks = report["tasks"].as_array().unwrap();
    let counts: Vec<u64> = tasks.iter().map(|task| calls(task, "getppid")).collect();
    assert_eq!(counts, [1000, 1000, 1000], "{report}");
    assert!(
        tasks
            .iter()
            .all(|task| task["calls"].as_u64().unwrap() > 1000),
        "a task's calls count every syscall, whatever -e shows: {report}"
    );
    let mut args = vec!["syscalls", "--per-tid", "--"];
    args.extend(command);
    let (_, text) = probe_report(&args);
    let headings = text
        .lines()
        .filter(|line| line.starts_with("probe-calibrate (tid "))
        .count();
    assert_eq!(headings, 4, "three workers and the main thread:\n{text}");
}

/// `-e` selects rows as strace's does: by name, by names left out, by outcome; a bad
/// expression is refused before anything is traced.
#[test]
fn expressions_select_rows() {
    if !privileged() {
        return;
    }
    let dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=4k", "count=100"];
    let rows = |filters: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["syscalls", "--json"];
        for filter in filters {
            args.extend(["-e", filter]);
        }
        args.push("--");
        args.extend(dd);
        probe_json(&args)["syscalls"].as_array().unwrap().clone()
    };
    let names = |rows: &[serde_json::Value]| -> Vec<String> {
        let mut names: Vec<String> = rows
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&rows(&["trace=read,write"])), ["read", "write"]);
    let others = names(&rows(&["!read,write"]));
    assert!(others.contains(&"execve".to_string()), "{others:?}");
    assert!(
        !others.iter().any(|n| n == "read" || n == "write"),
        "{others:?}"
    );
    for row in rows(&["status=failed"]) {
        assert!(row["errors"].as_u64().unwrap() > 0, "{row}");
    }
    let out = probe(&["syscalls", "-e", "trace=reed", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid system call 'reed'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `-i` prints the change over each interval as it goes, then the totals: the
/// intervals tile the run and their getppid calls add up to the total (both bursts end
/// well before the last interval does).
#[test]
fn intervals_print_the_change_then_the_totals() {
    if !privileged() {
        return;
    }
    let script = format!(
        "{CALIBRATE} syscalls --count 3000; sleep 0.6; {CALIBRATE} syscalls --count 2000; sleep 0.6"
    );
    let (out, report) = probe_report(&[
        "syscalls", "--json", "-f", "-i", "200ms", "--", "sh", "-c", &script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects: Vec<serde_json::Value> = report
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let (total, intervals) = objects.split_last().unwrap();
    assert!(intervals.len() >= 5, "{} intervals", intervals.len());
    for pair in intervals.windows(2) {
        assert_eq!(pair[0]["to_seconds"], pair[1]["from_seconds"], "{pair:?}");
    }
    let in_intervals: u64 = intervals.iter().map(|i| calls(i, "getppid")).sum();
    let overall = calls(total, "getppid");
    assert!(overall >= 5000, "{total}");
    assert_eq!(in_intervals, overall, "{objects:?}");
    assert!(
        intervals.iter().filter(|i| calls(i, "getppid") > 0).count() >= 2,
        "both bursts show up in intervals of their own: {objects:?}"
    );
}

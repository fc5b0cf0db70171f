//! `probe daemon`: Prometheus metrics that grow, targets that come and go, detaching.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn the_daemon_serves_growing_counters_and_detaches_on_sigterm() {
    if !privileged() {
        return;
    }
    // A workload that makes read and write syscalls nonstop.
    let mut workload = Reaped(
        Command::new("dd")
            .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=100000000000"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (mut daemon, address, rest) = start_daemon(&["-p", &workload.id().to_string()]);

    let series = "probe_syscalls_total{syscall=\"read\"}";
    // The first sample appears once the workload's first reads are counted (later on
    // a loaded machine).
    let first = wait_until(
        "the first sample of the workload's reads",
        || http_get(&address, "/metrics"),
        |scrape| scrape.contains(series),
    );
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    assert!(first.contains("text/plain; version=0.0.4"));
    // The counters grow as the workload keeps going (each scrape reads the maps anew).
    let written = "probe_syscall_bytes_total{syscall=\"write\"}";
    let second = wait_until(
        "the read calls and written bytes to grow",
        || http_get(&address, "/metrics"),
        |second| {
            metric(second, series) > metric(&first, series)
                && metric(second, written) > metric(&first, written)
        },
    );
    assert_eq!(metric(&second, "probe_targets_up"), 1.0);
    assert!(http_get(&address, "/nope").starts_with("HTTP/1.1 404"));
    testdata::assert_promtool_accepts(second.split("\r\n\r\n").nth(1).unwrap_or(""));

    // A client that connects and never sends does not stop the others.
    let _silent = TcpStream::connect(&address).unwrap();
    // The target goes away; the daemon stays and says so.
    workload.kill().unwrap();
    workload.wait().unwrap();
    // Seen at the daemon's next rescan (every second; later on a loaded machine).
    let after = wait_until(
        "probe_targets_up to drop to 0",
        || http_get(&address, "/metrics"),
        |after| metric(after, "probe_targets_up") == 0.0,
    );
    assert!(metric(&after, series) >= metric(&second, series));

    let ids = bpf_ids(daemon.id());
    signal(daemon.id(), rustix::process::Signal::TERM);
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", rest.join().unwrap());
    assert_detached(&ids);
}

#[test]
fn the_daemon_follows_a_command_name_across_restarts() {
    if !privileged() {
        return;
    }
    let (mut daemon, address, rest) = start_daemon(&["--comm", "probe-calibrate"]);
    let up = || metric(&http_get(&address, "/metrics"), "probe_targets_up");
    // The series appears with the first call counted: absent, none are.
    let getppid = || {
        let scrape = http_get(&address, "/metrics");
        let body = scrape.split("\r\n\r\n").nth(1).unwrap_or("");
        ioserve_probe::metrics::sample_value(body, "probe_syscalls_total{syscall=\"getppid\"}")
            .unwrap_or(0.0)
    };
    // Waits until the daemon's rescan (every second) sees `expected` targets.
    let wait_up = |expected: f64| {
        wait_until(
            &format!("probe_targets_up to become {expected}"),
            up,
            |&now| now == expected,
        );
    };
    assert_eq!(up(), 0.0);
    let mut before = 0.0;
    for _round in 0..2 {
        let mut workload = busy_clock_caller();
        wait_up(1.0);
        // The new process's getppid calls are counted as it makes them.
        wait_until(
            "getppid calls of the new process to be counted",
            getppid,
            |&during| during > before,
        );
        workload.kill().unwrap();
        workload.wait().unwrap();
        wait_up(0.0);
        before = getppid();
    }
    signal(daemon.id(), rustix::process::Signal::TERM);
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", rest.join().unwrap());
}

#[test]
fn the_daemon_detaches_on_sigterm_even_when_its_log_reader_is_gone() {
    if !privileged() {
        return;
    }
    let mut daemon = Reaped(
        Command::new(PROBE)
            .args(["daemon", "--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut reader = BufReader::new(daemon.stderr.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("serving http://"), "{line}");
    let ids = bpf_ids(daemon.id());
    drop(reader); // its "detaching" lines now hit a closed pipe
    signal(daemon.id(), rustix::process::Signal::TERM);
    let status = wait_until(
        "the daemon to exit on SIGTERM",
        || daemon.try_wait().unwrap(),
        Option::is_some,
    )
    .expect("exited");
    assert!(status.success(), "{status:?}");
    assert_detached(&ids);
}

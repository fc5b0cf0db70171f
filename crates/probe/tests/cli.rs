//! probe against the truth: workloads with known counts, strace -c, the vDSO, the
//! sendfile verdict, the daemon's metrics, and the error paths.
//!
//! Most tests load BPF programs and need root. Run as another user they are skipped
//! with a note, unless PROBE_TESTS_REQUIRE_ROOT is set (as `cargo xtask ci` does),
//! which makes a missing privilege a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PROBE: &str = env!("CARGO_BIN_EXE_probe");
const CALIBRATE: &str = env!("CARGO_BIN_EXE_probe-calibrate");

/// A child process that is killed and reaped when the test ends, also by a failed
/// assertion, so that no workload or daemon outlives its test.
struct Reaped(Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// probe-calibrate making raw clock_gettime (and getppid) syscalls until killed.
fn busy_clock_caller() -> Reaped {
    Reaped(
        Command::new(CALIBRATE)
            .args(["syscalls", "--count", "2000000000"])
            .spawn()
            .unwrap(),
    )
}

/// Whether BPF tests can run; panics when they must but cannot.
fn privileged() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    if std::env::var_os("PROBE_TESTS_REQUIRE_ROOT").is_some() {
        panic!("PROBE_TESTS_REQUIRE_ROOT is set but the tests do not run as root");
    }
    eprintln!("skipped: loading BPF programs needs root");
    false
}

fn probe(args: &[&str]) -> Output {
    Command::new(PROBE).args(args).output().expect("probe runs")
}

/// Runs probe with --json and parses its stdout, asserting success.
fn probe_json(args: &[&str]) -> Value {
    let out = probe(args);
    assert!(
        out.status.success(),
        "probe {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "probe {args:?}: bad JSON ({err}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Calls of `name` in a `probe syscalls --json` report.
fn calls(report: &Value, name: &str) -> u64 {
    report["syscalls"]
        .as_array()
        .expect("syscalls array")
        .iter()
        .find(|row| row["name"] == name)
        .map_or(0, |row| row["calls"].as_u64().unwrap())
}

/// Per-syscall calls from a `strace -c -o FILE` summary.
fn strace_calls(summary: &str, name: &str) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors], syscall
            (words.len() >= 5 && words.last() == Some(&name)).then(|| words[3].parse().ok())?
        })
        .next()
        .unwrap_or(0)
}

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
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("strace.txt");
    let dd = [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=4k",
        "count=100000",
    ];
    let status = Command::new("strace")
        .args(["-c", "-o"])
        .arg(&summary)
        .args(dd)
        .stderr(Stdio::null())
        .status()
        .expect("strace runs (cargo xtask ci installs it)");
    assert!(status.success());
    let summary = std::fs::read_to_string(&summary).unwrap();

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

/// Runs `probe syscalls --json -- probe-calibrate copy --via VIA` against a local
/// TCP sink and returns the verdict.
fn copy_verdict(via: &str, file: &Path, size: u64) -> Value {
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = sink.local_addr().unwrap().to_string();
    let drain = std::thread::spawn(move || {
        let (mut stream, _) = sink.accept().unwrap();
        let mut received = Vec::new();
        stream.read_to_end(&mut received).unwrap();
        received.len() as u64
    });
    let file = file.to_str().unwrap();
    // --top 1 hides the data syscalls: the verdict must see them anyway.
    let report = probe_json(&[
        "syscalls",
        "--json",
        "--top",
        "1",
        "--",
        CALIBRATE,
        "copy",
        "--via",
        via,
        "--file",
        file,
        "--connect",
        &address,
    ]);
    assert_eq!(drain.join().unwrap(), size);
    assert_eq!(report["syscalls"].as_array().unwrap().len(), 1);
    report["verdict"].clone()
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

/// The BPF program and link ids a process holds (from its fds' fdinfo).
fn bpf_ids(pid: u32) -> Vec<(String, u64)> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        for line in info.lines() {
            for kind in ["prog_id:", "link_id:"] {
                if let Some(id) = line.strip_prefix(kind) {
                    ids.push((
                        kind.trim_end_matches(':').to_string(),
                        id.trim().parse().unwrap(),
                    ));
                }
            }
        }
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Asserts that none of `ids` is still loaded, with bpftool.
fn assert_detached(ids: &[(String, u64)]) {
    assert!(
        ids.iter().any(|(kind, _)| kind == "prog_id"),
        "no programs were seen: {ids:?}"
    );
    let listed = |what: &str| -> Value {
        let out = Command::new("bpftool")
            .args(["-j", what, "list"])
            .output()
            .expect("bpftool runs");
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]))
    };
    // The kernel frees programs after an RCU grace period: allow it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let progs = listed("prog");
        let links = listed("link");
        let left: Vec<_> = ids
            .iter()
            .filter(|(kind, id)| {
                let list = if kind == "prog_id" { &progs } else { &links };
                let ids = list.as_array().unwrap();
                ids.iter().any(|p| p["id"].as_u64() == Some(*id))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still loaded after probe exited: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads `child`'s stderr until a line containing `needle`; returns that line and a
/// thread that drains the rest.
fn wait_for_line(child: &mut Child, needle: &str) -> (String, std::thread::JoinHandle<String>) {
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "stderr ended before `{needle}`"
        );
        if line.contains(needle) {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
        rest
    });
    (line, rest)
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), signal)
        .unwrap();
}

#[test]
fn ctrl_c_prints_the_summary_and_detaches() {
    if !privileged() {
        return;
    }
    let mut target = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let mut probe = Reaped(
        Command::new(PROBE)
            .args(["syscalls", "-p", &target.id().to_string()])
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
    let started = Instant::now();
    let out = probe(&[
        "syscalls",
        "-p",
        &target.id().to_string(),
        "--duration",
        "20",
    ]);
    // The sleep ends, but as our child it stays a zombie until reaped: probe must
    // treat a zombie as exited.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "probe waited for its duration"
    );
    target.wait().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(target exited)"));
}

/// Starts `probe daemon --listen 127.0.0.1:0 ARGS`; returns it, the address it
/// serves and a thread draining its stderr.
fn start_daemon(args: &[&str]) -> (Reaped, String, std::thread::JoinHandle<String>) {
    let mut daemon = Reaped(
        Command::new(PROBE)
            .args(["daemon", "--listen", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (line, rest) = wait_for_line(&mut daemon, "serving http://");
    let address = line
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    (daemon, address.to_string(), rest)
}

fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// `promtool check metrics` (Debian's prometheus) finds nothing to say about `text`.
fn promtool_accepts(text: &str) {
    let promtool = testdata::require("promtool", "prometheus");
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = check.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

fn metric(response: &str, series: &str) -> f64 {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    probe::metrics::sample_value(body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
}

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
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let scrape = http_get(&address, "/metrics");
        if scrape.contains(series) || Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    assert!(first.contains("text/plain; version=0.0.4"));
    std::thread::sleep(Duration::from_millis(300));
    let second = http_get(&address, "/metrics");
    assert!(
        metric(&second, series) > metric(&first, series),
        "reads did not grow"
    );
    let written = "probe_syscall_bytes_total{syscall=\"write\"}";
    assert!(metric(&second, written) > metric(&first, written));
    assert_eq!(metric(&second, "probe_targets_up"), 1.0);
    assert!(http_get(&address, "/nope").starts_with("HTTP/1.1 404"));
    promtool_accepts(second.split("\r\n\r\n").nth(1).unwrap_or(""));

    // A client that connects and never sends does not stop the others.
    let _silent = TcpStream::connect(&address).unwrap();
    // The target goes away; the daemon stays and says so.
    workload.kill().unwrap();
    workload.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let after = http_get(&address, "/metrics");
    assert_eq!(metric(&after, "probe_targets_up"), 0.0, "{after}");
    assert!(metric(&after, series) >= metric(&second, series));

    let ids = bpf_ids(daemon.id());
    signal(daemon.id(), rustix::process::Signal::TERM);
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", rest.join().unwrap());
    assert_detached(&ids);
}

/// A copy of the probe binary that an unprivileged user can execute (the target
/// directory may sit below a directory only root can enter).
fn world_executable_probe(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join("probe");
    std::fs::copy(PROBE, &copy).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Runs `probe ARGS` as user nobody without capabilities.
fn as_nobody(probe: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(probe)
        .args(args)
        .output()
        .expect("setpriv (util-linux) runs")
}

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

#[test]
fn doctor_sees_udp_receive_queues_overflowing() {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, Ordering};
    // A socket that is never read, with the smallest buffer: every datagram past the
    // first few is a receive-buffer error, for as long as doctor watches.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&sink, 1024).unwrap();
    let target = sink.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        scope.spawn(|| {
            let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = sender.send_to(&[0u8; 48], target);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        let report = probe_json(&["doctor", "--json"]);
        stop.store(true, Ordering::Relaxed);
        report
    });
    let udp = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["area"] == "udp")
        .unwrap_or_else(|| panic!("no udp finding: {report:#}"));
    assert_eq!(udp["severity"], "warn", "{udp:#}");
    assert!(
        udp["evidence"]
            .as_str()
            .unwrap()
            .starts_with("RcvbufErrors +"),
        "{udp:#}"
    );
    assert!(
        udp["fix"].as_str().unwrap().contains("SO_REUSEPORT"),
        "{udp:#}"
    );
    drop(sink);
}

#[test]
fn doctor_reports_every_area_for_a_pid() {
    if !privileged() {
        return;
    }
    let mut target = busy_clock_caller();
    let report = probe_json(&[
        "doctor",
        "--json",
        "-p",
        &target.id().to_string(),
        "--duration",
        "0.5",
    ]);
    target.kill().unwrap();
    target.wait().unwrap();
    let findings = report["findings"].as_array().unwrap();
    let areas: Vec<&str> = findings
        .iter()
        .map(|f| f["area"].as_str().unwrap())
        .collect();
    assert_eq!(
        areas,
        [
            "clock",
            "cpufreq",
            "numa",
            "thp",
            "sendfile",
            "faults",
            "clock-syscalls",
            "runq",
            "udp"
        ]
    );
    // The calibrate loop makes raw clock_gettime syscalls: the fallback signature.
    let clock = findings
        .iter()
        .find(|f| f["area"] == "clock-syscalls")
        .unwrap();
    assert_eq!(clock["severity"], "warn", "{clock:#}");
    for f in findings {
        assert!(!f["evidence"].as_str().unwrap().is_empty());
        if f["severity"] == "warn" {
            assert!(f["fix"].is_string(), "a warning without a fix: {f:#}");
        }
    }
}

#[test]
fn the_daemon_follows_a_command_name_across_restarts() {
    if !privileged() {
        return;
    }
    let (mut daemon, address, rest) = start_daemon(&["--comm", "probe-calibrate"]);
    let up = || metric(&http_get(&address, "/metrics"), "probe_targets_up");
    let getppid = || {
        metric(
            &http_get(&address, "/metrics"),
            "probe_syscalls_total{syscall=\"getppid\"}",
        )
    };
    // Waits (up to 5 s) until the daemon's rescan (every second) sees `expected` targets.
    let wait_up = |expected: f64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while up() != expected {
            assert!(
                Instant::now() < deadline,
                "probe_targets_up never became {expected}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(up(), 0.0);
    let mut before = 0.0;
    for _round in 0..2 {
        let mut workload = busy_clock_caller();
        wait_up(1.0);
        std::thread::sleep(Duration::from_millis(200));
        let during = getppid();
        assert!(
            during > before,
            "getppid calls of the new process were not counted"
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
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert_detached(&ids);
}

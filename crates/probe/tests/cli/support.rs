//! Helpers of the probe CLI tests: running probe, workloads, the daemon, strace and
//! bpftool.

use std::fmt::Debug;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PROBE: &str = env!("CARGO_BIN_EXE_probe");
pub const CALIBRATE: &str = env!("CARGO_BIN_EXE_probe-calibrate");

/// How long a test waits for state that settles asynchronously (a counter the daemon
/// has not scraped yet, a rescan, an exit, programs the kernel frees after an RCU grace
/// period): generous, for a slow and loaded 2-core CI host. Waits end as soon as the
/// state is there.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Waits until `check` holds of what `read` returns, for at most [`SETTLE`]; returns
/// that value, or fails naming `what` was awaited and the last value read.
pub fn wait_until<T: Debug>(
    what: &str,
    mut read: impl FnMut() -> T,
    check: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + SETTLE;
    loop {
        let value = read();
        if check(&value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "waited {SETTLE:?} for {what}; last seen: {value:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process that is killed and reaped when the test ends, also by a failed
/// assertion, so that no workload or daemon outlives its test.
pub struct Reaped(pub Child);

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
pub fn busy_clock_caller() -> Reaped {
    Reaped(
        Command::new(CALIBRATE)
            .args(["syscalls", "--count", "2000000000"])
            .spawn()
            .unwrap(),
    )
}

/// Whether BPF tests can run; panics when they must but cannot.
pub fn privileged() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    if std::env::var_os("PROBE_TESTS_REQUIRE_ROOT").is_some() {
        panic!("PROBE_TESTS_REQUIRE_ROOT is set but the tests do not run as root");
    }
    eprintln!("skipped: loading BPF programs needs root");
    false
}

pub fn probe(args: &[&str]) -> Output {
    Command::new(PROBE).args(args).output().expect("probe runs")
}

/// Whether `probe COMMAND` writes a report that goes to stderr or `-o FILE` (the
/// commands that can trace a command of their own); the others print on stdout.
fn reports_like_strace(args: &[&str]) -> bool {
    matches!(args.first(), Some(&"syscalls" | &"faults"))
}

/// `args` with `-o FILE` after the subcommand.
pub fn with_report_file(args: &[&str], file: &Path) -> Vec<String> {
    let mut with = vec![args[0].to_string(), "-o".into(), file.display().to_string()];
    with.extend(args[1..].iter().map(|a| a.to_string()));
    with
}

/// Runs a `probe syscalls` or `probe faults` with its report written to a file
/// (`-o`): the run and the report.
pub fn probe_report(args: &[&str]) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report");
    let out = Command::new(PROBE)
        .args(with_report_file(args, &file))
        .output()
        .expect("probe runs");
    let report = std::fs::read_to_string(&file).unwrap_or_default();
    (out, report)
}

/// Runs probe with --json and parses its report (from `-o FILE` for the commands
/// that report like strace, else stdout), asserting success.
pub fn probe_json(args: &[&str]) -> Value {
    let (out, report) = if reports_like_strace(args) {
        probe_report(args)
    } else {
        let out = probe(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out, stdout)
    };
    assert!(
        out.status.success(),
        "probe {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&report)
        .unwrap_or_else(|err| panic!("probe {args:?}: bad JSON ({err}): {report}"))
}

/// Calls of `name` in a `probe syscalls --json` report.
pub fn calls(report: &Value, name: &str) -> u64 {
    report["syscalls"]
        .as_array()
        .expect("syscalls array")
        .iter()
        .find(|row| row["name"] == name)
        .map_or(0, |row| row["calls"].as_u64().unwrap())
}

/// `strace -c`'s summary of running `command` (cargo xtask ci installs strace).
pub fn strace_c_summary(command: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("strace.txt");
    let status = Command::new("strace")
        .args(["-c", "-o"])
        .arg(&summary)
        .args(command)
        .stderr(Stdio::null())
        .status()
        .expect("strace runs (cargo xtask ci installs it)");
    assert!(status.success(), "strace -c {command:?}");
    std::fs::read_to_string(&summary).unwrap()
}

/// Per-syscall calls from a `strace -c -o FILE` summary.
pub fn strace_calls(summary: &str, name: &str) -> u64 {
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

/// Runs `probe syscalls --json -- probe-calibrate copy --via VIA` against a local
/// TCP sink and returns the verdict.
pub fn copy_verdict(via: &str, file: &Path, size: u64) -> Value {
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

/// The BPF program and link ids a process holds (from its fds' fdinfo).
pub fn bpf_ids(pid: u32) -> Vec<(String, u64)> {
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
pub fn assert_detached(ids: &[(String, u64)]) {
    assert!(
        ids.iter().any(|(kind, _)| kind == "prog_id"),
        "no programs were seen: {ids:?}"
    );
    // `bpftool prog list` fails when a program it is listing is freed under it (other
    // tests, or other tracers on the machine, load and unload theirs at the same
    // time): such a listing is taken again, like one that still shows ours.
    let listed = |what: &str| -> Result<Value, String> {
        let out = Command::new("bpftool")
            .args(["-j", what, "list"])
            .output()
            .expect("bpftool runs");
        if !out.status.success() {
            return Err(format!(
                "bpftool {what} list: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("bpftool {what} list: {e}"))
    };
    // The kernel frees programs after an RCU grace period. `bpftool prog list` fails
    // when a program it lists is freed under it (other tests load and unload theirs at
    // the same time): such a listing is taken again.
    let _unloaded = wait_until(
        "the programs and links to be unloaded after probe exited",
        || match (listed("prog"), listed("link")) {
            (Ok(progs), Ok(links)) => Ok(ids
                .iter()
                .filter(|(kind, id)| {
                    let list = if kind == "prog_id" { &progs } else { &links };
                    let ids = list.as_array().unwrap();
                    ids.iter().any(|p| p["id"].as_u64() == Some(*id))
                })
                .collect::<Vec<_>>()),
            (Err(why), _) | (_, Err(why)) => Err(why),
        },
        |left| left.as_ref().is_ok_and(Vec::is_empty),
    );
}

/// Reads `child`'s stderr until a line containing `needle`; returns that line and a
/// thread that drains the rest.
pub fn wait_for_line(child: &mut Child, needle: &str) -> (String, std::thread::JoinHandle<String>) {
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

pub fn signal(pid: u32, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), signal)
        .unwrap();
}

/// Starts `probe daemon --listen 127.0.0.1:0 ARGS`; returns it, the address it
/// serves and a thread draining its stderr.
pub fn start_daemon(args: &[&str]) -> (Reaped, String, std::thread::JoinHandle<String>) {
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

pub fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

pub fn metric(response: &str, series: &str) -> f64 {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    ioserve_probe::metrics::sample_value(body, series)
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
}

/// A copy of the probe binary that an unprivileged user can execute (the target
/// directory may sit below a directory only root can enter).
pub fn world_executable_probe(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let copy = dir.join("probe");
    // `install` writes the copy in a process of its own: had this process held the file
    // open for writing, a child forked meanwhile by another test thread could inherit
    // that descriptor and make the exec fail with ETXTBSY.
    let status = Command::new("install")
        .args(["-m", "755", PROBE])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success(), "install {PROBE} {}", copy.display());
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// Runs `probe ARGS` as user nobody without capabilities.
pub fn as_nobody(probe: &Path, args: &[&str]) -> Output {
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

//! Syscalls per request: `probe syscalls` counts each server's syscalls (every process
//! and thread of it, `-f`) while wrk runs the 8 MiB and the 4 KiB workloads, and the
//! counts over the requests wrk completed give syscalls per request, beside nginx's.
//!
//! A dedicated run per server and workload after the rounds, not during them: probe's
//! BPF programs run on every syscall of the traced server (hundreds of ns each, see
//! `cargo xtask probe-overhead`), which would lower the throughput the rounds report,
//! and unevenly, most for the server that makes the most syscalls. The window is the
//! wrk run: probe says on stderr when its probes are attached, wrk starts then, and
//! probe is stopped with SIGTERM when wrk returns, so only the idle moments at either
//! end add to the counts (an idle server makes next to no syscalls).

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::servers::Running;
use super::wrk::wrk;
use super::{Workload, WORKLOADS};

/// The workloads whose syscalls are counted: the 8 MiB download and the 4 KiB request.
const COUNTED_WORKLOADS: [&str; 2] = ["a", "b"];

/// The syscalls shown in a column of their own, per workload (the rest add up to
/// "other").
const SHOWN_SYSCALLS: usize = 6;

/// What probe counted for one server under one workload.
#[derive(Clone, Debug, Serialize)]
pub(super) struct SyscallCounts {
    server: String,
    workload: &'static str,
    /// The requests wrk completed while probe counted.
    requests: u64,
    /// Calls per syscall, most first.
    calls: Vec<SyscallCalls>,
}

/// One syscall's calls, as probe's `--json` report lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SyscallCalls {
    name: String,
    calls: u64,
}

impl SyscallCounts {
    /// Every syscall per request (NaN without requests).
    fn total_per_request(&self) -> f64 {
        self.per_request_of(self.calls.iter().map(|c| c.calls).sum())
    }

    /// Calls of `name` per request (0 when it made none, NaN without requests).
    fn per_request(&self, name: &str) -> f64 {
        let calls = self
            .calls
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.calls);
        self.per_request_of(calls)
    }

    /// `calls` per request, NaN without requests (not a rate of infinity).
    fn per_request_of(&self, calls: u64) -> f64 {
        match self.requests {
            0 => f64::NAN,
            requests => calls as f64 / requests as f64,
        }
    }
}

/// probe's `--json` report, the part read here.
#[derive(Deserialize)]
struct ProbeReport {
    syscalls: Vec<SyscallCalls>,
}

/// The per-syscall calls of probe's `--json` report, most first.
fn parse_probe_report(json: &str) -> Result<Vec<SyscallCalls>> {
    let report: ProbeReport =
        serde_json::from_str(json).context("probe's --json report does not parse")?;
    let mut calls = report.syscalls;
    calls.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.name.cmp(&b.name)));
    Ok(calls)
}

/// Why the syscalls cannot be counted here, if they cannot: probe needs root and the
/// kernel's BTF.
pub(super) fn unavailable() -> Option<String> {
    if !crate::util::is_root() {
        return Some("probe syscalls needs root (BPF)".into());
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux) for probe".into());
    }
    None
}

/// Counts the syscalls of every server under the 8 MiB and the 4 KiB workloads, one
/// wrk run of `seconds` each.
pub(super) fn measure_all(
    running: &[Running],
    probe: &Path,
    seconds: u64,
    out: &Path,
) -> Result<Vec<SyscallCounts>> {
    let mut counts = Vec::new();
    for workload in WORKLOADS
        .iter()
        .filter(|w| COUNTED_WORKLOADS.contains(&w.key))
    {
        for server in running {
            let count = measure(server, workload, probe, seconds, out)?;
            eprintln!(
                "  syscalls {} {:<24} {:>8.2} per request ({} requests)",
                workload.key,
                server.name,
                count.total_per_request(),
                count.requests
            );
            counts.push(count);
        }
    }
    Ok(counts)
}

/// One wrk run under `probe syscalls -f -p PID...` on every process of the server.
fn measure(
    server: &Running,
    workload: &Workload,
    probe: &Path,
    seconds: u64,
    out: &Path,
) -> Result<SyscallCounts> {
    let report = out.join(format!("syscalls-{}-{}.json", server.name, workload.key));
    let mut command = Command::new(probe);
    // --duration only bounds probe's life should this run end before it stops probe.
    command
        .args(["syscalls", "-f", "--json", "--duration"])
        .arg((seconds + 60).to_string())
        .arg("-o")
        .arg(&report);
    for pid in server.pids() {
        command.arg("-p").arg(pid.to_string());
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", probe.display()))?;
    let mut stderr = BufReader::new(child.stderr.take().context("probe's stderr")?);
    // probe prints this line, also with --json, once its probes are attached.
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line)? == 0 {
            let status = child.wait()?;
            bail!(
                "probe syscalls did not attach to {} ({status}): {said}(--no-syscalls runs the load test without)",
                server.name
            );
        }
        if line.starts_with("Tracing syscalls of") {
            break;
        }
        said += &line;
    }
    let result = wrk(server, workload, seconds, out);
    stop(&mut child);
    let status = child.wait()?;
    stderr.read_to_string(&mut said)?;
    let result = result?;
    if !status.success() {
        bail!(
            "probe syscalls on {} failed ({status}): {said}",
            server.name
        );
    }
    let json =
        fs::read_to_string(&report).with_context(|| format!("cannot read {}", report.display()))?;
    Ok(SyscallCounts {
        server: server.name.clone(),
        workload: workload.key,
        requests: result.requests,
        calls: parse_probe_report(&json).with_context(|| format!("in {}", report.display()))?,
    })
}

/// Asks probe to print its report and detach (SIGTERM, as Ctrl-C would).
fn stop(probe: &mut Child) {
    let pid = rustix::process::Pid::from_child(probe);
    if rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_err() {
        let _ = probe.kill();
    }
}

/// The report's section: per workload, each server's syscalls per request in total and
/// for the syscalls most made, with the total's ratio to nginx's.
pub(super) fn render_table(counts: &[SyscallCounts]) -> String {
    let mut text = String::from(
        "Syscalls per request: probe syscalls -f on every process of the server during one more wrk run per workload, after the rounds; calls / requests wrk completed.\n\n",
    );
    for workload in WORKLOADS
        .iter()
        .filter(|w| COUNTED_WORKLOADS.contains(&w.key))
    {
        let rows: Vec<&SyscallCounts> = counts
            .iter()
            .filter(|c| c.workload == workload.key)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let columns = most_made(&rows);
        let nginx = rows
            .iter()
            .find(|c| c.server == "nginx")
            .map(|c| c.total_per_request());
        let _ = writeln!(
            text,
            "({}) {}: syscalls per request\n",
            workload.key, workload.title
        );
        let _ = writeln!(
            text,
            "| server | requests | total | {} | other | total vs nginx |",
            columns.join(" | ")
        );
        let _ = writeln!(
            text,
            "|---|---:|---:|{}---:|---:|",
            "---:|".repeat(columns.len())
        );
        for row in rows {
            let total = row.total_per_request();
            let shown: Vec<f64> = columns.iter().map(|name| row.per_request(name)).collect();
            let other = total - shown.iter().sum::<f64>();
            let cells: Vec<String> = shown.iter().map(|v| format!("{v:.2}")).collect();
            let _ = writeln!(
                text,
                "| {} | {} | {total:.2} | {} | {other:.2} | {} |",
                row.server,
                row.requests,
                cells.join(" | "),
                nginx.map_or("-".to_string(), |n| format!("{:.2}x", total / n)),
            );
        }
        text.push('\n');
    }
    text
}

/// The syscalls shown as columns under one workload, at most [`SHOWN_SYSCALLS`]: each
/// server's most made in turn (every server's first, then every server's second, ...),
/// so that one server's many calls at the same rate (nginx's open, fstat, close, ... once
/// per request each) do not leave another's few in "other"; shown the highest rate
/// over the servers first.
fn most_made(rows: &[&SyscallCounts]) -> Vec<String> {
    let ranked: Vec<Vec<(&str, f64)>> = rows
        .iter()
        .map(|row| {
            let mut calls: Vec<(&str, f64)> = row
                .calls
                .iter()
                .map(|call| (call.name.as_str(), row.per_request(&call.name)))
                .collect();
            calls.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
            calls
        })
        .collect();
    let deepest = ranked.iter().map(Vec::len).max().unwrap_or(0);
    let mut chosen: Vec<(&str, f64)> = Vec::new();
    for (name, _) in (0..deepest).flat_map(|i| ranked.iter().filter_map(move |calls| calls.get(i)))
    {
        if chosen.len() == SHOWN_SYSCALLS {
            break;
        }
        if chosen.iter().all(|(shown, _)| shown != name) {
            let highest = ranked
                .iter()
                .flatten()
                .filter(|(other, _)| other == name)
                .map(|&(_, rate)| rate)
                .fold(0.0, f64::max);
            chosen.push((name, highest));
        }
    }
    chosen.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    chosen
        .into_iter()
        .map(|(name, _)| name.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `probe syscalls -f --json` on ioserve while wrk fetched a 4 KiB file (captured,
    /// the first 8 rows kept).
    const PROBE_JSON: &str = include_str!("syscalls_fixture.json");

    fn counts(server: &str, requests: u64, calls: &[(&str, u64)]) -> SyscallCounts {
        SyscallCounts {
            server: server.into(),
            workload: "b",
            requests,
            calls: calls
                .iter()
                .map(|(name, calls)| SyscallCalls {
                    name: name.to_string(),
                    calls: *calls,
                })
                .collect(),
        }
    }

    #[test]
    fn reads_probes_json_report_most_calls_first() {
        let calls = parse_probe_report(PROBE_JSON).unwrap();
        assert_eq!(calls.len(), 8, "{calls:?}");
        assert_eq!((calls[0].name.as_str(), calls[0].calls), ("recvfrom", 7914));
        assert_eq!(calls.iter().map(|c| c.calls).sum::<u64>(), 23_827);
        assert!(
            calls.windows(2).all(|w| w[0].calls >= w[1].calls),
            "{calls:?}"
        );
        assert!(parse_probe_report("{\"target\": \"pid 1\"}").is_err());
        assert!(parse_probe_report("Syscalls of pid 1").is_err());
    }

    #[test]
    fn divides_calls_by_requests() {
        let nginx = counts(
            "nginx",
            1000,
            &[("writev", 1000), ("recvfrom", 2000), ("epoll_wait", 500)],
        );
        assert_eq!(nginx.total_per_request(), 3.5);
        assert_eq!(nginx.per_request("recvfrom"), 2.0);
        assert_eq!(nginx.per_request("sendfile"), 0.0);
        assert!(counts("idle", 0, &[("futex", 3)])
            .total_per_request()
            .is_nan());
    }

    #[test]
    fn table_shows_the_most_made_syscalls_and_the_ratio_to_nginx() {
        let rows = [
            counts(
                "nginx",
                1000,
                &[("writev", 1000), ("recvfrom", 2000), ("epoll_wait", 500)],
            ),
            counts(
                "ioserve-sendfile",
                2000,
                &[("sendfile", 2000), ("recvfrom", 2000), ("epoll_wait", 1000)],
            ),
        ];
        let table = render_table(&rows);
        assert!(
            table.contains(
                "| server | requests | total | recvfrom | sendfile | writev | epoll_wait | other | total vs nginx |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| nginx | 1000 | 3.50 | 2.00 | 0.00 | 1.00 | 0.50 | 0.00 | 1.00x |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| ioserve-sendfile | 2000 | 2.50 | 1.00 | 1.00 | 0.00 | 0.50 | 0.00 | 0.71x |"
            ),
            "{table}"
        );
        assert!(!table.contains("(a)"), "no rows, no section: {table}");
    }

    #[test]
    fn each_servers_own_calls_get_columns() {
        // nginx makes seven kinds of call per request, ioserve three at the same rate:
        // ranked by rate alone, ioserve's statx and writev would be "other".
        let rows = [
            counts(
                "nginx",
                100,
                &[
                    ("setsockopt", 200),
                    ("close", 100),
                    ("newfstatat", 100),
                    ("openat", 100),
                    ("recvfrom", 100),
                    ("sendfile", 100),
                    ("epoll_wait", 50),
                ],
            ),
            counts(
                "ioserve-sendfile",
                100,
                &[("writev", 100), ("statx", 100), ("recvfrom", 100)],
            ),
        ];
        let table = render_table(&rows);
        assert!(
            table.contains(
                "| server | requests | total | setsockopt | close | newfstatat | recvfrom | statx | writev | other | total vs nginx |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| ioserve-sendfile | 100 | 3.00 | 0.00 | 0.00 | 0.00 | 1.00 | 1.00 | 1.00 | 0.00 | 0.40x |"),
            "{table}"
        );
    }

    #[test]
    fn other_adds_what_the_columns_leave_out() {
        let names: Vec<String> = (0..8).map(|i| format!("call{i}")).collect();
        let calls: Vec<(&str, u64)> = names
            .iter()
            .zip(0..)
            .map(|(name, i)| (name.as_str(), 100 - i))
            .collect();
        let table = render_table(&[counts("go-fileserver", 100, &calls)]);
        // 8 syscalls, 6 columns: call6 and call7 (94 + 93 calls) are "other".
        assert!(table.contains("| 1.87 | - |"), "{table}");
        assert!(table.contains("| call5 | other |"), "{table}");
    }
}

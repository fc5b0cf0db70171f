//! Running wrk and reading its figures, which its Lua `done()` hook prints as JSON.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use super::servers::Running;
use super::Workload;

/// wrk's `done()` hook: the figures as one JSON line, so nothing is scraped from wrk's
/// human-readable summary (whose units and layout vary).
pub(super) const REPORT_LUA: &str = r#"-- Prints wrk's figures as one JSON line after the run.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"bytes":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,' ..
    '"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.bytes, summary.duration,
    latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
"#;

pub(super) const RANGES_LUA: &str = r#"-- Random 1 MiB ranges of /1g.bin; each wrk thread has its own seed.
local size, len = 1073741824, 1048576
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("seed", counter)
end
function init(args)
  math.randomseed(seed * 7919)
end
function request()
  local first = math.random(0, size - len)
  return wrk.format("GET", "/1g.bin", { ["Range"] = "bytes=" .. first .. "-" .. (first + len - 1) })
end
"#;

/// What a load client (wrk, h2load) measured.
pub(super) struct LoadResult {
    /// Requests completed.
    pub(super) requests: u64,
    pub(super) requests_per_s: f64,
    pub(super) bytes_per_s: f64,
    /// Latency percentiles: NaN where the client gives none (h2load).
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) errors: u64,
    pub(super) seconds: f64,
}

pub(super) fn wrk(
    server: &Running,
    workload: &Workload,
    seconds: u64,
    out: &Path,
) -> Result<LoadResult> {
    let mut command = Command::new("wrk");
    command.args([
        "-t2",
        &format!("-c{}", workload.connections),
        &format!("-d{seconds}s"),
        "--timeout",
        "10s",
    ]);
    let script = match workload.script {
        Some(source) => {
            let path = out.join(format!("{}.lua", workload.key));
            std::fs::write(&path, format!("{source}\n{REPORT_LUA}"))?;
            path
        }
        None => out.join("report.lua"),
    };
    command.arg("-s").arg(script);
    command.arg(server.url(workload.path));
    let output = command.output().context("cannot run wrk")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "wrk against {} failed: {}{}",
            server.name,
            text,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    parse_wrk(&text).with_context(|| format!("no WRK_JSON line in wrk's output:\n{text}"))
}

/// The figures `REPORT_LUA` printed.
#[derive(Debug, serde::Deserialize)]
struct WrkJson {
    requests: u64,
    bytes: u64,
    duration_us: u64,
    p50_us: u64,
    p99_us: u64,
    connect: u64,
    read: u64,
    write: u64,
    status: u64,
    timeout: u64,
}

fn parse_wrk(text: &str) -> Option<LoadResult> {
    let json = text.lines().find_map(|l| l.strip_prefix("WRK_JSON "))?;
    let w: WrkJson = serde_json::from_str(json).ok()?;
    let seconds = w.duration_us as f64 / 1e6;
    (seconds > 0.0).then(|| LoadResult {
        requests: w.requests,
        requests_per_s: w.requests as f64 / seconds,
        bytes_per_s: w.bytes as f64 / seconds,
        p50_ms: w.p50_us as f64 / 1000.0,
        p99_ms: w.p99_us as f64 / 1000.0,
        // Non-2xx/3xx responses and socket errors.
        errors: w.status + w.connect + w.read + w.write + w.timeout,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 3s test @ http://127.0.0.1:1/4k.bin
  2 threads and 100 connections
  245000 requests in 3.00s, 1.01GB read
WRK_JSON {\"requests\":245000,\"bytes\":1086324736,\"duration_us\":3000000,\"p50_us\":812,\"p99_us\":9510,\"connect\":0,\"read\":2,\"write\":0,\"status\":4,\"timeout\":1}
";

    #[test]
    fn parses_wrk_json() {
        let r = parse_wrk(WRK).unwrap();
        assert!((r.requests_per_s - 81_666.666).abs() < 0.01);
        assert!((r.bytes_per_s - 362_108_245.33).abs() < 0.01);
        assert!((r.p50_ms - 0.812).abs() < 1e-9);
        assert!((r.p99_ms - 9.51).abs() < 1e-9);
        assert_eq!((r.requests, r.errors, r.seconds), (245_000, 7, 3.0));
        assert!(parse_wrk("Requests/sec: 5").is_none());
    }
}

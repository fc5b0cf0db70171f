//! Running h2load (Debian's nghttp2-client) for the HTTP/2 workloads and reading its
//! summary.

use std::process::Command;

use anyhow::{bail, Context as _, Result};

use super::servers::Running;
use super::wrk::LoadResult;
use super::Workload;

/// Streams each connection keeps in flight.
const STREAMS: u32 = 10;

/// Runs h2load against `server` for `seconds`: two threads, the workload's connections,
/// [`STREAMS`] concurrent streams on each, HTTP/2 chosen by ALPN.
pub(super) fn h2load(server: &Running, workload: &Workload, seconds: u64) -> Result<LoadResult> {
    let output = Command::new("h2load")
        .args([
            "-t2",
            &format!("-c{}", workload.connections),
            &format!("-m{STREAMS}"),
            &format!("-D{seconds}"),
        ])
        .arg(server.url(workload.path))
        .output()
        .context("cannot run h2load")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "h2load against {} failed: {}{}",
            server.name,
            text,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    parse_h2load(&text).with_context(|| format!("no summary in h2load's output:\n{text}"))
}

/// The figures of h2load's summary:
///
/// ```text
/// finished in 2.00s, 12345.00 req/s, 50.12MB/s
/// requests: 24690 total, 24700 started, 24690 done, 24690 succeeded, 0 failed, 0 errored, 0 timeout
/// traffic: 100.24MB (105108720) total, ...
/// ```
///
/// h2load gives no latency percentiles (only min, max, mean): p50 and p99 are NaN.
fn parse_h2load(text: &str) -> Option<LoadResult> {
    let line = |prefix: &str| text.lines().find_map(|l| l.strip_prefix(prefix));
    let seconds: f64 = line("finished in ")?
        .split(',')
        .next()?
        .trim()
        .strip_suffix('s')?
        .parse()
        .ok()?;
    // `24690 total, 24700 started, ...`: each count before its word.
    let requests = line("requests: ")?;
    let count = |word: &str| -> Option<u64> {
        requests.split(',').find_map(|part| {
            let (number, name) = part.trim().split_once(' ')?;
            (name == word).then(|| number.parse().ok())?
        })
    };
    let bytes: u64 = line("traffic: ")?
        .split_once('(')?
        .1
        .split_once(')')?
        .0
        .parse()
        .ok()?;
    let done = count("total")?;
    // Failed requests (non-2xx/3xx included), errors and timeouts.
    let errors = count("failed")? + count("errored")? + count("timeout")?;
    (seconds > 0.0).then(|| LoadResult {
        requests: done,
        requests_per_s: done as f64 / seconds,
        bytes_per_s: bytes as f64 / seconds,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        errors,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H2LOAD: &str = "starting benchmark...
Main benchmark duration is over for thread #0. Stopping all clients.

finished in 2.00s, 858.00 req/s, 3.40MB/s
requests: 1716 total, 1748 started, 1716 done, 1710 succeeded, 6 failed, 2 errored, 1 timeout
status codes: 1710 2xx, 0 3xx, 6 4xx, 0 5xx
traffic: 6.80MB (7134652) total, 57.76KB (59144) headers (space savings 82.59%), 6.70MB (7028736) data
                     min         max         mean         sd        +/- sd
time for request:     2.09ms     91.87ms     16.44ms     20.11ms    90.68%
";

    #[test]
    fn the_summary_is_read() {
        let r = parse_h2load(H2LOAD).unwrap();
        assert_eq!((r.requests, r.errors, r.seconds), (1716, 9, 2.0));
        assert!((r.requests_per_s - 858.0).abs() < 1e-9);
        assert!((r.bytes_per_s - 3_567_326.0).abs() < 1e-9);
        assert!(r.p50_ms.is_nan() && r.p99_ms.is_nan());
        assert!(parse_h2load("finished in 0.00s, 0 req/s\n").is_none());
        assert!(parse_h2load(&H2LOAD.replace("finished in 2.00s", "finished in 0.00s")).is_none());
    }
}

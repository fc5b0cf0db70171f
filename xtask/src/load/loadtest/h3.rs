//! `cargo xtask loadtest --h3`: ioserve's HTTP/3 against Caddy's (quic-go), both over
//! the same certificate with TLS in user space, on 64 MiB and 4 KiB files, loaded by
//! one client (h3get, on quic-go's http3 package, built from xtask/src/http3/h3get),
//! and the same files over HTTPS on TCP (HTTP/2, h2load) for what QUIC costs against
//! TCP; the same rounds, medians and per-round ratios as the other reports, in h3.md
//! and h3.json, with the issue's targets judged on the per-round ratios.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::report::{figure, judge, medians, render_table, Target};
use super::servers::{h3_servers, select, start, Running};
use super::wrk::LoadResult;
use super::{measure_rounds, prepare_files, Client, Median, Options, Sample, Workload};
use crate::util::{certificate, ensure_packages, go_tool};

/// Caddy, installed with `go install` when missing.
pub(crate) const CADDY: &str = "github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9";

/// Requests each HTTP/3 connection keeps in flight (as h2load's streams).
const STREAMS: u32 = 10;

/// The workloads: over HTTP/3, then over HTTPS on TCP.
const H3_WORKLOADS: [Workload; 4] = [
    Workload {
        key: "h3-64m",
        title: "64 MiB file over HTTP/3, 4 connections of 10 streams",
        path: "/64m.bin",
        connections: 4,
        client: Client::H3get,
        script: None,
        bulk: true,
    },
    Workload {
        key: "h3-4k",
        title: "4 KiB file over HTTP/3, 50 connections of 10 streams",
        path: "/4k.bin",
        connections: 50,
        client: Client::H3get,
        script: None,
        bulk: false,
    },
    Workload {
        key: "h2-64m",
        title: "64 MiB file over HTTPS on TCP, HTTP/2, 4 connections of 10 streams",
        path: "/64m.bin",
        connections: 4,
        client: Client::H2load,
        script: None,
        bulk: true,
    },
    Workload {
        key: "h2-4k",
        title: "4 KiB file over HTTPS on TCP, HTTP/2, 50 connections of 10 streams",
        path: "/4k.bin",
        connections: 50,
        client: Client::H2load,
        script: None,
        bulk: false,
    },
];

/// What the report says about the setup.
const NOTE: &str = "TLS in user space for both servers (ioserve `--ktls off`; Caddy \
has no kTLS). QUIC encrypts each packet in user space whatever the kernel offers, so \
neither server can send file pages without copying them; over TCP ioserve could hand \
the encryption to the kernel (kTLS) where the `tls` module is loaded, which this host \
lacks. The HTTP/3 client is h3get (quic-go), the HTTP/2 one h2load; h2load gives no \
latency percentiles (NaN).";

#[derive(Serialize)]
struct H3Report<'a> {
    duration_s: u64,
    rounds: usize,
    cpus: usize,
    note: &'static str,
    workloads: Vec<(&'static str, &'static str)>,
    medians: &'a [Median],
    samples: &'a [Sample],
}

/// Where the h3get program is, built by [`run`].
fn h3get_path(out: &Path) -> PathBuf {
    out.join("h3get")
}

/// Runs the rounds and writes `out`/h3.md and `out`/h3.json (ioserve's release build
/// and the files in `www` are ready).
pub(super) fn run(options: &Options, www: &Path, out: &Path) -> Result<()> {
    ensure_packages(&[("nghttp2-client", "h2load")])?;
    prepare_files(www, &[("64m.bin", 64 << 20)])?;
    crate::http3::build_h3get(&h3get_path(out))?;
    let caddy = go_tool("caddy", CADDY)?;
    let certs = out.join("h3");
    fs::create_dir_all(&certs)?;
    let pair = certificate::self_signed(&certs)?;
    let specs = select(h3_servers(&pair, &caddy), &options.only)?;
    let mut running = Vec::new();
    for spec in &specs {
        running.push(start(spec, www, out)?);
        eprintln!(
            "xtask loadtest --h3: {} on {} (TCP and UDP)",
            spec.name,
            running.last().unwrap().url("/")
        );
    }
    // Caddy opens its UDP socket after its TCP one: wait until both answer HTTP/3.
    for server in &running {
        wait_for_http3(server, &pair.cert, out)?;
    }
    let samples = measure_rounds(&running, &H3_WORKLOADS, options, out)?;
    drop(running);
    let medians = medians(&samples, &specs, &H3_WORKLOADS, "caddy");
    let table = format!(
        "HTTP/3 against Caddy: {NOTE}\n\n{}{}",
        render_table(
            &medians,
            options,
            &H3_WORKLOADS,
            "caddy",
            "h3get (quic-go) and h2load -t2"
        ),
        judge(&samples, "ioserve-sendfile", "caddy", &TARGETS)
    );
    println!("{table}");
    let report = H3Report {
        duration_s: options.duration,
        rounds: options.rounds,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        note: NOTE,
        workloads: H3_WORKLOADS.iter().map(|w| (w.key, w.title)).collect(),
        medians: &medians,
        samples: &samples,
    };
    fs::write(out.join("h3.json"), serde_json::to_string_pretty(&report)?)?;
    fs::write(out.join("h3.md"), &table)?;
    eprintln!(
        "xtask loadtest --h3: wrote {}/{{h3.md,h3.json}}",
        out.display()
    );
    Ok(())
}

/// Waits until `server` answers a GET over HTTP/3.
fn wait_for_http3(server: &Running, ca: &Path, out: &Path) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let output = Command::new(h3get_path(out))
            .arg("-ca")
            .arg(ca)
            .arg(server.url("/4k.bin"))
            .output()
            .context("cannot run h3get")?;
        let answered = String::from_utf8_lossy(&output.stdout).contains("\"status\":200");
        if output.status.success() && answered {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "{} does not answer over HTTP/3 at {}: {}{}",
                server.name,
                server.url("/4k.bin"),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// h3get's load summary.
#[derive(Debug, Deserialize)]
struct H3Summary {
    requests: u64,
    bytes: u64,
    errors: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Loads `server` with `workload` over HTTP/3 for `seconds`: h3get with the workload's
/// connections, [`STREAMS`] requests in flight on each.
pub(super) fn h3get(
    server: &Running,
    workload: &Workload,
    seconds: u64,
    out: &Path,
) -> Result<LoadResult> {
    let ca = out.join("h3/cert.pem");
    let output = Command::new(h3get_path(out))
        .arg("-ca")
        .arg(&ca)
        .args([
            "-load",
            &format!("{seconds}s"),
            "-c",
            &workload.connections.to_string(),
            "-m",
            &STREAMS.to_string(),
        ])
        .arg(server.url(workload.path))
        .output()
        .context("cannot run h3get")?;
    if !output.status.success() {
        bail!(
            "h3get against {} failed: {}",
            server.name,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let summary: H3Summary = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "h3get printed no summary: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    Ok(LoadResult {
        requests: summary.requests,
        requests_per_s: summary.requests as f64 / summary.seconds,
        bytes_per_s: summary.bytes as f64 / summary.seconds,
        p50_ms: summary.p50_ms,
        p99_ms: summary.p99_ms,
        errors: summary.errors,
        seconds: summary.seconds,
    })
}

/// The issue's targets for ioserve over HTTP/3 against Caddy: on 64 MiB at least
/// Caddy's MB/s at no more than 0.8x its CPU s/GB; on 4 KiB at least 1.2x its req/s.
const TARGETS: [Target; 3] = [
    Target::median("64 MiB MB/s", "h3-64m", figure::mb_per_s, true, 1.0),
    Target::median(
        "64 MiB CPU s/GB",
        "h3-64m",
        figure::cpu_s_per_gb,
        false,
        0.8,
    ),
    Target::median("4 KiB req/s", "h3-4k", figure::requests_per_s, true, 1.2),
];

#[cfg(test)]
mod tests {
    use super::super::Figures;
    use super::*;

    fn sample(server: &str, workload: &'static str, round: usize, mb: f64, cpu: f64) -> Sample {
        Sample {
            server: server.into(),
            workload,
            round,
            figures: Figures::for_test(mb * 10.0, mb, cpu),
            errors: 0,
        }
    }

    #[test]
    fn the_targets_are_judged_on_the_per_round_ratios() {
        let samples = [
            sample("caddy", "h3-64m", 0, 100.0, 4.0),
            sample("ioserve-sendfile", "h3-64m", 0, 130.0, 2.8),
            sample("caddy", "h3-64m", 1, 100.0, 4.0),
            sample("ioserve-sendfile", "h3-64m", 1, 90.0, 3.6),
            sample("caddy", "h3-64m", 2, 100.0, 4.0),
            sample("ioserve-sendfile", "h3-64m", 2, 120.0, 3.0),
            sample("caddy", "h3-4k", 0, 10.0, 40.0),
            sample("ioserve-sendfile", "h3-4k", 0, 11.0, 20.0),
        ];
        let judged = |samples: &[Sample]| judge(samples, "ioserve-sendfile", "caddy", &TARGETS);
        let text = judged(&samples);
        for line in [
            "- 64 MiB MB/s >= 1.00x as the median: median 1.20x, worst round 0.90x (rounds: 1.30, 0.90, 1.20), met",
            "- 64 MiB CPU s/GB <= 0.80x as the median: median 0.75x, worst round 0.90x (rounds: 0.70, 0.90, 0.75), met",
            "- 4 KiB req/s >= 1.20x as the median: median 1.10x, worst round 1.10x (rounds: 1.10), not met",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        let text = judged(&samples[..6]);
        assert!(
            text.contains("- 4 KiB req/s >= 1.20x as the median: not measured"),
            "{text}"
        );
    }

    #[test]
    fn h3gets_summary_is_read() {
        let summary: H3Summary = serde_json::from_str(
            r#"{"requests":12505,"bytes":51220480,"errors":0,"seconds":3,"p50_ms":17.032,"p99_ms":84.809}"#,
        )
        .unwrap();
        assert_eq!(
            (summary.requests, summary.bytes, summary.errors),
            (12505, 51_220_480, 0)
        );
        assert_eq!((summary.seconds, summary.p99_ms), (3.0, 84.809));
    }
}

//! `cargo xtask loadtest --tls`: ioserve (sendfile) against nginx over HTTPS, with the
//! same certificate, TLS 1.3, TLS in user space for both: 8 MiB and 4 KiB files over
//! HTTP/1.1 (wrk) and 4 KiB over HTTP/2 (h2load); the same rounds, medians and ratios
//! as the plain report, in tls.md and tls.json, with the targets judged.

use std::fs;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::report::{figure, judge, medians, render_table, Target};
use super::servers::{select, start, tls_servers};
use super::{measure_rounds, Client, Median, Options, Sample, Workload};
use crate::util::{certificate, ensure_packages};

/// The workloads over HTTPS.
pub(super) const TLS_WORKLOADS: [Workload; 3] = [
    Workload {
        key: "a",
        title: "8 MiB file over HTTPS, HTTP/1.1, 100 connections",
        path: "/8m.bin",
        connections: 100,
        client: Client::Wrk,
        script: None,
        bulk: true,
    },
    Workload {
        key: "b",
        title: "4 KiB file over HTTPS, HTTP/1.1, 100 connections",
        path: "/4k.bin",
        connections: 100,
        client: Client::Wrk,
        script: None,
        bulk: false,
    },
    Workload {
        key: "h2",
        title: "4 KiB file over HTTPS, HTTP/2, 100 connections of 10 streams",
        path: "/4k.bin",
        connections: 100,
        client: Client::H2load,
        script: None,
        bulk: false,
    },
];

/// What the report says: why kTLS is not measured.
const NOTE: &str =
    "TLS in user space for both servers (nginx without `ssl_conf_command Options KTLS`, \
ioserve with `--ktls off`): this host's kernel has no `tls` module, and in the qemu \
guest that has one (`cargo xtask tls-vm`) the CPU is emulated, so kTLS speed is not \
measured. h2load gives no latency percentiles: NaN for HTTP/2.";

#[derive(Serialize)]
struct TlsReport<'a> {
    duration_s: u64,
    rounds: usize,
    cpus: usize,
    note: &'static str,
    workloads: Vec<(&'static str, &'static str)>,
    medians: &'a [Median],
    samples: &'a [Sample],
}

/// Runs the rounds over HTTPS and writes `out`/tls.md and `out`/tls.json (ioserve's
/// release build and the files in `www` are ready).
pub(super) fn run(options: &Options, www: &Path, out: &Path) -> Result<()> {
    ensure_packages(&[("nghttp2-client", "h2load")])?;
    let certs = out.join("tls");
    fs::create_dir_all(&certs)?;
    let pair = certificate::self_signed(&certs)?;
    let specs = select(tls_servers(&pair), &options.only)?;
    let mut running = Vec::new();
    for spec in &specs {
        running.push(start(spec, www, out)?);
        eprintln!(
            "xtask loadtest --tls: {} on {}",
            spec.name,
            running.last().unwrap().url("/")
        );
    }
    let samples = measure_rounds(&running, &TLS_WORKLOADS, options, out)?;
    drop(running);
    let medians = medians(&samples, &specs, &TLS_WORKLOADS, "nginx");
    let table = format!(
        "Over HTTPS (TLS 1.3): {NOTE}\n\n{}{}",
        render_table(
            &medians,
            options,
            &TLS_WORKLOADS,
            "nginx",
            super::WRK_CLIENTS
        ),
        judge(&samples, "ioserve-sendfile", "nginx", &TARGETS)
    );
    println!("{table}");
    let report = TlsReport {
        duration_s: options.duration,
        rounds: options.rounds,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        note: NOTE,
        workloads: TLS_WORKLOADS.iter().map(|w| (w.key, w.title)).collect(),
        medians: &medians,
        samples: &samples,
    };
    fs::write(out.join("tls.json"), serde_json::to_string_pretty(&report)?)?;
    fs::write(out.join("tls.md"), &table)?;
    eprintln!(
        "xtask loadtest --tls: wrote {}/{{tls.md,tls.json}}",
        out.display()
    );
    Ok(())
}

/// The targets for ioserve-sendfile over HTTPS, judged per round: on 8 MiB at least
/// nginx's MB/s at no more than its CPU s/GB; on 4 KiB at least its req/s over
/// HTTP/1.1, and at least 1.2x over HTTP/2.
const TARGETS: [Target; 4] = [
    Target::median("8 MiB MB/s", "a", figure::mb_per_s, true, 1.0),
    Target::median("8 MiB CPU s/GB", "a", figure::cpu_s_per_gb, false, 1.0),
    Target::median(
        "4 KiB HTTP/1.1 req/s",
        "b",
        figure::requests_per_s,
        true,
        1.0,
    ),
    Target::median(
        "4 KiB HTTP/2 req/s",
        "h2",
        figure::requests_per_s,
        true,
        1.2,
    ),
];

#[cfg(test)]
mod tests {
    use super::super::Figures;
    use super::*;

    fn sample(server: &str, workload: &'static str, round: usize, rps: f64, cpu: f64) -> Sample {
        Sample {
            server: server.into(),
            workload,
            round,
            figures: Figures::for_test(rps, rps / 100.0, cpu),
            errors: 0,
        }
    }

    #[test]
    fn the_targets_are_judged_against_nginx_per_round() {
        let mut samples = Vec::new();
        for round in 0..3 {
            let ours = [1.1, 1.0, 0.95][round];
            samples.push(sample("nginx", "a", round, 120.0, 2.0));
            samples.push(sample(
                "ioserve-sendfile",
                "a",
                round,
                120.0 * ours,
                2.0 / ours,
            ));
            samples.push(sample("nginx", "h2", round, 20_000.0, 9.0));
            samples.push(sample("ioserve-sendfile", "h2", round, 22_000.0, 8.0));
        }
        let text = judge(&samples, "ioserve-sendfile", "nginx", &TARGETS);
        for line in [
            "- 8 MiB MB/s >= 1.00x as the median: median 1.00x, worst round 0.95x (rounds: 1.10, 1.00, 0.95), met",
            "- 8 MiB CPU s/GB <= 1.00x as the median: median 1.00x, worst round 1.05x (rounds: 0.91, 1.00, 1.05), met",
            "- 4 KiB HTTP/1.1 req/s >= 1.00x as the median: not measured",
            "- 4 KiB HTTP/2 req/s >= 1.20x as the median: median 1.10x, worst round 1.10x (rounds: 1.10, 1.10, 1.10), not met",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }
}

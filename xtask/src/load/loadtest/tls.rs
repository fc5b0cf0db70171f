//! `cargo xtask loadtest --tls`: ioserve (sendfile) against nginx over HTTPS, with the
//! same certificate, TLS 1.3, TLS in user space for both: 8 MiB and 4 KiB files over
//! HTTP/1.1 (wrk) and 4 KiB over HTTP/2 (h2load); the same rounds, medians and ratios
//! as the plain report, in tls.md and tls.json, with the targets judged.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::report::{medians, render_table};
use super::servers::{select, start, tls_servers};
use super::{measure_rounds, Client, Median, Options, Sample, Workload};
use crate::util::{certificate, ensure_packages};

/// The workloads over HTTPS.
const TLS_WORKLOADS: [Workload; 3] = [
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
        targets(&medians)
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

/// The targets for ioserve-sendfile, each with its figure and whether it is
/// met: on 8 MiB at least nginx's MB/s at no more than its CPU s/GB; on 4 KiB at least
/// its req/s, over HTTP/1.1 and HTTP/2.
fn targets(medians: &[Median]) -> String {
    let of = |server: &str, workload: &str| {
        medians
            .iter()
            .find(|m| m.server == server && m.workload == workload)
    };
    let mut text = String::from("Targets (ioserve-sendfile / nginx):\n\n");
    let mut judge = |what: &str, ratio: Option<f64>, at_least: bool| {
        let verdict = match ratio.filter(|r| r.is_finite()) {
            None => "not measured".to_string(),
            Some(r) => {
                let met = if at_least { r >= 1.0 } else { r <= 1.0 };
                format!("{r:.2}x, {}", if met { "met" } else { "not met" })
            }
        };
        let bound = if at_least { ">=" } else { "<=" };
        let _ = writeln!(text, "- {what} {bound} 1.0x: {verdict}");
    };
    let ratio = |workload: &str, figure: fn(&Median) -> f64| {
        let ioserve = of("ioserve-sendfile", workload)?;
        let nginx = of("nginx", workload)?;
        Some(figure(ioserve) / figure(nginx))
    };
    judge("8 MiB MB/s", ratio("a", |m| m.figures.mb_per_s), true);
    judge(
        "8 MiB CPU s/GB",
        ratio("a", |m| m.figures.cpu_s_per_gb),
        false,
    );
    judge(
        "4 KiB HTTP/1.1 req/s",
        ratio("b", |m| m.figures.requests_per_s),
        true,
    );
    judge(
        "4 KiB HTTP/2 req/s",
        ratio("h2", |m| m.figures.requests_per_s),
        true,
    );
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::super::Figures;
    use super::*;

    fn median(server: &str, workload: &'static str, mb: f64, cpu: f64, rps: f64) -> Median {
        Median {
            server: server.into(),
            workload,
            figures: Figures::for_test(rps, mb, cpu),
            errors: 0,
            ratio_to_peer: None,
            cpu_ratio_to_peer: None,
            round_ratios: Vec::new(),
            cpu_round_ratios: Vec::new(),
        }
    }

    #[test]
    fn the_targets_are_judged_against_nginx() {
        let medians = [
            median("nginx", "a", 1000.0, 2.0, 120.0),
            median("ioserve-sendfile", "a", 1100.0, 2.5, 130.0),
            median("nginx", "b", 40.0, 9.0, 10_000.0),
            median("ioserve-sendfile", "b", 44.0, 8.0, 10_000.0),
            median("nginx", "h2", 40.0, 9.0, 20_000.0),
            median("ioserve-sendfile", "h2", 36.0, 8.0, 18_000.0),
        ];
        let text = targets(&medians);
        for line in [
            "- 8 MiB MB/s >= 1.0x: 1.10x, met",
            "- 8 MiB CPU s/GB <= 1.0x: 1.25x, not met",
            "- 4 KiB HTTP/1.1 req/s >= 1.0x: 1.00x, met",
            "- 4 KiB HTTP/2 req/s >= 1.0x: 0.90x, not met",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        let text = targets(&medians[..2]);
        assert!(
            text.contains("- 4 KiB HTTP/2 req/s >= 1.0x: not measured"),
            "{text}"
        );
    }
}

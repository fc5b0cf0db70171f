//! The report: medians over rounds with ratios to nginx, as a table and a chart.

use std::fmt::Write as _;

use super::servers::ServerSpec;
use super::{Figures, Median, Options, Sample, Workload, WORKLOADS};
use crate::util::stats::median;
use crate::util::svg::{Anchor, Svg, PALETTE};

/// Each server's medians under each of `workloads`, with the ratio to nginx's.
pub(super) fn medians(
    samples: &[Sample],
    specs: &[ServerSpec],
    workloads: &[Workload],
) -> Vec<Median> {
    let mut out = Vec::new();
    for workload in workloads {
        let of = |server: &str, f: fn(&Sample) -> f64| {
            median(
                samples
                    .iter()
                    .filter(|s| s.server == server && s.workload == workload.key)
                    .map(f),
            )
            .unwrap_or(f64::NAN)
        };
        let headline = |server: &str| {
            if workload.bulk {
                of(server, |s| s.figures.mb_per_s)
            } else {
                of(server, |s| s.figures.requests_per_s)
            }
        };
        let nginx = specs
            .iter()
            .any(|s| s.name == "nginx")
            .then(|| headline("nginx"));
        for spec in specs {
            let name = spec.name.as_str();
            out.push(Median {
                server: spec.name.clone(),
                workload: workload.key,
                figures: Figures {
                    requests_per_s: of(name, |s| s.figures.requests_per_s),
                    mb_per_s: of(name, |s| s.figures.mb_per_s),
                    p50_ms: of(name, |s| s.figures.p50_ms),
                    p99_ms: of(name, |s| s.figures.p99_ms),
                    cpu_s_per_gb: of(name, |s| s.figures.cpu_s_per_gb),
                    peak_rss_mib: of(name, |s| s.figures.peak_rss_mib),
                },
                errors: samples
                    .iter()
                    .filter(|s| s.server == name && s.workload == workload.key)
                    .map(|s| s.errors)
                    .sum(),
                ratio_to_nginx: nginx.map(|n| headline(name) / n),
            });
        }
    }
    out
}

/// The medians as a Markdown table per one of `workloads`.
pub(super) fn render_table(
    medians: &[Median],
    options: &Options,
    workloads: &[Workload],
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Medians of {} round(s) of {} s per server and workload; wrk -t2 (h2load -t2 for HTTP/2) on the same {} CPUs; ratio = headline figure / nginx's.\n",
        options.rounds,
        options.duration,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if let Some(bytes) = options.send_buffer {
        let _ = writeln!(
            text,
            "Every server's connections have a send buffer of {bytes} bytes (SO_SNDBUF: ioserve --send-buffer, nginx `listen ... sndbuf=`; the kernel doubles it), not the kernel's autotuning.\n"
        );
    }
    for workload in workloads {
        let _ = writeln!(text, "({}) {}\n", workload.key, workload.title);
        let _ = writeln!(
            text,
            "| server | req/s | MB/s | p50 ms | p99 ms | CPU s/GB | peak RSS MiB | errors | {} vs nginx |",
            if workload.bulk { "MB/s" } else { "req/s" }
        );
        let _ = writeln!(text, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for m in medians.iter().filter(|m| m.workload == workload.key) {
            let _ = writeln!(
                text,
                "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.3} | {:.1} | {} | {} |",
                m.server,
                m.figures.requests_per_s,
                m.figures.mb_per_s,
                m.figures.p50_ms,
                m.figures.p99_ms,
                m.figures.cpu_s_per_gb,
                m.figures.peak_rss_mib,
                m.errors,
                m.ratio_to_nginx
                    .map_or("-".to_string(), |r| format!("{r:.2}x")),
            );
        }
        text.push('\n');
    }
    text
}

/// A grouped bar chart: per workload, each server's headline figure relative to nginx.
pub(super) fn render_chart(medians: &[Median], specs: &[ServerSpec]) -> String {
    let (bar, gap, height, top, left) = (18.0, 30.0, 260.0, 40.0, 50.0);
    let group = bar * specs.len() as f64 + gap;
    let plot_right = left + group * WORKLOADS.len() as f64;
    let max = medians
        .iter()
        .filter_map(|m| m.ratio_to_nginx)
        .filter(|r| r.is_finite())
        .fold(1.5f64, f64::max);
    let mut svg = Svg::new(
        plot_right + 200.0,
        top + height + 60.0,
        "Load test: headline figure relative to nginx (1.0 = nginx)",
    );
    let y_of = |ratio: f64| top + height - ratio / max * height;
    svg.line((left, y_of(1.0)), (plot_right, y_of(1.0)), "#888", true);
    svg.text(5.0, y_of(1.0), Anchor::Start, "1.0x");
    for (w, workload) in WORKLOADS.iter().enumerate() {
        let x0 = left + w as f64 * group;
        for (i, spec) in specs.iter().enumerate() {
            let ratio = medians
                .iter()
                .find(|m| m.workload == workload.key && m.server == spec.name)
                .and_then(|m| m.ratio_to_nginx)
                .filter(|r| r.is_finite())
                .unwrap_or(0.0);
            let y = y_of(ratio);
            svg.rect(
                x0 + i as f64 * bar,
                y,
                bar - 2.0,
                top + height - y,
                PALETTE[i % PALETTE.len()],
                &format!("{} ({}): {ratio:.2}x", spec.name, workload.key),
            );
        }
        let unit = if workload.bulk { "MB/s" } else { "req/s" };
        svg.text(
            x0,
            top + height + 16.0,
            Anchor::Start,
            &format!("({}) {unit}", workload.key),
        );
    }
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    svg.legend(plot_right + 10.0, top, &names);
    svg.finish()
}

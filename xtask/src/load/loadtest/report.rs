//! The report: medians over rounds with ratios to the peer (nginx; Caddy for HTTP/3),
//! as a table and a chart.

use std::fmt::Write as _;

use super::servers::ServerSpec;
use super::{Figures, Median, Options, Sample, Workload, WORKLOADS};
use crate::util::stats::median;
use crate::util::svg::{Anchor, Svg, PALETTE};

/// Each server's medians under each of `workloads`, with the ratio to the `peer`
/// server's.
pub(super) fn medians(
    samples: &[Sample],
    specs: &[ServerSpec],
    workloads: &[Workload],
    peer: &str,
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
        let headline_of: fn(&Sample) -> f64 = match workload.bulk {
            true => |sample| sample.figures.mb_per_s,
            false => |sample| sample.figures.requests_per_s,
        };
        let headline = |server: &str| of(server, headline_of);
        let has_peer = specs.iter().any(|s| s.name == peer);
        let peer_headline = has_peer.then(|| headline(peer));
        let peer_cpu = has_peer.then(|| of(peer, |s| s.figures.cpu_s_per_gb));
        let round_ratios = |server: &str, f: fn(&Sample) -> f64| {
            round_ratios(samples, server, peer, workload.key, f)
        };
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
                ratio_to_peer: peer_headline.map(|n| headline(name) / n),
                cpu_ratio_to_peer: peer_cpu.map(|n| of(name, |s| s.figures.cpu_s_per_gb) / n),
                round_ratios: round_ratios(name, headline_of),
                cpu_round_ratios: round_ratios(name, |s| s.figures.cpu_s_per_gb),
            });
        }
    }
    out
}

/// Per round, `figure` of `server`'s sample under `workload` over `figure` of `peer`'s
/// in the same round (the servers run one after the other within a round), in the
/// order of the rounds; rounds that either server lacks are left out.
pub(super) fn round_ratios(
    samples: &[Sample],
    server: &str,
    peer: &str,
    workload: &str,
    figure: fn(&Sample) -> f64,
) -> Vec<f64> {
    let mut ratios: Vec<(usize, f64)> = samples
        .iter()
        .filter(|s| s.server == server && s.workload == workload)
        .filter_map(|ours| {
            samples
                .iter()
                .find(|n| n.server == peer && n.workload == workload && n.round == ours.round)
                .map(|theirs| (ours.round, figure(ours) / figure(theirs)))
        })
        .collect();
    ratios.sort_by_key(|&(round, _)| round);
    ratios.into_iter().map(|(_, ratio)| ratio).collect()
}

/// A target of ours against a peer, judged on the per-round ratios: an operator sizing
/// a machine reads the worst round, so the median of the rounds' ratios must meet
/// `median`, and where `every_round` is given, each round must meet it.
pub(super) struct Target {
    /// What is measured, as the report says it ("8 MiB CPU s/GB").
    pub what: &'static str,
    /// The workload's key.
    pub workload: &'static str,
    /// The figure whose ratio is judged.
    pub figure: fn(&Sample) -> f64,
    /// Whether ours must be at least (throughput) or at most (CPU, latency) the bound.
    pub at_least: bool,
    /// The bound on the median of the per-round ratios.
    pub median: f64,
    /// The bound on every round's ratio, if any.
    pub every_round: Option<f64>,
}

impl Target {
    /// A bound on the per-round median alone.
    pub(super) const fn median(
        what: &'static str,
        workload: &'static str,
        figure: fn(&Sample) -> f64,
        at_least: bool,
        median: f64,
    ) -> Target {
        Target {
            what,
            workload,
            figure,
            at_least,
            median,
            every_round: None,
        }
    }

    /// The same target, with a bound that every round must meet as well.
    pub(super) const fn every_round(self, bound: f64) -> Target {
        Target {
            every_round: Some(bound),
            ..self
        }
    }
}

/// The headline figures of the targets.
pub(super) mod figure {
    use super::Sample;

    /// Throughput in MB/s.
    pub(in super::super) fn mb_per_s(sample: &Sample) -> f64 {
        sample.figures.mb_per_s
    }

    /// Requests per second.
    pub(in super::super) fn requests_per_s(sample: &Sample) -> f64 {
        sample.figures.requests_per_s
    }

    /// The server's CPU seconds per GB sent.
    pub(in super::super) fn cpu_s_per_gb(sample: &Sample) -> f64 {
        sample.figures.cpu_s_per_gb
    }
}

/// Each of `targets` for `ours` against `peer`, judged on the per-round ratios: a
/// Markdown list with the median, the worst round, every round, and met or not.
pub(super) fn judge(samples: &[Sample], ours: &str, peer: &str, targets: &[Target]) -> String {
    let mut text = format!("Targets ({ours} / {peer}, judged on the per-round ratios):\n\n");
    for target in targets {
        let ratios: Vec<f64> = round_ratios(samples, ours, peer, target.workload, target.figure)
            .into_iter()
            .filter(|r| r.is_finite())
            .collect();
        let sign = if target.at_least { ">=" } else { "<=" };
        let meets = |ratio: f64, bound: f64| match target.at_least {
            true => ratio >= bound,
            false => ratio <= bound,
        };
        let mut bounds = format!("{sign} {:.2}x as the median", target.median);
        if let Some(bound) = target.every_round {
            let _ = write!(bounds, " and {sign} {bound:.2}x in every round");
        }
        let verdict = match median(ratios.iter().copied()) {
            None => "not measured".to_string(),
            Some(m) => {
                let worst = match target.at_least {
                    true => ratios.iter().copied().fold(f64::INFINITY, f64::min),
                    false => ratios.iter().copied().fold(0.0, f64::max),
                };
                let met = meets(m, target.median)
                    && target.every_round.is_none_or(|bound| meets(worst, bound));
                let rounds: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
                format!(
                    "median {m:.2}x, worst round {worst:.2}x (rounds: {}), {}",
                    rounds.join(", "),
                    if met { "met" } else { "not met" }
                )
            }
        };
        let _ = writeln!(text, "- {} {bounds}: {verdict}", target.what);
    }
    text.push('\n');
    text
}

/// The medians as a Markdown table per one of `workloads`, with the ratios to `peer`;
/// `clients` says what generated the load.
pub(super) fn render_table(
    medians: &[Median],
    options: &Options,
    workloads: &[Workload],
    peer: &str,
    clients: &str,
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Medians of {} round(s) of {} s per server and workload; {clients} on the same {} CPUs; ratio = headline figure / {peer}'s; CPU vs {peer} = CPU s/GB / {peer}'s; per round: the same ratio in each round, the servers measured one after the other.\n",
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
            "| server | req/s | MB/s | p50 ms | p99 ms | CPU s/GB | peak RSS MiB | errors | {unit} vs {peer} | per round | CPU vs {peer} | per round |",
            unit = if workload.bulk { "MB/s" } else { "req/s" }
        );
        let _ = writeln!(
            text,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
        let rounds = |ratios: &[f64]| match ratios {
            [] => "-".to_string(),
            _ => ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        for m in medians.iter().filter(|m| m.workload == workload.key) {
            let _ = writeln!(
                text,
                "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.3} | {:.1} | {} | {} | {} | {} | {} |",
                m.server,
                m.figures.requests_per_s,
                m.figures.mb_per_s,
                m.figures.p50_ms,
                m.figures.p99_ms,
                m.figures.cpu_s_per_gb,
                m.figures.peak_rss_mib,
                m.errors,
                ratio(m.ratio_to_peer),
                rounds(&m.round_ratios),
                ratio(m.cpu_ratio_to_peer),
                rounds(&m.cpu_round_ratios),
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
        .filter_map(|m| m.ratio_to_peer)
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
                .and_then(|m| m.ratio_to_peer)
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

#[cfg(test)]
mod tests {
    use super::super::servers::{select, servers};
    use super::*;

    fn sample(server: &str, workload: &'static str, round: usize, rps: f64, cpu: f64) -> Sample {
        Sample {
            server: server.into(),
            workload,
            round,
            figures: Figures::for_test(rps, rps / 256.0, cpu),
            errors: 0,
        }
    }

    #[test]
    fn the_table_gives_each_rounds_ratio_and_the_cpu_ratio() {
        let specs = select(servers(), &["nginx".into(), "ioserve-sendfile".into()]).unwrap();
        let workloads = &WORKLOADS[1..2];
        // nginx's rounds vary by a third, so the ratio of the medians (1.21x) is not
        // the median of the rounds' ratios (1.38x).
        let samples = [
            sample("nginx", "b", 0, 46291.0, 6.0),
            sample("ioserve-sendfile", "b", 0, 51599.0, 4.0),
            sample("ioserve-sendfile", "b", 1, 52350.0, 5.0),
            sample("nginx", "b", 1, 34721.0, 8.0),
            sample("ioserve-sendfile", "b", 2, 59918.0, 4.5),
            sample("nginx", "b", 2, 43372.0, 6.5),
        ];
        let medians = medians(&samples, &specs, workloads, "nginx");
        let options = Options {
            duration: 10,
            rounds: 3,
            connections: 5000,
            ..Options::default()
        };
        let table = render_table(
            &medians,
            &options,
            workloads,
            "nginx",
            super::super::WRK_CLIENTS,
        );
        assert!(
            table.contains("| errors | req/s vs nginx | per round | CPU vs nginx | per round |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 | 1.21x | 1.11, 1.51, 1.38 | 0.69x | 0.67, 0.62, 0.69 |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 | 1.00x | 1.00, 1.00, 1.00 | 1.00x |"),
            "{table}"
        );
    }

    #[test]
    fn a_target_with_a_bound_on_every_round_fails_on_its_worst_round() {
        // CPU s/GB ratios per round: 0.75, 0.78, 0.93, 0.70, 0.79 (median 0.78).
        let mut samples = Vec::new();
        for (round, ours) in [7.5, 7.8, 9.3, 7.0, 7.9].into_iter().enumerate() {
            samples.push(sample("nginx", "a", round, 700.0, 10.0));
            samples.push(sample("ioserve-sendfile", "a", round, 750.0, ours));
        }
        let target = |every_round| Target {
            every_round,
            ..Target::median("8 MiB CPU s/GB", "a", figure::cpu_s_per_gb, false, 0.8)
        };
        let text = judge(&samples, "ioserve-sendfile", "nginx", &[target(None)]);
        assert!(
            text.contains("- 8 MiB CPU s/GB <= 0.80x as the median: median 0.78x, worst round 0.93x (rounds: 0.75, 0.78, 0.93, 0.70, 0.79), met"),
            "{text}"
        );
        let text = judge(&samples, "ioserve-sendfile", "nginx", &[target(Some(0.9))]);
        assert!(
            text.contains("- 8 MiB CPU s/GB <= 0.80x as the median and <= 0.90x in every round: median 0.78x, worst round 0.93x"),
            "{text}"
        );
        assert!(text.contains("0.79), not met"), "{text}");
        let text = judge(&samples, "ioserve-sendfile", "nginx", &[target(Some(0.95))]);
        assert!(text.contains("0.79), met"), "{text}");
    }
}

//! The c100k report: per server, the memory per connection of each kind and how the
//! connections went, the full mix's polite latencies, the targets judged on
//! them, and what makes the CI smoke fail. Pure functions of the figures.

use std::fmt::Write as _;

use serde::Serialize;

use super::client::Counts;
use super::host::HostLimits;
use super::mix::{addresses_for, Kind, Mix};
use super::polite::{Polite, POLITE_EVERY};

/// Bytes per idle HTTP/1.1 connection that ioserve may cost (nginx: about 530).
const IDLE_HTTP1_MOST_BYTES: f64 = 512.0;

/// Bytes per downloading connection that ioserve may cost.
const DOWNLOADING_MOST_BYTES: f64 = 1536.0;

/// The polite client's p99 allowed with every connection held, in ms.
const POLITE_P99_MOST_MS: f64 = 2.0;

/// How the memory per connection is measured, as the report says it.
const MEMORY_METHOD: &str = "Memory per connection: growth of the server's settled RssAnon \
(all its processes) over the connections of one kind, per connection still held when it is \
read, each kind on a fresh start of the server after one warm-up connection of that kind; \
idle TLS with as many connections as HTTP/2. ";

/// The memory per connection of one kind, on a fresh start of one server.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KindMemory {
    /// The kind.
    pub kind: Kind,
    /// How its connections went.
    pub counts: Counts,
    /// Connections still held when the memory was read.
    pub held: usize,
    /// Growth of the server's settled RssAnon over the connections, per connection
    /// still held when it was read (NaN when none was).
    pub bytes_per_connection: f64,
}

/// How one kind's connections went in the full mix.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KindCounts {
    /// The kind.
    pub kind: Kind,
    /// How its connections went.
    #[serde(flatten)]
    pub counts: Counts,
}

/// The full mix on one fresh start of a server (its plain and HTTPS instances).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MixRun {
    /// Per kind, how the connections went.
    pub counts: Vec<KindCounts>,
    /// The polite client during the hold.
    pub polite: Polite,
    /// The servers' settled RssAnon with every connection held, in KiB.
    pub rss_anon_kib: u64,
}

/// One server's figures.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ServerFigures {
    /// Its name.
    pub server: String,
    /// Per kind, the memory per connection (empty in the smoke, which measures none).
    pub memory: Vec<KindMemory>,
    /// The full mix, once run.
    pub mix: Option<MixRun>,
}

impl ServerFigures {
    /// Bytes per connection of `kind`, if measured.
    fn bytes(&self, kind: Kind) -> Option<f64> {
        self.memory
            .iter()
            .find(|m| m.kind == kind)
            .map(|m| m.bytes_per_connection)
            .filter(|b| b.is_finite())
    }

    /// Every count of the server: each memory phase and each kind of the mix.
    fn all_counts(&self) -> impl Iterator<Item = (&'static str, Kind, &Counts)> {
        let memory = self.memory.iter().map(|m| ("memory", m.kind, &m.counts));
        let mix = self
            .mix
            .iter()
            .flat_map(|mix| mix.counts.iter().map(|k| ("full mix", k.kind, &k.counts)));
        memory.chain(mix)
    }
}

/// A target and whether it was met.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Verdict {
    /// What is asked.
    pub target: String,
    /// What was measured.
    pub measured: String,
    /// Met or not; `None` when not measured.
    pub met: Option<bool>,
}

/// Everything the c100k run writes.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    /// The command line that made it.
    pub command: String,
    /// The mix of connections.
    pub mix: Mix,
    /// Seconds the full mix was held.
    pub hold_s: f64,
    /// The path the slow downloads asked for.
    pub download: String,
    /// Connections the client had connecting and waiting for their answer at once.
    pub at_once: usize,
    /// CPUs of the host.
    pub cpus: usize,
    /// The kernel's release.
    pub kernel: String,
    /// The host's limits.
    pub host: HostLimits,
    /// Per server, the figures.
    pub servers: Vec<ServerFigures>,
    /// The targets, judged for ioserve.
    pub targets: Vec<Verdict>,
}

/// The targets for `ours` (bytes per connection, the polite p99, every
/// connection held), the idle TLS one against `peer`'s; `held` is the full mix's size.
pub(crate) fn judge(
    servers: &[ServerFigures],
    ours: &str,
    peer: &str,
    held: usize,
) -> Vec<Verdict> {
    let ours = servers.iter().find(|s| s.server == ours);
    let peer = servers.iter().find(|s| s.server == peer);
    let verdict = |target: String, measured: Option<(String, bool)>| match measured {
        Some((measured, met)) => Verdict {
            target,
            measured,
            met: Some(met),
        },
        None => Verdict {
            target,
            measured: "not measured".into(),
            met: None,
        },
    };
    let at_most = |kind: Kind, most: f64| {
        verdict(
            format!("{} <= {most:.0} B per connection", kind.title()),
            ours.and_then(|s| s.bytes(kind))
                .map(|b| (format!("{b:.0} B"), b <= most)),
        )
    };
    let idle_tls = ours
        .and_then(|s| s.bytes(Kind::IdleTls))
        .zip(peer.and_then(|s| s.bytes(Kind::IdleTls)))
        .map(|(o, p)| (format!("{o:.0} B against {p:.0} B"), o <= p));
    let polite = ours.and_then(|s| s.mix.as_ref()).map(|mix| {
        let p = &mix.polite;
        (
            format!(
                "p99 {:.2} ms (p50 {:.2} ms; {} requests, {} failed)",
                p.p99_ms, p.p50_ms, p.requests, p.failed
            ),
            p.requests > 0 && p.p99_ms <= POLITE_P99_MOST_MS,
        )
    });
    let held_all = ours.filter(|s| s.mix.is_some()).map(|s| {
        let mut total = Counts::default();
        for (_, _, c) in s.all_counts() {
            total.connections += c.connections;
            total.answered += c.answered;
            total.refused += c.refused;
            total.failed += c.failed;
            total.dropped += c.dropped;
        }
        (
            format!(
                "{} answered of {}: {} refused, {} failed, {} dropped while held",
                total.answered, total.connections, total.refused, total.failed, total.dropped
            ),
            total.all_held(),
        )
    });
    vec![
        at_most(Kind::IdleHttp1, IDLE_HTTP1_MOST_BYTES),
        verdict(
            format!(
                "{} <= {}'s per connection",
                Kind::IdleTls.title(),
                peer.map_or("the peer", |p| p.server.as_str())
            ),
            idle_tls,
        ),
        at_most(Kind::Downloading, DOWNLOADING_MOST_BYTES),
        verdict(
            format!("polite p99 <= {POLITE_P99_MOST_MS:.0} ms with all {held} held"),
            polite,
        ),
        verdict(
            "every connection accepted, answered and held (none refused, failed or dropped)".into(),
            held_all,
        ),
    ]
}

/// What makes the smoke fail: per server, each kind whose connections were not all
/// answered and held, and polite requests that failed. Empty when all went well.
pub(crate) fn smoke_failures(servers: &[ServerFigures]) -> Vec<String> {
    let mut failures = Vec::new();
    for server in servers {
        if server.mix.is_none() {
            failures.push(format!("{}: the full mix did not run", server.server));
        }
        for (phase, kind, c) in server.all_counts() {
            if !c.all_held() {
                failures.push(format!(
                    "{} ({phase}, {}): {} answered of {}: {} refused, {} failed, {} dropped while held",
                    server.server,
                    kind.title(),
                    c.answered,
                    c.connections,
                    c.refused,
                    c.failed,
                    c.dropped
                ));
            }
        }
        if let Some(mix) = server.mix.as_ref().filter(|m| m.polite.failed > 0) {
            failures.push(format!(
                "{}: {} of the polite client's requests failed",
                server.server, mix.polite.failed
            ));
        }
    }
    failures
}

/// The report as Markdown: the command line first, then the scenario, a table per
/// server (with ratios to `peer`), and the targets.
pub(crate) fn render(report: &Report, peer: &str, ours: &str) -> String {
    let mut md = format!("`{}`\n\n", report.command);
    let mix = &report.mix;
    let host = &report.host;
    let _ = writeln!(
        md,
        "c100k: {} connections held at once: {} idle HTTP/1.1 keep-alive (after one GET of \
         4 KiB), {} HTTP/2 over TLS (one GET of 4 KiB, the other streams unused), {} slow \
         downloads of {} (16 KiB receive buffer, read at 64 KiB/s), and a polite client \
         asking for 4 KiB every {} ms during a hold of {:.0} s. From {} source address(es) \
         in 127.0.0.0/8 (up to {} connections each; ephemeral ports {}-{}), {} \
         connecting at a time; open-file limit {} ({} wanted); {} CPUs, kernel {}.",
        mix.total(),
        mix.idle_http1,
        mix.http2,
        mix.downloading,
        report.download,
        POLITE_EVERY.as_millis(),
        report.hold_s,
        addresses_for(mix.total(), host.per_address),
        host.per_address,
        host.ephemeral_ports.0,
        host.ephemeral_ports.1,
        report.at_once,
        host.descriptors,
        host.descriptors_wanted,
        report.cpus,
        report.kernel,
    );
    if host.descriptors < host.descriptors_wanted {
        let _ = writeln!(
            md,
            "\n**The open-file limit ({}) is below the {} wanted**, and this process could \
             not raise it (raising a hard limit needs CAP_SYS_RESOURCE): the client and the \
             servers, which inherit it, cannot hold every connection, and refusals or \
             failures past it are the host's, not the servers'.",
            host.descriptors, host.descriptors_wanted
        );
    }
    if !host.raised.is_empty() {
        let _ = writeln!(md, "\nRaised for the run: {}.", host.raised.join(", "));
    }
    let memory_measured = report.servers.iter().any(|s| !s.memory.is_empty());
    let _ = writeln!(
        md,
        "\n{}Refused: 503, or reset or closed before the answer; dropped: closed by the \
         server while held; opened: the TCP connect succeeded.\n",
        if memory_measured { MEMORY_METHOD } else { "" }
    );
    let peer_figures = report.servers.iter().find(|s| s.server == peer);
    for server in &report.servers {
        let _ = writeln!(md, "### {}\n", server.server);
        let _ = writeln!(
            md,
            "| phase | kind | connections | bytes per connection | vs {peer} | opened | answered | refused | failed | dropped |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let row = |md: &mut String, phase: &str, kind: Kind, c: &Counts, bytes: Option<f64>| {
            let ratio = bytes
                .zip(peer_figures.and_then(|p| p.bytes(kind)))
                .filter(|(_, p)| *p > 0.0)
                .map_or("-".to_string(), |(o, p)| format!("{:.2}x", o / p));
            let _ = writeln!(
                md,
                "| {phase} | {} | {} | {} | {ratio} | {} | {} | {} | {} | {} |",
                kind.title(),
                c.connections,
                bytes.map_or("-".to_string(), |b| format!("{b:.0}")),
                c.opened,
                c.answered,
                c.refused,
                c.failed,
                c.dropped
            );
        };
        for m in &server.memory {
            row(&mut md, "memory", m.kind, &m.counts, server.bytes(m.kind));
        }
        if let Some(run) = &server.mix {
            for k in &run.counts {
                row(&mut md, "full mix", k.kind, &k.counts, None);
            }
            let p = &run.polite;
            let downloads = run
                .counts
                .iter()
                .find(|k| k.kind == Kind::Downloading)
                .and_then(|k| k.counts.kib_per_s())
                .map_or(String::new(), |rate| {
                    format!("; slow downloads read {rate:.1} KiB/s each")
                });
            let _ = writeln!(
                md,
                "\nFull mix: polite client p50 {:.2} ms, p99 {:.2} ms ({} requests, {} \
                 failed){downloads}; RssAnon with all held {:.1} MiB (plain and HTTPS \
                 servers together).",
                p.p50_ms,
                p.p99_ms,
                p.requests,
                p.failed,
                run.rss_anon_kib as f64 / 1024.0
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "Targets ({ours}, issue #56):\n");
    for v in &report.targets {
        let verdict = match v.met {
            Some(true) => format!("{}, met", v.measured),
            Some(false) => format!("{}, not met", v.measured),
            None => v.measured.clone(),
        };
        let _ = writeln!(md, "- {}: {verdict}", v.target);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(connections: usize, answered: usize, dropped: usize) -> Counts {
        Counts {
            connections,
            opened: connections,
            answered,
            refused: connections - answered,
            dropped,
            ..Counts::default()
        }
    }

    fn server(name: &str, bytes: [f64; 4], p99_ms: f64, mix_answered: usize) -> ServerFigures {
        let memory = Kind::ALL
            .iter()
            .zip(bytes)
            .map(|(&kind, bytes_per_connection)| KindMemory {
                kind,
                counts: counts(100, 100, 0),
                held: 100,
                bytes_per_connection,
            })
            .collect();
        ServerFigures {
            server: name.into(),
            memory,
            mix: Some(MixRun {
                counts: vec![
                    KindCounts {
                        kind: Kind::IdleHttp1,
                        counts: counts(90, mix_answered, 0),
                    },
                    KindCounts {
                        kind: Kind::Downloading,
                        counts: Counts {
                            downloaded_bytes: 640 << 10,
                            held_s: 10.0,
                            ..counts(10, 10, 0)
                        },
                    },
                ],
                polite: Polite {
                    requests: 1000,
                    failed: 0,
                    p50_ms: 0.25,
                    p99_ms,
                },
                rss_anon_kib: 2048,
            }),
        }
    }

    fn report(servers: Vec<ServerFigures>) -> Report {
        let targets = judge(&servers, "ioserve-sendfile", "nginx", 100);
        Report {
            command: "cargo xtask loadtest --c100k --connections 100".into(),
            mix: Mix::of(100),
            hold_s: 20.0,
            at_once: 256,
            download: "/1g.bin".into(),
            cpus: 2,
            kernel: "6.18.0".into(),
            host: HostLimits {
                descriptors: 1 << 20,
                descriptors_wanted: 7_124,
                ephemeral_ports: (32768, 60999),
                per_address: 9_410,
                raised: vec!["net.core.somaxconn: 4096 -> 65535".into()],
            },
            servers,
            targets,
        }
    }

    #[test]
    fn the_targets_are_judged_on_ours_and_the_idle_tls_one_against_nginx() {
        let servers = vec![
            server("nginx", [540.0, 2100.0, 9000.0, 1300.0], 0.9, 90),
            server("ioserve-sendfile", [480.0, 2300.0, 7000.0, 1200.0], 2.5, 90),
        ];
        let verdicts = judge(&servers, "ioserve-sendfile", "nginx", 100);
        let said: Vec<(String, Option<bool>)> = verdicts
            .iter()
            .map(|v| (format!("{}: {}", v.target, v.measured), v.met))
            .collect();
        assert_eq!(
            said,
            [
                ("idle HTTP/1.1 <= 512 B per connection: 480 B".into(), Some(true)),
                ("idle TLS (HTTP/1.1) <= nginx's per connection: 2300 B against 2100 B".into(), Some(false)),
                ("slow download (64 KiB/s) <= 1536 B per connection: 1200 B".into(), Some(true)),
                ("polite p99 <= 2 ms with all 100 held: p99 2.50 ms (p50 0.25 ms; 1000 requests, 0 failed)".into(), Some(false)),
                ("every connection accepted, answered and held (none refused, failed or dropped): 500 answered of 500: 0 refused, 0 failed, 0 dropped while held".into(), Some(true)),
            ]
        );
        // Without nginx, the idle TLS target is not judged.
        let alone = judge(&servers[1..], "ioserve-sendfile", "nginx", 100);
        assert_eq!(alone[1].met, None);
        assert_eq!(alone[1].measured, "not measured");
        // A refused connection fails the last one.
        let refused = vec![server("ioserve-sendfile", [1.0; 4], 1.0, 89)];
        let verdicts = judge(&refused, "ioserve-sendfile", "nginx", 100);
        assert_eq!(verdicts[4].met, Some(false));
        assert!(verdicts[4].measured.contains("1 refused"), "{verdicts:?}");
    }

    #[test]
    fn the_smoke_fails_on_any_connection_not_answered_or_dropped() {
        let good = [server("nginx", [1.0; 4], 0.5, 90)];
        assert_eq!(smoke_failures(&good), Vec::<String>::new());
        let mut bad = server("ioserve-sendfile", [1.0; 4], 0.5, 88);
        if let Some(mix) = bad.mix.as_mut() {
            mix.counts[1].counts.dropped = 1;
            mix.polite.failed = 3;
        }
        let failures = smoke_failures(&[bad]);
        assert_eq!(
            failures,
            [
                "ioserve-sendfile (full mix, idle HTTP/1.1): 88 answered of 90: 2 refused, 0 failed, 0 dropped while held",
                "ioserve-sendfile (full mix, slow download (64 KiB/s)): 10 answered of 10: 0 refused, 0 failed, 1 dropped while held",
                "ioserve-sendfile: 3 of the polite client's requests failed",
            ]
        );
        let not_run = ServerFigures {
            mix: None,
            ..server("nginx", [1.0; 4], 0.5, 90)
        };
        assert!(smoke_failures(&[not_run])[0].contains("the full mix did not run"));
    }

    #[test]
    fn the_report_starts_with_its_command_and_gives_a_table_per_server() {
        let servers = vec![
            server("nginx", [540.0, 2100.0, 9000.0, 1300.0], 0.9, 90),
            server("ioserve-sendfile", [480.0, 2300.0, 7000.0, 1200.0], 1.5, 90),
        ];
        let md = render(&report(servers), "nginx", "ioserve-sendfile");
        assert!(
            md.starts_with("`cargo xtask loadtest --c100k --connections 100`\n\n"),
            "{md}"
        );
        for line in [
            "c100k: 100 connections held at once: 90 idle HTTP/1.1 keep-alive",
            "From 1 source address(es) in 127.0.0.0/8 (up to 9410 connections each; ephemeral ports 32768-60999), 256 connecting at a time; open-file limit 1048576 (7124 wanted)",
            "Raised for the run: net.core.somaxconn: 4096 -> 65535.",
            "### ioserve-sendfile\n",
            "| memory | idle HTTP/1.1 | 100 | 480 | 0.89x | 100 | 100 | 0 | 0 | 0 |",
            "| memory | slow download (64 KiB/s) | 100 | 1200 | 0.92x |",
            "| full mix | idle HTTP/1.1 | 90 | - | - | 90 | 90 | 0 | 0 | 0 |",
            "Full mix: polite client p50 0.25 ms, p99 1.50 ms (1000 requests, 0 failed); slow downloads read 64.0 KiB/s each; RssAnon with all held 2.0 MiB",
            "- idle HTTP/1.1 <= 512 B per connection: 480 B, met",
            "- polite p99 <= 2 ms with all 100 held: p99 1.50 ms (p50 0.25 ms; 1000 requests, 0 failed), met",
        ] {
            assert!(md.contains(line), "{line}\n---\n{md}");
        }
        assert!(!md.contains("below the"), "{md}");
        assert!(md.contains("Memory per connection: growth"), "{md}");
        // The smoke measures no memory: no method, and its targets not measured.
        let smoke = report(vec![ServerFigures {
            memory: Vec::new(),
            ..server("ioserve-sendfile", [1.0; 4], 0.5, 90)
        }]);
        let md = render(&smoke, "nginx", "ioserve-sendfile");
        assert!(!md.contains("Memory per connection"), "{md}");
        assert!(
            md.contains("- idle HTTP/1.1 <= 512 B per connection: not measured\n"),
            "{md}"
        );
        let mut short = report(vec![server("nginx", [1.0; 4], 0.5, 90)]);
        short.host.descriptors = 20_000;
        short.host.descriptors_wanted = 307_168;
        let md = render(&short, "nginx", "ioserve-sendfile");
        assert!(
            md.contains("**The open-file limit (20000) is below the 307168 wanted**"),
            "{md}"
        );
    }
}

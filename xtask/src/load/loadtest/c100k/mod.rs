//! `cargo xtask loadtest --c100k`: ioserve and nginx holding 100,000 connections from
//! this host (issue #56): 90 % idle HTTP/1.1 keep-alive, 9 % HTTP/2 over TLS, 1 % slow
//! downloads, and a polite client timing 4 KiB requests while they are held.
//!
//! For each kind (and idle TLS), each server is started fresh and the growth of its
//! settled RssAnon over that many connections of the kind gives the bytes per
//! connection, as [`memory`](super::memory) measures them; then the full mix is opened
//! on a fresh start of each server and held while the polite client runs. Every
//! connection is counted: opened, answered, refused, failed, dropped while held. The
//! report is c100k.md and c100k.json, with the targets judged; [`smoke`] is
//! CI's short run, which fails on any connection not answered and held.
//!
//! By job: [`mix`] says what is opened and from which source addresses, [`host`]
//! raises the kernel's and the process's limits, [`client`] opens and holds the
//! connections (each one a task of [`connection`], speaking [`http1`] or HTTP/2, its
//! end an [`outcome`]) and runs the [`polite`] client, [`report`] renders and judges.

mod client;
mod connection;
mod host;
mod http1;
mod mix;
mod outcome;
mod polite;
mod report;

use std::fs;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::memory::{growth_per_connection, settled_anon_kib};
use super::servers::{c100k_servers, select, start_built, Running, ServerSpec};
use crate::util::certificate;
pub(super) use client::CONNECTING_AT_ONCE;
use client::{Batch, Client};
use mix::{Kind, Mix};
use report::{KindCounts, KindMemory, MixRun, Report, ServerFigures};

/// The server whose targets the report judges.
const OURS: &str = "ioserve-sendfile";

/// The server it is compared with.
const PEER: &str = "nginx";

/// The smoke's connections in all: a few thousand, so that each kind has dozens.
const SMOKE_CONNECTIONS: usize = 3_000;

/// The smoke's hold.
const SMOKE_HOLD: Duration = Duration::from_secs(3);

/// What one c100k run does.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    /// Connections of the full mix.
    pub connections: usize,
    /// How long the full mix is held while the polite client runs.
    pub hold: Duration,
    /// Only these servers (as `--only` picks them).
    pub only: Vec<String>,
    /// The command line that asked for it, as the report says it.
    pub command: String,
    /// Connections connecting and waiting for their answer at once.
    pub at_once: usize,
    /// Whether each kind's memory per connection is measured before the full mix.
    pub memory: bool,
    /// Whether the full mix runs (after the memory, if that is measured).
    pub full_mix: bool,
}

/// Runs the scenario against the servers (`ioserve`, a release build, and the files
/// in `www` are ready) and writes `out`/c100k.md and `out`/c100k.json.
pub(crate) fn run(scenario: &Scenario, ioserve: &Path, www: &Path, out: &Path) -> Result<()> {
    let mix = Mix::of(scenario.connections);
    let specs = select(c100k_servers(mix.total()), &scenario.only)?;
    let measured = Measured {
        command: scenario.command.clone(),
        at_once: scenario.at_once,
        mix,
        hold: scenario.hold,
        download: "/1g.bin",
        memory: scenario.memory,
        full_mix: scenario.full_mix,
    };
    let (report, _) = measure(&measured, &specs, ioserve, www, out)?;
    let md = report::render(&report, PEER, OURS);
    println!("{md}");
    write_report(&report, &md, out)
}

/// Checks `only` as [`run`] will pick its servers: an error that names them when it
/// picks none (before a guest spends minutes booting to find out).
pub(crate) fn check_only(only: &[String]) -> Result<()> {
    select(c100k_servers(SMOKE_CONNECTIONS), only).map(drop)
}

/// Writes `report` as `md` to `out`/c100k.md and as JSON to `out`/c100k.json.
fn write_report(report: &Report, md: &str, out: &Path) -> Result<()> {
    let (md_path, json_path) = (out.join("c100k.md"), out.join("c100k.json"));
    fs::write(&md_path, md).with_context(|| format!("cannot write {}", md_path.display()))?;
    let json = serde_json::to_string_pretty(report).context("the report as JSON")?;
    fs::write(&json_path, json).with_context(|| format!("cannot write {}", json_path.display()))?;
    eprintln!(
        "xtask loadtest --c100k: wrote {} and {}",
        md_path.display(),
        json_path.display()
    );
    Ok(())
}

/// CI's smoke: [`SMOKE_CONNECTIONS`] in the full mix, held [`SMOKE_HOLD`], against
/// `ioserve` (a build of it) and nginx, no memory measured; fails naming each kind
/// whose connections were not all answered and held. `www` holds 4k.bin and 8m.bin;
/// the report goes to `out` as the full run's does.
pub(crate) fn smoke(ioserve: &Path, www: &Path, out: &Path) -> Result<()> {
    let mix = Mix::of(SMOKE_CONNECTIONS);
    let measured = Measured {
        command: "cargo xtask ci: the c100k smoke".into(),
        at_once: client::CONNECTING_AT_ONCE,
        mix,
        hold: SMOKE_HOLD,
        // Read at 64 KiB/s, 8 MiB lasts two minutes: past the smoke's hold.
        download: "/8m.bin",
        memory: false,
        full_mix: true,
    };
    let specs = c100k_servers(mix.total());
    let (report, failures) = measure(&measured, &specs, ioserve, www, out)?;
    let md = report::render(&report, PEER, OURS);
    eprint!("{md}");
    write_report(&report, &md, out)?;
    if !failures.is_empty() {
        bail!(
            "the c100k smoke left connections unanswered or dropped:\n  {}",
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// What [`measure`] runs.
struct Measured {
    /// The command line that asked for it, as the report says it.
    command: String,
    /// Connections connecting and waiting for their answer at once.
    at_once: usize,
    /// The full mix.
    mix: Mix,
    /// How long the full mix is held.
    hold: Duration,
    /// The large file of the slow downloads.
    download: &'static str,
    /// Whether to measure the memory per connection of each kind.
    memory: bool,
    /// Whether to run the full mix.
    full_mix: bool,
}

/// Raises the host's limits, then measures every server of `specs`: with `memory`,
/// each kind on fresh starts (the servers alternating per kind), then, with
/// `full_mix`, the full mix on a fresh start of each. The report, and what would fail the smoke.
fn measure(
    measured: &Measured,
    specs: &[ServerSpec],
    ioserve: &Path,
    www: &Path,
    out: &Path,
) -> Result<(Report, Vec<String>)> {
    let host = host::prepare(&measured.mix)?;
    let certs = out.join("c100k-tls");
    fs::create_dir_all(&certs).with_context(|| format!("cannot create {}", certs.display()))?;
    let pair = certificate::self_signed(&certs)?;
    let client = Client::new(
        &pair.cert,
        measured.download,
        host.per_address,
        host.descriptors,
        measured.at_once,
    )?;
    let pairs: Vec<(&ServerSpec, ServerSpec)> =
        specs.iter().map(|s| (s, s.over_https(&pair))).collect();
    let mut servers: Vec<ServerFigures> = specs
        .iter()
        .map(|s| ServerFigures {
            server: s.name.clone(),
            memory: Vec::new(),
            mix: None,
        })
        .collect();
    let start = |spec: &ServerSpec| start_built(spec, www, out, ioserve);
    if measured.memory {
        for kind in Kind::ALL {
            for ((plain, https), figures) in pairs.iter().zip(&mut servers) {
                let spec = if kind.over_tls() { https } else { *plain };
                let count = measured.mix.measured(kind);
                let memory = kind_memory(&client, &start(spec)?, kind, count)
                    .with_context(|| format!("{} per connection of {}", kind.title(), spec.name))?;
                eprintln!(
                    "xtask loadtest --c100k: {:<20} {:<26} {:>7} connections: {:>7.0} B each",
                    figures.server,
                    kind.title(),
                    count,
                    memory.bytes_per_connection
                );
                figures.memory.push(memory);
            }
        }
    }
    if measured.full_mix {
        for ((plain, https), figures) in pairs.iter().zip(&mut servers) {
            let run = full_mix(&client, (&start(plain)?, &start(https)?), measured);
            eprintln!(
                "xtask loadtest --c100k: {:<20} full mix of {}: polite p50 {:.2} ms, p99 {:.2} ms",
                figures.server,
                measured.mix.total(),
                run.polite.p50_ms,
                run.polite.p99_ms
            );
            figures.mix = Some(run);
        }
    }
    let failures = report::smoke_failures(&servers);
    let report = Report {
        command: measured.command.clone(),
        mix: measured.mix,
        hold_s: measured.hold.as_secs_f64(),
        download: measured.download.to_string(),
        at_once: measured.at_once,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        host,
        targets: report::judge(&servers, OURS, PEER, measured.mix.total()),
        servers,
    };
    Ok((report, failures))
}

/// Bytes per connection of `kind` on `server` (just started): one warm-up connection
/// of the kind first, closed (lazily made state is not per connection), then the
/// growth of its settled RssAnon over `count` connections, divided among those still
/// held when it is read (the server may have closed some).
fn kind_memory(client: &Client, server: &Running, kind: Kind, count: usize) -> Result<KindMemory> {
    let batch = |count| Batch {
        kind,
        count,
        server: server.addr,
    };
    let warm_up = client.release(client.open(&[batch(1)]));
    if !warm_up.iter().all(|(_, c)| c.all_held()) {
        bail!("{}'s warm-up connection was not answered", server.name);
    }
    let mut held = 0;
    let (holding, bytes_per_connection) = growth_per_connection(
        server,
        || Ok(client.open(&[batch(count)])),
        |holding| {
            held = holding.still_held();
            held
        },
    )?;
    let counts = client
        .release(holding)
        .into_iter()
        .map(|(_, c)| c)
        .next()
        .unwrap_or_default();
    Ok(KindMemory {
        kind,
        counts,
        held,
        bytes_per_connection,
    })
}

/// The full mix against `servers` (plain and HTTPS, just started): every kind opened
/// at once, the servers' settled RssAnon read, then held while the polite client runs
/// for the hold.
fn full_mix(client: &Client, servers: (&Running, &Running), measured: &Measured) -> MixRun {
    let (plain, https) = servers;
    let batches: Vec<Batch> = measured
        .mix
        .batches()
        .into_iter()
        .map(|(kind, count)| Batch {
            kind,
            count,
            server: if kind.over_tls() {
                https.addr
            } else {
                plain.addr
            },
        })
        .collect();
    let holding = client.open(&batches);
    let rss_anon_kib = settled_anon_kib(plain) + settled_anon_kib(https);
    let polite = client.polite(plain.addr, measured.hold);
    let counts = client
        .release(holding)
        .into_iter()
        .map(|(kind, counts)| KindCounts { kind, counts })
        .collect();
    MixRun {
        counts,
        polite,
        rss_anon_kib,
    }
}

/// This run's command line as typed: `cargo xtask` and its arguments.
pub(crate) fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_is_checked_against_the_scenarios_servers() {
        assert!(check_only(&[]).is_ok());
        assert!(check_only(&["ioserve-sendfile".into(), "nginx".into()]).is_ok());
        let unknown = check_only(&["caddy".into()]).unwrap_err().to_string();
        assert!(
            unknown.contains("matches no server") && unknown.contains("nginx"),
            "{unknown}"
        );
    }
}

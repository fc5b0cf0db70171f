//! `cargo xtask loadtest`: ioserve beside nginx and Go's FileServer, same files, same
//! load, alternating, on 127.0.0.1 only.
//!
//! Every server is started once and stays up; each round runs every workload against
//! every server in turn (the order rotates between rounds), and the report gives the
//! median over rounds with ratios to nginx. Server CPU comes from /proc/PID/stat of the
//! server's processes, peak RSS from VmHWM after resetting it (clear_refs 5) before
//! each run. Then [`syscalls`] counts each server's syscalls per request with probe
//! (unless `--no-syscalls`), and [`memory`] measures what idle and slow clients cost
//! each server.
//!
//! By job: [`servers`] starts and watches the servers, [`wrk`] runs the load and reads
//! its figures, [`report`] writes the medians as a table and a chart. `--cold` runs the
//! cold-disk scenario instead ([`cold`], with [`throttle`] for a slow disk); `--tls`
//! ioserve against nginx over HTTPS ([`tls`], HTTP/2 by [`h2load`]); `--c100k` both
//! holding 100,000 connections of several kinds ([`c100k`]).
//! [`profile`] (`cargo xtask profile`) records where the CPU goes under the same
//! servers and workloads, with perf, as flamegraphs.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::util::{ensure_packages, on_path, project_root, step};

mod c100k;
pub(crate) use c100k::{check_only as c100k_check_only, Scenario as C100kScenario};
mod cold;
mod h2load;
mod h3;
mod memory;
pub(crate) mod profile;
mod report;
mod servers;
mod syscalls;
mod throttle;
mod tls;
mod wrk;

use h2load::h2load;
use report::{figure, judge, medians, render_chart, render_table, Target};
use servers::{cpu_seconds, select, servers, start, status_kib, Running, ServerSpec};
use wrk::{wrk, LoadResult, RANGES_LUA, REPORT_LUA};

/// Options of one load test.
#[derive(Debug, Default)]
pub struct Options {
    /// Seconds per wrk run.
    pub duration: u64,
    /// Rounds over all servers and workloads.
    pub rounds: usize,
    /// Only these servers: exact names, or text in their names.
    pub only: Vec<String>,
    /// Clients of the memory-per-connection measurement.
    pub connections: usize,
    /// Run the cold-disk scenario instead.
    pub cold: bool,
    /// Run ioserve against nginx over HTTPS instead.
    pub tls: bool,
    /// Run ioserve's HTTP/3 against Caddy's instead.
    pub h3: bool,
    /// Run the c100k scenario instead: `connections` held at once.
    pub c100k: bool,
    /// The cold scenario's disk read limit in MB/s (0: none).
    pub disk_mbps: u64,
    /// Whether the cold scenario's download clients copy the bodies they receive
    /// (otherwise they discard them unread, as a NIC's DMA would leave them).
    pub client_copy: bool,
    /// Whether to count syscalls per request with probe after the rounds.
    pub syscalls: bool,
    /// SO_SNDBUF of every connection of every server, in bytes (else autotuning).
    pub send_buffer: Option<u64>,
}

/// The command line of `cargo xtask loadtest`; [`Args::resolve`] applies `--quick`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per wrk run; with --c100k, seconds the full mix is held [default: 10;
    /// --quick: 3; --c100k: 20, with --quick 5]
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: Option<u64>,
    /// Rounds over all servers and workloads [default: 3; --quick: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=20), conflicts_with = "c100k")]
    rounds: Option<u64>,
    /// Only these servers (comma-separated): an exact name picks that server alone,
    /// other text every server whose name contains it
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    only: Vec<String>,
    /// Clients of the memory-per-connection measurement (at most 50000); with --c100k,
    /// the connections held at once [default: 10000; --quick: 2000; --c100k: 100000,
    /// with --quick 10000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(10..=200_000))]
    connections: Option<u64>,
    /// A short run: 1 round of 3 s, 2000 clients
    #[arg(long)]
    quick: bool,
    /// The cold-disk scenario instead: hot 4 KiB requests beside 16 clients downloading
    /// 256 MiB files dropped from the page cache (ioserve with cold reads on its pool and
    /// inline, nginx with and without `aio threads`), and beside the same downloads
    /// from the page cache for comparison; writes cold.md and cold.json
    #[arg(long, conflicts_with = "tls")]
    cold: bool,
    /// ioserve (sendfile) against nginx over HTTPS instead, the same certificate, TLS
    /// 1.3, TLS in user space for both: 8 MiB and 4 KiB files over HTTP/1.1 (wrk) and
    /// 4 KiB over HTTP/2 (h2load); writes tls.md and tls.json
    #[arg(long)]
    tls: bool,
    /// ioserve's HTTP/3 against Caddy's (quic-go; go install when missing) instead, the
    /// same certificate, TLS in user space: 64 MiB and 4 KiB files over HTTP/3 (h3get,
    /// quic-go's client) and over HTTPS on TCP (HTTP/2, h2load); writes h3.md and
    /// h3.json, with the targets judged on the per-round ratios
    #[arg(long, conflicts_with_all = ["cold", "tls"])]
    h3: bool,
    /// The c100k scenario instead (issue #56): ioserve and nginx, each sized for it,
    /// holding --connections at once from source addresses spread over 127.0.0.0/8:
    /// 90 % idle HTTP/1.1 keep-alive, 9 % HTTP/2 over TLS, 1 % slow downloads (64 KiB/s),
    /// with a polite client timing 4 KiB requests during the hold; memory per
    /// connection of each kind (and of idle TLS) on fresh starts; raises the kernel's
    /// limits where too low; writes c100k.md and c100k.json
    #[arg(long, conflicts_with_all = ["cold", "tls", "h3"])]
    c100k: bool,
    /// With --cold: limit the servers' disk reads to this many MB/s (a cgroup throttle),
    /// as a cloud volume or a spinning disk would; 0 for none [default: 200]
    #[arg(long, value_name = "MB/S", requires = "cold")]
    disk_mbps: Option<u64>,
    /// With --cold: the download clients copy each body into their buffer instead of
    /// discarding it unread (recv with MSG_TRUNC). A client on this machine copies;
    /// a remote client's bytes leave through the NIC's DMA, which no CPU of the server
    /// pays for, while a loopback copy is the first CPU touch of each freshly read page
    /// and, in a VM, can cost far more than the copy itself
    #[arg(long, requires = "cold")]
    client_copy: bool,
    /// Do not count syscalls per request (probe syscalls, which needs root and the
    /// kernel's BTF); the report then says they were skipped
    #[arg(long)]
    no_syscalls: bool,
    /// Every server's connections get this send buffer (SO_SNDBUF: ioserve's
    /// --send-buffer, nginx's `listen ... sndbuf=`) instead of the kernel's autotuning;
    /// bytes, or with K or M (1024-based), e.g. 4M
    #[arg(long, value_name = "SIZE", value_parser = parse_send_buffer, conflicts_with_all = ["cold", "tls", "c100k"])]
    send_buffer: Option<u64>,
}

/// A `--send-buffer` size: bytes, or with K or M as powers of 1024 (parse-size, as
/// ioserve reads its own `--send-buffer`), 4K to 1G as ioserve allows.
fn parse_send_buffer(text: &str) -> Result<u64, String> {
    let bytes = parse_size::Config::new()
        .with_binary()
        .parse_size(text.trim())
        .map_err(|_| format!("'{text}' is not a size; use e.g. 4194304, 512K or 4M"))?;
    if (4 << 10..=1 << 30).contains(&bytes) {
        Ok(bytes)
    } else {
        Err(format!("'{text}' is outside 4K to 1G"))
    }
}

impl Args {
    /// The options, with `--quick`'s defaults where nothing was given.
    pub fn resolve(self) -> Options {
        let pick = |value: Option<u64>, normal: u64, quick: u64| {
            value.unwrap_or(if self.quick { quick } else { normal })
        };
        let (duration, connections) = match self.c100k {
            true => (
                pick(self.duration, 20, 5),
                pick(self.connections, 100_000, 10_000),
            ),
            false => (
                pick(self.duration, 10, 3),
                pick(self.connections, 10_000, 2_000),
            ),
        };
        Options {
            duration,
            rounds: pick(self.rounds, 3, 1) as usize,
            connections: connections as usize,
            only: self.only,
            cold: self.cold,
            tls: self.tls,
            h3: self.h3,
            c100k: self.c100k,
            disk_mbps: self.disk_mbps.unwrap_or(200),
            client_copy: self.client_copy,
            syscalls: !self.no_syscalls,
            send_buffer: self.send_buffer,
        }
    }
}

/// What generates the plain and TLS loads, as the report says it.
const WRK_CLIENTS: &str = "wrk -t2 (h2load -t2 for HTTP/2)";

/// The load generator of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    /// wrk: HTTP/1.1 with keep-alive.
    Wrk,
    /// h2load: HTTP/2 (over TLS, chosen by ALPN).
    H2load,
    /// h3get (quic-go's http3 client): HTTP/3.
    H3get,
}

/// One workload of the seed's download service.
#[derive(Clone, Copy)]
struct Workload {
    key: &'static str,
    title: &'static str,
    path: &'static str,
    connections: u32,
    client: Client,
    /// A wrk Lua script generating the requests, if not a plain GET of `path`.
    script: Option<&'static str>,
    /// Whether throughput (MB/s) rather than requests/s is the headline.
    bulk: bool,
}

const WORKLOADS: [Workload; 5] = [
    Workload {
        key: "a",
        title: "8 MiB file, 100 connections",
        path: "/8m.bin",
        connections: 100,
        client: Client::Wrk,
        script: None,
        bulk: true,
    },
    Workload {
        key: "b",
        title: "4 KiB file, 100 connections",
        path: "/4k.bin",
        connections: 100,
        client: Client::Wrk,
        script: None,
        bulk: false,
    },
    Workload {
        key: "a5k",
        title: "8 MiB file, 5000 connections",
        path: "/8m.bin",
        connections: 5000,
        client: Client::Wrk,
        script: None,
        bulk: true,
    },
    Workload {
        key: "b5k",
        title: "4 KiB file, 5000 connections",
        path: "/4k.bin",
        connections: 5000,
        client: Client::Wrk,
        script: None,
        bulk: false,
    },
    Workload {
        key: "c",
        title: "random 1 MiB ranges of a 1 GiB file, 16 connections",
        path: "/1g.bin",
        connections: 16,
        client: Client::Wrk,
        script: Some(RANGES_LUA),
        bulk: true,
    },
];

/// ioserve's targets against nginx, judged on the per-round ratios (an operator sizing
/// a machine reads the worst round, not the best): at 100 and at 5000 connections, the
/// 8 MiB file at no more than 0.80x nginx's CPU s/GB as the median and 0.90x in every
/// round, the 4 KiB file at 1.5x its req/s or more.
const TARGETS: [Target; 4] = [
    Target::median(
        "8 MiB CPU s/GB, 100 connections",
        "a",
        figure::cpu_s_per_gb,
        false,
        0.8,
    )
    .every_round(0.9),
    Target::median(
        "4 KiB req/s, 100 connections",
        "b",
        figure::requests_per_s,
        true,
        1.5,
    ),
    Target::median(
        "8 MiB CPU s/GB, 5000 connections",
        "a5k",
        figure::cpu_s_per_gb,
        false,
        0.8,
    )
    .every_round(0.9),
    Target::median(
        "4 KiB req/s, 5000 connections",
        "b5k",
        figure::requests_per_s,
        true,
        1.5,
    ),
];

/// The server whose targets the report judges.
const OURS: &str = "ioserve-sendfile";

/// What one run measures (a sample) or the medians of several.
#[derive(Clone, Debug, Serialize)]
struct Figures {
    requests_per_s: f64,
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_s_per_gb: f64,
    peak_rss_mib: f64,
}

#[cfg(test)]
impl Figures {
    /// The report tests' figures: these throughputs and CPU, fixed latencies and RSS.
    fn for_test(requests_per_s: f64, mb_per_s: f64, cpu_s_per_gb: f64) -> Figures {
        Figures {
            requests_per_s,
            mb_per_s,
            p50_ms: 1.0,
            p99_ms: 2.0,
            cpu_s_per_gb,
            peak_rss_mib: 10.0,
        }
    }
}

/// One wrk run against one server.
#[derive(Clone, Debug, Serialize)]
struct Sample {
    server: String,
    workload: &'static str,
    round: usize,
    #[serde(flatten)]
    figures: Figures,
    errors: u64,
}

/// What the report says about one server under one workload.
#[derive(Clone, Debug, Serialize)]
struct Median {
    server: String,
    workload: &'static str,
    /// Each figure's median over the rounds.
    #[serde(flatten)]
    figures: Figures,
    /// Errors summed over the rounds.
    errors: u64,
    /// The headline figure (MB/s or requests/s) over the peer's (nginx's; Caddy's for
    /// HTTP/3).
    ratio_to_peer: Option<f64>,
    /// CPU seconds per GB over the peer's.
    cpu_ratio_to_peer: Option<f64>,
    /// Per round, the headline figure over nginx's in the same round (the servers run
    /// one after the other within a round): the spread behind `ratio_to_peer`.
    round_ratios: Vec<f64>,
    /// Per round, CPU seconds per GB over nginx's in the same round.
    cpu_round_ratios: Vec<f64>,
}

#[derive(Serialize)]
struct Report<'a> {
    duration_s: u64,
    rounds: usize,
    cpus: usize,
    kernel: String,
    workloads: Vec<(&'static str, &'static str)>,
    medians: &'a [Median],
    samples: &'a [Sample],
    memory: &'a [memory::ConnectionMemory],
    /// Syscalls per request, when counted.
    syscalls: &'a [syscalls::SyscallCounts],
    /// Why the syscalls were not counted, if they were not.
    syscalls_skipped: Option<&'a str>,
    /// Every server's SO_SNDBUF in bytes, when `--send-buffer` set one.
    send_buffer: Option<u64>,
}

/// Runs the load test and writes target/loadtest/{report.md,results.json,chart.svg}.
pub fn run(options: &Options) -> Result<()> {
    if !options.c100k && options.connections > PLAIN_MOST_CONNECTIONS {
        bail!(
            "--connections {}: the memory measurement connects from 127.0.0.1 alone, \
             {PLAIN_MOST_CONNECTIONS} at most; more with --c100k",
            options.connections
        );
    }
    ensure_packages(&[("nginx", "nginx"), ("wrk", "wrk")])?;
    let out = crate::util::target_dir()?.join("loadtest");
    fs::create_dir_all(&out)?;
    // Refused before the rounds, not after them.
    let count_syscalls =
        options.syscalls && !options.cold && !options.tls && !options.h3 && !options.c100k;
    if let Some(why) = syscalls::unavailable().filter(|_| count_syscalls) {
        bail!("cannot count syscalls: {why}; pass --no-syscalls to run without");
    }
    // With the package's features (its allocator), so that the figures are the
    // package's.
    let mut build = crate::release::dist::packaged_release_build()?;
    if count_syscalls {
        build.args(["-p", "ioserve-probe"]);
    }
    let what = match count_syscalls {
        true => "build ioserve and probe (release)",
        false => "build ioserve (release)",
    };
    step(what, build)?;
    let www = out.join("www");
    prepare_files(&www, &FILES)?;
    fs::write(out.join("report.lua"), REPORT_LUA)?;
    if options.cold {
        return cold::run(options, &www, &out);
    }
    if options.tls {
        return tls::run(options, &www, &out);
    }
    if options.h3 {
        return h3::run(options, &www, &out);
    }
    if options.c100k {
        let scenario = c100k::Scenario {
            connections: options.connections,
            hold: std::time::Duration::from_secs(options.duration),
            only: options.only.clone(),
            command: c100k::command_line(),
            at_once: c100k::CONNECTING_AT_ONCE,
            memory: true,
            full_mix: true,
        };
        let ioserve = crate::util::target_dir()?.join("release/ioserve");
        return c100k::run(&scenario, &ioserve, &www, &out);
    }
    let specs = select(servers(), &options.only)?
        .into_iter()
        .map(|spec| spec.with_send_buffer(options.send_buffer))
        .collect::<Result<Vec<ServerSpec>>>()?;
    let mut build_go = Command::new(find_go()?);
    build_go
        .current_dir(project_root().join("benches/peers/go-fileserver"))
        .args(["build", "-o"])
        .arg(out.join("go-fileserver"));
    step("build the Go FileServer peer", build_go)?;

    // Before the servers start, which inherit it: wrk's 5000 connections, then the
    // memory measurement's clients.
    let clients = memory::raise_limit(options.connections.max(MOST_CONNECTIONS));
    let mut running = Vec::new();
    for spec in &specs {
        running.push(start(spec, &www, &out)?);
        eprintln!(
            "xtask loadtest: {} on {}",
            spec.name,
            running.last().unwrap().addr
        );
    }

    let samples = measure_rounds(&running, &WORKLOADS, options, &out)?;
    let syscalls = if count_syscalls {
        let probe = crate::util::target_dir()?.join("release/probe");
        Ok(syscalls::measure_all(
            &running,
            &probe,
            options.duration,
            &out,
        )?)
    } else {
        Err("skipped (--no-syscalls)")
    };
    drop(running);

    let memory = memory::measure_all(&specs, &www, &out, clients.min(options.connections))?;

    write_report(&samples, &specs, &memory, &syscalls, options, &out)
}

/// Warms every server up, then runs every one of `workloads` against every server for
/// `options.rounds` rounds, each round starting with the next server.
fn measure_rounds(
    running: &[Running],
    workloads: &'static [Workload],
    options: &Options,
    out: &Path,
) -> Result<Vec<Sample>> {
    let total = running.len() * workloads.len() * options.rounds;
    eprintln!(
        "xtask loadtest: {total} runs of {} s ({} servers, {} workloads, {} rounds), about {} min",
        options.duration,
        running.len(),
        workloads.len(),
        options.rounds,
        (total as u64 * (options.duration + 1)).div_ceil(60)
    );
    // Warm-up, not recorded: page cache, connection pools, the open-file caches.
    for server in running {
        for workload in workloads {
            load(server, workload, 1, out)?;
        }
    }
    let mut samples = Vec::new();
    for round in 0..options.rounds {
        for workload in workloads {
            for i in 0..running.len() {
                // Alternate: each round starts with the next server.
                let server = &running[(i + round) % running.len()];
                let sample = measure(server, workload, round, options.duration, out)?;
                eprintln!(
                    "  round {} {} {:<24} {:>9.0} req/s {:>8.0} MB/s p99 {:>8.2} ms",
                    round + 1,
                    workload.key,
                    sample.server,
                    sample.figures.requests_per_s,
                    sample.figures.mb_per_s,
                    sample.figures.p99_ms
                );
                samples.push(sample);
            }
        }
    }
    Ok(samples)
}

/// The medians table (printed and in report.md), results.json and chart.svg.
fn write_report(
    samples: &[Sample],
    specs: &[ServerSpec],
    memory: &[memory::ConnectionMemory],
    syscalls: &Result<Vec<syscalls::SyscallCounts>, &str>,
    options: &Options,
    out: &Path,
) -> Result<()> {
    let medians = medians(samples, specs, &WORKLOADS, "nginx");
    let syscall_table = match syscalls {
        Ok(counts) => syscalls::render_table(counts),
        Err(why) => format!("Syscalls per request: {why}.\n\n"),
    };
    let table = render_table(&medians, options, &WORKLOADS, "nginx", WRK_CLIENTS)
        + &judge(samples, OURS, "nginx", &TARGETS)
        + &syscall_table
        + &memory::render_table(memory);
    println!("{table}");
    let report = Report {
        duration_s: options.duration,
        rounds: options.rounds,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        workloads: WORKLOADS.iter().map(|w| (w.key, w.title)).collect(),
        medians: &medians,
        samples,
        memory,
        syscalls: syscalls.as_deref().unwrap_or_default(),
        syscalls_skipped: syscalls.as_ref().err().copied(),
        send_buffer: options.send_buffer,
    };
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    fs::write(out.join("report.md"), &table)?;
    fs::write(out.join("chart.svg"), render_chart(&medians, specs))?;
    eprintln!(
        "xtask loadtest: wrote {}/{{report.md,results.json,chart.svg}}",
        out.display()
    );
    Ok(())
}

pub(crate) fn find_go() -> Result<PathBuf> {
    if on_path("go") {
        return Ok(PathBuf::from("go"));
    }
    let local = PathBuf::from("/usr/local/go/bin/go");
    if local.is_file() {
        return Ok(local);
    }
    ensure_packages(&[("golang-go", "go")])?;
    Ok(PathBuf::from("go"))
}

/// The most connections a workload opens.
const MOST_CONNECTIONS: usize = 5000;

/// The most clients of the plain run's memory measurement (its range before --c100k):
/// they all connect from 127.0.0.1 to one port, so past the ephemeral ports of one
/// address their connects fail.
const PLAIN_MOST_CONNECTIONS: usize = 50_000;

/// CI's smoke of the c100k scenario ([`c100k::smoke`]) against `ioserve` (a build of
/// it) and nginx: a few thousand connections of every kind held for a few seconds;
/// fails when any was refused, failed, left unanswered or dropped. Writes its files
/// under target/loadtest-c100k-smoke.
pub(crate) fn c100k_ci(ioserve: &Path) -> Result<()> {
    ensure_packages(&[("nginx", "nginx")])?;
    let out = crate::util::target_dir()?.join("loadtest-c100k-smoke");
    let www = out.join("www");
    prepare_files(&www, &FILES[..2])?;
    c100k::smoke(ioserve, &www, &out)
}

/// This run's command line as typed (`cargo xtask` and its arguments), as a c100k
/// report names it.
pub(crate) fn c100k_command_line() -> String {
    c100k::command_line()
}

/// The c100k scenario where `cargo xtask c100k-vm` runs it, in a guest with no cargo:
/// `scenario` against `ioserve` (a release build) and the nginx on PATH, the served
/// files and the report (c100k.md and c100k.json) under `out`.
pub(crate) fn c100k_in_guest(scenario: &C100kScenario, ioserve: &Path, out: &Path) -> Result<()> {
    let www = out.join("www");
    prepare_files(&www, &FILES)?;
    c100k::run(scenario, ioserve, &www, out)
}

/// CI's smoke of the per-round judgement: one short round of the workloads that
/// issue #56's targets judge (8 MiB and 4 KiB, at 100 and at 5,000 connections)
/// against `ioserve` (a build of it) and nginx, then the judgement, printed. Fails
/// when a run served nothing or a target could not be judged (a workload or a server
/// missing from the samples); not on the margins, which one round of two seconds on
/// a shared host cannot show. Writes its files under target/loadtest-rounds-smoke.
pub(crate) fn rounds_ci(ioserve: &Path) -> Result<()> {
    ensure_packages(&[("nginx", "nginx"), ("wrk", "wrk")])?;
    let out = crate::util::target_dir()?.join("loadtest-rounds-smoke");
    let www = out.join("www");
    prepare_files(&www, &FILES[..2])?;
    fs::write(out.join("report.lua"), REPORT_LUA)?;
    let options = Options {
        duration: 2,
        rounds: 1,
        only: vec!["nginx".into(), OURS.into()],
        ..Options::default()
    };
    let specs = select(servers(), &options.only)?;
    // wrk's 5000 connections, before the servers start (they inherit the limit).
    memory::raise_limit(MOST_CONNECTIONS);
    let mut running = Vec::new();
    for spec in &specs {
        running.push(servers::start_built(spec, &www, &out, ioserve)?);
    }
    let samples = measure_rounds(&running, &ROUND_SMOKE_WORKLOADS, &options, &out)?;
    drop(running);
    if let Some(idle) = samples.iter().find(|s| s.figures.requests_per_s <= 0.0) {
        bail!(
            "the round smoke's {} run of {} answered no request",
            idle.workload,
            idle.server
        );
    }
    let judged = judge(&samples, OURS, "nginx", &TARGETS);
    println!("{judged}");
    if judged.contains("not measured") {
        bail!("the round smoke could not judge every target:\n{judged}");
    }
    Ok(())
}

/// The workloads that [`TARGETS`] judge, which CI's round smoke runs.
const ROUND_SMOKE_WORKLOADS: [Workload; 4] =
    [WORKLOADS[0], WORKLOADS[1], WORKLOADS[2], WORKLOADS[3]];

/// The served files, by name and length.
const FILES: [(&str, u64); 3] = [("4k.bin", 4096), ("8m.bin", 8 << 20), ("1g.bin", 1 << 30)];

/// Writes `files` into `www` (those not there yet): pseudo-random bytes, so that
/// nothing is sparse or compressible; then reads them into the page cache.
fn prepare_files(www: &Path, files: &[(&str, u64)]) -> Result<()> {
    fs::create_dir_all(www)?;
    for &(name, len) in files {
        let path = www.join(name);
        if fs::metadata(&path).is_ok_and(|m| m.len() == len) {
            continue;
        }
        eprintln!("xtask loadtest: writing {}", path.display());
        let mut block = vec![0u8; (len as usize).min(1 << 20)];
        // Incompressible, not sparse, and the same on every run.
        fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15u64 ^ len).fill(&mut block);
        let mut file = std::io::BufWriter::new(fs::File::create(&path)?);
        for i in 0..len / block.len() as u64 {
            // Every MiB differs from the others.
            block[..8].copy_from_slice(&i.to_le_bytes());
            file.write_all(&block)?;
        }
        file.flush()?;
    }
    // Warm the page cache (the cold scenario's files are in a directory of their own).
    for entry in fs::read_dir(www)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::io::copy(&mut fs::File::open(entry.path())?, &mut std::io::sink())?;
        }
    }
    Ok(())
}

/// Loads `server` with `workload` for `seconds`, by the workload's client.
fn load(server: &Running, workload: &Workload, seconds: u64, out: &Path) -> Result<LoadResult> {
    match workload.client {
        Client::Wrk => wrk(server, workload, seconds, out),
        Client::H2load => h2load(server, workload, seconds),
        Client::H3get => h3::h3get(server, workload, seconds, out),
    }
}

fn measure(
    server: &Running,
    workload: &Workload,
    round: usize,
    seconds: u64,
    out: &Path,
) -> Result<Sample> {
    let pids = server.pids();
    for pid in &pids {
        // Resets VmHWM, so the peak is this run's.
        let _ = fs::write(format!("/proc/{pid}/clear_refs"), "5");
    }
    let cpu_before = cpu_seconds(&pids);
    let wrk = load(server, workload, seconds, out)?;
    let cpu = cpu_seconds(&pids) - cpu_before;
    let peak_rss_kib: u64 = pids.iter().map(|pid| status_kib(*pid, "VmHWM:")).sum();
    let gb = wrk.bytes_per_s * wrk.seconds / 1e9;
    Ok(Sample {
        server: server.name.clone(),
        workload: workload.key,
        round,
        figures: Figures {
            requests_per_s: wrk.requests_per_s,
            mb_per_s: wrk.bytes_per_s / 1e6,
            p50_ms: wrk.p50_ms,
            p99_ms: wrk.p99_ms,
            cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { f64::NAN },
            peak_rss_mib: peak_rss_kib as f64 / 1024.0,
        },
        errors: wrk.errors,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            crate::Cli::try_parse_from(["xtask", "loadtest"].iter().chain(args)).map(
                |cli| match cli.task {
                    crate::Task::Loadtest(args) => args.resolve(),
                    other => panic!("parsed as {other:?}"),
                },
            )
        };
        let o = parse(&["--quick", "--only", "nginx,ioserve-sendfile"]).unwrap();
        assert_eq!(
            (o.duration, o.rounds, o.only.len(), o.connections, o.cold),
            (3, 1, 2, 2000, false)
        );
        assert!(o.syscalls, "counted unless --no-syscalls");
        assert!(!parse(&["--no-syscalls"]).unwrap().syscalls);
        let o = parse(&["--cold"]).unwrap();
        assert_eq!((o.cold, o.disk_mbps), (true, 200));
        assert_eq!(parse(&["--cold", "--disk-mbps", "0"]).unwrap().disk_mbps, 0);
        assert!(parse(&["--disk-mbps", "100"]).is_err(), "only with --cold");
        let o = parse(&["--tls", "--rounds", "1", "--duration", "2"]).unwrap();
        assert_eq!((o.tls, o.cold, o.rounds, o.duration), (true, false, 1, 2));
        assert!(
            parse(&["--tls", "--cold"]).is_err(),
            "one scenario at a time"
        );
        let o = parse(&["--rounds", "5"]).unwrap();
        assert_eq!((o.duration, o.rounds, o.connections), (10, 5, 10_000));
        let error = parse(&["--duration", "0"]).unwrap_err().to_string();
        assert!(error.contains("'0' for '--duration"), "{error}");
        assert_eq!(
            parse(&[]).unwrap().send_buffer,
            None,
            "autotuning by default"
        );
        for (given, bytes) in [("4M", 4 << 20), ("512k", 512 << 10), ("65536", 65536)] {
            let o = parse(&["--send-buffer", given]).unwrap();
            assert_eq!(o.send_buffer, Some(bytes), "{given}");
        }
        for (given, why) in [
            ("2K", "outside 4K to 1G"),
            ("2048M", "outside"),
            ("4X", "not a size"),
        ] {
            let error = parse(&["--send-buffer", given]).unwrap_err().to_string();
            assert!(error.contains(why), "{given}: {error}");
        }
        assert!(
            parse(&["--send-buffer", "4M", "--cold"]).is_err(),
            "the hot workloads only"
        );
        let o = parse(&["--c100k"]).unwrap();
        assert_eq!(
            (o.c100k, o.connections, o.duration, o.cold, o.tls, o.h3),
            (true, 100_000, 20, false, false, false)
        );
        let o = parse(&["--c100k", "--quick", "--only", "nginx,ioserve-sendfile"]).unwrap();
        assert_eq!((o.connections, o.duration, o.only.len()), (10_000, 5, 2));
        let o = parse(&["--c100k", "--connections", "200000", "--duration", "7"]).unwrap();
        assert_eq!((o.connections, o.duration), (200_000, 7));
        assert!(parse(&["--c100k", "--connections", "200001"]).is_err());
        assert!(!parse(&[]).unwrap().c100k);
        assert_eq!(
            parse(&["--connections", "60000"]).unwrap().connections,
            60_000,
            "parsed; the plain run refuses it before it starts"
        );
        let error = super::run(&parse(&["--connections", "60000"]).unwrap()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("50000 at most; more with --c100k"),
            "{error}"
        );
        for other in ["--cold", "--tls", "--h3"] {
            assert!(parse(&["--c100k", other]).is_err(), "--c100k with {other}");
        }
        for (flag, value) in [("--rounds", "2"), ("--send-buffer", "4M")] {
            assert!(
                parse(&["--c100k", flag, value]).is_err(),
                "--c100k with {flag}"
            );
        }
    }
}

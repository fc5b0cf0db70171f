//! `cargo xtask loadtest`: ioserve beside nginx and Go's FileServer, same files, same
//! load, alternating, on 127.0.0.1 only.
//!
//! Every server is started once and stays up; each round runs every workload against
//! every server in turn (the order rotates between rounds), and the report gives the
//! median over rounds with ratios to nginx. Server CPU comes from /proc/PID/stat of the
//! server's processes, peak RSS from VmHWM after resetting it (clear_refs 5) before
//! each run.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::stats::median;
use crate::svg::{Anchor, Svg, PALETTE};
use crate::{cargo, ensure_packages, on_path, project_root, step};

/// Options of one load test.
#[derive(Debug)]
pub struct Options {
    /// Seconds per wrk run.
    pub duration: u64,
    /// Rounds over all servers and workloads.
    pub rounds: usize,
    /// Only the servers whose name contains one of these.
    pub only: Vec<String>,
    /// Clients of the memory-per-connection measurement.
    pub connections: usize,
}

/// The command line of `cargo xtask loadtest`; [`Args::resolve`] applies `--quick`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per wrk run [default: 10; --quick: 3]
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=600))]
    duration: Option<u64>,
    /// Rounds over all servers and workloads [default: 3; --quick: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: Option<u64>,
    /// Only the servers whose name contains one of these (comma-separated)
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    only: Vec<String>,
    /// Clients of the memory-per-connection measurement [default: 10000; --quick: 2000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(10..=50_000))]
    connections: Option<u64>,
    /// A short run: 1 round of 3 s, 2000 clients
    #[arg(long)]
    quick: bool,
}

impl Args {
    /// The options, with `--quick`'s defaults where nothing was given.
    pub fn resolve(self) -> Options {
        let pick = |value: Option<u64>, normal: u64, quick: u64| {
            value.unwrap_or(if self.quick { quick } else { normal })
        };
        Options {
            duration: pick(self.duration, 10, 3),
            rounds: pick(self.rounds, 3, 1) as usize,
            connections: pick(self.connections, 10_000, 2_000) as usize,
            only: self.only,
        }
    }
}

/// One workload of the seed's download service.
struct Workload {
    key: &'static str,
    title: &'static str,
    path: &'static str,
    connections: u32,
    /// A wrk Lua script generating the requests, if not a plain GET of `path`.
    script: Option<&'static str>,
    /// Whether throughput (MB/s) rather than requests/s is the headline.
    bulk: bool,
}

const WORKLOADS: [Workload; 3] = [
    Workload {
        key: "a",
        title: "8 MiB file, 100 connections",
        path: "/8m.bin",
        connections: 100,
        script: None,
        bulk: true,
    },
    Workload {
        key: "b",
        title: "4 KiB file, 100 connections",
        path: "/4k.bin",
        connections: 100,
        script: None,
        bulk: false,
    },
    Workload {
        key: "c",
        title: "random 1 MiB ranges of a 1 GiB file, 16 connections",
        path: "/1g.bin",
        connections: 16,
        script: Some(RANGES_LUA),
        bulk: true,
    },
];

/// wrk's `done()` hook: the figures as one JSON line, so nothing is scraped from wrk's
/// human-readable summary (whose units and layout vary).
const REPORT_LUA: &str = r#"-- Prints wrk's figures as one JSON line after the run.
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

const RANGES_LUA: &str = r#"-- Random 1 MiB ranges of /1g.bin; each wrk thread has its own seed.
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

/// How a server under test is started.
#[derive(Clone, Debug)]
enum Kind {
    Nginx,
    Go,
    Ioserve {
        strategy: &'static str,
        runtime: &'static str,
    },
}

pub(crate) struct ServerSpec {
    pub(crate) name: String,
    kind: Kind,
}

fn servers() -> Vec<ServerSpec> {
    let mut specs = vec![
        ServerSpec {
            name: "nginx".into(),
            kind: Kind::Nginx,
        },
        ServerSpec {
            name: "go-fileserver".into(),
            kind: Kind::Go,
        },
    ];
    for strategy in ["sendfile", "mmap", "read", "buffered"] {
        specs.push(ServerSpec {
            name: format!("ioserve-{strategy}"),
            kind: Kind::Ioserve {
                strategy,
                runtime: "per-core",
            },
        });
    }
    specs.push(ServerSpec {
        name: "ioserve-sendfile-multi".into(),
        kind: Kind::Ioserve {
            strategy: "sendfile",
            runtime: "multi",
        },
    });
    specs
}

/// A started server; stopped when dropped.
pub(crate) struct Running {
    pub(crate) name: String,
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Running {
    /// The server's processes: the child and, for nginx, its workers.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let main = self.child.id();
        let mut pids = vec![main];
        pids.extend(children_of(main));
        pids
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    /// The headline figure (MB/s or requests/s) over nginx's.
    ratio_to_nginx: Option<f64>,
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
    memory: &'a [crate::connmem::ConnectionMemory],
}

/// Runs the load test and writes target/loadtest/{report.md,results.json,chart.svg}.
pub fn run(options: &Options) -> Result<()> {
    ensure_packages(&[("nginx", "nginx"), ("wrk", "wrk")])?;
    let out = project_root().join("target/loadtest");
    fs::create_dir_all(&out)?;
    let go = find_go()?;
    step(
        "build ioserve (release)",
        cargo(&["build", "--release", "-p", "ioserve"]),
    )?;
    let mut build_go = Command::new(&go);
    build_go
        .current_dir(project_root().join("benches/peers/go-fileserver"))
        .args(["build", "-o"])
        .arg(out.join("go-fileserver"));
    step("build the Go FileServer peer", build_go)?;

    let www = out.join("www");
    prepare_files(&www)?;
    fs::write(out.join("report.lua"), REPORT_LUA)?;
    fs::write(
        out.join("ranges.lua"),
        format!("{RANGES_LUA}\n{REPORT_LUA}"),
    )?;

    let specs: Vec<ServerSpec> = servers()
        .into_iter()
        .filter(|s| {
            options.only.is_empty() || options.only.iter().any(|o| s.name.contains(o.as_str()))
        })
        .collect();
    if specs.is_empty() {
        bail!(
            "--only matches no server; servers: {}",
            servers()
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut running = Vec::new();
    for spec in &specs {
        running.push(start(spec, &www, &out)?);
        eprintln!(
            "xtask loadtest: {} on {}",
            spec.name,
            running.last().unwrap().addr
        );
    }

    let total = running.len() * WORKLOADS.len() * options.rounds;
    eprintln!(
        "xtask loadtest: {total} runs of {} s ({} servers, {} workloads, {} rounds), about {} min",
        options.duration,
        running.len(),
        WORKLOADS.len(),
        options.rounds,
        (total as u64 * (options.duration + 1)).div_ceil(60)
    );
    // Warm-up, not recorded: page cache, connection pools, the open-file caches.
    for server in &running {
        for workload in &WORKLOADS {
            wrk(server, workload, 1, &out)?;
        }
    }
    let mut samples = Vec::new();
    for round in 0..options.rounds {
        for workload in &WORKLOADS {
            for i in 0..running.len() {
                // Alternate: each round starts with the next server.
                let server = &running[(i + round) % running.len()];
                let sample = measure(server, workload, round, options.duration, &out)?;
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
    drop(running);

    let clients = crate::connmem::raise_limit(options.connections);
    let memory = crate::connmem::measure_all(&specs, &www, &out, clients)?;

    let medians = medians(&samples, &specs);
    let table = render_table(&medians, options) + &crate::connmem::render_table(&memory);
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
        samples: &samples,
        memory: &memory,
    };
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    fs::write(out.join("report.md"), &table)?;
    fs::write(out.join("chart.svg"), render_chart(&medians, &specs))?;
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

/// The served files: pseudo-random bytes, so that nothing is sparse or compressible.
fn prepare_files(www: &Path) -> Result<()> {
    fs::create_dir_all(www)?;
    for (name, len) in [
        ("4k.bin", 4096u64),
        ("8m.bin", 8 << 20),
        ("1g.bin", 1 << 30),
    ] {
        let path = www.join(name);
        if fs::metadata(&path).is_ok_and(|m| m.len() == len) {
            continue;
        }
        eprintln!("xtask loadtest: writing {}", path.display());
        let mut block = vec![0u8; (len as usize).min(1 << 20)];
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ len;
        for chunk in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        let mut file = std::io::BufWriter::new(fs::File::create(&path)?);
        for i in 0..len / block.len() as u64 {
            // Every MiB differs from the others.
            block[..8].copy_from_slice(&i.to_le_bytes());
            file.write_all(&block)?;
        }
        file.flush()?;
    }
    // Warm the page cache.
    for entry in fs::read_dir(www)? {
        std::io::copy(&mut fs::File::open(entry?.path())?, &mut std::io::sink())?;
    }
    Ok(())
}

pub(crate) fn start(spec: &ServerSpec, www: &Path, out: &Path) -> Result<Running> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut command = match &spec.kind {
        Kind::Nginx => {
            let dir = out.join("nginx");
            fs::create_dir_all(dir.join("tmp"))?;
            let conf = dir.join("nginx.conf");
            fs::write(&conf, nginx_conf(&dir, www, addr))?;
            let mut command = Command::new("nginx");
            command.arg("-c").arg(&conf).arg("-p").arg(&dir);
            command
        }
        Kind::Go => {
            let mut command = Command::new(out.join("go-fileserver"));
            command
                .arg("-root")
                .arg(www)
                .arg("-listen")
                .arg(addr.to_string());
            command
        }
        Kind::Ioserve { strategy, runtime } => {
            let mut command = Command::new(project_root().join("target/release/ioserve"));
            command.arg(www).args([
                "--listen",
                &addr.to_string(),
                "--strategy",
                strategy,
                "--runtime",
                runtime,
                "--access-log",
                "off",
            ]);
            command
        }
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", spec.name))?;
    let running = Running {
        name: spec.name.clone(),
        child,
        addr,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("{} did not listen on {addr} within 10 s", spec.name);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(running)
}

/// nginx as the issue asks: sendfile on, tcp_nopush on, access_log off, 2 workers.
fn nginx_conf(dir: &Path, www: &Path, addr: SocketAddr) -> String {
    let tmp = dir.join("tmp");
    let tmp = tmp.display();
    format!(
        "worker_processes 2;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
         worker_rlimit_nofile 65536;\nevents {{ worker_connections 32768; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  \
         default_type application/octet-stream;\n  client_body_temp_path {tmp};\n  proxy_temp_path {tmp};\n  \
         fastcgi_temp_path {tmp};\n  uwsgi_temp_path {tmp};\n  scgi_temp_path {tmp};\n  \
         server {{ listen {addr} reuseport; root {www}; }}\n}}\n",
        dir = dir.display(),
        www = www.display(),
    )
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
    let wrk = wrk(server, workload, seconds, out)?;
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

/// What wrk printed.
struct WrkResult {
    requests_per_s: f64,
    bytes_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    seconds: f64,
}

fn wrk(server: &Running, workload: &Workload, seconds: u64, out: &Path) -> Result<WrkResult> {
    let mut command = Command::new("wrk");
    command.args([
        "-t2",
        &format!("-c{}", workload.connections),
        &format!("-d{seconds}s"),
        "--timeout",
        "10s",
    ]);
    let script = if workload.script.is_some() {
        "ranges.lua"
    } else {
        "report.lua"
    };
    command.arg("-s").arg(out.join(script));
    command.arg(format!("http://{}{}", server.addr, workload.path));
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

fn parse_wrk(text: &str) -> Option<WrkResult> {
    let json = text.lines().find_map(|l| l.strip_prefix("WRK_JSON "))?;
    let w: WrkJson = serde_json::from_str(json).ok()?;
    let seconds = w.duration_us as f64 / 1e6;
    (seconds > 0.0).then(|| WrkResult {
        requests_per_s: w.requests as f64 / seconds,
        bytes_per_s: w.bytes as f64 / seconds,
        p50_ms: w.p50_us as f64 / 1000.0,
        p99_ms: w.p99_us as f64 / 1000.0,
        // Non-2xx/3xx responses and socket errors.
        errors: w.status + w.connect + w.read + w.write + w.timeout,
        seconds,
    })
}

fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks_per_s = 100.0; // USER_HZ, fixed at 100 on Linux for /proc/PID/stat.
    pids.iter()
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // After ')': state is field 3; utime and stime are fields 14 and 15.
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks_per_s)
        })
        .sum()
}

pub(crate) fn status_kib(pid: u32, key: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

fn medians(samples: &[Sample], specs: &[ServerSpec]) -> Vec<Median> {
    let mut out = Vec::new();
    for workload in &WORKLOADS {
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

fn render_table(medians: &[Median], options: &Options) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Medians of {} round(s) of {} s per server and workload; wrk -t2 on the same {} CPUs; ratio = headline figure / nginx's.\n",
        options.rounds,
        options.duration,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for workload in &WORKLOADS {
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
fn render_chart(medians: &[Median], specs: &[ServerSpec]) -> String {
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
        assert_eq!((r.errors, r.seconds), (7, 3.0));
        assert!(parse_wrk("Requests/sec: 5").is_none());
    }

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
            (o.duration, o.rounds, o.only.len(), o.connections),
            (3, 1, 2, 2000)
        );
        let o = parse(&["--rounds", "5"]).unwrap();
        assert_eq!((o.duration, o.rounds, o.connections), (10, 5, 10_000));
        let error = parse(&["--duration", "0"]).unwrap_err().to_string();
        assert!(error.contains("'0' for '--duration"), "{error}");
    }
}

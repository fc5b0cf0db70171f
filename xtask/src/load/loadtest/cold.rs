//! The cold-disk scenario (`cargo xtask loadtest --cold`): while 16 clients download
//! 256 MiB files whose pages are dropped from the page cache before every download,
//! wrk measures hot 4 KiB requests. A server whose worker waits for the disk makes
//! every hot request queued behind it wait too; the hot p99 shows it.
//!
//! Each round measures every server three times: idle (wrk alone), beside cached
//! downloads (the same 16 clients paced at the disk's rate, downloading a file that
//! stays in the page cache: what the download traffic itself costs the hot requests on
//! these CPUs, with no disk in the picture) and loaded (wrk beside the cold downloads).
//! The report gives the medians, the loaded p99 over the idle p99 and over the cached
//! one, and the disk throughput the cold clients got (a server could keep its hot p99
//! low by starving them).

use std::fs;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::servers::{cold_servers, select, start, Running, ServerSpec};
use super::throttle::DiskThrottle;
use super::wrk::{wrk, LoadResult};
use super::{Client, Options, Workload};
use crate::util::stats::median;

/// Cold clients, each with a file of its own.
const CLIENTS: usize = 16;
/// Size of each cold file.
const COLD_FILE: u64 = 256 << 20;

/// The hot load: a cached 4 KiB file at a steady pace, well below what any of the
/// servers can answer, so that its latency shows waiting (for a worker stuck on the
/// disk) rather than queueing on two saturated CPUs.
const HOT: Workload = Workload {
    key: "hot",
    title: "4 KiB file, 10 connections paced at 2 ms (about 5000 requests/s)",
    path: "/4k.bin",
    connections: 10,
    client: Client::Wrk,
    script: Some(PACED_LUA),
    bulk: false,
};

/// wrk's `delay()` hook: each connection waits before its next request.
const PACED_LUA: &str = r#"-- Each connection waits 2 ms between requests.
function delay()
  return 2
end
"#;

/// One server's figures in one round.
#[derive(Clone, Debug, Serialize)]
struct ColdSample {
    server: String,
    round: usize,
    idle_p99_ms: f64,
    idle_requests_per_s: f64,
    /// Beside the cached downloads (absent without a disk limit to pace them at).
    cached_p99_ms: Option<f64>,
    /// What the cached downloads got per second while wrk ran.
    cached_mb_per_s: Option<f64>,
    loaded_p99_ms: f64,
    loaded_p50_ms: f64,
    loaded_requests_per_s: f64,
    /// What the cold clients downloaded per second while wrk ran.
    cold_mb_per_s: f64,
    /// Cold downloads completed while wrk ran.
    cold_downloads: u64,
    errors: u64,
}

/// Medians over the rounds.
#[derive(Clone, Debug, Serialize)]
struct ColdMedian {
    server: String,
    idle_p99_ms: f64,
    /// NaN without a disk limit.
    cached_p99_ms: f64,
    loaded_p50_ms: f64,
    loaded_p99_ms: f64,
    /// Loaded p99 over idle p99.
    slowdown: f64,
    /// Loaded p99 over the p99 beside cached downloads: what the cold disk adds.
    cold_over_cached: f64,
    loaded_requests_per_s: f64,
    cold_mb_per_s: f64,
    errors: u64,
}

/// Runs the scenario and writes target/loadtest/{cold.md,cold.json}.
pub(super) fn run(options: &Options, www: &Path, out: &Path) -> Result<()> {
    let files = prepare_cold_files(&www.join("cold"))?;
    let specs = select(cold_servers(), &options.only)?;
    let mut running = Vec::new();
    for spec in &specs {
        running.push(start(spec, www, out)?);
    }
    // Each server reads from a "disk" of its own; dropped before the servers, which go
    // back to the root cgroup, then stop.
    let throttles = running
        .iter()
        .map(|server| {
            (options.disk_mbps > 0)
                .then(|| {
                    DiskThrottle::apply(
                        &server.name,
                        &www.join("cold"),
                        &server.pids(),
                        options.disk_mbps * 1_000_000,
                    )
                })
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?;
    eprintln!(
        "xtask loadtest --cold: {} servers, {} rounds of {} x {} s each, {CLIENTS} cold clients of {} MiB files, disk reads {}",
        running.len(),
        options.rounds,
        if options.disk_mbps > 0 { 3 } else { 2 },
        options.duration,
        COLD_FILE >> 20,
        disk_rate(options.disk_mbps)
    );
    for server in &running {
        wrk(server, &HOT, 1, out)?;
    }
    let samples = measure_rounds(&running, &throttles, &files, options, out)?;
    drop(throttles);
    drop(running);
    write_report(&samples, &specs, options, out)
}

/// `options.rounds` rounds over the servers, each round starting one server later so
/// that none always goes first; a throttled disk settles after each measurement.
fn measure_rounds(
    running: &[Running],
    throttles: &[Option<DiskThrottle>],
    files: &[String],
    options: &Options,
    out: &Path,
) -> Result<Vec<ColdSample>> {
    let mut samples = Vec::new();
    for round in 0..options.rounds {
        for i in 0..running.len() {
            let index = (i + round) % running.len();
            let server = &running[index];
            let sample = measure(server, files, round, options, out)?;
            if let Some(throttle) = &throttles[index] {
                throttle.settle(Duration::from_secs(30));
            }
            eprintln!(
                "  round {} {:<24} idle p99 {:>7.2} ms, beside cached downloads {:>7.2} ms, loaded p99 {:>7.2} ms ({:.1}x), cold {:>5.0} MB/s",
                round + 1,
                sample.server,
                sample.idle_p99_ms,
                sample.cached_p99_ms.unwrap_or(f64::NAN),
                sample.loaded_p99_ms,
                sample.loaded_p99_ms / sample.idle_p99_ms,
                sample.cold_mb_per_s
            );
            samples.push(sample);
        }
    }
    Ok(samples)
}

/// The medians table (printed, cold.md) and every sample (cold.json).
fn write_report(
    samples: &[ColdSample],
    specs: &[ServerSpec],
    options: &Options,
    out: &Path,
) -> Result<()> {
    let medians = medians(samples, specs);
    let table = render(&medians, samples, options);
    println!("{table}");
    fs::write(out.join("cold.md"), &table)?;
    fs::write(
        out.join("cold.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "duration_s": options.duration,
            "rounds": options.rounds,
            "clients": CLIENTS,
            "cold_file_bytes": COLD_FILE,
            "hot": HOT.title,
            "disk_mbps": options.disk_mbps,
            "medians": medians,
            "samples": samples,
        }))?,
    )?;
    eprintln!(
        "xtask loadtest --cold: wrote {}/{{cold.md,cold.json}}",
        out.display()
    );
    Ok(())
}

/// The cold files: pseudo-random, so that nothing is sparse.
fn prepare_cold_files(dir: &Path) -> Result<Vec<String>> {
    fs::create_dir_all(dir)?;
    let mut names = Vec::new();
    for i in 0..CLIENTS {
        let name = format!("c{i:02}.bin");
        let path = dir.join(&name);
        if !fs::metadata(&path).is_ok_and(|m| m.len() == COLD_FILE) {
            eprintln!("xtask loadtest --cold: writing {}", path.display());
            let mut block = vec![0u8; 1 << 20];
            let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1du64 ^ i as u64);
            let mut file = std::io::BufWriter::new(fs::File::create(&path)?);
            for _ in 0..COLD_FILE / block.len() as u64 {
                rng.fill(&mut block);
                file.write_all(&block)?;
            }
            file.into_inner()?.sync_all()?;
        }
        names.push(name);
    }
    Ok(names)
}

fn measure(
    server: &Running,
    files: &[String],
    round: usize,
    options: &Options,
    out: &Path,
) -> Result<ColdSample> {
    let seconds = options.duration;
    let idle = wrk(server, &HOT, seconds, out)?;
    let cold_dir = out.join("www/cold");
    let cached = match options.disk_mbps {
        0 => None,
        mbps => {
            // Every client downloads the first file, kept in the page cache, at its
            // share of the disk's rate.
            let file = &files[0];
            warm_page_cache(&cold_dir.join(file))?;
            let pace = Pace::PerClient(mbps as f64 * 1e6 / CLIENTS as f64);
            let downloads = ColdClients::start(
                server.addr,
                &cold_dir,
                &[file; CLIENTS],
                pace,
                Receive::from(options),
            );
            let beside = wrk(server, &HOT, seconds, out);
            let (bytes, _, elapsed) = downloads.stop()?;
            Some((beside?.p99_ms, bytes as f64 / elapsed / 1e6))
        }
    };
    let downloads = ColdClients::start(
        server.addr,
        &cold_dir,
        files,
        Pace::ColdAsFastAsServed,
        Receive::from(options),
    );
    let loaded = wrk(server, &HOT, seconds, out);
    let (bytes, completed, elapsed) = downloads.stop()?;
    let loaded: LoadResult = loaded?;
    Ok(ColdSample {
        server: server.name.clone(),
        round,
        idle_p99_ms: idle.p99_ms,
        idle_requests_per_s: idle.requests_per_s,
        cached_p99_ms: cached.map(|(p99, _)| p99),
        cached_mb_per_s: cached.map(|(_, mbps)| mbps),
        loaded_p99_ms: loaded.p99_ms,
        loaded_p50_ms: loaded.p50_ms,
        loaded_requests_per_s: loaded.requests_per_s,
        cold_mb_per_s: bytes as f64 / elapsed / 1e6,
        cold_downloads: completed,
        errors: idle.errors + loaded.errors,
    })
}

/// How the download clients read.
#[derive(Clone, Copy, Debug)]
enum Pace {
    /// Each drops its file's pages from the page cache before each download and reads
    /// as fast as the server sends.
    ColdAsFastAsServed,
    /// Each reads at most this many bytes per second, and leaves the page cache be.
    PerClient(f64),
}

/// What the download clients do with the bodies they receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Receive {
    /// Discard them unread (`recv` with `MSG_TRUNC`, which TCP honours by dropping
    /// the bytes without copying them): no CPU on this machine touches the server's
    /// pages, as none does when a NIC sends them to a remote client.
    Discard,
    /// Copy them into the client's buffer, as a client on this machine does.
    Copy,
}

impl From<&Options> for Receive {
    fn from(options: &Options) -> Receive {
        if options.client_copy {
            Receive::Copy
        } else {
            Receive::Discard
        }
    }
}

/// The download clients: each downloads its file again and again on one keep-alive
/// connection.
struct ColdClients {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    completed: Arc<AtomicU64>,
    started: Instant,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl ColdClients {
    fn start<S: AsRef<str>>(
        addr: SocketAddr,
        dir: &Path,
        files: &[S],
        pace: Pace,
        receive: Receive,
    ) -> ColdClients {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let completed = Arc::new(AtomicU64::new(0));
        let threads = files
            .iter()
            .map(|name| {
                let name = name.as_ref();
                let client = ColdClient {
                    addr,
                    path: dir.join(name),
                    url_path: format!("/cold/{name}"),
                    pace,
                    receive,
                    stop: Arc::clone(&stop),
                    bytes: Arc::clone(&bytes),
                    completed: Arc::clone(&completed),
                };
                std::thread::spawn(move || client.run())
            })
            .collect();
        ColdClients {
            stop,
            bytes,
            completed,
            started: Instant::now(),
            threads,
        }
    }

    /// Stops the clients; returns the bytes they received, the downloads they
    /// completed and the seconds they ran.
    fn stop(self) -> Result<(u64, u64, f64)> {
        let elapsed = self.started.elapsed().as_secs_f64();
        let bytes = self.bytes.load(Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("a cold client panicked"))??;
        }
        Ok((bytes, self.completed.load(Ordering::Relaxed), elapsed))
    }
}

struct ColdClient {
    addr: SocketAddr,
    /// The file on disk, whose pages are dropped before each cold download.
    path: PathBuf,
    url_path: String,
    pace: Pace,
    receive: Receive,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    completed: Arc<AtomicU64>,
}

impl ColdClient {
    fn run(&self) -> Result<()> {
        let stream = TcpStream::connect(self.addr)
            .with_context(|| format!("cold client cannot connect to {}", self.addr))?;
        // Short, so that a stop is seen soon even while the server is slow.
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::with_capacity(256 << 10, stream);
        let request = format!("GET {} HTTP/1.1\r\nHost: cold\r\n\r\n", self.url_path);
        let mut scratch = vec![0u8; 256 << 10];
        let started = Instant::now();
        let mut received = 0u64;
        while !self.stopped() {
            if let Pace::ColdAsFastAsServed = self.pace {
                drop_from_page_cache(&self.path)?;
            }
            writer.write_all(request.as_bytes())?;
            let Some(mut remaining) = self.read_head(&mut reader)? else {
                return Ok(());
            };
            while remaining > 0 {
                let want = scratch.len().min(remaining as usize);
                match self.read_body(&mut reader, &mut scratch[..want]) {
                    Ok(0) => bail!("{} closed the connection mid-body", self.url_path),
                    Ok(n) => {
                        remaining -= n as u64;
                        received += n as u64;
                        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
                        if let Pace::PerClient(bytes_per_s) = self.pace {
                            let due =
                                started + Duration::from_secs_f64(received as f64 / bytes_per_s);
                            std::thread::sleep(due.saturating_duration_since(Instant::now()));
                        }
                    }
                    Err(e) if is_timeout(&e) && self.stopped() => return Ok(()),
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            self.completed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Receives up to `scratch.len()` bytes of a body, as `self.receive` says: what the
    /// reader has buffered is taken first, then the socket is read or discarded from.
    fn read_body(
        &self,
        reader: &mut BufReader<TcpStream>,
        scratch: &mut [u8],
    ) -> std::io::Result<usize> {
        if self.receive == Receive::Copy || !reader.buffer().is_empty() {
            return reader.read(scratch);
        }
        // TCP drops up to scratch.len() bytes without writing them to scratch.
        let (_, discarded) = rustix::net::recv(
            reader.get_ref(),
            &mut *scratch,
            rustix::net::RecvFlags::TRUNC,
        )?;
        Ok(discarded)
    }

    /// Reads a response head; returns its Content-Length, or `None` when stopped
    /// before it came.
    fn read_head(&self, reader: &mut BufReader<TcpStream>) -> Result<Option<u64>> {
        let mut head = Vec::new();
        loop {
            match reader.read_until(b'\n', &mut head) {
                Ok(0) => bail!("{} closed the connection", self.url_path),
                Ok(_) if head.ends_with(b"\r\n\r\n") => break,
                Ok(_) => {}
                Err(e) if is_timeout(&e) && self.stopped() => return Ok(None),
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let head = String::from_utf8_lossy(&head);
        if !head.starts_with("HTTP/1.1 200") {
            bail!(
                "{} answered {}",
                self.url_path,
                head.lines().next().unwrap_or("")
            );
        }
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .with_context(|| format!("no Content-Length for {}", self.url_path))?;
        Ok(Some(length))
    }
}

/// How the disk is limited, in words.
fn disk_rate(mbps: u64) -> String {
    match mbps {
        0 => "not limited".to_string(),
        mbps => format!("limited to {mbps} MB/s (cgroup throttle)"),
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Reads `path` once, so that its pages are in the page cache (this process is not
/// under the servers' disk throttle).
fn warm_page_cache(path: &Path) -> Result<()> {
    let mut file =
        fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    std::io::copy(&mut file, &mut std::io::sink())
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(())
}

/// Drops `path`'s pages from the page cache (those no process holds mapped).
fn drop_from_page_cache(path: &Path) -> Result<()> {
    let file = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    rustix::fs::fadvise(file.as_fd(), 0, None, rustix::fs::Advice::DontNeed)
        .with_context(|| format!("posix_fadvise(DONTNEED) on {}", path.display()))?;
    Ok(())
}

/// The most ioserve's hot p99 under the cold downloads may be over its idle p99, in
/// every round.
const SLOWDOWN_BOUND: f64 = 1.5;

fn medians(samples: &[ColdSample], specs: &[ServerSpec]) -> Vec<ColdMedian> {
    specs
        .iter()
        .map(|spec| {
            let of = |f: fn(&ColdSample) -> f64| {
                median(samples.iter().filter(|s| s.server == spec.name).map(f)).unwrap_or(f64::NAN)
            };
            let idle_p99_ms = of(|s| s.idle_p99_ms);
            let cached_p99_ms = of(|s| s.cached_p99_ms.unwrap_or(f64::NAN));
            let loaded_p99_ms = of(|s| s.loaded_p99_ms);
            ColdMedian {
                server: spec.name.clone(),
                idle_p99_ms,
                cached_p99_ms,
                loaded_p50_ms: of(|s| s.loaded_p50_ms),
                loaded_p99_ms,
                slowdown: loaded_p99_ms / idle_p99_ms,
                cold_over_cached: loaded_p99_ms / cached_p99_ms,
                loaded_requests_per_s: of(|s| s.loaded_requests_per_s),
                cold_mb_per_s: of(|s| s.cold_mb_per_s),
                errors: samples
                    .iter()
                    .filter(|s| s.server == spec.name)
                    .map(|s| s.errors)
                    .sum(),
            }
        })
        .collect()
}

/// The report: the medians' table, then ioserve-sendfile's loaded p99 against its
/// idle p99 in each round of `samples` (the target holds in every round or not at all).
fn render(medians: &[ColdMedian], samples: &[ColdSample], options: &Options) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Cold disk: hot {} beside {CLIENTS} clients downloading {} MiB files dropped from the page cache before each download; disk reads {}.\n\
         Cached downloads: the same clients paced at the disk's rate, downloading one file that stays in the page cache (the traffic without the disk).\n\
         The download clients {}.\n\
         Medians of {} round(s) of {} s idle + {} s beside cached downloads + {} s loaded per server; wrk -t2 on the same {} CPUs.\n",
        HOT.title,
        COLD_FILE >> 20,
        disk_rate(options.disk_mbps),
        match Receive::from(options) {
            Receive::Discard => "discard the bodies unread (recv with MSG_TRUNC), as a NIC's DMA leaves them; --client-copy copies them",
            Receive::Copy => "copy the bodies into their buffers (--client-copy)",
        },
        options.rounds,
        options.duration,
        options.duration,
        options.duration,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    text.push_str("| server | idle p99 ms | beside cached downloads p99 ms | loaded p50 ms | loaded p99 ms | loaded / idle p99 | loaded / cached p99 | hot req/s loaded | cold MB/s | errors |\n");
    text.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let figure = |value: f64, decimals: usize, suffix: &str| match value.is_finite() {
        true => format!("{value:.decimals$}{suffix}"),
        false => "-".to_string(),
    };
    for m in medians {
        let _ = writeln!(
            text,
            "| {} | {:.2} | {} | {:.2} | {:.2} | {:.1}x | {} | {:.0} | {:.0} | {} |",
            m.server,
            m.idle_p99_ms,
            figure(m.cached_p99_ms, 2, ""),
            m.loaded_p50_ms,
            m.loaded_p99_ms,
            m.slowdown,
            figure(m.cold_over_cached, 1, "x"),
            m.loaded_requests_per_s,
            m.cold_mb_per_s,
            m.errors
        );
    }
    let find = |name: &str| medians.iter().find(|m| m.server == name);
    if let Some(ours) = find("ioserve-sendfile") {
        let mut rounds: Vec<&ColdSample> = samples
            .iter()
            .filter(|s| s.server == "ioserve-sendfile")
            .collect();
        rounds.sort_by_key(|s| s.round);
        let ratios: Vec<f64> = rounds
            .iter()
            .map(|s| s.loaded_p99_ms / s.idle_p99_ms)
            .collect();
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        let _ = writeln!(
            text,
            "\nioserve-sendfile: loaded p99 {:.2}x its idle p99 (median); per round {}, worst {worst:.2}x (target <= {SLOWDOWN_BOUND}x in every round: {})",
            ours.slowdown,
            listed.join(", "),
            match worst <= SLOWDOWN_BOUND && !ratios.is_empty() {
                true => "met",
                false => "not met",
            }
        );
        if ours.cached_p99_ms.is_finite() {
            let _ = writeln!(
                text,
                "ioserve-sendfile: beside the same downloads from the page cache (no disk) its p99 is {:.1}x its idle p99; the cold disk adds {:.2} ms ({:.1}x)",
                ours.cached_p99_ms / ours.idle_p99_ms,
                ours.loaded_p99_ms - ours.cached_p99_ms,
                ours.cold_over_cached
            );
        }
        if let Some(threads) = find("nginx-aio-threads") {
            let _ = writeln!(
                text,
                "ioserve-sendfile: loaded p99 {:.2}x nginx-aio-threads' (target <= 1x)",
                ours.loaded_p99_ms / threads.loaded_p99_ms
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(server: &str, round: usize, cached_p99_ms: Option<f64>, loaded: f64) -> ColdSample {
        ColdSample {
            server: server.into(),
            round,
            idle_p99_ms: 0.25,
            idle_requests_per_s: 4500.0,
            cached_p99_ms,
            cached_mb_per_s: cached_p99_ms.map(|_| 200.0),
            loaded_p99_ms: loaded,
            loaded_p50_ms: 0.1,
            loaded_requests_per_s: 4100.0,
            cold_mb_per_s: 199.0,
            cold_downloads: 10,
            errors: 0,
        }
    }

    fn options(disk_mbps: u64) -> Options {
        Options {
            duration: 6,
            rounds: 3,
            cold: true,
            disk_mbps,
            ..Options::default()
        }
    }

    #[test]
    fn the_report_sets_the_loaded_p99_against_idle_and_cached_downloads() {
        let specs = select(cold_servers(), &["ioserve-sendfile".into()]).unwrap();
        let samples = [
            sample("ioserve-sendfile", 0, Some(0.5), 3.0),
            sample("ioserve-sendfile", 1, Some(0.25), 2.0),
            sample("ioserve-sendfile", 2, Some(0.3), 9.0),
        ];
        let medians = medians(&samples, &specs);
        assert_eq!(
            (medians[0].cached_p99_ms, medians[0].loaded_p99_ms),
            (0.3, 3.0)
        );
        assert_eq!(medians[0].cold_over_cached, 10.0);
        let text = render(&medians, &samples, &options(200));
        assert!(
            text.contains("| ioserve-sendfile | 0.25 | 0.30 | 0.10 | 3.00 | 12.0x | 10.0x |"),
            "{text}"
        );
        assert!(
            text.contains("the cold disk adds 2.70 ms (10.0x)"),
            "{text}"
        );
        assert!(
            text.contains("loaded p99 12.00x its idle p99 (median); per round 12.00, 8.00, 36.00, worst 36.00x (target <= 1.5x in every round: not met)"),
            "{text}"
        );
    }

    #[test]
    fn without_a_disk_limit_there_is_no_cached_figure() {
        let specs = select(cold_servers(), &["ioserve-sendfile".into()]).unwrap();
        let samples = [sample("ioserve-sendfile", 0, None, 3.0)];
        let text = render(&medians(&samples, &specs), &samples, &options(0));
        assert!(
            text.contains("| ioserve-sendfile | 0.25 | - | 0.10 | 3.00 | 12.0x | - |"),
            "{text}"
        );
        assert!(!text.contains("the cold disk adds"), "{text}");
    }

    /// A keep-alive server answering every request with `body` bytes, split over
    /// several writes.
    fn serve_forever(body: usize) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let chunk = vec![7u8; 1000];
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) if line == "\r\n" => {
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n");
                        if writer.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        let mut left = body;
                        while left > 0 {
                            let n = left.min(chunk.len());
                            if writer.write_all(&chunk[..n]).is_err() {
                                return;
                            }
                            left -= n;
                        }
                    }
                    Ok(_) => {}
                }
            }
        });
        addr
    }

    #[test]
    fn download_clients_take_each_body_exactly_whether_they_copy_or_discard() {
        // A body not a multiple of the clients' reads or the server's writes: a client
        // that took a byte too many or too few would read the next head wrong and fail.
        const BODY: usize = 300_001;
        for receive in [Receive::Discard, Receive::Copy] {
            let addr = serve_forever(BODY);
            let clients = ColdClients::start(
                addr,
                Path::new("/nonexistent"),
                &["file"],
                Pace::PerClient(1e12),
                receive,
            );
            // Generous for a slow and loaded CI host; ends as soon as five are done.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let completed = clients.completed.load(Ordering::Relaxed);
                if completed >= 5 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{receive:?}: {completed} of 5 bodies completed in 30 s"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            // stop() reads the byte count before the clients stop: at least the five
            // bodies seen complete.
            let (bytes, completed, _) = clients.stop().unwrap();
            assert!(completed >= 5, "{receive:?}");
            assert!(bytes >= 5 * BODY as u64, "{receive:?}: {bytes} bytes");
        }
    }

    #[test]
    fn the_report_says_how_the_clients_received() {
        let specs = select(cold_servers(), &["ioserve-sendfile".into()]).unwrap();
        let samples = [sample("ioserve-sendfile", 0, Some(0.3), 3.0)];
        let medians = medians(&samples, &specs);
        assert!(render(&medians, &samples, &options(200)).contains("discard the bodies unread"));
        let copying = Options {
            client_copy: true,
            ..options(200)
        };
        assert!(render(&medians, &samples, &copying).contains("copy the bodies into their buffers"));
    }
}

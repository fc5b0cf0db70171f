//! `cargo xtask soak`: hours of mixed load on one ioserve over HTTPS, with its
//! resources sampled, failing on any error and on what grows.
//!
//! The mix, all at once for `--duration`: wrk's keep-alive requests for small files
//! over HTTP/1.1 (16 connections, about 800 per second), curl downloads of a 32 MiB
//! file over HTTP/2 in two halves (a range, then a resume with `-C`), single ranges at
//! random offsets, slow readers (2 MiB at 200 KB/s), directory listings; every minute a
//! SIGHUP, every other one with a new certificate written first (a certificate
//! reload). Every body is compared with the file. Every `--interval` the server's RSS
//! (and its anonymous part),
//! open descriptors and threads, its request count and 5xx count are written to
//! `soak.csv`, plotted in `soak.svg`, both in `--out`.
//!
//! It fails on any failed client request, wrk error or 5xx; and, after the warm-up (the
//! first tenth of the run, at least 30 s), on an anonymous RSS (heap and stacks) that
//! grows by more than 1 % per hour, or descriptors or threads that grow by more than
//! 5 % over the run: each a least-squares slope that must also stand out of the
//! samples' noise (three standard errors), so that jitter is not taken for a leak. The
//! RSS slope is judged on 10 minutes or more after the warm-up; a shorter run (CI's two
//! minutes) fails on an anonymous RSS that ends over 25 % above the highest it had
//! reached by the first sample after the warm-up (a CI run's anonymous RSS was 11.1 MiB
//! at 10 s, 9.3 at 30 s and 11.9 at the end: a pool thread more, not a leak).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use rustix::process::Signal;

use super::paced_wrk::{signal, PacedWrk};
use crate::util::certificate::self_signed;
use crate::util::ioserve_process::{IoserveBinary, IoserveProcess};
use crate::util::svg::{Anchor, Svg, PALETTE};
use crate::util::{ensure_packages, target_dir};

/// Options of `cargo xtask soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct Options {
    #[command(flatten)]
    binary: IoserveBinary,
    /// How long the load runs (`90s`, `1h`)
    #[arg(long, default_value = "1h", value_parser = duration_arg::parse_positive)]
    duration: Duration,
    /// How often the server's resources are sampled
    #[arg(long, default_value = "10s", value_parser = duration_arg::parse_positive)]
    interval: Duration,
    /// Where soak.csv and soak.svg go [default: TARGET_DIR/soak]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// `cargo xtask soak`.
pub(crate) fn run(options: &Options) -> Result<()> {
    let ioserve = options.binary.get()?;
    let out = match &options.out {
        Some(out) => out.clone(),
        None => target_dir()?.join("soak"),
    };
    soak(
        &ioserve,
        options.duration,
        options.interval,
        &out,
        &Mix::FULL,
    )
}

/// `cargo xtask ci`'s short run: two minutes, sampled every 10 s, of the light mix.
pub(crate) fn ci(ioserve: &Path) -> Result<()> {
    let out = target_dir()?.join("soak");
    soak(
        ioserve,
        Duration::from_secs(120),
        Duration::from_secs(10),
        &out,
        &Mix::LIGHT,
    )
}

/// The programs the load runs.
const PACKAGES: &[(&str, &str)] = &[("wrk", "wrk"), ("curl", "curl")];

/// The tree served: the large file, the slow readers' file, small files, a listing.
struct Tree {
    large: Arc<Vec<u8>>,
    medium: Arc<Vec<u8>>,
}

const LARGE: usize = 32 << 20;
/// The small files wrk asks for in turn.
const SMALL_FILES: [&str; 4] = ["/s0.txt", "/s1.txt", "/s2.txt", "/s3.txt"];
const MEDIUM: usize = 2 << 20;

/// How much of each load the soak puts on.
struct Mix {
    /// wrk's connections and the pause of each between its requests.
    wrk_connections: u32,
    wrk_delay_ms: u32,
    /// Loops of each curl workload.
    loops: usize,
    /// `--limit-rate` of the large downloads.
    download_rate: &'static str,
}

impl Mix {
    /// `cargo xtask soak`'s: about 750 requests a second, two loops of each download.
    const FULL: Mix = Mix {
        wrk_connections: 16,
        wrk_delay_ms: 20,
        loops: 2,
        download_rate: "40M",
    };
    /// CI's: every kind of request, at a fifth of the rate, so that the guests beside
    /// it keep their CPU.
    const LIGHT: Mix = Mix {
        wrk_connections: 8,
        wrk_delay_ms: 50,
        loops: 1,
        download_rate: "10M",
    };
}

fn soak(
    ioserve: &Path,
    duration: Duration,
    interval: Duration,
    out: &Path,
    mix: &Mix,
) -> Result<()> {
    ensure_packages(PACKAGES)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot make {}", out.display()))?;
    let scratch = tempfile::tempdir()?;
    let root = scratch.path().join("root");
    let tree = make_tree(&root)?;
    let tls = scratch.path().join("tls");
    std::fs::create_dir(&tls)?;
    let certificate = self_signed(&tls)?;
    let config = scratch.path().join("ioserve.toml");
    std::fs::write(&config, "access-log = false\n")?;
    let mut command = Command::new(ioserve);
    command
        .arg(&root)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config)
        .arg("--tls-cert")
        .arg(&certificate.cert)
        .arg("--tls-key")
        .arg(&certificate.key)
        .stderr(std::fs::File::create(out.join("ioserve.log"))?);
    let server = IoserveProcess::start(command, "https", Duration::from_secs(30))?;
    let base = format!("https://{}", server.addr);
    let metrics = server
        .metrics
        .context("ioserve printed no metrics address")?;
    let pid = server.pid();
    println!(
        "xtask soak: {} for {:?}, sampled every {:?}, into {}",
        ioserve.display(),
        duration,
        interval,
        out.display()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Failures::default());
    let wrk = PacedWrk::start(
        &base,
        &SMALL_FILES,
        mix.wrk_connections,
        mix.wrk_delay_ms,
        scratch.path(),
    )?;
    let mut clients = Vec::new();
    let workloads: [(&str, Workload, usize); 4] = [
        (
            "download in two halves",
            Client::download_with_resume,
            mix.loops,
        ),
        ("range", Client::range, 1),
        ("slow reader", Client::slow_reader, mix.loops),
        ("listing", Client::listing, 1),
    ];
    let workloads = workloads
        .into_iter()
        .flat_map(|(name, workload, loops)| std::iter::repeat_n((name, workload), loops));
    for (name, workload) in workloads {
        let client = Client {
            download_rate: mix.download_rate,
            base: base.clone(),
            large: Arc::clone(&tree.large),
            medium: Arc::clone(&tree.medium),
        };
        let (stop, failures) = (Arc::clone(&stop), Arc::clone(&failures));
        clients.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Err(error) = workload(&client) {
                    failures.add(name, &error);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut csv = String::from(
        "seconds,rss_kib,rss_anon_kib,descriptors,threads,requests,server_errors,client_errors\n",
    );
    let mut next_reload = Duration::from_secs(60);
    let mut reloads = 0u32;
    loop {
        let at = started.elapsed();
        let sample = Sample::take(pid, metrics, at, failures.count())?;
        csv.push_str(&sample.csv_row());
        samples.push(sample);
        std::fs::write(out.join("soak.csv"), &csv)?;
        if at >= duration {
            break;
        }
        let until_sample = interval.saturating_sub(started.elapsed().saturating_sub(at));
        let wake = started.elapsed() + until_sample;
        while started.elapsed() < wake {
            if started.elapsed() >= next_reload {
                reloads += 1;
                if reloads.is_multiple_of(2) {
                    // A certificate reload: new files, read by the SIGHUP.
                    self_signed(&tls)?;
                }
                signal(pid, Signal::HUP)?;
                next_reload += Duration::from_secs(60);
            }
            std::thread::sleep(
                Duration::from_millis(100).min(wake.saturating_sub(started.elapsed())),
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let wrk_requests = wrk.finish();
    for client in clients {
        let _ = client.join();
    }
    let log = std::fs::read_to_string(out.join("ioserve.log")).unwrap_or_default();
    let reloaded = log.matches("SIGHUP: configuration reloaded").count();
    std::fs::write(out.join("soak.svg"), plot(&samples, duration))?;

    let report = Report::of(&samples, duration);
    let summary = format!(
        "{report}; wrk: {}; {} SIGHUPs sent, {reloaded} reloads logged ({} with a new certificate)",
        match &wrk_requests {
            Ok(requests) => format!("{requests} requests, no error"),
            Err(error) => format!("{error:#}"),
        },
        reloads,
        reloads / 2
    );
    std::fs::write(out.join("summary.md"), format!("{summary}\n"))?;
    println!("xtask soak: {summary}");
    let mut problems = report.problems();
    if let Err(error) = wrk_requests {
        problems.push(format!("wrk: {error:#}"));
    }
    problems.extend(failures.first());
    if reloaded != reloads as usize {
        problems.push(format!("{reloads} SIGHUPs sent, {reloaded} reloads logged"));
    }
    if !problems.is_empty() {
        bail!("the soak failed:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

fn make_tree(root: &Path) -> Result<Tree> {
    std::fs::create_dir_all(root.join("dir"))?;
    let mut large = vec![0u8; LARGE];
    fastrand::fill(&mut large);
    std::fs::write(root.join("large.bin"), &large)?;
    let mut medium = vec![0u8; MEDIUM];
    fastrand::fill(&mut medium);
    std::fs::write(root.join("medium.bin"), &medium)?;
    for i in 0..4 {
        std::fs::write(
            root.join(format!("s{i}.txt")),
            vec![b'a' + i as u8; 1024 << i],
        )?;
    }
    for i in 0..50 {
        std::fs::write(
            root.join("dir").join(format!("file-{i:02}.txt")),
            format!("{i}\n"),
        )?;
    }
    Ok(Tree {
        large: Arc::new(large),
        medium: Arc::new(medium),
    })
}

/// One kind of client request, made again and again.
type Workload = fn(&Client) -> Result<()>;

/// Client failures, counted, the first few kept.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Failures {
    fn add(&self, workload: &str, error: &anyhow::Error) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if first.len() < 10 {
            first.push(format!("{workload}: {error:#}"));
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn first(&self) -> Vec<String> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One curl-driven workload's view of the server.
struct Client {
    /// `--limit-rate` of the large downloads.
    download_rate: &'static str,
    base: String,
    large: Arc<Vec<u8>>,
    medium: Arc<Vec<u8>>,
}

impl Client {
    /// curl over HTTP/2 where the server offers it, not checking the test certificate
    /// (it changes under the clients), failing on an HTTP error.
    fn curl(&self, args: &[&str], path: &str) -> Result<Vec<u8>> {
        let mut child = Command::new("curl")
            .args([
                "--silent",
                "--show-error",
                "--fail",
                "--insecure",
                "--max-time",
                "120",
            ])
            .args(args)
            .arg(format!("{}{path}", self.base))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run curl")?;
        let mut body = Vec::new();
        child
            .stdout
            .take()
            .context("curl's stdout")?
            .read_to_end(&mut body)?;
        let mut said = String::new();
        child
            .stderr
            .take()
            .context("curl's stderr")?
            .read_to_string(&mut said)?;
        let status = child.wait()?;
        ensure!(
            status.success(),
            "curl {path} {args:?}: {status}: {}",
            said.trim()
        );
        Ok(body)
    }

    /// The large file's first half as a range, then the rest by resuming.
    fn download_with_resume(&self) -> Result<()> {
        let half = LARGE / 2;
        let mut body = self.curl(
            &[
                "--range",
                &format!("0-{}", half - 1),
                "--limit-rate",
                self.download_rate,
            ],
            "/large.bin",
        )?;
        ensure!(body.len() == half, "the first half: {} bytes", body.len());
        // What `curl -C -` does with a partial file: a Range from its size.
        let rest = self.curl(
            &[
                "--continue-at",
                &half.to_string(),
                "--limit-rate",
                self.download_rate,
            ],
            "/large.bin",
        )?;
        body.extend_from_slice(&rest);
        ensure!(
            body[..] == self.large[..],
            "the resumed download is not the file ({} bytes)",
            body.len()
        );
        Ok(())
    }

    /// A range at a random place of the large file.
    fn range(&self) -> Result<()> {
        let start = fastrand::usize(..LARGE - 1);
        let end = (start + fastrand::usize(1..1 << 20)).min(LARGE - 1);
        let body = self.curl(&["--range", &format!("{start}-{end}")], "/large.bin")?;
        ensure!(
            body[..] == self.large[start..=end],
            "range {start}-{end} is not the file's"
        );
        Ok(())
    }

    /// The medium file, read at 200 KB/s.
    fn slow_reader(&self) -> Result<()> {
        let body = self.curl(&["--limit-rate", "200K"], "/medium.bin")?;
        ensure!(
            body[..] == self.medium[..],
            "the slow download is not the file ({} bytes)",
            body.len()
        );
        Ok(())
    }

    /// The listing of the directory of 50 files.
    fn listing(&self) -> Result<()> {
        let body = String::from_utf8(self.curl(&[], "/dir/")?)?;
        ensure!(
            body.contains("file-49.txt"),
            "the listing lacks file-49.txt"
        );
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }
}

/// The server's resources at one moment.
#[derive(Debug, Clone)]
struct Sample {
    seconds: f64,
    rss_kib: u64,
    /// The anonymous part of the RSS (the heap, stacks): what a leak grows. The rest
    /// is the binary's and libraries' pages, which grow as more code runs.
    anon_kib: u64,
    descriptors: u64,
    threads: u64,
    requests: u64,
    server_errors: u64,
    client_errors: u64,
}

impl Sample {
    fn take(
        pid: u32,
        metrics: std::net::SocketAddr,
        at: Duration,
        client_errors: u64,
    ) -> Result<Sample> {
        let status =
            std::fs::read_to_string(format!("/proc/{pid}/status")).context("the server is gone")?;
        let field = |name: &str| -> Result<u64> {
            let line = status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
            Ok(line.split_whitespace().next().unwrap_or("0").parse()?)
        };
        let descriptors = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
        let text = scrape(metrics)?;
        let (requests, server_errors) = requests_in(&text);
        Ok(Sample {
            seconds: at.as_secs_f64(),
            rss_kib: field("VmRSS:")?,
            anon_kib: field("RssAnon:")?,
            descriptors,
            threads: field("Threads:")?,
            requests,
            server_errors,
            client_errors,
        })
    }

    fn csv_row(&self) -> String {
        format!(
            "{:.1},{},{},{},{},{},{},{}\n",
            self.seconds,
            self.rss_kib,
            self.anon_kib,
            self.descriptors,
            self.threads,
            self.requests,
            self.server_errors,
            self.client_errors
        )
    }
}

/// The metrics page, over plain HTTP.
fn scrape(metrics: std::net::SocketAddr) -> Result<String> {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(metrics)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    ensure!(
        text.starts_with("HTTP/1.1 200"),
        "the metrics answer: {}",
        text.lines().next().unwrap_or("")
    );
    Ok(text)
}

/// All requests answered, and those answered with a 5xx status.
fn requests_in(text: &str) -> (u64, u64) {
    let mut all = 0;
    let mut errors = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("ioserve_requests_total{status=\"") else {
            continue;
        };
        let Some((status, value)) = rest.split_once("\"} ") else {
            continue;
        };
        let value: u64 = value.trim().parse().unwrap_or(0);
        all += value;
        if status.starts_with('5') {
            errors += value;
        }
    }
    (all, errors)
}

/// A least-squares line through `points`: its slope and that slope's standard error.
fn slope(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let b = sxy / sxx;
    let a = mean_y - b * mean_x;
    let residual: f64 = points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
    let error = (residual / (n - 2.0) / sxx).sqrt();
    Some((b, error))
}

/// The shortest window after the warm-up on which the RSS slope is judged.
const SLOPE_WINDOW: f64 = 600.0;

/// What the samples after the warm-up say.
struct Report {
    warm_up: f64,
    samples: usize,
    rss_mib: (f64, f64),
    /// RSS growth in % of its mean per hour, and its standard error.
    rss_per_hour: Option<(f64, f64)>,
    /// Seconds from the first to the last sample after the warm-up.
    window: f64,
    /// The highest anonymous RSS up to the first sample after the warm-up (the
    /// footprint the load has already reached), and that of the last sample.
    rss_start_kib: u64,
    rss_end_kib: u64,
    descriptors: Trend,
    threads: Trend,
    requests: u64,
    server_errors: u64,
    client_errors: u64,
}

/// A count's range and its growth over the run (fitted), in % of its mean.
struct Trend {
    min: u64,
    max: u64,
    growth: Option<(f64, f64)>,
    /// The highest count of the first and of the last third of the samples.
    first_third_max: u64,
    last_third_max: u64,
}

impl Trend {
    fn of(points: &[(f64, f64)], span: f64) -> Trend {
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
        let third = points.len() / 3;
        let max_of = |points: &[(f64, f64)]| points.iter().map(|p| p.1 as u64).max().unwrap_or(0);
        Trend {
            min: points.iter().map(|p| p.1 as u64).min().unwrap_or(0),
            max: max_of(points),
            growth: slope(points).map(|(b, e)| (b * span / mean * 100.0, e * span / mean * 100.0)),
            first_third_max: max_of(&points[..third]),
            last_third_max: max_of(&points[points.len() - third..]),
        }
    }

    /// Grows: by more than `limit` % over the run and by more than three standard
    /// errors, and the last third of the run reaches above the first third's highest
    /// by more than 2 (a pool's thread or a connection more is not growth).
    fn grows(&self, limit: f64) -> bool {
        self.growth.is_some_and(|(g, e)| g > limit && g > 3.0 * e)
            && self.last_third_max > self.first_third_max + 2
    }
}

impl Report {
    fn of(samples: &[Sample], duration: Duration) -> Report {
        let warm_up = (duration.as_secs_f64() / 10.0).max(30.0);
        let after: Vec<&Sample> = samples.iter().filter(|s| s.seconds >= warm_up).collect();
        let points = |value: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            after.iter().map(|s| (s.seconds, value(s))).collect()
        };
        let rss = points(|s| s.anon_kib as f64);
        let mean_rss = rss.iter().map(|p| p.1).sum::<f64>() / rss.len().max(1) as f64;
        let span =
            after.last().map_or(0.0, |s| s.seconds) - after.first().map_or(0.0, |s| s.seconds);
        let last = samples.last();
        Report {
            warm_up,
            samples: after.len(),
            rss_mib: (
                rss.iter().map(|p| p.1).fold(f64::MAX, f64::min) / 1024.0,
                rss.iter().map(|p| p.1).fold(0.0, f64::max) / 1024.0,
            ),
            rss_per_hour: slope(&rss)
                .map(|(b, e)| (b * 3600.0 / mean_rss * 100.0, e * 3600.0 / mean_rss * 100.0)),
            window: span,
            rss_start_kib: samples
                .iter()
                .take_while(|s| s.seconds <= after.first().map_or(0.0, |first| first.seconds))
                .map(|s| s.anon_kib)
                .max()
                .unwrap_or(0),
            rss_end_kib: after.last().map_or(0, |s| s.anon_kib),
            descriptors: Trend::of(&points(|s| s.descriptors as f64), span),
            threads: Trend::of(&points(|s| s.threads as f64), span),
            requests: last.map_or(0, |s| s.requests),
            server_errors: last.map_or(0, |s| s.server_errors),
            client_errors: last.map_or(0, |s| s.client_errors),
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.samples < 3 {
            problems.push(format!("only {} samples after the warm-up", self.samples));
        }
        if self.server_errors > 0 {
            problems.push(format!(
                "{} responses with a 5xx status",
                self.server_errors
            ));
        }
        if self.client_errors > 0 {
            problems.push(format!("{} failed client requests", self.client_errors));
        }
        // A slope of 1 % per hour is 0.03 % of the RSS in two minutes, below the steps
        // of the allocator (an arena for a new pool thread): it is judged on a window
        // of 10 minutes or more; a shorter run bounds the growth instead.
        if self.window >= SLOPE_WINDOW {
            if let Some((growth, error)) = self.rss_per_hour {
                if growth > 1.0 && growth > 3.0 * error {
                    problems.push(format!(
                        "anonymous RSS grows {growth:.2} % per hour (± {error:.2})"
                    ));
                }
            }
        } else if self.rss_end_kib > self.rss_start_kib * 5 / 4 {
            problems.push(format!(
                "anonymous RSS grew from {} KiB after the warm-up to {} KiB (over 25 %)",
                self.rss_start_kib, self.rss_end_kib
            ));
        }
        if self.descriptors.grows(5.0) {
            problems.push(format!(
                "open descriptors grow: {}..{}",
                self.descriptors.min, self.descriptors.max
            ));
        }
        if self.threads.grows(5.0) {
            problems.push(format!(
                "threads grow: {}..{}",
                self.threads.min, self.threads.max
            ));
        }
        problems
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let trend = |t: &Trend| match t.growth {
            Some((g, e)) => format!("{}..{} ({g:+.1} % ± {e:.1} over the run)", t.min, t.max),
            None => format!("{}..{}", t.min, t.max),
        };
        write!(
            f,
            "{} requests answered, {} with 5xx, {} client failures; after the {:.0} s warm-up ({} samples): anonymous RSS {:.1}..{:.1} MiB ({}), descriptors {}, threads {}",
            self.requests,
            self.server_errors,
            self.client_errors,
            self.warm_up,
            self.samples,
            self.rss_mib.0,
            self.rss_mib.1,
            match self.rss_per_hour {
                Some((g, e)) => format!("{g:+.2} % per hour ± {e:.2}"),
                None => "no slope".into(),
            },
            trend(&self.descriptors),
            trend(&self.threads),
        )
    }
}

/// One series of the plot, read from each sample.
type Measure = fn(&Sample) -> f64;

/// RSS, descriptors and threads over time, one panel each.
fn plot(samples: &[Sample], duration: Duration) -> String {
    let (width, panel) = (720.0, 150.0);
    let (left, right) = (70.0, width - 20.0);
    let mut svg = Svg::new(
        width,
        40.0 + 4.0 * (panel + 30.0) + 20.0,
        "ioserve under cargo xtask soak",
    );
    let end = samples
        .last()
        .map_or(duration.as_secs_f64(), |s| s.seconds)
        .max(1.0);
    let minutes = end / 60.0;
    let series: [(&str, Measure); 4] = [
        ("RSS (MiB)", |s| s.rss_kib as f64 / 1024.0),
        ("anonymous RSS (MiB)", |s| s.anon_kib as f64 / 1024.0),
        ("open descriptors", |s| s.descriptors as f64),
        ("threads", |s| s.threads as f64),
    ];
    for (i, (name, value)) in series.into_iter().enumerate() {
        let top = 40.0 + i as f64 * (panel + 30.0);
        let bottom = top + panel;
        let max = samples.iter().map(value).fold(0.0, f64::max).max(1.0) * 1.1;
        svg.line((left, bottom), (right, bottom), "black", false);
        svg.line((left, top), (left, bottom), "black", false);
        svg.text(left + 4.0, top + 12.0, Anchor::Start, name);
        svg.text(left - 6.0, top + 10.0, Anchor::End, &format!("{max:.0}"));
        svg.text(left - 6.0, bottom, Anchor::End, "0");
        svg.text(
            right,
            bottom + 14.0,
            Anchor::End,
            &format!("{minutes:.1} min"),
        );
        let points: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| {
                (
                    left + (right - left) * s.seconds / end,
                    bottom - (bottom - top) * value(s) / max,
                )
            })
            .collect();
        svg.polyline(&points, PALETTE[i]);
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_series_has_no_slope_and_a_leak_has_one() {
        let flat: Vec<(f64, f64)> = (0..20)
            .map(|i| (i as f64, 100.0 + (i % 3) as f64))
            .collect();
        let (b, e) = slope(&flat).unwrap();
        assert!(b.abs() < 3.0 * e || b.abs() < 0.1, "{b} ± {e}");
        let leak: Vec<(f64, f64)> = (0..20).map(|i| (i as f64, 100.0 + i as f64)).collect();
        let (b, e) = slope(&leak).unwrap();
        assert!((b - 1.0).abs() < 1e-9 && e < 1e-9, "{b} ± {e}");
    }

    /// Two minutes sampled every 10 s with these anonymous RSS values (KiB), 13 threads.
    fn two_minutes(anon_kib: [u64; 13]) -> Vec<Sample> {
        anon_kib
            .iter()
            .enumerate()
            .map(|(i, &anon_kib)| Sample {
                seconds: 10.0 * i as f64,
                rss_kib: anon_kib + 12_000,
                anon_kib,
                descriptors: 56,
                threads: 13,
                requests: 2000 * i as u64,
                server_errors: 0,
                client_errors: 0,
            })
            .collect()
    }

    #[test]
    fn a_short_run_judges_the_rss_against_the_warm_ups_peak() {
        // A CI run's: down from 11.1 MiB after the warm-up, back to 11.9 by the end.
        let ci = two_minutes([
            5556, 11100, 9908, 9280, 9524, 9444, 10728, 11988, 11796, 11720, 11724, 11764, 11896,
        ]);
        let report = Report::of(&ci, Duration::from_secs(120));
        assert_eq!(report.problems(), Vec::<String>::new());
        // Past the warm-up's peak by over a quarter: a leak for a short run.
        let leak = two_minutes([
            5556, 9000, 9100, 9280, 9900, 10500, 11000, 11500, 12000, 12500, 13000, 13500, 14000,
        ]);
        let problems = Report::of(&leak, Duration::from_secs(120)).problems();
        assert!(
            problems.iter().any(|p| p.contains("anonymous RSS grew")),
            "{problems:?}"
        );
    }

    #[test]
    fn requests_and_server_errors_are_read_from_the_metrics() {
        let text = "ioserve_requests_total{status=\"200\"} 10\nioserve_requests_total{status=\"503\"} 2\nioserve_requests_total{status=\"404\"} 1\n";
        assert_eq!(requests_in(text), (13, 2));
    }
}

//! `cargo xtask udpload`: seed 002's measurement. A bounded load generator (K client
//! sockets on 127.0.0.1, batched sends paced to an offered rate, a fixed duration per
//! step) against timeserve with one socket, timeserve with N SO_REUSEPORT sockets,
//! chrony, and the seed's Go server in both shapes. Each step records replies per
//! second, loss, the round trip's p50/p99 and the kernel's `RcvbufErrors` delta
//! (datagrams dropped because a receive queue was full), and the server's CPU time per
//! answer, into target/udpload/{report.md,results.json,chart.svg}.
//!
//! With `--nts`, the servers are timeserve and chrony, each in plain NTP and in NTS
//! (RFC 8915: authenticated requests with valid cookies, [`nts`]), and the report adds
//! what authentication costs per answer and key exchanges per second.

mod nts;

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::Serialize;
use timeserve::io::{RecvBatch, SendBatch};
use timeserve::packet::{client_request, NtpTimestamp, Reply};

use crate::util::svg::{Anchor, Svg, PALETTE};
use crate::util::{cargo, project_root, stats, step};

/// The command-line options.
#[derive(Debug, PartialEq)]
pub struct Options {
    /// Seconds of load per step.
    seconds: f64,
    /// Offered loads, requests per second.
    rates: Vec<u64>,
    /// Client sockets (distinct source ports, so SO_REUSEPORT spreads them).
    clients: usize,
    /// Sockets of the multi-socket servers.
    sockets: usize,
    /// SO_RCVBUF of the servers' sockets (timeserve --receive-buffer; the Go peer and
    /// chrony keep the kernel default).
    receive_buffer: Option<u32>,
    /// Runs of each step; the report gives each figure's median.
    repeat: usize,
    /// timeserve and chrony, plain and NTS, instead of the seed's five servers.
    nts: bool,
}

/// The command line of `cargo xtask udpload`; [`Args::resolve`] applies `--quick`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load per step, 0.2 to 60 [default: 2; --quick: 0.5]
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Offered loads in requests per second, comma-separated
    /// [default: 20000,40000,80000,120000,160000,240000; --quick: 20000,80000,160000]
    #[arg(long, value_name = "A,B,..", value_delimiter = ',',
          value_parser = clap::value_parser!(u64).range(1..=2_000_000))]
    rates: Vec<u64>,
    /// Client sockets (distinct source ports, so SO_REUSEPORT spreads them)
    #[arg(long, value_name = "K", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    clients: u16,
    /// Sockets of the multi-socket servers [default: one per CPU]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(2..=256))]
    sockets: Option<u16>,
    /// SO_RCVBUF of timeserve's sockets in bytes [default: the kernel's]
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..))]
    receive_buffer: Option<u32>,
    /// Runs of each step; the report gives each figure's median [default: 3; --quick: 1]
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u16).range(1..=15))]
    repeat: Option<u16>,
    /// A short sweep: three rates, 0.5 s steps, one run each
    #[arg(long)]
    quick: bool,
    /// Network Time Security: timeserve and chrony serving NTS (authenticated requests
    /// with valid cookies) beside their plain NTP, the CPU cost of an authenticated
    /// answer, and key exchanges per second
    #[arg(long)]
    nts: bool,
}

fn parse_seconds(text: &str) -> std::result::Result<f64, String> {
    text.parse()
        .ok()
        .filter(|s: &f64| (0.2..=60.0).contains(s))
        .ok_or_else(|| format!("'{text}' is not 0.2 to 60 seconds"))
}

impl Args {
    /// The options, with `--quick`'s defaults where nothing was given.
    pub fn resolve(self) -> Options {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        let quick = self.quick;
        Options {
            seconds: self.seconds.unwrap_or(if quick { 0.5 } else { 2.0 }),
            rates: if !self.rates.is_empty() {
                self.rates
            } else if quick {
                vec![20_000, 80_000, 160_000]
            } else {
                vec![20_000, 40_000, 80_000, 120_000, 160_000, 240_000]
            },
            clients: usize::from(self.clients),
            sockets: self.sockets.map_or(cpus.max(2), usize::from),
            receive_buffer: self.receive_buffer,
            repeat: self.repeat.map_or(if quick { 1 } else { 3 }, usize::from),
            nts: self.nts,
        }
    }
}

/// One server under test.
#[derive(Clone, Debug)]
struct Target {
    name: String,
    kind: Kind,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Timeserve { sockets: usize, nts: bool },
    Chrony { nts: bool },
    Go { sockets: usize },
}

impl Kind {
    fn nts(self) -> bool {
        matches!(
            self,
            Kind::Timeserve { nts: true, .. } | Kind::Chrony { nts: true }
        )
    }
}

/// A server process, killed when dropped.
struct Running {
    child: Child,
    address: SocketAddr,
    /// Its NTS key exchange, when it serves NTS.
    key_exchange: Option<SocketAddr>,
    /// Its standard output, kept open while it runs.
    _stdout: Option<BufReader<std::process::ChildStdout>>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One step's figures.
#[derive(Clone, Debug, Serialize)]
struct Step {
    target: String,
    offered: u64,
    sent: u64,
    replies: u64,
    replies_per_second: f64,
    loss_percent: f64,
    p50_us: f64,
    p99_us: f64,
    rcvbuf_errors: u64,
    /// The server's CPU time (its threads and helper processes) per reply.
    cpu_us_per_answer: f64,
    /// NTS NAKs received (replies that are not counted as answers).
    naks: u64,
}

/// Key exchanges per second against one server.
#[derive(Clone, Debug, Serialize)]
struct KeyExchanges {
    target: String,
    threads: usize,
    per_second: f64,
    failed: u64,
    cpu_ms_per_exchange: f64,
}

/// The CA and certificate the NTS servers use, and the clients' trust.
struct NtsCertificates {
    pki: crate::util::certificate::IssuedPair,
    client: std::sync::Arc<rustls::ClientConfig>,
}

/// Runs the sweep and writes the report.
pub fn run(options: &Options) -> Result<()> {
    crate::util::ensure_packages(&[("chrony", "/usr/sbin/chronyd")])?;
    step(
        "cargo build --release -p timeserve",
        cargo(&["build", "--release", "-p", "timeserve"]),
    )?;
    let root = project_root();
    let target_dir = crate::util::target_dir()?;
    let out = target_dir.join("udpload");
    fs::create_dir_all(&out)?;
    let go_peer = build_go_peer(&root, &out)?;
    let targets = if options.nts {
        let many = format!("timeserve, {} reuseport sockets", options.sockets);
        vec![
            Target {
                name: many.clone(),
                kind: Kind::Timeserve {
                    sockets: options.sockets,
                    nts: false,
                },
            },
            Target {
                name: format!("{many}, NTS"),
                kind: Kind::Timeserve {
                    sockets: options.sockets,
                    nts: true,
                },
            },
            Target {
                name: "chrony 4.3".into(),
                kind: Kind::Chrony { nts: false },
            },
            Target {
                name: "chrony 4.3, NTS".into(),
                kind: Kind::Chrony { nts: true },
            },
        ]
    } else {
        vec![
            Target {
                name: "timeserve, 1 socket".into(),
                kind: Kind::Timeserve {
                    sockets: 1,
                    nts: false,
                },
            },
            Target {
                name: format!("timeserve, {} reuseport sockets", options.sockets),
                kind: Kind::Timeserve {
                    sockets: options.sockets,
                    nts: false,
                },
            },
            Target {
                name: "chrony 4.3".into(),
                kind: Kind::Chrony { nts: false },
            },
            Target {
                name: "Go (seed), 1 socket".into(),
                kind: Kind::Go { sockets: 1 },
            },
            Target {
                name: format!("Go (seed), {} reuseport sockets", options.sockets),
                kind: Kind::Go {
                    sockets: options.sockets,
                },
            },
        ]
    };
    let certificates = if options.nts {
        let dir = out.join("nts-certificates");
        fs::create_dir_all(&dir)?;
        let pki = crate::util::certificate::issued_by_test_ca(&dir)?;
        let client = nts::tls_client(&pki.ca)?;
        Some(NtsCertificates { pki, client })
    } else {
        None
    };
    let mut steps = Vec::new();
    let mut exchanges = Vec::new();
    for target in &targets {
        let running = start(
            target,
            &target_dir,
            &go_peer,
            options,
            certificates.as_ref(),
        )?;
        wait_until_answering(running.address)?;
        let load = match (running.key_exchange, &certificates) {
            (Some(key_exchange), Some(certificates)) => Some(NtsLoad::prepare(
                key_exchange,
                running.address,
                &certificates.client,
                options.clients,
            )?),
            _ => None,
        };
        for &rate in &options.rates {
            let runs = (0..options.repeat)
                .map(|_| measure(&target.name, &running, rate, options, load.as_ref()))
                .collect::<Result<Vec<_>>>()?;
            let step = median(&runs);
            eprintln!(
                "xtask udpload: {:<34} {:>7}/s offered: {:>9.0}/s answered, loss {:>5.1}%, p50 {:>6.0} us, p99 {:>7.0} us, RcvbufErrors +{}, {:.1} us CPU/answer{}",
                step.target, step.offered, step.replies_per_second, step.loss_percent, step.p50_us, step.p99_us, step.rcvbuf_errors, step.cpu_us_per_answer,
                if step.naks > 0 { format!(", {} NAKs", step.naks) } else { String::new() }
            );
            steps.push(step);
        }
        if let (Some(key_exchange), Some(certificates)) = (running.key_exchange, &certificates) {
            let threads = 4;
            let cpu_before = cpu_seconds(running.child.id());
            let (per_second, failed) = nts::key_exchange_rate(
                key_exchange,
                &certificates.client,
                threads,
                options.seconds.max(2.0),
            );
            let cpu = cpu_seconds(running.child.id()) - cpu_before;
            let seconds = options.seconds.max(2.0);
            let measured = KeyExchanges {
                target: target.name.clone(),
                threads,
                per_second,
                failed,
                cpu_ms_per_exchange: 1000.0 * cpu / (per_second * seconds).max(1.0),
            };
            eprintln!(
                "xtask udpload: {:<34} key exchanges: {:.0}/s from {threads} threads ({} failed), {:.2} ms CPU each",
                measured.target, measured.per_second, measured.failed, measured.cpu_ms_per_exchange
            );
            exchanges.push(measured);
        }
    }
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "steps": steps,
            "key_exchanges": exchanges,
        }))?,
    )?;
    fs::write(
        out.join("report.md"),
        report(&steps, &exchanges, &targets, options),
    )?;
    fs::write(out.join("chart.svg"), chart(&steps, &targets))?;
    eprintln!(
        "xtask udpload: wrote {}/{{report.md,results.json,chart.svg}}",
        out.display()
    );
    Ok(())
}

fn build_go_peer(root: &Path, out: &Path) -> Result<PathBuf> {
    let go = crate::util::find_go()?;
    let binary = out.join("go-ntp");
    let mut command = Command::new(go);
    command
        .current_dir(root.join("benches/peers/go-ntp"))
        .env("CGO_ENABLED", "0")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".");
    step("go build benches/peers/go-ntp", command)?;
    Ok(binary)
}

fn start(
    target: &Target,
    target_dir: &Path,
    go_peer: &Path,
    options: &Options,
    certificates: Option<&NtsCertificates>,
) -> Result<Running> {
    let nts = match (target.kind.nts(), certificates) {
        (true, Some(certificates)) => Some(&certificates.pki.pair),
        (true, None) => bail!("{}: NTS without certificates", target.name),
        (false, _) => None,
    };
    let (mut command, dir) = match target.kind {
        Kind::Timeserve { sockets, .. } => {
            let mut c = Command::new(target_dir.join("release/timeserve"));
            c.args([
                "--listen",
                "127.0.0.1:0",
                "--stratum",
                "2",
                "--workers",
                &sockets.to_string(),
            ]);
            if let Some(bytes) = options.receive_buffer {
                c.args(["--receive-buffer", &bytes.to_string()]);
            }
            if let Some(pair) = nts {
                c.arg("--nts-cert")
                    .arg(&pair.cert)
                    .arg("--nts-key")
                    .arg(&pair.key)
                    .args(["--nts-ke-listen", "127.0.0.1:0"]);
            }
            (c, None)
        }
        Kind::Go { sockets } => {
            let mut c = Command::new(go_peer);
            c.args(["-listen", "127.0.0.1:0", "-sockets", &sockets.to_string()]);
            (c, None)
        }
        Kind::Chrony { .. } => {
            let dir = tempfile::tempdir()?;
            let port = free_udp_port()?;
            let conf = dir.path().join("chrony.conf");
            let mut config = format!(
                "port {port}\nbindaddress 127.0.0.1\nallow 127.0.0.1\nlocal stratum 10\ncmdport 0\npidfile {}\n",
                dir.path().join("chronyd.pid").display()
            );
            let key_exchange = match nts {
                Some(pair) => {
                    let ke_port = std::net::TcpListener::bind("127.0.0.1:0")?
                        .local_addr()?
                        .port();
                    let _ = write!(
                        config,
                        "ntsservercert {}\nntsserverkey {}\nntsport {ke_port}\nntsdumpdir {}\n",
                        pair.cert.display(),
                        pair.key.display(),
                        dir.path().display()
                    );
                    Some(SocketAddr::from(([127, 0, 0, 1], ke_port)))
                }
                None => None,
            };
            fs::write(&conf, config)?;
            let mut c = Command::new("/usr/sbin/chronyd");
            // -x: never touch the clock; -d: stay in the foreground; as root, stay
            // root (dropping to _chrony would lose the temporary directory).
            c.args(["-x", "-d", "-u", "root", "-f"]).arg(&conf);
            let mut running = Running {
                child: c
                    .stderr(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting chronyd")?,
                address: SocketAddr::from(([127, 0, 0, 1], port)),
                key_exchange,
                _stdout: None,
                _dir: None,
            };
            running._dir = Some(dir);
            if let Some(address) = key_exchange {
                wait_until_listening(address)?;
            }
            return Ok(running);
        }
    };
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", target.name))?;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    // "timeserve: serving NTP on ADDR (...)" or "go-ntp: serving on ADDR (...)", then
    // "timeserve: serving NTS-KE on ADDR (...)" with NTS.
    let mut address_on_next_line = || -> Result<SocketAddr> {
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        line.split_whitespace()
            .find_map(|word| word.parse::<SocketAddr>().ok())
            .with_context(|| format!("{} did not say where it serves: {line:?}", target.name))
    };
    let address = address_on_next_line()?;
    let key_exchange = nts.map(|_| address_on_next_line()).transpose()?;
    Ok(Running {
        child,
        address,
        key_exchange,
        _stdout: Some(stdout),
        _dir: dir,
    })
}

/// Waits until a TCP listener accepts at `address` (chronyd's NTS-KE helper starts
/// after its UDP socket).
fn wait_until_listening(address: SocketAddr) -> Result<()> {
    for _ in 0..100 {
        if std::net::TcpStream::connect(address).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("nothing listens on {address} within 10 s")
}

/// The CPU time of process `pid` and its children so far, in seconds (chronyd's
/// NTS-KE helpers are processes of their own): the sum of their threads' time on a
/// CPU from `schedstat`, in nanoseconds, where `stat`'s clock ticks (10 ms) would be
/// too coarse for a step of half a second.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut nanoseconds = 0u64;
    for entry in entries.flatten() {
        let Ok(own) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let parent = fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                // pid (comm) state ppid ...
                let (_, rest) = stat.rsplit_once(") ")?;
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if own != pid && parent != Some(pid) {
            continue;
        }
        let Ok(tasks) = fs::read_dir(entry.path().join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            nanoseconds += fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|line| line.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    nanoseconds as f64 / 1e9
}

fn free_udp_port() -> Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_until_answering(address: SocketAddr) -> Result<()> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = [0u8; 128];
    for _ in 0..100 {
        socket.send_to(&client_request(4, NtpTimestamp(1)), address)?;
        if socket.recv(&mut buf).is_ok() {
            return Ok(());
        }
    }
    bail!("no NTP reply from {address} within 10 s")
}

/// The kernel's `Udp: RcvbufErrors` (IPv4, all sockets).
fn rcvbuf_errors() -> u64 {
    let text = fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .position(|n| n == "RcvbufErrors")
        .and_then(|i| values.split_whitespace().nth(i)?.parse().ok())
        .unwrap_or(0)
}

/// Offers `rate` requests per second to `address` for the step's duration from
/// `options.clients` sockets, then waits 300 ms for stragglers.
///
/// The generator sleeps between ticks in `poll` rather than spinning, so that on a
/// small machine it leaves the CPUs to the server under test: every `TICK` it sends
/// the requests that have come due (in chunks, rotating over the client sockets, so
/// that SO_REUSEPORT spreads them) and drains whichever sockets have replies.
fn measure(
    name: &str,
    server: &Running,
    rate: u64,
    options: &Options,
    load: Option<&NtsLoad>,
) -> Result<Step> {
    const TICK: Duration = Duration::from_micros(250);
    let mut client = LoadClient::new(options.clients, server.address, load)?;
    let mut rtts: Vec<u64> = Vec::with_capacity((rate as f64 * options.seconds) as usize);
    let duration = Duration::from_secs_f64(options.seconds);
    let errors_before = rcvbuf_errors();
    let cpu_before = cpu_seconds(server.child.id());
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration + Duration::from_millis(300) {
            break;
        }
        if elapsed < duration {
            let due = ((elapsed.as_secs_f64() * rate as f64) as u64).saturating_sub(sent);
            sent += client.send(due, start);
        }
        let next_tick = TICK.saturating_sub(start.elapsed().saturating_sub(elapsed));
        client.receive(next_tick, start, &mut rtts)?;
    }
    let cpu = cpu_seconds(server.child.id()) - cpu_before;
    rtts.sort_unstable();
    let replies = rtts.len() as u64;
    let micros = |p: f64| stats::quantile(&rtts, p).map_or(f64::NAN, |ns| ns as f64 / 1000.0);
    Ok(Step {
        target: name.to_string(),
        offered: rate,
        sent,
        replies,
        replies_per_second: replies as f64 / options.seconds,
        loss_percent: if sent == 0 {
            0.0
        } else {
            100.0 * (sent.saturating_sub(replies)) as f64 / sent as f64
        },
        p50_us: micros(0.5),
        p99_us: micros(0.99),
        rcvbuf_errors: rcvbuf_errors().saturating_sub(errors_before),
        cpu_us_per_answer: 1e6 * cpu / replies.max(1) as f64,
        naks: client.naks,
    })
}

/// The prepared requests of an NTS load: per client socket, requests carrying the
/// cookies of that socket's own key exchange.
struct NtsLoad {
    requests: Vec<Vec<Vec<u8>>>,
}

impl NtsLoad {
    /// Runs one key exchange per client socket with the server whose key exchange is
    /// at `key_exchange`, prepares each socket's requests, and checks that the server
    /// at `address` authenticates one.
    fn prepare(
        key_exchange: SocketAddr,
        address: SocketAddr,
        config: &std::sync::Arc<rustls::ClientConfig>,
        clients: usize,
    ) -> Result<NtsLoad> {
        let mut requests = Vec::with_capacity(clients);
        for socket in 0..clients {
            let (client, cookies) = nts::key_exchange(key_exchange, config)?;
            let prepared = nts::prepared_requests(socket, &client, &cookies);
            if socket == 0 {
                nts::check_authentic(address, &client, &prepared[0])?;
            }
            requests.push(prepared);
        }
        Ok(NtsLoad { requests })
    }
}

/// The generator's client sockets and batches.
struct LoadClient<'a> {
    sockets: Vec<UdpSocket>,
    address: SocketAddr,
    send: SendBatch,
    receive: RecvBatch,
    /// The socket the next chunk goes out on.
    next_socket: usize,
    /// NTS requests to send instead of plain ones, and when each was last sent (ns
    /// since the start), per socket.
    nts: Option<(&'a NtsLoad, Vec<Vec<u64>>)>,
    /// The next NTS request of each socket.
    next_request: Vec<usize>,
    /// NTS NAKs received.
    naks: u64,
}

impl<'a> LoadClient<'a> {
    /// Requests sent per sendmmsg.
    const CHUNK: u64 = 32;
    /// Replies read per recvmmsg.
    const RECEIVE: usize = 64;

    /// `clients` non-blocking sockets on loopback sending to `address`, NTS requests
    /// from `load` when given.
    fn new(
        clients: usize,
        address: SocketAddr,
        load: Option<&'a NtsLoad>,
    ) -> Result<LoadClient<'a>> {
        let sockets = (0..clients)
            .map(|_| {
                let socket = UdpSocket::bind("127.0.0.1:0")?;
                socket.set_nonblocking(true)?;
                // Large client buffers, so that drops are the server's.
                let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, 8 << 20);
                Ok(socket)
            })
            .collect::<Result<_>>()?;
        Ok(LoadClient {
            sockets,
            address,
            send: SendBatch::new(Self::CHUNK as usize),
            receive: RecvBatch::new(Self::RECEIVE),
            next_socket: 0,
            nts: load.map(|load| (load, vec![vec![0; nts::REQUESTS_PER_SOCKET]; clients])),
            next_request: vec![0; clients],
            naks: 0,
        })
    }

    /// Sends up to `due` requests in chunks, rotating over the sockets (so that
    /// SO_REUSEPORT spreads them). A plain request carries its send time (ns since
    /// `start`) as its transmit timestamp, which the reply returns as its origin; an
    /// NTS request carries its number, and its send time is kept. Returns how many
    /// went out (fewer when a client's own send buffer is full: the rest is due at the
    /// next tick).
    fn send(&mut self, mut due: u64, start: Instant) -> u64 {
        let mut sent = 0;
        while due > 0 {
            let index = self.next_socket;
            self.next_socket = (self.next_socket + 1) % self.sockets.len();
            for _ in 0..due.min(Self::CHUNK) {
                let now = start.elapsed().as_nanos() as u64;
                let packet = self.send.push(self.address, None);
                match &mut self.nts {
                    None => *packet.header_mut() = client_request(4, NtpTimestamp(now)),
                    Some((load, sent_at)) => {
                        let number = self.next_request[index];
                        self.next_request[index] = (number + 1) % nts::REQUESTS_PER_SOCKET;
                        let request = &load.requests[index][number];
                        packet.buffer_mut()[..request.len()].copy_from_slice(request);
                        packet.seal(request.len());
                        sent_at[index][number] = now;
                    }
                }
            }
            let outcome = self.send.send(self.sockets[index].as_fd());
            sent += outcome.sent as u64;
            if outcome.sent == 0 {
                break;
            }
            due = due.saturating_sub(outcome.sent as u64 + outcome.failed as u64);
        }
        sent
    }

    /// Waits up to `wait` for replies and drains every socket that has some, adding
    /// each reply's round trip (ns) to `rtts`.
    fn receive(&mut self, wait: Duration, start: Instant, rtts: &mut Vec<u64>) -> Result<()> {
        let mut fds: Vec<PollFd<'_>> = self
            .sockets
            .iter()
            .map(|s| PollFd::new(s, PollFlags::IN))
            .collect();
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: wait.as_nanos() as _,
        };
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error).context("poll on the client sockets"),
        }
        let readable: Vec<bool> = fds
            .iter()
            .map(|fd| fd.revents().contains(PollFlags::IN))
            .collect();
        drop(fds);
        for (socket, _) in self.sockets.iter().zip(readable).filter(|(_, r)| *r) {
            loop {
                let count = self.receive.recv(socket.as_fd())?;
                let now = start.elapsed().as_nanos() as u64;
                for i in 0..count {
                    let bytes = self.receive.datagram(i).0;
                    let Some(reply) = Reply::parse(bytes) else {
                        continue;
                    };
                    match &self.nts {
                        None => rtts.push(now.saturating_sub(reply.origin.0)),
                        Some(_) if nts::is_nak(bytes) => self.naks += 1,
                        Some((_, sent_at)) => {
                            let number = reply.origin.0 as usize;
                            if let Some(at) = sent_at
                                .get(number >> 16)
                                .and_then(|s| s.get(number & 0xffff))
                            {
                                rtts.push(now.saturating_sub(*at));
                            }
                        }
                    }
                }
                if count < Self::RECEIVE {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// Each figure's median over the runs of one step.
fn median(runs: &[Step]) -> Step {
    let mid =
        |figure: &dyn Fn(&Step) -> f64| stats::median(runs.iter().map(figure)).unwrap_or(f64::NAN);
    let count = |figure: fn(&Step) -> u64| mid(&|s| figure(s) as f64).round() as u64;
    Step {
        target: runs[0].target.clone(),
        offered: runs[0].offered,
        sent: count(|s| s.sent),
        replies: count(|s| s.replies),
        replies_per_second: mid(&|s| s.replies_per_second),
        loss_percent: mid(&|s| s.loss_percent),
        p50_us: mid(&|s| s.p50_us),
        p99_us: mid(&|s| s.p99_us),
        rcvbuf_errors: count(|s| s.rcvbuf_errors),
        cpu_us_per_answer: mid(&|s| s.cpu_us_per_answer),
        naks: count(|s| s.naks),
    }
}

fn report(
    steps: &[Step],
    exchanges: &[KeyExchanges],
    targets: &[Target],
    options: &Options,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# udpload: SNTP servers under offered load\n\n{} client sockets on 127.0.0.1, {} s per step; \
         `RcvbufErrors` is the kernel's count of datagrams dropped for a full receive queue \
         during the step. Loss counts requests without a reply. CPU is the server's (its \
         threads and helper processes) per reply. Each figure is the median of {} runs.\n",
        options.clients, options.seconds, options.repeat
    );
    let _ = writeln!(
        md,
        "| server | offered/s | answered/s | loss | p50 | p99 | RcvbufErrors | CPU/answer |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for target in targets {
        for s in steps.iter().filter(|s| s.target == target.name) {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.1}% | {:.0} us | {:.0} us | {} | {:.2} us |",
                s.target,
                s.offered,
                s.replies_per_second,
                s.loss_percent,
                s.p50_us,
                s.p99_us,
                s.rcvbuf_errors,
                s.cpu_us_per_answer
            );
        }
    }
    if options.nts {
        nts_report(&mut md, steps, exchanges, targets);
    }
    md
}

/// The NTS section: timeserve's NTS against chrony's at each offered load, what
/// authentication adds to each answer, and key exchanges per second.
fn nts_report(md: &mut String, steps: &[Step], exchanges: &[KeyExchanges], targets: &[Target]) {
    let named = |timeserve: bool, nts: bool| {
        targets
            .iter()
            .find(|t| t.kind.nts() == nts && matches!(t.kind, Kind::Timeserve { .. }) == timeserve)
    };
    let (Some(ours), Some(ours_plain), Some(chrony), Some(chrony_plain)) = (
        named(true, true),
        named(true, false),
        named(false, true),
        named(false, false),
    ) else {
        return;
    };
    let at = |target: &Target, rate: u64| {
        steps
            .iter()
            .find(|s| s.target == target.name && s.offered == rate)
    };
    let _ = writeln!(
        md,
        "\n## NTS (RFC 8915)\n\nAuthenticated requests with valid cookies (one key exchange \
         per client socket), answered with a fresh cookie each. The NTS cost is the server's \
         CPU per authenticated answer less its CPU per plain answer at the same offered load.\n"
    );
    let _ = writeln!(
        md,
        "| offered/s | timeserve NTS answered/s (loss) | chrony NTS answered/s (loss) | ratio | timeserve NTS cost/answer | chrony NTS cost/answer | NAKs |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    let mut rates: Vec<u64> = steps.iter().map(|s| s.offered).collect();
    rates.sort_unstable();
    rates.dedup();
    for rate in rates {
        let (Some(a), Some(a0), Some(b), Some(b0)) = (
            at(ours, rate),
            at(ours_plain, rate),
            at(chrony, rate),
            at(chrony_plain, rate),
        ) else {
            continue;
        };
        let _ = writeln!(
            md,
            "| {rate} | {:.0} ({:.1}%) | {:.0} ({:.1}%) | {:.2}x | {:+.2} us | {:+.2} us | {} / {} |",
            a.replies_per_second,
            a.loss_percent,
            b.replies_per_second,
            b.loss_percent,
            a.replies_per_second / b.replies_per_second.max(1.0),
            a.cpu_us_per_answer - a0.cpu_us_per_answer,
            b.cpu_us_per_answer - b0.cpu_us_per_answer,
            a.naks,
            b.naks
        );
    }
    let _ = writeln!(
        md,
        "\n| server | key exchanges/s | client threads | failed | CPU per exchange |\n|---|---|---|---|---|"
    );
    for k in exchanges {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {:.2} ms |",
            k.target, k.per_second, k.threads, k.failed, k.cpu_ms_per_exchange
        );
    }
    if let [ours, theirs] = exchanges {
        let _ = writeln!(
            md,
            "\nKey exchanges per second, {} over {}: {:.2}x.",
            ours.target,
            theirs.target,
            ours.per_second / theirs.per_second.max(1e-9)
        );
    }
}

/// Offered load (x) against receive-buffer drops per second (y), one line per server:
/// the seed's chart.
fn chart(steps: &[Step], targets: &[Target]) -> String {
    let (width, height, left, bottom, top, right) = (760.0, 420.0, 70.0, 50.0, 30.0, 250.0);
    let max_x = steps.iter().map(|s| s.offered).max().unwrap_or(1) as f64;
    let drops = |s: &Step| s.rcvbuf_errors as f64 / (s.sent.max(1) as f64 / s.offered as f64);
    let max_y = steps.iter().map(drops).fold(1.0, f64::max);
    let x = |v: f64| left + v / max_x * (width - left - right);
    let y = |v: f64| height - bottom - v / max_y * (height - bottom - top);
    let mut svg = Svg::new(
        width,
        height,
        "Receive-buffer drops against offered load (127.0.0.1)",
    );
    svg.axes(
        (left, top),
        (width - right, height - bottom),
        "offered requests/s",
        "RcvbufErrors per second",
    );
    for i in 0..=4 {
        let (vx, vy) = (max_x * f64::from(i) / 4.0, max_y * f64::from(i) / 4.0);
        svg.text(
            x(vx),
            height - bottom + 16.0,
            Anchor::Middle,
            &format!("{:.0}k", vx / 1000.0),
        );
        svg.text(left - 6.0, y(vy) + 4.0, Anchor::End, &format!("{vy:.0}"));
    }
    for (i, target) in targets.iter().enumerate() {
        let points: Vec<(f64, f64)> = steps
            .iter()
            .filter(|s| s.target == target.name)
            .map(|s| (x(s.offered as f64), y(drops(s))))
            .collect();
        svg.polyline(&points, PALETTE[i % PALETTE.len()]);
    }
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    svg.legend(width - right + 10.0, top, &names);
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            crate::Cli::try_parse_from(["xtask", "udpload"].iter().chain(args)).map(|cli| match cli
                .task
            {
                crate::Task::Udpload(args) => args.resolve(),
                other => panic!("parsed as {other:?}"),
            })
        };
        let quick = parse(&["--quick", "--sockets", "4"]).unwrap();
        assert_eq!((quick.seconds, quick.sockets, quick.repeat), (0.5, 4, 1));
        assert_eq!(quick.rates, vec![20_000, 80_000, 160_000]);
        assert_eq!(parse(&["--repeat", "5"]).unwrap().repeat, 5);
        assert_eq!(
            parse(&["--rates", "1000,2000"]).unwrap().rates,
            vec![1000, 2000]
        );
        assert_eq!(parse(&["--quick", "--seconds", "1"]).unwrap().seconds, 1.0);
        for (bad, says) in [
            (&["--rates", "1000,x"][..], "'x' for '--rates"),
            (&["--seconds", "0"], "'0' is not 0.2 to 60 seconds"),
            (&["--sockets", "1"], "'1' for '--sockets"),
            (&["--repeat", "0"], "'0' for '--repeat"),
            (&["--fast"], "unexpected argument '--fast'"),
        ] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn median_takes_each_figure_separately() {
        let step = |replies: u64, p99_us: f64| Step {
            target: "t".into(),
            offered: 10,
            sent: 10,
            replies,
            replies_per_second: replies as f64,
            loss_percent: 0.0,
            p50_us: 1.0,
            p99_us,
            rcvbuf_errors: replies,
            cpu_us_per_answer: p99_us / 10.0,
            naks: replies * 2,
        };
        let m = median(&[step(9, 50.0), step(3, 10.0), step(5, 90.0)]);
        assert_eq!((m.replies, m.p99_us, m.rcvbuf_errors), (5, 50.0, 5));
        assert_eq!((m.cpu_us_per_answer, m.naks), (5.0, 10));
    }
}

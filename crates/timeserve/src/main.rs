//! The `timeserve` binary: arguments, signals, start-up report; the serving is the
//! library's.

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ioserve_exporter::signals::OperatorSignals;
use timeserve::exporter::Exporter;
use timeserve::ratelimit::Limit;
use timeserve::server::{Config, Server, DEFAULT_BATCH};
use timeserve::socket::SocketOptions;
use timeserve::sync::{parse_reference_id, Declared, KernelState};

/// An SNTPv4 server (RFC 5905 server mode) on one SO_REUSEPORT UDP socket per worker.
///
/// Replies carry the kernel's receive timestamp and a transmit timestamp taken just
/// before sending. Whether they call the clock synchronised comes from the kernel
/// (adjtimex, as chrony or ntpd keep it): an unsynchronised host answers with leap
/// indicator 3 and stratum 0, which clients discard, unless --stratum declares the
/// host synchronised by other means.
#[derive(Debug, Parser)]
#[command(name = "timeserve", version)]
struct Args {
    /// Address to serve on; repeat for several (default: 0.0.0.0:123 and [::]:123).
    #[arg(long, value_name = "ADDR")]
    listen: Vec<SocketAddr>,

    /// Sockets and threads per address (default: one per CPU this process may use).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    workers: Option<u16>,

    /// Pin worker i of each address to the i-th CPU this process may use.
    #[arg(long)]
    pin: bool,

    /// Receive buffer of each socket in bytes (SO_RCVBUF; as root past
    /// net.core.rmem_max). Default: the kernel's.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..))]
    receive_buffer: Option<u32>,

    /// Datagrams taken per recvmmsg call.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH as u16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: u16,

    /// Declare the host synchronised at this stratum (1-15), whatever the kernel
    /// says: for a clock disciplined outside adjtimex (PTP, a GPS daemon). Default:
    /// the kernel's state, reported as stratum 3 when synchronised.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=15))]
    stratum: Option<u8>,

    /// Reference id: an IPv4 address (upstream server) or 1-4 ASCII letters and
    /// digits (a reference clock: GPS, PPS...). Default: KERN.
    #[arg(long, value_name = "ID", value_parser = parse_reference_id)]
    refid: Option<[u8; 4]>,

    /// Root dispersion to report when --stratum is given and the kernel has no error
    /// estimate (500ms, 1ms, 0.002...). Default: 1ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    root_dispersion: Option<Duration>,

    /// Limit each client address to one request per DURATION on average (500ms, 2s,
    /// 1m, or seconds); over it, one Kiss-o'-Death RATE reply per interval, then
    /// silence. Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    rate_limit_interval: Option<Duration>,

    /// Requests a client may send back to back under --rate-limit-interval.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    rate_limit_burst: u32,

    /// Serve Prometheus metrics at http://ADDR/metrics (and /healthz).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "timeserve: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let listen = if args.listen.is_empty() {
        default_listen()
    } else {
        args.listen.clone()
    };
    let workers = match args.workers {
        Some(n) => usize::from(n),
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let declared = Declared {
        stratum: args.stratum,
        reference_id: args.refid,
        root_dispersion: args.root_dispersion,
    };
    let config = Config {
        listen,
        workers,
        pin: args.pin,
        socket: SocketOptions {
            receive_buffer: args.receive_buffer.map(|b| b as usize),
        },
        batch: usize::from(args.batch),
        declared,
        rate_limit: args.rate_limit_interval.map(|interval| Limit {
            interval,
            burst: args.rate_limit_burst,
        }),
    };

    // The control runtime: the operator's signals and the metrics listener. The
    // handlers are installed before anything is bound, so that a signal sent as soon
    // as an address is printed is handled, never fatal.
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the control runtime")?;
    let signals = {
        let _context = control.enter();
        OperatorSignals::install()?
    };
    let server = Server::bind(&config)?;
    let exporter = args.metrics_listen.map(Exporter::bind).transpose()?;
    report_start(&server, &config, exporter.as_ref())?;

    let metrics = server.metrics();
    let declared = declared.stratum.is_some();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (finished, workers_done) = tokio::sync::oneshot::channel::<()>();
        let workers = scope.spawn(|| {
            let result = server.run(&stop);
            let _ = finished.send(());
            result
        });
        let exported = control.block_on(async {
            let (stop_exporter, exporter_stopped) = tokio::sync::oneshot::channel::<()>();
            let exporting = exporter.map(|exporter| {
                tokio::spawn(exporter.serve(metrics, declared, async move {
                    let _ = exporter_stopped.await;
                }))
            });
            control_signals(signals, workers_done).await;
            stop.store(true, Ordering::Relaxed);
            let _ = stop_exporter.send(());
            match exporting {
                Some(task) => task.await.context("the metrics task failed")?,
                None => Ok(()),
            }
            .context("serving metrics")
        });
        let served = workers
            .join()
            .map_err(|_| anyhow::anyhow!("the serving thread panicked"))?;
        served?;
        exported
    })?;
    note("stopped");
    Ok(())
}

/// Both address families on port 123, or IPv4 alone on a host without IPv6.
fn default_listen() -> Vec<SocketAddr> {
    let mut listen = vec![SocketAddr::from(([0, 0, 0, 0], 123))];
    if UdpSocket::bind("[::1]:0").is_ok() {
        listen.push(SocketAddr::from(([0u16; 8], 123)));
    } else {
        note("IPv6 is not available on this host: serving IPv4 only");
    }
    listen
}

/// Waits until SIGTERM or SIGINT (the server then stops and exits 0) or until the
/// workers end by themselves (an error); SIGHUP, SIGUSR1 and SIGUSR2 are logged and
/// ignored (nothing to reload: the clock state is read from the kernel every
/// second), so a stray reload never kills the server.
async fn control_signals(
    mut signals: OperatorSignals,
    mut workers_done: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            signal = signals.recv() => {
                if signal.stops() {
                    return;
                }
                note(&format!(
                    "{} ignored: timeserve has no configuration to reload (the clock state is re-read from the kernel every second)",
                    signal.name()
                ));
            }
            _ = &mut workers_done => return,
        }
    }
}

fn report_start(
    server: &Server,
    config: &Config,
    exporter: Option<&Exporter>,
) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    for &address in server.local_addrs() {
        let buffer = server
            .receive_buffer(address)
            .map_or_else(|| "?".into(), |b| b.to_string());
        writeln!(
            stdout,
            "timeserve: serving NTP on {address} ({} worker{}, SO_REUSEPORT, receive buffer {buffer} bytes each)",
            config.workers,
            if config.workers == 1 { "" } else { "s" },
        )?;
    }
    if let Some(exporter) = exporter {
        writeln!(
            stdout,
            "timeserve: metrics at http://{}/metrics",
            exporter.local_addr()
        )?;
    }
    stdout.flush().context("cannot write to stdout")?;
    let kernel = KernelState::read().context("reading the kernel's clock state (adjtimex)")?;
    match (config.declared.stratum, kernel.synchronised) {
        (Some(stratum), _) => note(&format!(
            "declared synchronised at stratum {stratum} (--stratum); the kernel says {}synchronised",
            if kernel.synchronised { "" } else { "un" }
        )),
        (None, true) => note(&format!(
            "the kernel clock is synchronised (max error {:?}): replies say stratum {}",
            kernel.max_error,
            timeserve::sync::DEFAULT_SYNCED_STRATUM
        )),
        (None, false) => note(
            "the kernel clock is NOT synchronised: replies say leap indicator 3 (alarm) and stratum 0, and clients will discard them; run chrony or ntpd on this host, or declare --stratum if something else disciplines the clock",
        ),
    }
    Ok(())
}

/// A duration: seconds (`2`, `0.5`) or a number with a unit (`500ms`, `5s`, `1m`),
/// the toolkit's one syntax.
fn parse_duration(text: &str) -> Result<Duration, String> {
    duration_arg::parse(text).map_err(|e| e.to_string())
}

/// A line on stderr; a closed stderr is ignored, never a panic.
fn note(message: &str) {
    let _ = writeln!(std::io::stderr(), "timeserve: {message}");
}

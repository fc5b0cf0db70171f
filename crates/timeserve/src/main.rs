//! The `timeserve` binary: arguments, signals, start-up report; the serving is the
//! library's.

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use timeserve::cli::Args;
use timeserve::exporter::Exporter;
use timeserve::ratelimit::Limit;
use timeserve::server::{Config, Server};
use timeserve::socket::SocketOptions;
use timeserve::sync::{Declared, KernelState};

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

    let stop = Arc::new(AtomicBool::new(false));
    watch_signals(Arc::clone(&stop))?;
    let server = Server::bind(&config)?;
    let exporter = args.metrics_listen.map(Exporter::bind).transpose()?;
    report_start(&server, &config, exporter.as_ref())?;

    let metrics = server.metrics();
    std::thread::scope(|scope| {
        if let Some(exporter) = &exporter {
            let (metrics, stop) = (&metrics, &stop);
            let declared = declared.stratum.is_some();
            scope.spawn(move || exporter.serve(metrics, declared, stop));
        }
        let result = server.run(&stop);
        stop.store(true, Ordering::Relaxed);
        result
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

/// SIGTERM and SIGINT stop the server (exit 0 once the workers are done); SIGHUP,
/// SIGUSR1 and SIGUSR2 are logged and ignored (nothing to reload: the clock state is
/// read from the kernel every second), so a stray reload never kills the server.
fn watch_signals(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])
            .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("timeserve-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                match signal {
                    SIGTERM | SIGINT => {
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    other => note(&format!(
                        "signal {other} ignored: timeserve has no configuration to reload (the clock state is re-read from the kernel every second)"
                    )),
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
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

/// A line on stderr; a closed stderr is ignored, never a panic.
fn note(message: &str) {
    let _ = writeln!(std::io::stderr(), "timeserve: {message}");
}

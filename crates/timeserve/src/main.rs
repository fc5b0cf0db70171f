//! The `timeserve` binary: arguments, signals, start-up report; the serving is the
//! library's.

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use clap::Parser as _;
use ioserve_exporter::signals::OperatorSignals;
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

/// A line on stderr; a closed stderr is ignored, never a panic.
fn note(message: &str) {
    let _ = writeln!(std::io::stderr(), "timeserve: {message}");
}

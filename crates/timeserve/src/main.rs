//! The `timeserve` binary: arguments, signals, start-up report; the serving is the
//! library's.

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use ioserve_exporter::signals::{OperatorSignal, OperatorSignals};
use timeserve::cli::Args;
use timeserve::exporter::Exporter;
use timeserve::nts::cookie::MasterSecret;
use timeserve::nts::ke::{CertificateReloader, KeServer, KeSettings};
use timeserve::nts::records::NtpEndpoint;
use timeserve::nts::{secret_file, SharedSecret};
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
    let nts_secret = match &args.nts_cert {
        Some(_) => Some(SharedSecret::new(master_secret(
            args.nts_key_file.as_deref(),
            args.nts_key_rotation,
        )?)),
        None => None,
    };
    let config = Config {
        listen: listen.clone(),
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
        nts: nts_secret.clone(),
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
    let key_exchange = match (&args.nts_cert, &args.nts_key, &nts_secret) {
        (Some(certificate), Some(key), Some(secret)) => {
            let settings = KeSettings {
                listen: if args.nts_ke_listen.is_empty() {
                    default_ke_listen(server.local_addrs())
                } else {
                    args.nts_ke_listen.clone()
                },
                certificate: certificate.clone(),
                key: key.clone(),
                endpoint: NtpEndpoint {
                    server: args.nts_ntp_server.clone(),
                    port: args.nts_ntp_port,
                },
                max_connections: args.nts_ke_max_connections as usize,
                timeout: args.nts_ke_timeout,
            };
            Some(KeServer::bind(settings, secret.clone())?)
        }
        _ => None,
    };
    let exporter = args.metrics_listen.map(Exporter::bind).transpose()?;
    report_start(&server, &config, key_exchange.as_ref(), exporter.as_ref())?;
    let reload = key_exchange.as_ref().map(|ke| NtsReload {
        certificate: ke.reloader(),
        key_file: args.nts_key_file.clone(),
        rotation: args.nts_key_rotation,
        secret: nts_secret.clone().expect("NTS has a secret"),
    });
    // The key exchange's own threads: TLS handshakes cost far more CPU than NTP
    // replies, and must not wait behind the signals.
    let ke_runtime = key_exchange
        .as_ref()
        .map(|_| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers.clamp(1, 4))
                .thread_name("timeserve-nts-ke")
                .enable_all()
                .build()
                .context("cannot start the NTS key exchange's runtime")
        })
        .transpose()?;

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
        let (stop_key_exchange, key_exchange_stopped) = tokio::sync::oneshot::channel::<()>();
        let exchanging = match (key_exchange, &ke_runtime) {
            (Some(ke), Some(runtime)) => {
                let metrics = std::sync::Arc::clone(&metrics);
                Some(scope.spawn(move || {
                    runtime.block_on(ke.serve(metrics, async move {
                        let _ = key_exchange_stopped.await;
                    }))
                }))
            }
            _ => None,
        };
        let exported = control.block_on(async {
            let (stop_exporter, exporter_stopped) = tokio::sync::oneshot::channel::<()>();
            let exporting = exporter.map(|exporter| {
                tokio::spawn(exporter.serve(metrics, declared, async move {
                    let _ = exporter_stopped.await;
                }))
            });
            control_signals(signals, workers_done, reload.as_ref()).await;
            stop.store(true, Ordering::Relaxed);
            let _ = stop_key_exchange.send(());
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
        if let Some(exchanging) = exchanging {
            exchanging
                .join()
                .map_err(|_| anyhow::anyhow!("the NTS key exchange thread panicked"))?
                .context("serving NTS key exchanges")?;
        }
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
/// workers end by themselves (an error). SIGHUP re-reads the NTS certificate, key
/// and secret file when NTS is served; otherwise it, SIGUSR1 and SIGUSR2 are logged
/// and ignored (the clock state is read from the kernel every second), so a stray
/// signal never kills the server.
async fn control_signals(
    mut signals: OperatorSignals,
    mut workers_done: tokio::sync::oneshot::Receiver<()>,
    reload: Option<&NtsReload>,
) {
    loop {
        tokio::select! {
            signal = signals.recv() => {
                if signal.stops() {
                    return;
                }
                match (signal, reload) {
                    (OperatorSignal::Hangup, Some(reload)) => match reload.reload() {
                        Ok(what) => note(&format!("SIGHUP: {what}")),
                        Err(error) => note(&format!("SIGHUP: {error:#}; serving with what was loaded before")),
                    },
                    _ => note(&format!(
                        "{} ignored: timeserve has no configuration to reload (the clock state is re-read from the kernel every second)",
                        signal.name()
                    )),
                }
            }
            _ = &mut workers_done => return,
        }
    }
}

/// What SIGHUP reloads when NTS is served.
struct NtsReload {
    certificate: CertificateReloader,
    key_file: Option<PathBuf>,
    rotation: Duration,
    secret: SharedSecret,
}

impl NtsReload {
    /// Re-reads the secret file (never making one) and the certificate and key, then
    /// puts what was read in place; when either fails, neither changes. Says what
    /// changed.
    fn reload(&self) -> anyhow::Result<String> {
        let secret = self
            .key_file
            .as_deref()
            .map(secret_file::read)
            .transpose()?;
        self.certificate.reload()?;
        let (Some(path), Some(secret)) = (&self.key_file, secret) else {
            return Ok("reloaded the NTS certificate and key".into());
        };
        let replaced = MasterSecret::new(secret, self.rotation);
        if self.secret.load().same_secret(&replaced) {
            Ok("reloaded the NTS certificate and key; the NTS key file is unchanged".into())
        } else {
            self.secret.replace(replaced);
            Ok(format!(
                "reloaded the NTS certificate and key, and a new master secret from {} (cookies made under the old one now get NTS NAKs, and clients run a new key exchange)",
                path.display()
            ))
        }
    }
}

/// The master secret: from `key_file` (made when missing), else random.
fn master_secret(
    key_file: Option<&std::path::Path>,
    rotation: Duration,
) -> anyhow::Result<MasterSecret> {
    match key_file {
        Some(path) => {
            let (secret, created) = secret_file::read_or_create(path)?;
            if created {
                note(&format!(
                    "NTS: made a new master secret in {}",
                    path.display()
                ));
            }
            Ok(MasterSecret::new(secret, rotation))
        }
        None => MasterSecret::random(rotation)
            .map_err(|e| anyhow::anyhow!("no random numbers for the NTS master secret: {e}")),
    }
}

/// Each served address's IP, at the NTS-KE port.
fn default_ke_listen(served: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut listen: Vec<SocketAddr> = served
        .iter()
        .map(|address| SocketAddr::new(address.ip(), timeserve::nts::ke::DEFAULT_PORT))
        .collect();
    listen.dedup();
    listen
}

fn report_start(
    server: &Server,
    config: &Config,
    key_exchange: Option<&KeServer>,
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
    if let Some(key_exchange) = key_exchange {
        for address in key_exchange.local_addrs() {
            writeln!(
                stdout,
                "timeserve: serving NTS-KE on {address} (TLS 1.3, ALPN ntske/1, AEAD_AES_SIV_CMAC_256)"
            )?;
        }
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

//! The server: binds its listeners, starts its workers, runs its control loop, and
//! shuts down gracefully. The parts live beside it: `listeners` (binding and socket
//! activation), `workers` (threads and runtimes), `accept` (the accept loops),
//! `control` (signals, reloads, the service manager), `reload` (building the settings
//! in force).
//!
//! `--runtime per-core` (the default) binds `--workers` listening sockets to the same
//! address with SO_REUSEPORT and drives each with its own current-thread tokio runtime
//! on its own thread: the kernel spreads connections over the sockets, and a connection
//! never leaves its thread. `--runtime multi` runs one work-stealing runtime with
//! `--workers` threads and one listener. `--pin` pins worker threads to CPUs;
//! `--numa` places a group of per-core workers on each NUMA node (see
//! [`crate::ops::placement`]).
//!
//! Live upgrade (SIGUSR2): the binary on disk starts with the listening sockets
//! inherited; once it serves, this process stops accepting and finishes what it has in
//! flight as at shutdown (see `serve::handover`).
//!
//! Shutdown (SIGTERM, SIGINT, or [`Server::shutdown_token`]): every worker stops
//! accepting and closes its listener, idle keep-alive connections close, responses in
//! flight go on for at most `--shutdown-timeout`, then the process exits. The signal
//! handlers are installed by [`Server::bind`], before the listeners are bound: a signal
//! that comes as soon as the address is printed (or a client is answered) is handled,
//! never the default action that ends the process at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ioserve_exporter::server::MetricsServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::acme::certificates::Certificates;
use crate::acme::client::AcmeError;
use crate::acme::manager::Manager;
use crate::acme::ChallengeKind;
use crate::io::strategy::StrategyKind;
use crate::ops::config::{Config, KtlsSetting, RuntimeKind};
use crate::ops::metrics::{self, Metrics};
use crate::ops::placement::WorkerPlace;
pub use crate::serve::control::ConfigSource;
use crate::serve::control::{self, Control, Ended, Reload, Upgrades};
pub use crate::serve::error::ServerError;
use crate::serve::handover::{self, Executable, ReadyPipe, Sockets};
use crate::serve::http3::{self, Http3};
use crate::serve::ktls::{self, KernelTls};
use crate::serve::listeners;
use crate::serve::redirect;
use crate::serve::reload;
use crate::serve::shared::Shared;
use crate::serve::tls::AcmeTls;
use crate::serve::workers::{self, Placement};

/// A bound, not yet running server.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    /// HTTP/3's UDP socket, when it is served.
    http3_socket: Option<std::net::UdpSocket>,
    /// `--idle-timeout` at start: QUIC's own idle timeout.
    idle_timeout: Duration,
    listeners: Vec<std::net::TcpListener>,
    metrics_listener: Option<std::net::TcpListener>,
    redirect_listener: Option<std::net::TcpListener>,
    local_addr: SocketAddr,
    shutdown_timeout: Duration,
    runtime: RuntimeKind,
    workers: usize,
    pin: bool,
    numa: Option<Vec<WorkerPlace>>,
    reload: Reload,
    control: Control,
    /// Gets and renews the certificate, with `--acme-domain`.
    acme: Option<Manager>,
    /// What SIGUSR2 starts, and the sockets it passes on.
    upgrades: Upgrades,
    /// Where this process says it serves, when a live upgrade started it.
    ready: Option<ReadyPipe>,
}

impl Server {
    /// Opens the root and binds the listeners (one per worker) and the metrics listener.
    ///
    /// It first installs handlers for SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 (the
    /// exporter's [`OperatorSignals`](ioserve_exporter::signals::OperatorSignals)), which
    /// stay for the life of the process: [`Server::run`] acts on the signals, and one
    /// that comes before it runs waits for it.
    pub fn bind(config: &Config) -> Result<Server, ServerError> {
        // First, so that the passed descriptors have their owners before anything else.
        let upgraded = handover::inherited()?;
        let ready = ReadyPipe::from_env()?;
        let executable = Executable::current();
        let control = Control::start()?;
        let descriptor_limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let acme = config
            .acme()
            .map(Manager::start)
            .transpose()
            .map_err(ServerError::Acme)?;
        let acme_tls = match &acme {
            Some(manager) => Some(Arc::new(
                AcmeTls::new(manager.certificates())
                    .map_err(|error| ServerError::Acme(AcmeError::Setup(error.to_string())))?,
            )),
            None => None,
        };
        let built = reload::build(config, descriptor_limit, acme_tls.as_ref(), None)?;
        let (upgraded_serve, upgraded_metrics, upgraded_redirect, upgraded_quic) = match upgraded {
            Some(passed) => (
                Some(passed.serve),
                passed.metrics,
                passed.redirect,
                passed.quic,
            ),
            None => (None, None, None, None),
        };
        let upgrading = upgraded_serve.is_some();
        let socket_activation = !upgrading && std::env::var_os("LISTEN_FDS").is_some();
        let (bound, http3_socket) =
            listeners::bind_with_http3(config, upgraded_serve, upgraded_quic, socket_activation)?;
        let local_addr = bound.local_addr;
        let metrics_listener = listeners::bind_metrics(config, upgraded_metrics)?;
        if acme.is_some() {
            log_validation_port(config, local_addr);
        }
        if config.redirect_http.is_some() && built.live.tls.is_none() {
            return Err(ServerError::RedirectWithoutTls);
        }
        let redirect_listener = listeners::bind_redirect(config, upgraded_redirect)?;
        let mut sockets = Sockets::copy(
            &bound.loops[..bound.distinct],
            metrics_listener.as_ref(),
            redirect_listener.as_ref(),
        )
        .map_err(ServerError::Worker)?;
        if let Some(socket) = &http3_socket {
            sockets = sockets.with_quic(socket).map_err(ServerError::Worker)?;
        }
        let kernel_tls = kernel_tls(config.ktls, built.live.tls.is_some())?;
        if built.live.tls.is_some() && kernel_tls.is_none() {
            match config.strategy {
                StrategyKind::Sendfile | StrategyKind::Mmap => tracing::info!(
                    strategy = config.strategy.name(),
                    "TLS in user space: {} serves through reads (kTLS not in use)",
                    config.strategy.name()
                ),
                StrategyKind::Read | StrategyKind::Buffered => {}
            }
        }
        if config.auth_file.is_some() && !config.tls() && !local_addr.ip().is_loopback() {
            tracing::warn!(
                listen = %local_addr,
                "--auth-file without TLS on a non-loopback address: credentials cross the \
                 network in clear text (put a TLS proxy in front, or listen on loopback)"
            );
        }
        let mut shared = Shared::new(
            built.live,
            Arc::new(
                Metrics::new(config.workers, config.strategy.name())
                    .with_ktls(kernel_tls.is_some())
                    .with_acme(acme.as_ref().map(Manager::status)),
            ),
            built.fitted.max_connections,
            config.workers,
            kernel_tls,
        );
        if let Some(socket) = &http3_socket {
            let port = socket.local_addr().map_err(ServerError::Worker)?.port();
            shared = shared.advertising_http3(port);
        }
        let shared = Arc::new(shared);
        Ok(Server {
            shared,
            http3_socket,
            idle_timeout: config.idle_timeout,
            listeners: bound.loops,
            metrics_listener,
            redirect_listener,
            local_addr,
            shutdown_timeout: config.shutdown_timeout,
            runtime: config.runtime,
            workers: config.workers,
            pin: config.pin,
            numa: config.numa.clone(),
            reload: Reload {
                config: config.clone(),
                descriptor_limit,
                source: None,
                guards: [built.guard, None],
                acme: acme_tls,
            },
            control,
            acme,
            upgrades: Upgrades {
                executable,
                sockets,
            },
            ready,
        })
    }

    /// The address the server listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The UDP address of HTTP/3, if it is served.
    pub fn http3_addr(&self) -> Option<SocketAddr> {
        self.http3_socket
            .as_ref()
            .and_then(|socket| socket.local_addr().ok())
    }

    /// The metrics address, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The address of the `--redirect-http` listener, if there is one.
    pub fn redirect_addr(&self) -> Option<SocketAddr> {
        self.redirect_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Whether a live upgrade started this process (it inherited its listeners).
    pub fn started_by_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// The canonical served root.
    pub fn root(&self) -> PathBuf {
        self.shared.live().site.root.path().to_owned()
    }

    /// Lets SIGHUP re-read the configuration with `source` and apply it to new
    /// requests (see the `reload` module).
    pub fn reload_with(mut self, source: ConfigSource) -> Server {
        self.reload.source = Some(source);
        self
    }

    /// A token that shuts the server down when cancelled, as SIGTERM does.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shared.shutdown.clone()
    }

    /// Runs until SIGTERM, SIGINT, the shutdown token or a live upgrade's new process
    /// serving, then drains and returns.
    pub fn run(self) -> Result<(), ServerError> {
        let Server {
            shared,
            http3_socket,
            idle_timeout,
            listeners,
            metrics_listener,
            redirect_listener,
            local_addr,
            shutdown_timeout,
            runtime,
            workers,
            pin,
            numa,
            mut reload,
            control,
            acme,
            upgrades,
            ready,
        } = self;
        let placement = Arc::new(Placement { pin, numa });
        let quic = http3_socket
            .map(|socket| QuicThread::start(socket, &shared, idle_timeout))
            .transpose()?;
        let http3 = quic.as_ref().map(|quic| quic.http3.clone());
        let threads = match runtime {
            RuntimeKind::PerCore => {
                workers::spawn_per_core(listeners, http3, &shared, shutdown_timeout, &placement)?
            }
            RuntimeKind::Multi => workers::spawn_multi(
                listeners,
                http3,
                &shared,
                shutdown_timeout,
                workers,
                placement.pin,
            )?,
        };

        match ready {
            // Started by a live upgrade: the old process, still the service manager's
            // main one, hands that role over once it hears this.
            Some(pipe) => {
                if let Err(error) = pipe.ready() {
                    tracing::warn!(%error, "live upgrade: cannot tell the old process that this one serves");
                }
            }
            None => control::notify(&[sd_notify::NotifyState::Ready]),
        }
        let Control { runtime, signals } = control;
        let ended = runtime.block_on(async {
            // Scrapes stop with the server; those in flight get the exporter's grace.
            let exporting =
                metrics_listener.and_then(|listener| match TcpListener::from_std(listener) {
                    Ok(listener) => Some(tokio::spawn(
                        MetricsServer::new(Arc::new(metrics::registry(&shared.metrics)))
                            .serve(listener, shared.shutdown.clone().cancelled_owned()),
                    )),
                    Err(error) => {
                        tracing::error!(%error, "metrics listener unusable");
                        None
                    }
                });
            let answers: Option<Arc<Certificates>> = acme.as_ref().map(Manager::certificates);
            let acme_running =
                acme.map(|manager| tokio::spawn(manager.run(shared.shutdown.clone())));
            let redirecting = redirect_listener.map(|listener| {
                tokio::spawn(redirect::serve(
                    listener,
                    local_addr.port(),
                    Arc::clone(&shared),
                    answers,
                ))
            });
            tokio::spawn(control::sweep_open_files(Arc::clone(&shared)));
            let ended = control::control_signals(&shared, &mut reload, signals, &upgrades).await;
            match ended {
                Ended::HandedOver => shared.hand_over(),
                Ended::Stopped => shared.shutdown.cancel(),
            }
            // The listening sockets close with the workers' copies (or live on in the
            // new process).
            drop(upgrades);
            if let Some(redirecting) = redirecting {
                if redirecting.await.is_err() {
                    tracing::error!("the redirect listener panicked");
                }
            }
            if let Some(exporting) = exporting {
                if exporting.await.is_err() {
                    tracing::error!("the metrics server panicked");
                }
            }
            if let Some(acme_running) = acme_running {
                if acme_running.await.is_err() {
                    tracing::error!("the ACME manager panicked");
                }
            }
            ended
        });
        // After a hand-over the service manager follows the new process.
        if ended == Ended::Stopped {
            control::notify(&[sd_notify::NotifyState::Stopping]);
        }
        for handle in threads {
            if handle.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        if let Some(quic) = quic {
            quic.stop();
        }
        // The last lines of the access log reach their file before run returns.
        drop(reload);
        Ok(())
    }
}

/// The thread that drives HTTP/3's endpoint (its UDP socket: receiving, GRO,
/// demultiplexing) until the workers are done with its connections.
struct QuicThread {
    http3: Http3,
    done: CancellationToken,
    thread: std::thread::JoinHandle<()>,
}

impl QuicThread {
    fn start(
        socket: std::net::UdpSocket,
        shared: &Arc<Shared>,
        idle_timeout: Duration,
    ) -> Result<QuicThread, ServerError> {
        http3::log_offloads(&socket);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        let http3 = Http3::new(socket, shared, idle_timeout, runtime.handle())
            .map_err(ServerError::Worker)?;
        let done = CancellationToken::new();
        let thread = {
            let (done, http3, shared) = (done.clone(), http3.clone(), Arc::clone(shared));
            std::thread::Builder::new()
                .name("ioserve-quic".into())
                .spawn(move || {
                    runtime.block_on(async move {
                        shared.shutdown.cancelled().await;
                        if shared.handed_over() {
                            http3.hand_over().await;
                        }
                        drop(shared);
                        done.cancelled().await;
                        http3.flush_closes().await;
                    });
                })
                .map_err(ServerError::Worker)?
        };
        Ok(QuicThread {
            http3,
            done,
            thread,
        })
    }

    /// Ends the thread, once the workers have ended their connections.
    fn stop(self) {
        self.done.cancel();
        drop(self.http3);
        if self.thread.join().is_err() {
            tracing::error!("the HTTP/3 endpoint's thread panicked");
        }
    }
}

/// Says where the CA will validate, when the server does not listen there itself (a
/// port forward or a load balancer may bring the CA to it; else validation fails).
fn log_validation_port(config: &Config, tls_addr: SocketAddr) {
    let (port, listening) = match config.acme_challenge {
        ChallengeKind::TlsAlpn01 => (443, Some(tls_addr.port())),
        ChallengeKind::Http01 => (80, config.redirect_http.map(|addr| addr.port())),
    };
    if listening != Some(port) {
        tracing::info!(
            challenge = config.acme_challenge.name(),
            listening = ?listening,
            "acme: the CA validates on port {port}; make it reach this listener (a port \
             forward, or a load balancer in front)"
        );
    }
}

/// kTLS for a server with `setting` whose listeners speak TLS when `tls`: what the
/// probe found, said once in the log, under auto and on; nothing under off (the kernel
/// is not asked) or without TLS. `on` where the kernel cannot is an error.
fn kernel_tls(setting: KtlsSetting, tls: bool) -> Result<Option<KernelTls>, ServerError> {
    match (setting, tls) {
        (KtlsSetting::Off, _) | (KtlsSetting::Auto, false) => Ok(None),
        (KtlsSetting::On, false) => Err(ServerError::KtlsWithoutTls),
        (setting, true) => match ktls::probe() {
            Ok(kernel) => {
                let refused = kernel.refused_suites();
                match refused.is_empty() {
                    true => {
                        tracing::info!("kTLS: the kernel encrypts TLS records after the handshake")
                    }
                    false => tracing::info!(
                        refused = ?refused,
                        "kTLS: the kernel encrypts TLS records after the handshake, except under \
                         the suites it refuses: their connections stay in user space"
                    ),
                }
                Ok(Some(kernel))
            }
            Err(reason) if setting == KtlsSetting::On => Err(ServerError::Ktls(reason)),
            Err(reason) => {
                tracing::info!("kTLS not available, TLS in user space: {reason}");
                Ok(None)
            }
        },
    }
}

//! The server: listeners, worker threads, the connection limit and graceful shutdown.
//!
//! `--runtime per-core` (the default) binds `--workers` listening sockets to the same
//! address with SO_REUSEPORT and drives each with its own current-thread tokio runtime
//! on its own thread: the kernel spreads connections over the sockets, and a connection
//! never leaves its thread. `--runtime multi` runs one work-stealing runtime with
//! `--workers` threads and one listener. `--pin` pins worker threads to CPUs.
//!
//! Shutdown (SIGTERM, SIGINT, or [`Server::shutdown_token`]): every worker stops
//! accepting and closes its listener, idle keep-alive connections close, responses in
//! flight go on for at most `--shutdown-timeout`, then the process exits.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use futures_util::FutureExt as _;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing_appender::non_blocking::WorkerGuard;

use crate::access_log::AccessLog;
use crate::budget;
use crate::config::{Config, RuntimeKind};
use crate::conn;
use crate::handler::{CacheSettings, Site};
use crate::metrics::{self, Metrics};
use crate::path::{Resolver, Root};
use crate::shared::{ConnectionSlot, Limits, Shared};
use crate::strategy::Strategy;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The root cannot be opened.
    #[error("cannot serve {path}: {source}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A listening socket cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// Socket activation passed descriptors that cannot be served.
    #[error("socket activation (LISTEN_FDS): {0}")]
    Activation(String),
    /// The access log file cannot be opened.
    #[error("cannot open the access log {}: {source}", path.display())]
    AccessLog {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A runtime or thread could not be created.
    #[error("cannot start a worker: {0}")]
    Worker(io::Error),
}

/// A bound, not yet running server.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    listeners: Vec<std::net::TcpListener>,
    metrics_listener: Option<std::net::TcpListener>,
    local_addr: SocketAddr,
    shutdown_timeout: Duration,
    runtime: RuntimeKind,
    workers: usize,
    pin: bool,
    /// Flushes the access log's writer when the server is done.
    access_log_guard: Option<WorkerGuard>,
}

impl Server {
    /// Opens the root and binds the listeners (one per worker) and the metrics listener.
    pub fn bind(config: &Config) -> Result<Server, ServerError> {
        let root = Root::open(&config.root, config.follow_symlinks).map_err(|source| {
            ServerError::Root {
                path: config.root.clone(),
                source,
            }
        })?;
        match root.resolver() {
            Resolver::Openat2 => {
                tracing::info!(resolver = "openat2", "paths resolved beneath the root")
            }
            Resolver::Walk => tracing::warn!(
                resolver = "component walk",
                "openat2 is missing or refused (kernel before 5.6, or a seccomp profile): \
                 paths are resolved one component at a time, with the same guarantees"
            ),
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let fitted = budget::fit(
            limit,
            config.workers,
            config.max_connections,
            1 + config.strategy.descriptors_per_download(),
            config.open_file_cache,
        );
        if let Some(warning) = &fitted.warning {
            tracing::warn!("{warning}");
        }
        let listen_error = |addr| move |source| ServerError::Listen { addr, source };
        let (local_addr, listeners) = match inherited_listeners()? {
            Some(inherited) => {
                tracing::info!(
                    sockets = inherited.len(),
                    "socket activation: serving the listeners passed in LISTEN_FDS (--listen is not used)"
                );
                share_inherited(inherited, config)?
            }
            None => {
                // With port 0 the kernel picks a port: every worker binds that one.
                let local_addr = claim(config.listen).map_err(listen_error(config.listen))?;
                let sockets = match config.runtime {
                    RuntimeKind::PerCore => config.workers,
                    RuntimeKind::Multi => 1,
                };
                let listeners = (0..sockets)
                    .map(|_| bind_reuseport(local_addr).map_err(listen_error(local_addr)))
                    .collect::<Result<Vec<_>, _>>()?;
                (local_addr, listeners)
            }
        };
        let metrics_listener = config
            .metrics_listen
            .map(|addr| bind_exclusive(addr).map_err(listen_error(addr)))
            .transpose()?;
        let strategy = Strategy::new(config.strategy, config.chunk_size);
        let (access_log, access_log_guard) = match config.access_log {
            false => (None, None),
            true => {
                let (log, guard) =
                    AccessLog::open(config.access_log_format, config.access_log_file.as_deref())
                        .map_err(|source| ServerError::AccessLog {
                            path: config.access_log_file.clone().unwrap_or_default(),
                            source,
                        })?;
                (Some(log), Some(guard))
            }
        };
        let site = Site::new(
            root,
            config.listing.then_some(config.listing_max_entries),
            config.hidden,
            CacheSettings {
                workers: config.workers,
                capacity: fitted.open_file_cache,
                validity: config.open_file_cache_valid,
            },
        );
        let shared = Arc::new(Shared::new(
            site,
            strategy,
            Limits {
                header_timeout: config.header_timeout,
                idle_timeout: config.idle_timeout,
                send_timeout: config.send_timeout,
            },
            access_log,
            Arc::new(Metrics::new(config.workers, config.strategy.name())),
            fitted.max_connections,
            config.workers,
        ));
        Ok(Server {
            shared,
            listeners,
            metrics_listener,
            local_addr,
            shutdown_timeout: config.shutdown_timeout,
            runtime: config.runtime,
            workers: config.workers,
            pin: config.pin,
            access_log_guard,
        })
    }

    /// The address the server listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics address, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// The canonical served root.
    pub fn root(&self) -> &std::path::Path {
        self.shared.site.root.path()
    }

    /// A token that shuts the server down when cancelled, as SIGTERM does.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shared.shutdown.clone()
    }

    /// Runs until SIGTERM, SIGINT or the shutdown token, then drains and returns.
    pub fn run(self) -> Result<(), ServerError> {
        let Server {
            shared,
            listeners,
            metrics_listener,
            shutdown_timeout,
            runtime,
            workers,
            pin,
            access_log_guard,
            ..
        } = self;
        let threads = match runtime {
            RuntimeKind::PerCore => spawn_per_core(listeners, &shared, shutdown_timeout, pin)?,
            RuntimeKind::Multi => spawn_multi(listeners, &shared, shutdown_timeout, workers, pin)?,
        };

        let control = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        notify(&[sd_notify::NotifyState::Ready]);
        control.block_on(async {
            if let Some(listener) = metrics_listener {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        tokio::spawn(metrics::serve(listener, Arc::clone(&shared.metrics)));
                    }
                    Err(error) => tracing::error!(%error, "metrics listener unusable"),
                }
            }
            if let Some(every) = shared.site.files.sweep_interval() {
                tokio::spawn(sweep_open_files(Arc::clone(&shared), every));
            }
            wait_for_shutdown(&shared.shutdown).await;
        });
        shared.shutdown.cancel();
        notify(&[sd_notify::NotifyState::Stopping]);
        for handle in threads {
            if handle.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        // The last lines of the access log reach their file before run returns.
        drop(access_log_guard);
        Ok(())
    }
}

/// One thread per listener, each with a current-thread runtime; connections of worker
/// `id` use shard `id` of the metrics and of the open-file cache.
fn spawn_per_core(
    listeners: Vec<std::net::TcpListener>,
    shared: &Arc<Shared>,
    shutdown_timeout: Duration,
    pin: bool,
) -> Result<Vec<thread::JoinHandle<()>>, ServerError> {
    let mut threads = Vec::with_capacity(listeners.len());
    for (id, listener) in listeners.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        let shared = Arc::clone(shared);
        let handle = thread::Builder::new()
            .name(format!("ioserve-worker-{id}"))
            .spawn(move || {
                if pin {
                    pin_current_thread(id);
                }
                runtime.block_on(accept_loop(listener, shared, shutdown_timeout, || id));
            })
            .map_err(ServerError::Worker)?;
        threads.push(handle);
    }
    Ok(threads)
}

/// One work-stealing runtime of `workers` threads behind the listeners (one, or those
/// passed by socket activation); connections are given shards round-robin.
fn spawn_multi(
    listeners: Vec<std::net::TcpListener>,
    shared: &Arc<Shared>,
    shutdown_timeout: Duration,
    workers: usize,
    pin: bool,
) -> Result<Vec<thread::JoinHandle<()>>, ServerError> {
    let next_thread = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("ioserve-worker")
        .on_thread_start(move || {
            if pin {
                pin_current_thread(next_thread.fetch_add(1, Ordering::Relaxed));
            }
        })
        .enable_all()
        .build()
        .map_err(ServerError::Worker)?;
    let shared = Arc::clone(shared);
    let handle = thread::Builder::new()
        .name("ioserve-accept".into())
        .spawn(move || {
            // One accept loop per listener (several with socket activation), each
            // giving its connections shards round-robin from its own starting point.
            let loops = listeners.into_iter().enumerate().map(|(i, listener)| {
                let mut next = i;
                accept_loop(listener, Arc::clone(&shared), shutdown_timeout, move || {
                    next = (next + 1) % workers;
                    next
                })
            });
            runtime.block_on(futures_util::future::join_all(loops));
        })
        .map_err(ServerError::Worker)?;
    Ok(vec![handle])
}

/// Pins the calling thread to the `index`-th CPU of those the process may use.
fn pin_current_thread(index: usize) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    let allowed = match sched_getaffinity(None) {
        Ok(allowed) => allowed,
        Err(error) => return tracing::warn!(%error, "cannot read the CPU affinity; not pinning"),
    };
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&cpu| allowed.is_set(cpu))
        .collect();
    let Some(&cpu) = cpus.get(index % cpus.len().max(1)) else {
        return;
    };
    let mut only = CpuSet::new();
    only.set(cpu);
    match sched_setaffinity(None, &only) {
        Ok(()) => tracing::debug!(cpu, "worker thread pinned"),
        Err(error) => tracing::warn!(%error, cpu, "cannot pin a worker thread"),
    }
}

/// Closes the cached descriptors of deleted and replaced files every `every`.
async fn sweep_open_files(shared: Arc<Shared>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let dropped = shared.site.files.sweep();
        if dropped > 0 {
            tracing::debug!(dropped, "closed cached files that were deleted or replaced");
        }
    }
}

/// Tells the service manager (`NOTIFY_SOCKET`, set by systemd for `Type=notify`) how
/// the server stands; nothing happens without one.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify the service manager");
    }
}

/// Waits for SIGTERM, SIGINT or the token.
async fn wait_for_shutdown(token: &CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        _ => {
            tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
            return token.cancelled().await;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        _ = token.cancelled() => {}
    }
}

/// Accepts on `listener` until shutdown, then drains the connections it started.
/// `shard` names the metrics and cache shard of each new connection.
async fn accept_loop(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    shutdown_timeout: Duration,
    mut shard: impl FnMut() -> usize,
) {
    let id = shard();
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, worker = id, "listener unusable");
            return;
        }
    };
    let connections = TaskTracker::new();
    let (mut failed_accepts, mut last_accept_warning) = (0u64, None);
    loop {
        if shared.accepting_paused() {
            // Clients wait in the backlog until a connection ends.
            tokio::select! {
                _ = shared.shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(10)) => continue,
            }
        }
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and friends: back off instead of spinning, and say so at most
                // once a second.
                failed_accepts += 1;
                if last_accept_warning
                    .is_none_or(|at: std::time::Instant| at.elapsed() >= Duration::from_secs(1))
                {
                    tracing::warn!(%error, worker = id, failed = failed_accepts, "accept failed; backing off");
                    last_accept_warning = Some(std::time::Instant::now());
                    failed_accepts = 0;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (slot, admitted) = ConnectionSlot::acquire(&shared, id);
        let metrics = Arc::clone(&shared.metrics);
        let shared = Arc::clone(&shared);
        let connection = async move {
            if admitted {
                conn::serve(stream, peer, &shared, &slot).await;
            } else {
                conn::refuse(stream, peer, &shared, id, 503).await;
            }
        };
        // A panic is a bug; it ends this connection only (the panic hook has logged
        // it), and the slot's drop gives its place back. (Combinators, not an async
        // block: a block would hold the connection's future twice, before and while it
        // is awaited, doubling every connection's task.)
        connections.spawn(
            AssertUnwindSafe(connection)
                .catch_unwind()
                .map(move |outcome| {
                    if outcome.is_err() {
                        metrics.panic(id);
                        tracing::debug!(%peer, worker = id, "connection ended by a panic");
                    }
                }),
        );
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(shutdown_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            worker = id,
            left = connections.len(),
            "shutdown timeout: cutting the connections still open"
        );
    }
}

/// The TCP listeners systemd (or `systemd-socket-activate`) passed in `LISTEN_FDS`,
/// when it passed any.
fn inherited_listeners() -> Result<Option<Vec<std::net::TcpListener>>, ServerError> {
    let mut passed = listenfd::ListenFd::from_env();
    if passed.len() == 0 {
        return Ok(None);
    }
    let mut listeners = Vec::with_capacity(passed.len());
    for index in 0..passed.len() {
        match passed.take_tcp_listener(index) {
            Ok(Some(listener)) => {
                listener
                    .set_nonblocking(true)
                    .map_err(ServerError::Worker)?;
                listeners.push(listener);
            }
            Ok(None) => {}
            Err(error) => {
                return Err(ServerError::Activation(format!(
                    "descriptor {} is not a TCP listening socket: {error}",
                    3 + index
                )))
            }
        }
    }
    if listeners.is_empty() {
        return Err(ServerError::Activation(format!(
            "{} descriptors passed and none is a TCP listening socket",
            passed.len()
        )));
    }
    Ok(Some(listeners))
}

/// Spreads inherited sockets over the accept loops: per-core, one loop per worker (and
/// at least one per socket), worker `i` accepting on socket `i % n`; multi, one loop
/// per socket. Returns the first socket's address and the loops' listeners.
fn share_inherited(
    inherited: Vec<std::net::TcpListener>,
    config: &Config,
) -> Result<(SocketAddr, Vec<std::net::TcpListener>), ServerError> {
    let local_addr = inherited[0].local_addr().map_err(ServerError::Worker)?;
    let loops = match config.runtime {
        RuntimeKind::PerCore => config.workers.max(inherited.len()),
        RuntimeKind::Multi => inherited.len(),
    };
    let listeners = (0..loops)
        .map(|i| inherited[i % inherited.len()].try_clone())
        .collect::<io::Result<Vec<_>>>()
        .map_err(ServerError::Worker)?;
    Ok((local_addr, listeners))
}

/// Makes sure nothing else listens on `addr` and returns it, with the port the kernel
/// picked when it was 0. A socket bound without SO_REUSEPORT conflicts with any other
/// socket on the address, so another ioserve (which would otherwise join our
/// SO_REUSEPORT group and take part of the traffic) makes this fail with "address
/// already in use"; the socket is closed again before the workers bind.
fn claim(addr: SocketAddr) -> io::Result<SocketAddr> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("the bound address is not an IP address"))
}

/// A listener that nothing else may share (the metrics endpoint).
fn bind_exclusive(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// One worker's listener; the workers of this process share the address.
fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

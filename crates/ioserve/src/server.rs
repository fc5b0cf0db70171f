//! The server: listeners, worker threads, the connection limit and graceful shutdown.
//!
//! `--runtime per-core` (the default) binds `--workers` listening sockets to the same
//! address with SO_REUSEPORT and drives each with its own current-thread tokio runtime
//! on its own thread: the kernel spreads connections over the sockets, and a connection
//! never leaves its thread. `--runtime multi` runs one work-stealing runtime with
//! `--workers` threads and one listener. `--pin` pins worker threads to CPUs;
//! `--numa` places a group of per-core workers on each NUMA node (see
//! [`crate::placement`]).
//!
//! Shutdown (SIGTERM, SIGINT, or [`Server::shutdown_token`]): every worker stops
//! accepting and closes its listener, idle keep-alive connections close, responses in
//! flight go on for at most `--shutdown-timeout`, then the process exits. The signal
//! handlers are installed by [`Server::bind`], before the listeners are bound: a signal
//! that comes as soon as the address is printed (or a client is answered) is handled,
//! never the default action that ends the process at once.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use futures_util::FutureExt as _;
use ioserve_exporter::server::MetricsServer;
use ioserve_exporter::signals::{OperatorSignal, OperatorSignals};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing_appender::non_blocking::WorkerGuard;

use crate::config::{Config, ConfigError, RuntimeKind};
use crate::conn;
use crate::metrics::{self, Metrics};
use crate::placement::WorkerPlace;
use crate::reload;
use crate::shared::{ConnectionSlot, Shared};

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
    numa: Option<Vec<WorkerPlace>>,
    reload: Reload,
    control: Control,
}

/// The control thread's runtime and the operator's signals, caught from
/// [`Server::bind`] on.
#[derive(Debug)]
struct Control {
    runtime: tokio::runtime::Runtime,
    /// None when the handlers could not be installed (logged).
    signals: Option<OperatorSignals>,
}

impl Control {
    /// The runtime, with the signal handlers installed: from here on these signals no
    /// longer end the process, they wait in the streams until the control loop runs.
    fn start() -> Result<Control, ServerError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        let signals = {
            let _context = runtime.enter();
            OperatorSignals::install()
                .map_err(|error| {
                    tracing::error!(%error, "cannot install signal handlers; stop the server with SIGKILL");
                })
                .ok()
        };
        Ok(Control { runtime, signals })
    }
}

/// Where a reload gets its configuration, and what it needs to keep.
struct Reload {
    /// The configuration in force.
    config: Config,
    /// RLIMIT_NOFILE, for the descriptor budget.
    descriptor_limit: u64,
    /// Reads the configuration again (the command line merged with its file); without
    /// it, SIGHUP is logged and ignored.
    source: Option<ConfigSource>,
    /// Guards of the current access log and of the one before it (whose in-flight
    /// requests may still write), flushed when dropped.
    guards: [Option<WorkerGuard>; 2],
}

/// A function that reads the configuration again.
pub type ConfigSource = Box<dyn Fn() -> Result<Config, ConfigError> + Send>;

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload")
            .field("config", &self.config)
            .field("reloadable", &self.source.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Opens the root and binds the listeners (one per worker) and the metrics listener.
    ///
    /// It first installs handlers for SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 (the
    /// exporter's [`OperatorSignals`]), which stay for the life of the process:
    /// [`Server::run`] acts on the signals, and one that comes before it runs waits for
    /// it.
    pub fn bind(config: &Config) -> Result<Server, ServerError> {
        let control = Control::start()?;
        let descriptor_limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let built = reload::build(config, descriptor_limit)?;
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
        let shared = Arc::new(Shared::new(
            built.live,
            Arc::new(Metrics::new(config.workers, config.strategy.name())),
            built.fitted.max_connections,
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
            numa: config.numa.clone(),
            reload: Reload {
                config: config.clone(),
                descriptor_limit,
                source: None,
                guards: [built.guard, None],
            },
            control,
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
    pub fn root(&self) -> PathBuf {
        self.shared.live().site.root.path().to_owned()
    }

    /// Lets SIGHUP re-read the configuration with `source` and apply it to new
    /// requests (see [`crate::reload`]).
    pub fn reload_with(mut self, source: ConfigSource) -> Server {
        self.reload.source = Some(source);
        self
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
            numa,
            mut reload,
            control,
            ..
        } = self;
        let placement = Arc::new(Placement { pin, numa });
        let threads = match runtime {
            RuntimeKind::PerCore => {
                spawn_per_core(listeners, &shared, shutdown_timeout, &placement)?
            }
            RuntimeKind::Multi => {
                spawn_multi(listeners, &shared, shutdown_timeout, workers, placement.pin)?
            }
        };

        notify(&[sd_notify::NotifyState::Ready]);
        let Control { runtime, signals } = control;
        runtime.block_on(async {
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
            tokio::spawn(sweep_open_files(Arc::clone(&shared)));
            control_signals(&shared, &mut reload, signals).await;
            shared.shutdown.cancel();
            if let Some(exporting) = exporting {
                if exporting.await.is_err() {
                    tracing::error!("the metrics server panicked");
                }
            }
        });
        notify(&[sd_notify::NotifyState::Stopping]);
        for handle in threads {
            if handle.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        // The last lines of the access log reach their file before run returns.
        drop(reload);
        Ok(())
    }
}

/// Where the per-core workers run: pinned or not, and with `--numa` their places.
struct Placement {
    pin: bool,
    numa: Option<Vec<WorkerPlace>>,
}

impl Placement {
    /// The thread name of worker `id`: with `--numa` it says the node
    /// (`ioserve-n1-w3`), so that `ps -L`, `top -H` and /proc show the groups.
    fn thread_name(&self, id: usize) -> String {
        match self.numa.as_ref().and_then(|places| places.get(id)) {
            Some(place) => format!("ioserve-n{}-w{id}", place.node),
            None => format!("ioserve-worker-{id}"),
        }
    }

    /// Places the calling thread, worker `id`.
    fn apply(&self, id: usize) {
        match self.numa.as_ref().and_then(|places| places.get(id)) {
            Some(place) => match place.apply(self.pin) {
                Ok(()) => tracing::debug!(worker = id, %place, "worker placed"),
                Err(error) => tracing::warn!(worker = id, %place, %error, "cannot place a worker"),
            },
            None if self.pin => pin_current_thread(id),
            None => {}
        }
    }
}

/// One thread per listener, each with a current-thread runtime; connections of worker
/// `id` use shard `id` of the metrics and of the open-file cache.
fn spawn_per_core(
    listeners: Vec<std::net::TcpListener>,
    shared: &Arc<Shared>,
    shutdown_timeout: Duration,
    placement: &Arc<Placement>,
) -> Result<Vec<thread::JoinHandle<()>>, ServerError> {
    if let Some(places) = &placement.numa {
        let mut nodes: Vec<u32> = places.iter().map(|p| p.node).collect();
        nodes.dedup();
        for node in nodes {
            let group: Vec<&WorkerPlace> = places.iter().filter(|p| p.node == node).collect();
            tracing::info!(node, workers = group.len(), cpus = %group[0].cpus, "numa: worker group");
        }
    }
    let mut threads = Vec::with_capacity(listeners.len());
    for (id, listener) in listeners.into_iter().enumerate() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServerError::Worker)?;
        let shared = Arc::clone(shared);
        let placement = Arc::clone(placement);
        let handle = thread::Builder::new()
            .name(placement.thread_name(id))
            .spawn(move || {
                // Before the first connection: what the worker allocates and first
                // touches from here on follows its node's policy.
                placement.apply(id);
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

/// Closes the cached descriptors of deleted and replaced files, every validity period
/// of the settings in force.
async fn sweep_open_files(shared: Arc<Shared>) {
    loop {
        let live = shared.live();
        let Some(every) = live.site.files.sweep_interval() else {
            // No cache now; a reload may bring one.
            drop(live);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let dropped = live.site.files.sweep();
        if dropped > 0 {
            tracing::debug!(dropped, "closed cached files that were deleted or replaced");
        }
        drop(live);
        tokio::time::sleep(every).await;
    }
}

/// Tells the service manager (`NOTIFY_SOCKET`, set by systemd for `Type=notify`) how
/// the server stands; nothing happens without one.
fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify the service manager");
    }
}

/// Handles the operator's signals until SIGTERM, SIGINT or the shutdown token (only the
/// token when the handlers could not be installed): SIGHUP reloads the configuration,
/// SIGUSR1 reopens the access log (after logrotate moved it), SIGUSR2 is logged and
/// ignored.
async fn control_signals(shared: &Shared, reload: &mut Reload, signals: Option<OperatorSignals>) {
    let token = &shared.shutdown;
    let Some(mut signals) = signals else {
        return token.cancelled().await;
    };
    loop {
        let signal = tokio::select! {
            signal = signals.recv() => signal,
            _ = token.cancelled() => return,
        };
        match signal {
            OperatorSignal::Terminate | OperatorSignal::Interrupt => {
                return tracing::info!("{}: shutting down", signal.name())
            }
            OperatorSignal::Hangup => {
                // systemd 253 and later want the monotonic time beside RELOADING=1.
                match sd_notify::NotifyState::monotonic_usec_now() {
                    Ok(now) => notify(&[sd_notify::NotifyState::Reloading, now]),
                    Err(_) => notify(&[sd_notify::NotifyState::Reloading]),
                }
                reload_configuration(shared, reload);
                notify(&[sd_notify::NotifyState::Ready]);
            }
            OperatorSignal::User1 => reopen_access_log(shared, reload),
            OperatorSignal::User2 => tracing::warn!("SIGUSR2: ignored"),
        }
    }
}

/// SIGHUP: reads the configuration again and serves new requests with it; on any
/// error the settings in force stay.
fn reload_configuration(shared: &Shared, reload: &mut Reload) {
    let Some(source) = &reload.source else {
        return tracing::warn!("SIGHUP: this server has no configuration to re-read; ignored");
    };
    let config = match source() {
        Ok(config) => config,
        Err(error) => {
            return tracing::error!(%error, "SIGHUP: the configuration is invalid; keeping the one in force")
        }
    };
    let built = match reload::build(&config, reload.descriptor_limit) {
        Ok(built) => built,
        Err(error) => {
            return tracing::error!(%error, "SIGHUP: cannot apply the configuration; keeping the one in force")
        }
    };
    let kept = reload::restart_only_changes(&reload.config, &config);
    if !kept.is_empty() {
        tracing::warn!(
            settings = kept.join(", "),
            "SIGHUP: these settings need a restart and keep their old values"
        );
    }
    shared.replace_live(built.live);
    let [current, _] = std::mem::take(&mut reload.guards);
    reload.guards = [built.guard, current];
    reload.config = config;
    tracing::info!("SIGHUP: configuration reloaded; new requests use it");
}

/// SIGUSR1: opens the access log file again (logrotate's `postrotate`), so that lines
/// go to a new file at the configured path.
fn reopen_access_log(shared: &Shared, reload: &mut Reload) {
    if !reload.config.access_log {
        return;
    }
    match reload::open_access_log(&reload.config) {
        Ok((log, guard)) => {
            let mut live = (*shared.live()).clone();
            live.access_log = Some(log);
            shared.replace_live(live);
            let [current, _] = std::mem::take(&mut reload.guards);
            reload.guards = [Some(guard), current];
            tracing::info!("SIGUSR1: access log reopened");
        }
        Err(error) => {
            tracing::error!(%error, "SIGUSR1: cannot reopen the access log; still writing the old one")
        }
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
    let mut failures = AcceptFailures::default();
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
        match accepted {
            Ok((stream, peer)) => spawn_connection(&connections, &shared, id, stream, peer),
            Err(error) => failures.back_off(&error, id).await,
        }
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

/// Failed accepts (EMFILE and friends): a worker backs off instead of spinning, and
/// says so at most once a second.
#[derive(Default)]
struct AcceptFailures {
    /// Failures since the last warning.
    unreported: u64,
    last_warning: Option<std::time::Instant>,
}

impl AcceptFailures {
    async fn back_off(&mut self, error: &io::Error, worker: usize) {
        self.unreported += 1;
        if self
            .last_warning
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(%error, worker, failed = self.unreported, "accept failed; backing off");
            self.last_warning = Some(std::time::Instant::now());
            self.unreported = 0;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Serves an accepted connection in a task of `connections` (or refuses it with 503
/// when no connection slot is free).
fn spawn_connection(
    connections: &TaskTracker,
    shared: &Arc<Shared>,
    id: usize,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let (slot, admitted) = ConnectionSlot::acquire(shared, id);
    let metrics = Arc::clone(&shared.metrics);
    let shared = Arc::clone(shared);
    let connection = async move {
        if admitted {
            conn::serve(stream, peer, &shared, &slot).await;
        } else {
            conn::refuse(stream, peer, &shared, id, 503).await;
        }
    };
    // A panic is a bug; it ends this connection only (the panic hook has logged it),
    // and the slot's drop gives its place back. (Combinators, not an async block: a
    // block would hold the connection's future twice, before and while it is awaited,
    // doubling every connection's task.)
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

//! The control thread: the operator's signals (SIGTERM and SIGINT shut down, SIGHUP
//! reloads the configuration, SIGUSR1 reopens the access log, SIGUSR2 upgrades to the
//! binary now on disk), the service manager's notifications, and the open-file cache's
//! sweep.

use std::sync::Arc;
use std::time::Duration;

use ioserve_exporter::signals::{OperatorSignal, OperatorSignals};
use tracing_appender::non_blocking::WorkerGuard;

use crate::ops::config::{Config, ConfigError};
use crate::serve::error::ServerError;
use crate::serve::handover::{self, Executable, Outcome, Sockets, Upgrade};
use crate::serve::reload;
use crate::serve::shared::Shared;
use crate::serve::tls::AcmeTls;

/// The control thread's runtime and the operator's signals, caught from
/// [`Server::bind`] on.
#[derive(Debug)]
pub(super) struct Control {
    pub(super) runtime: tokio::runtime::Runtime,
    /// None when the handlers could not be installed (logged).
    pub(super) signals: Option<OperatorSignals>,
}

impl Control {
    /// The runtime, with the signal handlers installed: from here on these signals no
    /// longer end the process, they wait in the streams until the control loop runs.
    pub(super) fn start() -> Result<Control, ServerError> {
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
pub(super) struct Reload {
    /// The configuration in force.
    pub(super) config: Config,
    /// RLIMIT_NOFILE, for the descriptor budget.
    pub(super) descriptor_limit: u64,
    /// Reads the configuration again (the command line merged with its file); without
    /// it, SIGHUP is logged and ignored.
    pub(super) source: Option<ConfigSource>,
    /// Guards of the current access log and of the one before it (whose in-flight
    /// requests may still write), flushed when dropped.
    pub(super) guards: [Option<WorkerGuard>; 2],
    /// ACME's handshakes, which a reload keeps (the certificate belongs to the process).
    pub(super) acme: Option<Arc<AcmeTls>>,
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

/// Closes the cached descriptors of deleted and replaced files, every validity period
/// of the settings in force.
pub(super) async fn sweep_open_files(shared: Arc<Shared>) {
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
pub(super) fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::warn!(%error, "cannot notify the service manager");
    }
}

/// What SIGUSR2 needs: the binary to start and the sockets to pass it.
#[derive(Debug)]
pub(super) struct Upgrades {
    /// The path this process was started from.
    pub(super) executable: Executable,
    /// This process's listening sockets.
    pub(super) sockets: Sockets,
}

/// Why the control loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// SIGTERM, SIGINT or the shutdown token: the server stops.
    Stopped,
    /// A new process serves the listeners: this one finishes what it has in flight.
    HandedOver,
}

/// A new binary being started by SIGUSR2.
type Starting = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>;

/// Handles the operator's signals until SIGTERM, SIGINT or the shutdown token (only the
/// token when the handlers could not be installed), or until a new binary started by
/// SIGUSR2 serves: SIGHUP reloads the configuration, SIGUSR1 reopens the access log
/// (after logrotate moved it).
pub(super) async fn control_signals(
    shared: &Shared,
    reload: &mut Reload,
    signals: Option<OperatorSignals>,
    upgrades: &Upgrades,
) -> Ended {
    let token = &shared.shutdown;
    let Some(mut signals) = signals else {
        token.cancelled().await;
        return Ended::Stopped;
    };
    // The new process of an upgrade under way, and its end.
    let mut starting: Option<(u32, Starting)> = None;
    loop {
        let signal = tokio::select! {
            signal = signals.recv() => signal,
            outcome = async { starting.as_mut().expect("guarded").1.as_mut().await }, if starting.is_some() => {
                let (pid, _) = starting.take().expect("guarded");
                match upgraded(pid, outcome, upgrades) {
                    true => return Ended::HandedOver,
                    false => continue,
                }
            }
            _ = token.cancelled() => {
                stop_starting(starting.as_ref().map(|(pid, _)| *pid));
                return Ended::Stopped;
            }
        };
        match signal {
            OperatorSignal::Terminate | OperatorSignal::Interrupt => {
                stop_starting(starting.as_ref().map(|(pid, _)| *pid));
                tracing::info!("{}: shutting down", signal.name());
                return Ended::Stopped;
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
            OperatorSignal::User2 => match &starting {
                Some((pid, _)) => tracing::warn!(
                    pid,
                    "SIGUSR2: the new binary started by the last SIGUSR2 has not said it serves yet; ignored"
                ),
                None => starting = start_upgrade(upgrades),
            },
        }
    }
}

/// SIGUSR2: starts the binary now on disk with the listening sockets.
fn start_upgrade(upgrades: &Upgrades) -> Option<(u32, Starting)> {
    let executable = &upgrades.executable;
    match Upgrade::start(executable, &upgrades.sockets) {
        Ok(upgrade) => {
            let pid = upgrade.pid();
            tracing::info!(
                pid,
                binary = %executable,
                "SIGUSR2: started the binary on disk with the listening sockets; waiting for it to serve"
            );
            Some((pid, Box::pin(upgrade.outcome())))
        }
        Err(error) => {
            tracing::error!(binary = %executable, %error, "SIGUSR2: cannot start the new binary; still serving");
            None
        }
    }
}

/// What the start of the new process `pid` came to: whether it serves now (and this
/// process must stop accepting).
fn upgraded(pid: u32, outcome: Outcome, upgrades: &Upgrades) -> bool {
    let binary = &upgrades.executable;
    match outcome {
        Outcome::Ready => {
            // Under systemd this process is still the main one: it names its successor,
            // whose notifications count from now on.
            notify(&[sd_notify::NotifyState::MainPid(pid)]);
            tracing::info!(
                pid,
                "SIGUSR2: the new process serves; this one stops accepting and finishes the \
                 requests and downloads in flight (up to --shutdown-timeout)"
            );
            true
        }
        Outcome::Ended => {
            tracing::error!(pid, %binary, "SIGUSR2: the new binary ended before it served (its own lines above say why); still serving");
            false
        }
        Outcome::Silent => {
            tracing::error!(
                pid,
                %binary,
                "SIGUSR2: the new binary did not say it serves within {} s; stopped it (SIGKILL); still serving",
                handover::READY_WAIT.as_secs()
            );
            false
        }
    }
}

/// Stops the new process of an upgrade under way, if there is one: the operator stops
/// the service.
fn stop_starting(pid: Option<u32>) {
    let Some(pid) = pid else {
        return;
    };
    tracing::info!(pid, "stopping the new binary that SIGUSR2 started");
    handover::terminate(pid);
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
    let built = match reload::build(
        &config,
        reload.descriptor_limit,
        reload.acme.as_ref(),
        Some(&shared.live().site),
    ) {
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

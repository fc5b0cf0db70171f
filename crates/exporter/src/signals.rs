//! The operator's signals, caught on a tokio runtime: SIGTERM and SIGINT to stop,
//! SIGHUP, SIGUSR1 and SIGUSR2 for whatever the daemon makes of them (reload,
//! reopen a log, or a logged "ignored"), so that none of them takes its default action
//! and kills the process.
//!
//! Install them before binding anything: from [`OperatorSignals::install`] on, a
//! signal waits in its stream until the daemon's control loop receives it, so one sent
//! as soon as the daemon printed its address is neither lost nor fatal.

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::error::ExporterError;

/// One of the signals an operator (or a service manager) sends a daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorSignal {
    /// SIGTERM: stop.
    Terminate,
    /// SIGINT (Ctrl-C): stop.
    Interrupt,
    /// SIGHUP: reload the configuration, by convention.
    Hangup,
    /// SIGUSR1: reopen log files, by convention.
    User1,
    /// SIGUSR2.
    User2,
}

impl OperatorSignal {
    /// The signal's name, `SIGTERM` and so on.
    pub fn name(self) -> &'static str {
        match self {
            OperatorSignal::Terminate => "SIGTERM",
            OperatorSignal::Interrupt => "SIGINT",
            OperatorSignal::Hangup => "SIGHUP",
            OperatorSignal::User1 => "SIGUSR1",
            OperatorSignal::User2 => "SIGUSR2",
        }
    }

    /// Whether the daemon should stop: SIGTERM and SIGINT.
    pub fn stops(self) -> bool {
        matches!(self, OperatorSignal::Terminate | OperatorSignal::Interrupt)
    }
}

/// The five signals as streams of the runtime they were installed on.
#[derive(Debug)]
pub struct OperatorSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
    user1: Signal,
    user2: Signal,
}

impl OperatorSignals {
    /// Installs the handlers. Call it inside a tokio runtime (within `block_on`, a
    /// task, or after `Runtime::enter`), before the daemon binds its sockets.
    pub fn install() -> Result<OperatorSignals, ExporterError> {
        let catch = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|cause| ExporterError::Signal {
                signal: name,
                cause,
            })
        };
        Ok(OperatorSignals {
            terminate: catch(SignalKind::terminate(), "SIGTERM")?,
            interrupt: catch(SignalKind::interrupt(), "SIGINT")?,
            hangup: catch(SignalKind::hangup(), "SIGHUP")?,
            user1: catch(SignalKind::user_defined1(), "SIGUSR1")?,
            user2: catch(SignalKind::user_defined2(), "SIGUSR2")?,
        })
    }

    /// The next signal to arrive (one already pending returns at once). Of several
    /// pending at once, SIGHUP, SIGUSR1 and SIGUSR2 come before SIGTERM and SIGINT: a
    /// reload or reopen sent just before a stop is acted on (or logged) first, instead
    /// of being lost when the stop wins a random choice.
    pub async fn recv(&mut self) -> OperatorSignal {
        // `recv` yields None only once the runtime's signal driver is gone, and then
        // for good: that branch is disabled and the others still wait (all of them
        // disabled: nothing can arrive any more).
        tokio::select! {
            biased;
            Some(()) = self.hangup.recv() => OperatorSignal::Hangup,
            Some(()) = self.user1.recv() => OperatorSignal::User1,
            Some(()) = self.user2.recv() => OperatorSignal::User2,
            Some(()) = self.terminate.recv() => OperatorSignal::Terminate,
            Some(()) = self.interrupt.recv() => OperatorSignal::Interrupt,
            else => std::future::pending().await,
        }
    }
}

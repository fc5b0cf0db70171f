//! What every probe command does around its measurement: resolve what to watch
//! (pids, a command it starts, or the whole system), then wait until the duration
//! ends, the user interrupts, or the watched processes exit.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bpf::{Scope, TaskName};
use crate::error::{ProbeError, Result};
use crate::signals::{Interrupt, Signals};
use crate::target::{self, ChildExit, PausedCommand, RunningCommand, WatchedProcess};

/// What the user asked to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// The whole system.
    System,
    /// Running processes by pid.
    Pids(Vec<u32>),
    /// A command to start.
    Command(Vec<OsString>),
    /// Every task with this name, running now or started later.
    Named(TaskName),
}

/// The watched processes, before the probes attach.
pub enum Prepared {
    /// The whole system.
    System,
    /// Running processes.
    Processes(Vec<WatchedProcess>),
    /// A command, stopped before its execve.
    Command(PausedCommand),
    /// Tasks by name.
    Named(TaskName),
}

impl Prepared {
    /// Opens the pids or starts the command (stopped).
    pub fn new(spec: &TargetSpec) -> Result<Prepared> {
        Ok(match spec {
            TargetSpec::System => Prepared::System,
            TargetSpec::Pids(pids) => Prepared::Processes(
                pids.iter()
                    .map(|&pid| WatchedProcess::open(pid))
                    .collect::<Result<_>>()?,
            ),
            TargetSpec::Command(argv) => Prepared::Command(target::spawn_paused(argv)?),
            TargetSpec::Named(name) => Prepared::Named(*name),
        })
    }

    /// The scope the probes must filter on.
    pub fn scope(&self) -> Scope {
        match self {
            Prepared::System => Scope::System,
            Prepared::Processes(procs) => Scope::Processes(procs.iter().map(|p| p.pid()).collect()),
            Prepared::Command(paused) => Scope::Processes(vec![paused.pid()]),
            Prepared::Named(name) => Scope::Named(*name),
        }
    }

    /// Lets a command run (call it after the probes attached) and waits as
    /// [`Watch::wait`] does; returns why the measurement ended and how long it ran.
    pub fn run(self, signals: &Signals, duration: Option<Duration>) -> Result<(Ending, Duration)> {
        let started = Instant::now();
        let mut watch = self.start()?;
        let ending = watch.wait(signals, duration);
        Ok((ending, started.elapsed()))
    }

    /// As [`Prepared::run`], calling `tick` with the time since the start at every
    /// multiple of `interval` before the end (`probe syscalls -i`). An error from
    /// `tick` ends the run (a command started stays running, as with `run`).
    pub fn run_in_intervals<E: From<ProbeError>>(
        self,
        signals: &Signals,
        duration: Option<Duration>,
        interval: Duration,
        mut tick: impl FnMut(Duration) -> std::result::Result<(), E>,
    ) -> std::result::Result<(Ending, Duration), E> {
        let started = Instant::now();
        let deadline = duration.map(|d| started + d);
        let mut watch = self.start()?;
        let mut ticks = 0u32;
        loop {
            ticks = ticks.saturating_add(1);
            let next = started + interval * ticks;
            let until = deadline.map_or(next, |d| d.min(next));
            let ending = watch.wait(
                signals,
                Some(until.saturating_duration_since(Instant::now())),
            );
            let ended = !matches!(ending, Ending::Duration)
                || deadline.is_some_and(|d| Instant::now() >= d);
            if ended {
                return Ok((ending, started.elapsed()));
            }
            tick(started.elapsed())?;
        }
    }

    /// Lets a command run (after the probes attached).
    pub fn start(self) -> Result<Watch> {
        Ok(match self {
            // Tasks of that name may come and go: watched like the whole system.
            Prepared::System | Prepared::Named(_) => Watch::System,
            Prepared::Processes(procs) => Watch::Processes(procs),
            Prepared::Command(paused) => Watch::Command(paused.release()?),
        })
    }
}

/// The watched processes while the probes run.
pub enum Watch {
    /// The whole system.
    System,
    /// Running processes.
    Processes(Vec<WatchedProcess>),
    /// A command probe started.
    Command(RunningCommand),
}

/// Why a measurement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum Ending {
    /// The requested duration passed.
    Duration,
    /// SIGINT or SIGTERM.
    Interrupted {
        /// The signal number.
        signal: i32,
    },
    /// Every watched process exited.
    TargetExited {
        /// The command's exit code, when probe started it and it exited normally.
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// The signal that killed the command, when one did.
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
}

impl Ending {
    /// A few words for people.
    pub fn describe(&self) -> String {
        match self {
            Ending::Duration => "duration elapsed".into(),
            Ending::Interrupted { signal } => format!("interrupted by signal {signal}"),
            Ending::TargetExited {
                code: Some(code), ..
            } => format!("command exited with {code}"),
            Ending::TargetExited {
                signal: Some(signal),
                ..
            } => {
                format!("command killed by signal {signal}")
            }
            Ending::TargetExited { .. } => "target exited".into(),
        }
    }
}

impl Watch {
    /// Waits until `duration` passes (forever when `None`), a termination signal
    /// arrives (forwarded to a command probe started), or every watched process has
    /// exited.
    pub fn wait(&mut self, signals: &Signals, duration: Option<Duration>) -> Ending {
        let deadline = duration.map(|d| Instant::now() + d);
        loop {
            if let Some(ending) = self.exited() {
                return ending;
            }
            let now = Instant::now();
            let slice = match deadline {
                Some(deadline) if now >= deadline => return Ending::Duration,
                Some(deadline) => (deadline - now).min(Duration::from_millis(100)),
                None => Duration::from_millis(100),
            };
            if let Some(Interrupt::Terminate(signal)) = signals.wait(slice) {
                if let Watch::Command(child) = self {
                    child.signal(signal);
                }
                return Ending::Interrupted { signal };
            }
        }
    }

    fn exited(&mut self) -> Option<Ending> {
        match self {
            Watch::System => None,
            Watch::Processes(procs) => {
                procs
                    .iter()
                    .all(WatchedProcess::exited)
                    .then_some(Ending::TargetExited {
                        code: None,
                        signal: None,
                    })
            }
            Watch::Command(child) => child.try_wait().map(|exit| match exit {
                ChildExit::Code(code) => Ending::TargetExited {
                    code: Some(code),
                    signal: None,
                },
                ChildExit::Signal(signal) => Ending::TargetExited {
                    code: None,
                    signal: Some(signal),
                },
            }),
        }
    }
}

//! Work on a thread beside the stage running now: CI's fresh-host installations beside
//! clippy, ACME's renewal scenario beside everything after the packages, the checks
//! that use one core beside the guests. Joined by [`Beside::finish`], or when dropped
//! (a stage on the main thread failed first), so that its processes and installations
//! end before xtask exits.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// A job running on its own thread.
pub(crate) struct Beside<T: Send + 'static> {
    name: &'static str,
    thread: Option<JoinHandle<(Result<T>, Duration)>>,
}

impl<T: Send + 'static> Beside<T> {
    /// Starts `job`, named `name` in messages.
    pub(crate) fn start(
        name: &'static str,
        job: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Self {
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let result = job();
            (result, started.elapsed())
        });
        Beside {
            name,
            thread: Some(thread),
        }
    }

    /// Waits for the job: its result and how long it ran.
    pub(crate) fn finish(mut self) -> (Result<T>, Duration) {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(done)) => done,
            Some(Err(_)) => (
                Err(anyhow::anyhow!("{}: its thread panicked", self.name)),
                Duration::ZERO,
            ),
            None => (
                Err(anyhow::anyhow!("{}: already finished", self.name)),
                Duration::ZERO,
            ),
        }
    }

    /// Waits for the job and returns its result alone.
    pub(crate) fn result(self) -> Result<T> {
        let name = self.name;
        match self.finish() {
            (Ok(value), _) => Ok(value),
            (Err(error), _) => bail!("{name}: {error:#}"),
        }
    }
}

impl<T: Send + 'static> Drop for Beside<T> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            eprintln!("xtask: waiting for {} to end", self.name);
            let _ = thread.join();
        }
    }
}

//! Waiting for Ctrl-C, SIGTERM or a child's exit without signal handlers: the
//! signals are blocked and collected with sigtimedwait, so a probe always gets to
//! print its summary and detach.

use std::io;
use std::time::Duration;

use crate::error::{ProbeError, Result};

/// What interrupted a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT (Ctrl-C) or SIGTERM: stop now.
    Terminate(i32),
    /// SIGCHLD: a child changed state.
    Child,
}

/// SIGINT, SIGTERM and SIGCHLD, blocked in the thread that made this and in every
/// thread it starts afterwards.
pub struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    /// Blocks the signals in the calling thread. Call it before starting threads, so
    /// that they inherit the mask and no thread takes the default action.
    pub fn block() -> Result<Signals> {
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise and fill it
        // and pthread_sigmask only reads it.
        let set = unsafe {
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD] {
                libc::sigaddset(&mut set, signal);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(ProbeError::Sys {
                    what: "blocking SIGINT and SIGTERM",
                    cause: io::Error::from_raw_os_error(rc),
                });
            }
            set
        };
        Ok(Signals { set })
    }

    /// Waits up to `timeout` for one of the signals.
    pub fn wait(&self, timeout: Duration) -> Option<Interrupt> {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `self.set` is an initialised signal set, `timeout` a valid timespec,
        // and a null siginfo pointer is allowed.
        let signal = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &timeout) };
        match signal {
            libc::SIGCHLD => Some(Interrupt::Child),
            s if s > 0 => Some(Interrupt::Terminate(s)),
            _ => None, // EAGAIN (timeout) or EINTR
        }
    }
}

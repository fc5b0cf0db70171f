//! The scenarios' process plumbing: children that are stopped when their guard drops,
//! programs run under a time limit, conditions polled under a deadline, free ports.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rustix::process::{kill_process, Pid, Signal};

/// How often a condition is looked at again.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// What one look at a polled condition found: it holds (with what it yields), or not
/// yet (with what was seen, for the error when the deadline passes).
pub(crate) enum Look<T> {
    /// The condition holds.
    Holds(T),
    /// Not yet: what was seen instead.
    Not(String),
}

/// Looks at a condition every 200 ms until it holds, for at most `limit`; the error
/// names `what` was awaited and the last thing seen. An error from `look` ends the wait
/// at once (something that will not come right by waiting, such as an exited process).
pub(crate) fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut look: impl FnMut() -> Result<Look<T>>,
) -> Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = match look()? {
            Look::Holds(value) => return Ok(value),
            Look::Not(seen) => seen,
        };
        if Instant::now() >= deadline {
            bail!("waited {limit:?} for {what}; last seen: {seen}");
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// A child process, named for messages, whose output goes to a log file; killed and
/// reaped when dropped.
pub(crate) struct Spawned {
    /// What messages call it.
    pub(crate) name: String,
    child: Child,
}

impl Spawned {
    /// Starts `command` with stdin closed and stdout and stderr appended to `log`.
    pub(crate) fn start(name: &str, mut command: Command, log: &Path) -> Result<Spawned> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", command.get_program()))?;
        Ok(Spawned {
            name: name.to_owned(),
            child,
        })
    }

    /// An error if the process has exited, naming how.
    pub(crate) fn alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("{} exited ({status})", self.name),
        }
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends SIGTERM to `child` and waits at most `limit` for it to exit; past that it is
/// killed and the error says so.
pub(crate) fn terminate(child: &mut Child, name: &str, limit: Duration) -> Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    kill_process(Pid::from_child(child), Signal::TERM)
        .with_context(|| format!("cannot send SIGTERM to {name}"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name} did not exit within {limit:?} of SIGTERM; killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `command` with `input` on its stdin (or none), for at most `limit`: its output,
/// whatever its exit status; past the limit it is killed and the error names `what`.
pub(crate) fn output_within(
    what: &str,
    mut command: Command,
    input: Option<&[u8]>,
    limit: Duration,
) -> Result<Output> {
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what} ({:?})", command.get_program()))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // Small inputs (a certificate): the pipe's buffer holds them.
        stdin
            .write_all(input)
            .with_context(|| format!("cannot write to {what}"))?;
    }
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut stderr = child.stderr.take().context("stderr")?;
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The ports [`free_tcp_port`] and [`free_udp_port`] have handed out in this process.
/// Each port is bound and closed again to be found, and the kernel may hand a port
/// just closed to the next bind: two that were free a moment ago can be the same one
/// (a renewal scenario's ioserve once got pebble's port), so no port is given twice.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Keeps `port` for its caller unless it was handed out before.
fn hand_out(port: u16) -> bool {
    HANDED_OUT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(port)
}

/// A TCP port of 127.0.0.1 that was free a moment ago, and not handed out before.
pub(crate) fn free_tcp_port() -> Result<u16> {
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("cannot bind a port")?;
        let port = listener.local_addr()?.port();
        if hand_out(port) {
            return Ok(port);
        }
    }
    bail!("found no TCP port that was not handed out already")
}

/// A UDP port of 127.0.0.1 that was free a moment ago (and whose TCP twin is free too:
/// challtestsrv listens on both), and not handed out before.
pub(crate) fn free_udp_port() -> Result<u16> {
    for _ in 0..64 {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("cannot bind a port")?;
        let port = socket.local_addr()?.port();
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() && hand_out(port) {
            return Ok(port);
        }
    }
    bail!("found no port free for both UDP and TCP")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_port_is_handed_out_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            assert!(seen.insert(free_tcp_port().unwrap()));
        }
        for _ in 0..50 {
            assert!(seen.insert(free_udp_port().unwrap()));
        }
    }
}

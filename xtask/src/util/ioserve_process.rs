//! ioserve as the checks run it (the browser check, h2spec, testssl.sh, the guests):
//! which executable, the process, and the wait for the address it prints once it
//! listens.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};

use crate::util::{cargo, step, target_dir};

/// Which ioserve executable a check runs.
#[derive(clap::Args, Debug, Default, Clone)]
pub(crate) struct IoserveBinary {
    /// Run this ioserve executable (a release or packaged build) instead of building
    /// the debug one
    #[arg(long = "ioserve", value_name = "PATH")]
    path: Option<PathBuf>,
}

impl IoserveBinary {
    /// The executable at `path` (what `cargo xtask ci` has just packaged: building
    /// ioserve alone again would resolve its dependencies' features anew and compile
    /// them once more).
    pub(crate) fn at(path: &Path) -> IoserveBinary {
        IoserveBinary {
            path: Some(path.to_path_buf()),
        }
    }

    /// The given executable, or the debug build, built now.
    pub(crate) fn get(&self) -> Result<PathBuf> {
        match &self.path {
            Some(path) => {
                ensure!(
                    path.is_file(),
                    "--ioserve {}: no such file; give the path of an ioserve executable",
                    path.display()
                );
                Ok(path.clone())
            }
            None => {
                step(
                    "cargo build -p ioserve",
                    cargo(&["build", "--package", "ioserve", "--bin", "ioserve"]),
                )?;
                Ok(target_dir()?.join("debug/ioserve"))
            }
        }
    }

    /// The arguments that name this choice on a child xtask's command line.
    pub(crate) fn args(&self) -> Vec<std::ffi::OsString> {
        match &self.path {
            Some(path) => vec!["--ioserve".into(), path.clone().into_os_string()],
            None => Vec::new(),
        }
    }
}

/// A running ioserve; stopped (killed and reaped) when dropped.
pub(crate) struct IoserveProcess {
    child: Child,
    /// Where it listens, from its "serving ROOT at SCHEME://ADDR/" line.
    pub(crate) addr: SocketAddr,
    /// Where its metrics are, when it was started with `--metrics-listen`.
    pub(crate) metrics: Option<SocketAddr>,
}

impl IoserveProcess {
    /// Starts `command` (ioserve listening on `127.0.0.1:0`) and waits at most `wait`
    /// for its "serving ... at `scheme`://ADDR/" line; the error names the last line it
    /// printed, or how it exited.
    pub(crate) fn start(mut command: Command, scheme: &str, wait: Duration) -> Result<Self> {
        let program = command.get_program().to_string_lossy().into_owned();
        let wants_metrics = command.get_args().any(|arg| arg == "--metrics-listen");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let stdout = child.stdout.take().context("ioserve's stdout")?;
        let (lines, printed) = mpsc::channel();
        // Every line is read, to the end: ioserve exits if its stdout closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        // Dropped on an error below: the child is stopped.
        let mut server = IoserveProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: None,
        };
        let deadline = Instant::now() + wait;
        let mut last = String::from("nothing");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match printed.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = served_address(&line, scheme) {
                        server.addr = addr;
                    }
                    if let Some(addr) = listener_address(&line, "ioserve: metrics at http://") {
                        server.metrics = Some(addr);
                    }
                    if server.addr.port() != 0 && (server.metrics.is_some() || !wants_metrics) {
                        return Ok(server);
                    }
                    last = line;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "ioserve printed no {scheme}:// address within {wait:?}; last line: {last:?}"
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!(
                    "ioserve exited before it printed its address ({:?}); last line: {last:?}",
                    server.child.try_wait()
                ),
            }
        }
    }
}

impl IoserveProcess {
    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for IoserveProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in ioserve's "serving ROOT at SCHEME://ADDR/" line.
pub(crate) fn served_address(line: &str, scheme: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix("ioserve: serving ")?;
    address_at_start(rest.rsplit_once(&format!(" at {scheme}://"))?.1)
}

/// The address of one of ioserve's other listeners, in the line that begins with
/// `prefix` and goes on with `ADDR/` (`ioserve: metrics at http://`, `ioserve:
/// redirecting http://`).
pub(crate) fn listener_address(line: &str, prefix: &str) -> Option<SocketAddr> {
    address_at_start(line.strip_prefix(prefix)?)
}

/// The `ADDR` of `ADDR/...`.
fn address_at_start(text: &str) -> Option<SocketAddr> {
    text.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_read_from_the_listening_line() {
        assert_eq!(
            served_address(
                "ioserve: serving /srv at http://127.0.0.1:41234/ (strategy sendfile, 2 workers)",
                "http"
            ),
            Some(SocketAddr::from(([127, 0, 0, 1], 41234)))
        );
        assert_eq!(
            served_address("ioserve: metrics at http://127.0.0.1:9/metrics", "http"),
            None
        );
    }

    #[test]
    fn the_address_is_read_from_the_https_line() {
        assert_eq!(
            served_address(
                "ioserve: serving /tmp/r at https://127.0.0.1:41234/ (strategy sendfile, 2 workers)",
                "https"
            ),
            Some(SocketAddr::from(([127, 0, 0, 1], 41234)))
        );
        assert_eq!(
            served_address("ioserve: serving /tmp/r at http://127.0.0.1:1/", "https"),
            None
        );
    }
}

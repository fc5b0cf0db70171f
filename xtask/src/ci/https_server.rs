//! ioserve over HTTPS with a test certificate, on a free port of 127.0.0.1: what the
//! TLS checks (h2spec, testssl.sh) scan.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::util::certificate::CertificatePair;

/// How long ioserve may take to print its address.
const SERVER_WAIT: Duration = Duration::from_secs(60);

/// ioserve over HTTPS on a free port of 127.0.0.1; stopped when dropped.
pub(crate) struct HttpsServer {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl HttpsServer {
    /// Starts `binary` serving `root` with `pair`, and waits for its address.
    pub(crate) fn start(binary: &Path, root: &Path, pair: &CertificatePair) -> Result<HttpsServer> {
        let mut child = Command::new(binary)
            .arg(root)
            .args(["--listen", "127.0.0.1:0", "--access-log", "off"])
            .arg("--tls-cert")
            .arg(&pair.cert)
            .arg("--tls-key")
            .arg(&pair.key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let stdout = child.stdout.take().context("ioserve's stdout")?;
        let (lines, printed) = mpsc::channel();
        // Every line is read, to the end: ioserve exits if its stdout closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        let mut server = HttpsServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        loop {
            match printed.recv_timeout(SERVER_WAIT) {
                Ok(line) => {
                    if let Some(addr) = https_address(&line) {
                        server.addr = addr;
                        return Ok(server);
                    }
                }
                Err(_) => bail!("ioserve printed no https:// address within {SERVER_WAIT:?}"),
            }
        }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in ioserve's "serving ROOT at https://ADDR/" line.
fn https_address(line: &str) -> Option<SocketAddr> {
    line.strip_prefix("ioserve: serving ")?
        .rsplit_once(" at https://")?
        .1
        .split('/')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_read_from_the_https_line() {
        assert_eq!(
            https_address(
                "ioserve: serving /tmp/r at https://127.0.0.1:41234/ (strategy sendfile, 2 workers)"
            ),
            Some(SocketAddr::from(([127, 0, 0, 1], 41234)))
        );
        assert_eq!(
            https_address("ioserve: serving /tmp/r at http://127.0.0.1:1/"),
            None
        );
    }
}

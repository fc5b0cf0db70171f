//! ioserve over HTTPS with a test certificate, on a free port of 127.0.0.1: what the
//! TLS checks (h2spec, testssl.sh) scan.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::util::certificate::CertificatePair;
use crate::util::ioserve_process::IoserveProcess;

/// How long ioserve may take to print its address.
const SERVER_WAIT: Duration = Duration::from_secs(60);

/// Starts `binary` serving `root` over HTTPS with `pair` (no access log), and waits for
/// its address; stopped when the returned process is dropped.
pub(crate) fn start(binary: &Path, root: &Path, pair: &CertificatePair) -> Result<IoserveProcess> {
    let mut command = Command::new(binary);
    command
        .arg(root)
        .args(["--listen", "127.0.0.1:0", "--access-log", "off"])
        .arg("--tls-cert")
        .arg(&pair.cert)
        .arg("--tls-key")
        .arg(&pair.key);
    IoserveProcess::start(command, "https", SERVER_WAIT)
}

//! ioserve over HTTPS with a certificate from a test CA, on a free port of 127.0.0.1:
//! what the TLS checks (h2spec, testssl.sh) scan.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tempfile::TempDir;

use crate::util::certificate::{self, CertificatePair};
use crate::util::ioserve_process::IoserveProcess;

/// How long ioserve may take to print its address.
const SERVER_WAIT: Duration = Duration::from_secs(60);

/// Starts `binary` serving `root` over HTTPS with `pair` (no access log), and waits for
/// its address; stopped when the returned process is dropped.
fn start(binary: &Path, root: &Path, pair: &CertificatePair) -> Result<IoserveProcess> {
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

/// ioserve over HTTPS serving one page from a temporary directory, with a fresh
/// certificate from a fresh test CA; the directory (removed when dropped) holds the
/// served tree, the certificates and whatever the check writes there.
pub(crate) struct ServedPage {
    /// Stopped when dropped (before the directory goes).
    pub(crate) server: IoserveProcess,
    /// The test CA's certificate, for a client to trust.
    pub(crate) ca: PathBuf,
    pub(crate) work: TempDir,
}

/// Starts `binary` serving an `index.html` of `html` over HTTPS (see [`ServedPage`]).
pub(crate) fn serve_page(binary: &Path, html: &str) -> Result<ServedPage> {
    let work = tempfile::tempdir().context("cannot create a temporary directory")?;
    let root = work.path().join("root");
    std::fs::create_dir(&root)?;
    std::fs::write(root.join("index.html"), html)?;
    let issued = certificate::issued_by_test_ca(work.path())?;
    let server = start(binary, &root, &issued.pair)?;
    Ok(ServedPage {
        server,
        ca: issued.ca,
        work,
    })
}

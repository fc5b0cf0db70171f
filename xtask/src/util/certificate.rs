//! A self-signed certificate for 127.0.0.1 and localhost, for the checks and load tests
//! that serve HTTPS (h2spec, testssl.sh, `loadtest --tls`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// A certificate file and its key file, PEM.
#[derive(Clone, Debug)]
pub(crate) struct CertificatePair {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Writes a fresh self-signed certificate for 127.0.0.1 and localhost and its key to
/// `dir` as `cert.pem` and `key.pem`. It is valid from yesterday for 90 days, as a
/// public CA's would be, so that a scan finds nothing to say of its validity period.
pub(crate) fn self_signed(dir: &Path) -> Result<CertificatePair> {
    let key = rcgen::KeyPair::generate().context("cannot generate a key")?;
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .context("certificate parameters")?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(90);
    let cert = params
        .self_signed(&key)
        .context("cannot sign the certificate")?;
    let pair = CertificatePair {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&pair.cert, cert.pem())
        .with_context(|| format!("cannot write {}", pair.cert.display()))?;
    std::fs::write(&pair.key, key.serialize_pem())
        .with_context(|| format!("cannot write {}", pair.key.display()))?;
    Ok(pair)
}

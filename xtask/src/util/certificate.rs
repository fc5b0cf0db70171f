//! Certificates for 127.0.0.1 and localhost, for the checks and load tests that serve
//! HTTPS: self-signed (`loadtest --tls`), or issued by a test CA that the client is
//! told to trust, as a deployment's would be by a public one (h2spec, testssl.sh).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// A certificate file and its key file, PEM.
#[derive(Clone, Debug)]
pub(crate) struct CertificatePair {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Writes a fresh self-signed certificate for 127.0.0.1 and localhost and its key to
/// `dir` as `cert.pem` and `key.pem` (valid as [`set_validity`] says).
pub(crate) fn self_signed(dir: &Path) -> Result<CertificatePair> {
    let key = rcgen::KeyPair::generate().context("cannot generate a key")?;
    let cert = server_params()?
        .self_signed(&key)
        .context("cannot sign the certificate")?;
    write_pair(dir, &cert, &key)
}

/// A server certificate and the test CA that issued it.
#[derive(Clone, Debug)]
pub(crate) struct IssuedPair {
    pub(crate) pair: CertificatePair,
    /// The CA's certificate (PEM), for the client to trust.
    pub(crate) ca: PathBuf,
}

/// Writes a fresh test CA's certificate to `dir` as `ca.pem`, and a certificate for
/// 127.0.0.1 and localhost that it issued, with its key, as `cert.pem` and `key.pem`.
/// The server certificate names where its CA's revocation list would be (a CRL
/// distribution point on 127.0.0.1, never fetched), as a public CA's does.
pub(crate) fn issued_by_test_ca(dir: &Path) -> Result<IssuedPair> {
    let ca_key = rcgen::KeyPair::generate().context("cannot generate the CA's key")?;
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ioserve xtask test CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    set_validity(&mut ca_params);
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .context("cannot sign the CA's certificate")?;
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, ca_cert.pem()).with_context(|| format!("cannot write {}", ca.display()))?;

    let key = rcgen::KeyPair::generate().context("cannot generate a key")?;
    let mut params = server_params()?;
    params.crl_distribution_points = vec![rcgen::CrlDistributionPoint {
        uris: vec!["http://127.0.0.1/ioserve-test-ca.crl".to_string()],
    }];
    params.use_authority_key_identifier_extension = true;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let cert = params
        .signed_by(&key, &issuer)
        .context("cannot issue the certificate")?;
    let pair = write_pair(dir, &cert, &key)?;
    Ok(IssuedPair { pair, ca })
}

/// A server certificate's parameters: 127.0.0.1 and localhost.
fn server_params() -> Result<rcgen::CertificateParams> {
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .context("certificate parameters")?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    set_validity(&mut params);
    Ok(params)
}

/// Valid from yesterday for 90 days, as a public CA's certificate would be, so that a
/// scan finds nothing to say of the validity period.
fn set_validity(params: &mut rcgen::CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(90);
}

/// Writes `cert` and `key` to `dir` as `cert.pem` and `key.pem`.
fn write_pair(
    dir: &Path,
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
) -> Result<CertificatePair> {
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

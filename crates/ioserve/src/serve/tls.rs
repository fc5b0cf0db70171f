//! HTTPS in user space: the certificate chain and key of `--tls-cert` and `--tls-key`
//! loaded, checked and made into a rustls server configuration, or the certificate
//! that ACME keeps (`--acme-domain`, [`crate::acme`]) presented through its resolvers.
//!
//! rustls on the ring provider, TLS 1.2 and 1.3 only with its safe defaults, session
//! resumption on (a session cache and stateless tickets), 0-RTT off, the server's
//! cipher suite order, ALPN `h2` then `http/1.1`.
//! The configuration is part of the `Live` settings (`serve/shared.rs`), so SIGHUP
//! loads the pair again for new connections: one in flight keeps its session, and a
//! pair that fails to load leaves the old settings in force. ACME's certificate is
//! swapped by its manager instead, and a reload keeps the same resolvers.
//!
//! With ACME, the handshake first reads the client's hello: a client that offers ALPN
//! `acme-tls/1` is the CA validating TLS-ALPN-01 and gets the challenge's certificate
//! (then the connection closes); any other waits, up to [`CERTIFICATE_WAIT`], while
//! there is no valid certificate yet (the first order at start, or one that expired
//! while the CA was away), instead of being presented a wrong one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ResolvesServerCert, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

use crate::acme::certificates::{Certificates, ChallengeResolver, ServingResolver};
use crate::acme::challenge::ACME_TLS_ALPN;

/// How long a handshake may wait for ACME's first (or next valid) certificate, beyond
/// the header timeout: an order with a public CA takes seconds.
pub(crate) const CERTIFICATE_WAIT: Duration = Duration::from_secs(30);

/// Where the TLS listeners' certificate comes from.
#[derive(Clone, Debug)]
pub(crate) enum TlsSetup {
    /// `--tls-cert` and `--tls-key`.
    Files(Arc<ServerConfig>),
    /// ACME's certificate (`--acme-domain`), and the TLS-ALPN-01 answers.
    Acme(Arc<AcmeTls>),
}

/// The configurations of ACME's handshakes.
#[derive(Debug)]
pub(crate) struct AcmeTls {
    /// For clients: the served certificate.
    serving: Arc<ServerConfig>,
    /// For the CA's TLS-ALPN-01 validation: the challenge's certificate, ALPN
    /// `acme-tls/1` only.
    challenge: Arc<ServerConfig>,
    /// What both present.
    certificates: Arc<Certificates>,
}

impl AcmeTls {
    /// The configurations presenting what `certificates` holds.
    pub(crate) fn new(certificates: Arc<Certificates>) -> Result<AcmeTls, rustls::Error> {
        let serving = server_config(Arc::new(ServingResolver(Arc::clone(&certificates))))?;
        let mut challenge =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_cert_resolver(Arc::new(ChallengeResolver(Arc::clone(&certificates))));
        challenge.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        Ok(AcmeTls {
            serving: Arc::new(serving),
            challenge: Arc::new(challenge),
            certificates,
        })
    }
}

impl TlsSetup {
    /// The certificate this setup presents to `hello` now: HTTP/3's handshakes ask it
    /// of the settings in force, so that a reload or a renewal reaches them too.
    /// Without a valid ACME certificate yet there is none: the handshake fails, and an
    /// HTTP/3 client goes on over TCP, where the handshake waits for one.
    pub(crate) fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        match self {
            TlsSetup::Files(config) => config.cert_resolver.resolve(hello),
            TlsSetup::Acme(acme) => acme.serving.cert_resolver.resolve(hello),
        }
    }

    /// How long a handshake may take beyond the header timeout.
    pub(crate) fn extra_wait(&self) -> Duration {
        match self {
            TlsSetup::Files(_) => Duration::ZERO,
            TlsSetup::Acme(_) => CERTIFICATE_WAIT,
        }
    }

    /// The server's side of the handshake on `io`: the stream to serve, or `None` when
    /// it was the CA's TLS-ALPN-01 validation, answered (the connection is closed).
    pub(crate) async fn accept<IO>(&self, io: IO) -> io::Result<Option<TlsStream<IO>>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acme = match self {
            TlsSetup::Files(config) => {
                let stream = TlsAcceptor::from(Arc::clone(config)).accept(io).await?;
                return Ok(Some(stream));
            }
            TlsSetup::Acme(acme) => acme,
        };
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await?;
        let validating = start
            .client_hello()
            .alpn()
            .is_some_and(|mut offered| offered.any(|protocol| protocol == ACME_TLS_ALPN));
        if validating {
            let mut stream = start.into_stream(Arc::clone(&acme.challenge)).await?;
            let _ = stream.shutdown().await;
            return Ok(None);
        }
        // Without a valid certificate after the wait, the resolver has none to give
        // and rustls refuses the handshake with an alert.
        acme.certificates.wait_until_valid(CERTIFICATE_WAIT).await;
        let stream = start.into_stream(Arc::clone(&acme.serving)).await?;
        Ok(Some(stream))
    }
}

/// The rustls configuration of QUIC handshakes (HTTP/3): TLS 1.3 only (QUIC has no
/// other), ALPN `h3`, the certificate of `resolver`, resumption by tickets as over TCP,
/// 0-RTT off (`max_early_data_size` stays 0: early data can be replayed).
pub(crate) fn quic_server_config(
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<ServerConfig, rustls::Error> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.ignore_client_order = true;
    Ok(config)
}

/// Why a certificate and key cannot serve HTTPS; each names its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// The file holds no PEM block at all.
    #[error("{} is not PEM (expected -----BEGIN ...----- blocks)", path.display())]
    NotPem {
        /// The file.
        path: PathBuf,
    },
    /// A PEM block of the file cannot be decoded.
    #[error("{} holds a broken PEM block: {message}", path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The certificate file holds no certificate.
    #[error("{} holds no certificate (a CERTIFICATE block is needed)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no private key.
    #[error("{} holds no private key (a PRIVATE KEY block is needed)", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key cannot be used for signing.
    #[error("the private key in {} is unusable: {source}", path.display())]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// rustls's reason.
        source: rustls::Error,
    },
    /// The key is not the certificate's.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The first certificate cannot be used.
    #[error("the certificate in {} is unusable: {source}", path.display())]
    BadCertificate {
        /// The certificate file.
        path: PathBuf,
        /// rustls's reason.
        source: rustls::Error,
    },
}

/// Loads the chain in `cert` and the key in `key` (PEM) into the configuration of new
/// connections; warns when the certificate is expired or not valid yet.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_pem = read_pem(cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| bad_pem(cert, &error))?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::NoCertificate { path: cert.into() });
    };
    warn_if_not_valid_now(cert, leaf)?;
    let key_pem = read_pem(key)?;
    let private_key = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(private_key) => private_key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey { path: key.into() })
        }
        Err(error) => return Err(bad_pem(key, &error)),
    };
    let signing_key = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(private_key)
        .map_err(|source| TlsError::BadKey {
            path: key.into(),
            source,
        })?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(TlsError::Mismatch {
                cert: cert.into(),
                key: key.into(),
            })
        }
        Err(source) => {
            return Err(TlsError::BadCertificate {
                path: cert.into(),
                source,
            })
        }
    }
    let bad_certificate = |source| TlsError::BadCertificate {
        path: cert.into(),
        source,
    };
    let resolver = rustls::sign::SingleCertAndKey::from(certified);
    let config = server_config(Arc::new(resolver)).map_err(bad_certificate)?;
    Ok(Arc::new(config))
}

/// The configuration of client handshakes presenting what `resolver` gives.
fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<ServerConfig, rustls::Error> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    // kTLS (`--ktls`, serve/ktls.rs) takes the traffic keys from rustls after the
    // handshake.
    config.enable_secret_extraction = true;
    // Resumption by stateless tickets beside the default session cache; 0-RTT stays off
    // (max_early_data_size is 0 by default): replayed early data is not for a server
    // that cannot tell idempotent requests from others at that point.
    config.ticketer = rustls::crypto::ring::Ticketer::new()?;
    // HTTP/2 first, as clients expect; a client that offers neither (or no ALPN at
    // all) gets HTTP/1.1.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // The server's order of cipher suites (the provider's: AES-256-GCM first), not the
    // client's: a scanner (testssl.sh) rates a server that lets the client pick as
    // having no cipher order, a high finding.
    config.ignore_client_order = true;
    Ok(config)
}

/// The bytes of `path`, which must hold PEM.
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })?;
    if !bytes
        .windows(b"-----BEGIN ".len())
        .any(|w| w == b"-----BEGIN ")
    {
        return Err(TlsError::NotPem { path: path.into() });
    }
    Ok(bytes)
}

fn bad_pem(path: &Path, error: &rustls::pki_types::pem::Error) -> TlsError {
    TlsError::BadPem {
        path: path.into(),
        message: error.to_string(),
    }
}

/// Logs a warning with the validity dates when `leaf` is expired or not valid yet (the
/// server still starts with it, as nginx does: clients decide).
fn warn_if_not_valid_now(path: &Path, leaf: &CertificateDer<'_>) -> Result<(), TlsError> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf).map_err(|error| TlsError::BadCertificate {
            path: path.into(),
            source: rustls::Error::General(error.to_string()),
        })?;
    let validity = parsed.validity();
    if !validity.is_valid() {
        tracing::warn!(
            cert = %path.display(),
            not_before = %validity.not_before,
            not_after = %validity.not_after,
            "the TLS certificate is not valid now (expired or not yet valid): clients will refuse it"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_matching_pair_loads() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("localhost");
        let cert = write(dir.path(), "cert.pem", &cert);
        let key = write(dir.path(), "key.pem", &key);
        assert!(load(&cert, &key).is_ok());
    }

    #[test]
    fn each_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_a, key_a) = pair("a");
        let (_, key_b) = pair("b");
        let cert = write(dir.path(), "cert.pem", &cert_a);
        let key = write(dir.path(), "key.pem", &key_a);
        let other_key = write(dir.path(), "other-key.pem", &key_b);
        let garbage = write(dir.path(), "garbage.pem", "not a certificate\n");
        let missing = dir.path().join("missing.pem");
        let message = |result: Result<Arc<ServerConfig>, TlsError>| result.unwrap_err().to_string();

        let error = message(load(&missing, &key));
        assert!(
            error.contains("cannot read") && error.contains("missing.pem"),
            "{error}"
        );
        let error = message(load(&garbage, &key));
        assert!(
            error.contains("not PEM") && error.contains("garbage.pem"),
            "{error}"
        );
        let error = message(load(&key, &key));
        assert!(
            error.contains("no certificate") && error.contains("key.pem"),
            "{error}"
        );
        let error = message(load(&cert, &cert));
        assert!(
            error.contains("no private key") && error.contains("cert.pem"),
            "{error}"
        );
        let error = message(load(&cert, &other_key));
        assert!(
            error.contains("does not match") && error.contains("other-key.pem"),
            "{error}"
        );
    }
}

//! Why the server could not start: a leaf that every part of the start-up and of a
//! reload returns.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::acme::client::AcmeError;
use crate::http::htpasswd::HtpasswdError;
use crate::serve::ktls::KtlsUnavailable;
use crate::serve::tls::TlsError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The root cannot be opened.
    #[error("cannot serve {path}: {source}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A listening socket cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// HTTP/3's UDP socket cannot be bound.
    #[error("cannot listen for HTTP/3 on UDP {addr}: {source} (--http3=false serves TCP only)")]
    Http3 {
        /// The address (the TLS listener's).
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// Socket activation passed descriptors that cannot be served.
    #[error("socket activation (LISTEN_FDS): {0}")]
    Activation(String),
    /// The sockets or the pipe a live upgrade passed cannot be used.
    #[error("live upgrade: {0}")]
    Upgrade(String),
    /// The access log file cannot be opened.
    #[error("cannot open the access log {}: {source}", path.display())]
    AccessLog {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The `--auth-file` is refused.
    #[error(transparent)]
    Auth(#[from] HtpasswdError),
    /// The TLS certificate or key is refused.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Only one of `--tls-cert` and `--tls-key` is set.
    #[error("--tls-cert and --tls-key go together: {given} is set, {missing} is not")]
    TlsHalfPair {
        /// The flag that is set.
        given: &'static str,
        /// The flag that is missing.
        missing: &'static str,
    },
    /// `--redirect-http` without TLS: there is no HTTPS to redirect to.
    #[error(
        "--redirect-http needs TLS, --tls-cert and --tls-key or --acme-domain (it redirects to the HTTPS listeners)"
    )]
    RedirectWithoutTls,
    /// `--ktls on` where the kernel cannot encrypt TLS records.
    #[error("--ktls on, but kTLS cannot be had here: {0} (--ktls auto serves TLS in user space instead)")]
    Ktls(KtlsUnavailable),
    /// `--ktls on` without TLS.
    #[error("--ktls on needs TLS, --tls-cert and --tls-key or --acme-domain (it hands TLS connections to the kernel)")]
    KtlsWithoutTls,
    /// ACME cannot start (an unusable `--acme-ca-root`, for one).
    #[error("--acme-domain: {0}")]
    Acme(AcmeError),
    /// A runtime or thread could not be created.
    #[error("cannot start a worker: {0}")]
    Worker(io::Error),
}

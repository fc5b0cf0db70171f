//! Why the server could not start: a leaf that every part of the start-up and of a
//! reload returns.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::http::htpasswd::HtpasswdError;

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
    /// Socket activation passed descriptors that cannot be served.
    #[error("socket activation (LISTEN_FDS): {0}")]
    Activation(String),
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
    /// A runtime or thread could not be created.
    #[error("cannot start a worker: {0}")]
    Worker(io::Error),
}

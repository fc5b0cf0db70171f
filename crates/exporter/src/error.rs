//! The exporter's errors.

use std::io;
use std::net::SocketAddr;

/// What can go wrong in the metrics stack.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// A metric or collector failed to write itself in the text format.
    #[error("cannot encode the metrics in the Prometheus text format")]
    Encode(#[from] std::fmt::Error),
    /// The metrics listener could not be bound.
    #[error("cannot listen for metrics scrapes on {address}: {cause}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The system's error.
        #[source]
        cause: io::Error,
    },
    /// A standard listener could not be handed to the tokio runtime.
    #[error("cannot serve metrics on the listener: {0}")]
    Listener(#[source] io::Error),
    /// The runtime or thread that serves the metrics could not be started.
    #[error("cannot start the metrics server: {0}")]
    Start(#[source] io::Error),
    /// A signal handler could not be installed (outside a tokio runtime, or the
    /// system refused).
    #[error("cannot install a handler for {signal}: {cause}")]
    Signal {
        /// The signal's name (`SIGTERM`...).
        signal: &'static str,
        /// The system's error.
        #[source]
        cause: io::Error,
    },
}

//! timeserve's errors: each names the input and what is allowed.

use std::io;
use std::net::SocketAddr;

/// What can stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another socket holds the address.
    #[error("address {address} is already in use (another timeserve, chronyd or ntpd?)")]
    AddressInUse {
        /// The address.
        address: SocketAddr,
    },
    /// A port below 1024 without the privilege to bind it.
    #[error(
        "binding {address} needs root or CAP_NET_BIND_SERVICE (port {} is below 1024): \
         run as root, grant the capability (setcap cap_net_bind_service=+ep, or \
         AmbientCapabilities= in a systemd unit), or listen on a port from 1024 up",
        address.port()
    )]
    PrivilegedPort {
        /// The address.
        address: SocketAddr,
    },
    /// No interface has the address.
    #[error("cannot listen on {address}: no interface of this host has that address")]
    AddressNotAvailable {
        /// The address.
        address: SocketAddr,
    },
    /// Any other failure to open or bind a socket.
    #[error("cannot listen on {address}: {cause}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The system's error.
        #[source]
        cause: io::Error,
    },
    /// A worker's socket failed while serving.
    #[error("worker {worker} on {address}: receiving failed: {cause}")]
    Receive {
        /// The worker's index.
        worker: usize,
        /// Its address.
        address: SocketAddr,
        /// The system's error.
        #[source]
        cause: io::Error,
    },
    /// Pinning a worker to its CPU failed.
    #[error("cannot pin worker {worker} to CPU {cpu}: {cause}")]
    Pin {
        /// The worker's index.
        worker: usize,
        /// The CPU.
        cpu: usize,
        /// The system's error.
        #[source]
        cause: io::Error,
    },
    /// The NTS-KE certificate or key cannot be used.
    #[error("NTS certificate {path}: {reason}")]
    Certificate {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("{0}")]
    Config(String),
}

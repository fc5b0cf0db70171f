//! timeserve: an SNTPv4 server (RFC 5905 server mode, RFC 4330) for a LAN or a fleet,
//! built the way seed 002 ended up: one SO_REUSEPORT UDP socket per worker, so that no
//! single receive buffer overflows at peak.
//!
//! - [`packet`]: classifying requests and writing replies (pure, fuzzed);
//! - [`sync`]: what replies say about the clock (the kernel's `adjtimex` state);
//! - [`ratelimit`]: per-client token buckets with Kiss-o'-Death RATE replies;
//! - [`socket`] and [`io`]: the socket group and batched `recvmmsg`/`sendmmsg` with
//!   kernel receive timestamps and the socket's drop counter;
//! - [`nts`]: Network Time Security (RFC 8915): the key exchange over TLS, cookies
//!   and authenticated replies;
//! - [`server`]: the workers; [`metrics`] and [`exporter`]: Prometheus counters.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use timeserve::server::{Config, Server, DEFAULT_BATCH};
//!
//! let config = Config {
//!     listen: vec!["127.0.0.1:1123".parse().unwrap()],
//!     workers: 2,
//!     pin: false,
//!     socket: Default::default(),
//!     batch: DEFAULT_BATCH,
//!     declared: Default::default(),
//!     rate_limit: None,
//!     nts: None,
//! };
//! let server = Server::bind(&config)?;
//! let stop = AtomicBool::new(false); // set it (from a signal handler) to stop
//! server.run(&stop)?;
//! # Ok::<(), timeserve::error::Error>(())
//! ```

pub mod cli;
pub mod error;
pub mod exporter;
pub mod io;
pub mod metrics;
pub mod nts;
pub mod packet;
pub mod ratelimit;
pub mod server;
pub mod socket;
pub mod sync;

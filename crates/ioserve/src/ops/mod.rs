//! Operating the server: its settings, worker placement, metrics (with the TLS
//! handshakes' outcomes they count), access log and descriptor budget.

pub(crate) mod access_log;
pub(crate) mod budget;
pub mod config;
pub(crate) mod log_file;
pub(crate) mod metrics;
pub mod placement;
pub(crate) mod tls_outcome;

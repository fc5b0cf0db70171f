//! Operating the server: its settings, worker placement, metrics (with the TLS
//! handshakes' outcomes they count), access log, and the descriptor and memory budgets.

pub(crate) mod access_log;
pub(crate) mod budget;
pub mod config;
pub(crate) mod log_file;
pub mod memory;
pub(crate) mod metrics;
pub mod placement;
pub(crate) mod tls_outcome;

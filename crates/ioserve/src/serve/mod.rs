//! The server: listeners, workers, connections, the operator's signals and reloads.

pub(crate) mod conn;
pub(crate) mod reload;
pub mod server;
pub(crate) mod shared;

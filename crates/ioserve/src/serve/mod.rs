//! The server: listeners, workers, connections, the operator's signals and reloads.

mod accept;
pub(crate) mod conn;
mod control;
mod error;
mod listeners;
pub(crate) mod reload;
pub mod server;
pub(crate) mod shared;
mod workers;

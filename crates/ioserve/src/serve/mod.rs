//! The server: listeners, workers, connections, the operator's signals and reloads.

pub mod accept;
mod body;
pub mod check;
pub mod conn;
mod control;
mod error;
mod exchange;
mod fields;
mod handover;
mod http2;
mod http3;
pub(crate) mod ktls;
mod linger;
pub mod listeners;
mod parking;
pub(crate) mod per_ip;
mod redirect;
pub(crate) mod reload;
pub mod server;
pub(crate) mod shared;
pub mod tls;
mod transport;
mod workers;

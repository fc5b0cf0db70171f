//! ioserve: a download daemon for large files.
//!
//! A request goes: listener ([`server`]) → connection ([`conn`]) → head parse
//! ([`request`]) → the shared HTTP semantics ([`handler`]: [`path`] safety, validators
//! and preconditions in [`conditional`], the [`range`] plan, directory [`listing`]) →
//! the body moved by the selected IO [`strategy`] through [`output`] → access log and
//! [`metrics`].
//!
//! The HTTP semantics are implemented once; a strategy only moves the bytes of
//! `(file, offset, len)` to the socket, so every strategy answers identically.

pub(crate) mod access_log;
pub(crate) mod budget;
pub(crate) mod cache;
pub mod clock;
pub(crate) mod conditional;
pub mod config;
pub(crate) mod conn;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod handler;
pub(crate) mod listing;
pub(crate) mod metrics;
pub mod negotiation;
pub(crate) mod output;
pub mod path;
pub mod placement;
pub mod range;
pub(crate) mod reload;
pub(crate) mod request;
pub(crate) mod response;
pub mod server;
pub(crate) mod shared;
pub mod strategy;

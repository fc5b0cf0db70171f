//! ioserve: a download daemon for large files.
//!
//! A request goes: listener ([`serve::server`]) → connection ([`serve::conn`]) → head
//! parse ([`http::request`]) → the shared HTTP semantics ([`http::handler`]:
//! [`http::path`] safety, validators and preconditions in [`http::conditional`], the
//! [`http::range`] plan, directory [`http::listing`]) → the body moved by the selected IO
//! [`io::strategy`] through [`io::output`] → access log and [`ops::metrics`].
//!
//! The HTTP semantics are implemented once; a strategy only moves the bytes of
//! `(file, offset, len)` to the socket, so every strategy answers identically.

pub mod clock;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod io;
pub mod ops;
pub mod serve;

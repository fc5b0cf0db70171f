//! ioserve: a download daemon for large files.
//!
//! A request goes: listener ([`serve::listeners`], accepted in [`serve::accept`], with
//! `--tls-cert` over TLS in user space: [`serve::tls`]) →
//! connection ([`serve::conn`]; HTTP/2, chosen by ALPN over TLS, in `serve::http2`,
//! each stream through the same `serve::exchange`) → head parse ([`http::request`]) →
//! [`http::resolve`]:
//! what it asks for, with no IO ([`http::path`] safety, the method, preconditions,
//! `Range`, negotiated encodings) → [`http::reply`]: the file opened through the
//! [`io::open_file_cache`], validators and preconditions in [`http::conditional`], the
//! [`http::range`] plan, directory [`http::listing`] → the body moved by the selected IO
//! [`io::strategy`] through [`io::output`] → access log and metrics (`ops::access_log`,
//! `ops::metrics`). Where the reply would wait for the disk on the event loop, the
//! connection hands the resolved request to the blocking pool, which completes it.
//!
//! The HTTP semantics are implemented once; a strategy only moves the bytes of
//! `(file, offset, len)` to the socket, so every strategy answers identically.
//!
//! # Layout
//!
//! One folder per job; imports run one way between them, and inside each folder its
//! files import one way too (no module cycles):
//!
//! ```text
//! serve ──> ops ──> http ──> io
//!   └────────┴───────┴──────^
//! serve ──> acme <── ops
//! ```
//!
//! - [`acme`]: automatic HTTPS: the certificate got and renewed from an ACME CA, its
//!   state directory, the challenge answers; it imports nothing of the others.
//! - [`io`]: file IO, knowing nothing of HTTP: the served root, shared open files, the
//!   open-file cache, the response writer and the IO strategies.
//! - [`http`]: HTTP semantics: request, path, resolve, reply, response, ranges,
//!   conditions, negotiation, listings, directories as tar downloads.
//! - [`ops`]: operating the server: settings, worker placement, metrics, access log,
//!   descriptor budget.
//! - [`serve`]: the server: listeners, workers, accept loops, connections (plain HTTP
//!   or HTTPS, HTTP/1.1 or HTTP/2), signals and reloads; it uses the three others.
//! - [`clock`] (the `Date` header's cache) and [`fuzzing`] (invariants shared with the fuzz
//!   targets, over [`http`]) stand beside them, and with the `jemalloc` feature (the
//!   Debian package's build) `jemalloc`, the binary's global allocator.

pub mod acme;
pub mod clock;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod io;
#[cfg(feature = "jemalloc")]
pub mod jemalloc;
pub mod ops;
pub mod serve;

/// This build's version as `ioserve --version` and the start-up log say it: the
/// package's version and whether the build is optimized, so that an operator (or a
/// test) sees which of two builds serves after a live upgrade.
pub const VERSION: &str = if cfg!(debug_assertions) {
    concat!(env!("CARGO_PKG_VERSION"), " (debug build)")
} else {
    concat!(env!("CARGO_PKG_VERSION"), " (optimized build)")
};

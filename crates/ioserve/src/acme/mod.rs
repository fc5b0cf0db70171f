//! Automatic HTTPS (`--acme-domain`): the server gets its certificate from an ACME CA
//! (RFC 8555: Let's Encrypt, or any CA that speaks it), keeps it in a state directory,
//! renews it when the CA says (ACME Renewal Information, RFC 9773) or when a third of
//! its lifetime is left, and swaps the new one in for new handshakes.
//!
//! - [`settings`]: what the operator asks for, checked ([`AcmeSettings`]).
//! - [`store`]: the state directory: the account, the certificate with its key, a lock
//!   per certificate and the challenge answers, each file written atomically, so that
//!   replicas sharing the directory agree and a crash leaves no half file.
//! - [`certificate`]: a stored or issued certificate read (names, validity, the ARI
//!   identifier) and made into what rustls serves.
//! - [`challenge`]: the answers to the CA's validation: HTTP-01 on the plain listener,
//!   TLS-ALPN-01 (`acme-tls/1`) on the TLS listener, found in memory or, from another
//!   replica, in the state directory.
//! - [`certificates`]: the certificate served now, the rustls resolvers of the serving
//!   and the challenge handshakes, and the wait for a first certificate.
//! - [`client`]: the conversation with the CA, on instant-acme.
//! - [`schedule`]: when to renew and how long to back off after a failure.
//! - [`manager`]: the loop that loads, orders, stores and renews.
//! - [`status`]: what the metrics report (expiry, orders by result).
//!
//! The folder imports nothing from the rest of the server; `serve` starts the manager
//! and puts its resolvers into the TLS configuration.

pub mod certificate;
pub mod certificates;
pub mod challenge;
pub mod client;
pub mod manager;
pub mod schedule;
pub mod settings;
pub mod status;
pub mod store;

pub use settings::{AcmeSettings, ChallengeKind};

//! The toolkit's one metrics stack, shared by its daemons (ioserve, timeserve and
//! `probe daemon`):
//!
//! - [`exposition`]: metrics are kept in a [`prometheus_client`] [`Registry`], usually
//!   as [`Collector`]s that read the daemon's own counters when scraped, and written in
//!   the Prometheus text format (version 0.0.4) by one encoder, so every daemon's
//!   `/metrics` passes `promtool check metrics` the same way;
//! - [`process`]: the standard `process_*` metrics of Prometheus clients, from
//!   `/proc/self`;
//! - [`server`]: `GET /metrics` and `GET /healthz` served by hyper on a listener the
//!   daemon bound, until a shutdown future completes (connections in flight finish);
//! - [`signals`]: SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 caught as a stream on the
//!   daemon's tokio runtime, so that each daemon decides what they mean (stop, reload,
//!   reopen a log) in one `select!` instead of a handler of its own.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ioserve_exporter::prometheus_client::metrics::counter::Counter;
//! use ioserve_exporter::prometheus_client::registry::Registry;
//! use ioserve_exporter::server::MetricsServer;
//! use ioserve_exporter::signals::OperatorSignals;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let mut registry = Registry::default();
//! let requests = Counter::<u64>::default();
//! registry.register("example_requests", "Requests answered", requests.clone());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
//! let mut signals = OperatorSignals::install()?;
//! MetricsServer::new(Arc::new(registry))
//!     .serve(listener, async move {
//!         while !signals.recv().await.stops() {}
//!     })
//!     .await;
//! # Ok(())
//! # }
//! ```
//!
//! [`Registry`]: prometheus_client::registry::Registry
//! [`Collector`]: prometheus_client::collector::Collector

pub mod error;
pub mod exposition;
pub mod process;
pub mod server;
pub mod signals;

pub use error::ExporterError;
/// The `prometheus-client` crate this stack is built on, re-exported so that a daemon
/// registers its metrics with the very version the exposition encodes.
pub use prometheus_client;

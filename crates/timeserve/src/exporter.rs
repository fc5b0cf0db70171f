//! The metrics listener: `GET /metrics` (Prometheus text format) and `GET /healthz`,
//! served by the toolkit's metrics stack (`ioserve-exporter`) on the binary's
//! control runtime.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use ioserve_exporter::prometheus_client::registry::Registry;
use ioserve_exporter::server::MetricsServer;

use crate::error::Error;
use crate::metrics::{Collector, Metrics};

/// A bound metrics listener.
#[derive(Debug)]
pub struct Exporter {
    listener: std::net::TcpListener,
    address: SocketAddr,
}

impl Exporter {
    /// Binds `address` (port 0: any free port).
    pub fn bind(address: SocketAddr) -> Result<Exporter, Error> {
        let listener =
            std::net::TcpListener::bind(address).map_err(|cause| match cause.raw_os_error() {
                Some(libc::EADDRINUSE) => Error::AddressInUse { address },
                _ => Error::Bind { address, cause },
            })?;
        let address = listener.local_addr().unwrap_or(address);
        Ok(Exporter { listener, address })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Answers scrapes until `shutdown` completes. `declared_synchronised` is true
    /// when the operator declared a stratum (the replies then say synchronised
    /// whatever the kernel says). Call it on a tokio runtime.
    pub async fn serve(
        self,
        metrics: Arc<Metrics>,
        declared_synchronised: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        let bind_error = |cause| Error::Bind {
            address: self.address,
            cause,
        };
        self.listener.set_nonblocking(true).map_err(bind_error)?;
        let listener = tokio::net::TcpListener::from_std(self.listener).map_err(bind_error)?;
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Collector::new(metrics, declared_synchronised)));
        MetricsServer::new(Arc::new(registry))
            .serve(listener, shutdown)
            .await;
        Ok(())
    }
}

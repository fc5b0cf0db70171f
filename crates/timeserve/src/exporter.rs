//! The metrics listener: `GET /metrics` (Prometheus text format) and `GET /healthz`,
//! served by `tiny_http` on its own thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::sync::KernelState;

/// How often the exporter looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// A bound metrics listener.
pub struct Exporter {
    server: tiny_http::Server,
    address: SocketAddr,
}

impl Exporter {
    /// Binds `address` (port 0: any free port).
    pub fn bind(address: SocketAddr) -> Result<Exporter, crate::error::Error> {
        let server = tiny_http::Server::http(address).map_err(|cause| {
            let cause = match cause.downcast::<std::io::Error>() {
                Ok(io) => *io,
                Err(other) => std::io::Error::other(other.to_string()),
            };
            match cause.raw_os_error() {
                Some(libc::EADDRINUSE) => crate::error::Error::AddressInUse { address },
                _ => crate::error::Error::Bind { address, cause },
            }
        })?;
        let address = server.server_addr().to_ip().unwrap_or(address);
        Ok(Exporter { server, address })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Answers scrapes until `stop` is set. `declared_synchronised` is true when the
    /// operator declared a stratum (the replies then say synchronised whatever the
    /// kernel says).
    pub fn serve(&self, metrics: &Arc<Metrics>, declared_synchronised: bool, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let request = match self.server.recv_timeout(POLL) {
                Ok(Some(request)) => request,
                Ok(None) => continue,
                Err(_) => continue,
            };
            let (status, content_type, body) = match (request.method(), request.url()) {
                (tiny_http::Method::Get, "/metrics") => {
                    let synchronised =
                        declared_synchronised || KernelState::read().is_ok_and(|k| k.synchronised);
                    (
                        200,
                        "text/plain; version=0.0.4; charset=utf-8",
                        metrics.render(synchronised),
                    )
                }
                (tiny_http::Method::Get, "/healthz") => (200, "text/plain", "ok\n".to_string()),
                (tiny_http::Method::Get, _) => (
                    404,
                    "text/plain",
                    "not found: try /metrics or /healthz\n".to_string(),
                ),
                _ => (405, "text/plain", "only GET\n".to_string()),
            };
            let header = tiny_http::Header::from_bytes("Content-Type", content_type)
                .expect("a valid header");
            let response = tiny_http::Response::from_string(body)
                .with_status_code(status)
                .with_header(header);
            // A scraper that went away is not the server's problem.
            let _ = request.respond(response);
        }
    }
}

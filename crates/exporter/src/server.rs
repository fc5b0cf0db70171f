//! `GET /metrics` and `GET /healthz` over HTTP/1.1, served by hyper.
//!
//! A daemon binds the listener itself (so that it can report the address, and map a
//! taken port to its own error), then either awaits [`MetricsServer::serve`] on its
//! tokio runtime or, when it has none, calls [`MetricsServer::spawn`] for a thread of
//! its own. Both stop accepting when told to and give the connections in flight up to
//! [`MetricsServer::grace`] to finish.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::error::ExporterError;
use crate::exposition;

/// How long a client may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connections in flight get to finish once shutdown begins.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// The plain-text content type of everything but the metrics.
const TEXT: &str = "text/plain; charset=utf-8";

/// Binds a metrics listener on `address` (port 0: any free port).
pub fn bind(address: SocketAddr) -> Result<std::net::TcpListener, ExporterError> {
    std::net::TcpListener::bind(address).map_err(|cause| ExporterError::Bind { address, cause })
}

/// Serves a registry's metrics at `/metrics` and a liveness answer (`ok`) at
/// `/healthz`; any other path is 404, any other method on those two 405.
#[derive(Clone, Debug)]
pub struct MetricsServer {
    registry: Arc<Registry>,
    keep_alive: bool,
    grace: Duration,
}

impl MetricsServer {
    /// A server for `registry`, with HTTP keep-alive and a 5 s grace at shutdown.
    pub fn new(registry: Arc<Registry>) -> MetricsServer {
        MetricsServer {
            registry,
            keep_alive: true,
            grace: DEFAULT_GRACE,
        }
    }

    /// Whether a connection stays open for further requests (default) or closes after
    /// its first answer (`Connection: close`), for clients that read to the end.
    pub fn keep_alive(mut self, keep_alive: bool) -> MetricsServer {
        self.keep_alive = keep_alive;
        self
    }

    /// How long the connections in flight get to finish once shutdown begins (default
    /// 5 s); the rest are dropped.
    pub fn grace(mut self, grace: Duration) -> MetricsServer {
        self.grace = grace;
        self
    }

    /// Answers scrapes on `listener` until `shutdown` completes, then stops accepting
    /// and waits up to the grace period for the connections in flight.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(self.keep_alive);
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(error) => {
                        // Out of descriptors, most likely: wait for some to close.
                        tracing::warn!(%error, "metrics listener cannot accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let registry = Arc::clone(&self.registry);
            let service = hyper::service::service_fn(move |request: Request<_>| {
                let response = answer(&request, &registry);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection =
                graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "metrics connection ended with an error");
                }
            });
        }
        drop(listener);
        if tokio::time::timeout(self.grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::debug!("metrics connections still open after the grace period");
        }
    }

    /// Serves on a thread of its own with a single-threaded tokio runtime, for a
    /// daemon that has none, until [`RunningServer::shutdown`] (or its drop).
    pub fn spawn(self, listener: std::net::TcpListener) -> Result<RunningServer, ExporterError> {
        let address = listener.local_addr().map_err(ExporterError::Listener)?;
        listener
            .set_nonblocking(true)
            .map_err(ExporterError::Listener)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ExporterError::Start)?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener).map_err(ExporterError::Listener)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(self.serve(listener, async {
                    // An error means the handle was dropped: stop as well.
                    let _ = stopped.await;
                }));
            })
            .map_err(ExporterError::Start)?;
        Ok(RunningServer {
            address,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// A [`MetricsServer`] serving on its own thread; dropping it stops it too.
#[derive(Debug)]
pub struct RunningServer {
    address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, lets the connections in flight finish (within the grace
    /// period) and waits for the thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the metrics thread panicked");
            }
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// The answer to one request.
fn answer<B>(request: &Request<B>, registry: &Registry) -> Response<Full<Bytes>> {
    let get = request.method() == Method::GET;
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" if get => match exposition::render(registry) {
            Ok(text) => (StatusCode::OK, exposition::CONTENT_TYPE, Bytes::from(text)),
            Err(error) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                Bytes::from(format!("{error}\n")),
            ),
        },
        "/healthz" if get => (StatusCode::OK, TEXT, Bytes::from_static(b"ok\n")),
        "/metrics" | "/healthz" => (
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            Bytes::from_static(b"405 Method Not Allowed: only GET\n"),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"404 Not Found: metrics are at /metrics, health at /healthz\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
    }
    response
}

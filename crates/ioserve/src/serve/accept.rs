//! Accepting connections: each accept loop admits or refuses what its listener
//! accepts, serves it in a task of its own, and drains them at shutdown.

use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use crate::http::response::Reply;
use crate::ops::tls_outcome::{HandshakeFailure, TlsCipher, TlsMode, TlsVersion};
use crate::serve::shared::{ConnectionSlot, Shared};
use crate::serve::{conn, http2};

/// Accepts on `listener` until shutdown, then drains the connections it started.
/// `shard` names the metrics and cache shard of each new connection.
pub(super) async fn accept_loop(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    shutdown_timeout: Duration,
    mut shard: impl FnMut() -> usize,
) {
    let id = shard();
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, worker = id, "listener unusable");
            return;
        }
    };
    let connections = TaskTracker::new();
    let mut failures = AcceptFailures::default();
    loop {
        if shared.accepting_paused() {
            // Clients wait in the backlog until a connection ends.
            tokio::select! {
                _ = shared.shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(10)) => continue,
            }
        }
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => spawn_connection(&connections, &shared, id, stream, peer),
            Err(error) => failures.back_off(&error, id).await,
        }
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(shutdown_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            worker = id,
            left = connections.len(),
            "shutdown timeout: cutting the connections still open"
        );
    }
}

/// Whether an accepted connection may be served, and its place in the count.
struct Admission {
    slot: ConnectionSlot,
    /// Under `--max-connections`.
    admitted: bool,
    /// Under `--max-conns-per-ip`.
    peer_admitted: bool,
}

/// The 503 for a client at `--max-conns-per-ip`.
fn per_ip_busy() -> Reply {
    Reply::error(503).header("Retry-After", PER_IP_RETRY_AFTER)
}

/// The TLS handshake, within the header timeout, then the connection served (or
/// refused with 503 when it is not admitted) over it: HTTP/2 where the client chose
/// `h2` by ALPN, else HTTP/1.1. A handshake that fails (plain
/// HTTP sent to the HTTPS port, a client that refuses the certificate, a scanner)
/// closes the connection and is logged at debug level. The metrics count each
/// handshake: by version and cipher suite when it completes, by reason when it fails.
async fn answer_tls(
    tls: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    admission: Admission,
) {
    let Admission {
        slot,
        admitted,
        peer_admitted,
    } = admission;
    let id = slot.worker();
    let header_timeout = shared.live().limits.header_timeout;
    let stream = match tokio::time::timeout(header_timeout, tls.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            shared
                .metrics
                .tls_handshake_failure(id, HandshakeFailure::of(&error));
            return tracing::debug!(%peer, %error, "TLS handshake failed");
        }
        Err(_elapsed) => {
            shared
                .metrics
                .tls_handshake_failure(id, HandshakeFailure::Timeout);
            return tracing::debug!(%peer, "TLS handshake timed out");
        }
    };
    let session = stream.get_ref().1;
    shared.metrics.tls_connection(
        id,
        TlsMode::Userspace,
        TlsVersion::of(session.protocol_version()),
        TlsCipher::of(session.negotiated_cipher_suite().map(|s| s.suite())),
    );
    let h2 = session.alpn_protocol() == Some(b"h2");
    match (admitted, peer_admitted) {
        (true, true) if h2 => http2::serve(stream, peer, Arc::clone(shared), &slot).await,
        (true, false) if h2 => {
            let shared = Arc::clone(shared);
            http2::refuse_connection(stream, peer, shared, &slot, per_ip_busy).await;
        }
        (false, _) if h2 => {
            let busy = || Reply::error(503);
            http2::refuse_connection(stream, peer, Arc::clone(shared), &slot, busy).await;
        }
        (true, true) => conn::serve(stream, peer, shared, &slot).await,
        (true, false) => conn::refuse_with(stream, peer, shared, id, per_ip_busy()).await,
        (false, _) => conn::refuse(stream, peer, shared, id, 503).await,
    }
}

/// Seconds a client refused at `--max-conns-per-ip` is asked to wait (`Retry-After`):
/// one of its own connections will likely have ended by then.
const PER_IP_RETRY_AFTER: u64 = 1;

/// Failed accepts (EMFILE and friends): a worker backs off instead of spinning, and
/// says so at most once a second.
#[derive(Default)]
struct AcceptFailures {
    /// Failures since the last warning.
    unreported: u64,
    last_warning: Option<std::time::Instant>,
}

impl AcceptFailures {
    async fn back_off(&mut self, error: &io::Error, worker: usize) {
        self.unreported += 1;
        if self
            .last_warning
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(%error, worker, failed = self.unreported, "accept failed; backing off");
            self.last_warning = Some(std::time::Instant::now());
            self.unreported = 0;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Serves an accepted connection in a task of `connections` (or refuses it with 503
/// when no connection slot is free, or when its address has `--max-conns-per-ip` open).
fn spawn_connection(
    connections: &TaskTracker,
    shared: &Arc<Shared>,
    id: usize,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let (slot, admitted) = ConnectionSlot::acquire(shared, id);
    let per_ip_limit = shared.live().limits.max_conns_per_ip;
    let (peer_slot, peer_admitted) = shared.per_ip.admit(peer.ip().to_canonical(), per_ip_limit);
    if admitted && !peer_admitted {
        shared.metrics.refused_per_ip(id);
    }
    let metrics = Arc::clone(&shared.metrics);
    let shared = Arc::clone(shared);
    let _ = stream.set_nodelay(true);
    // HTTPS as the settings of this moment say (SIGHUP may load a new certificate).
    let tls = shared.live().tls.clone();
    let connection = async move {
        // The address's place is given back when the task ends, however it ends.
        let _peer_slot = peer_slot;
        match (tls, admitted, peer_admitted) {
            // Boxed: a plain connection's task keeps its size, without the handshake.
            (Some(tls), _, _) => {
                let admission = Admission {
                    slot,
                    admitted,
                    peer_admitted,
                };
                let tls = TlsAcceptor::from(tls);
                Box::pin(answer_tls(tls, stream, peer, &shared, admission)).await;
            }
            (None, true, true) => conn::serve(stream, peer, &shared, &slot).await,
            // Boxed too: refusals are rare, and their futures (a reply being written)
            // are larger than a served connection's.
            (None, true, false) => {
                Box::pin(conn::refuse_with(stream, peer, &shared, id, per_ip_busy())).await;
            }
            (None, false, _) => Box::pin(conn::refuse(stream, peer, &shared, id, 503)).await,
        }
    };
    // A panic is a bug; it ends this connection only (the panic hook has logged it),
    // and the slot's drop gives its place back. (Combinators, not an async block: a
    // block would hold the connection's future twice, before and while it is awaited,
    // doubling every connection's task.)
    connections.spawn(
        AssertUnwindSafe(connection)
            .catch_unwind()
            .map(move |outcome| {
                if outcome.is_err() {
                    metrics.panic(id);
                    tracing::debug!(%peer, worker = id, "connection ended by a panic");
                }
            }),
    );
}

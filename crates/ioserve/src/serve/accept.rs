//! Accepting connections: each accept loop admits or refuses what its listener
//! accepts, serves it in a task of its own, and drains them at shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use ktls::CorkStream;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

use crate::http::response::Reply;
use crate::ops::tls_outcome::{HandshakeFailure, TlsCipher, TlsMode, TlsVersion};
use crate::serve::conn::{self, Served};
use crate::serve::http2;
use crate::serve::ktls::HandOff;
use crate::serve::parking::{Parked, Parking};
use crate::serve::shared::{ConnectionSlot, Shared};
use crate::serve::tls::TlsSetup;
use crate::serve::transport::Transport;

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
    let parking = match Parking::new(&shared) {
        Ok(parking) => Some(parking),
        Err(error) => {
            tracing::warn!(%error, worker = id, "cannot make an epoll set for idle connections: each keeps its task");
            None
        }
    };
    let accepting = async {
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
                Ok((stream, peer)) => {
                    spawn_connection(&connections, &shared, parking.as_ref(), id, stream, peer)
                }
                Err(error) => failures.back_off(&error, id).await,
            }
        }
    };
    let waking = async {
        if let Some(parking) = &parking {
            let wake = |parked| resume(&connections, &shared, parking, parked);
            parking.drive(&shared.shutdown, wake).await;
        }
    };
    tokio::join!(accepting, waking);
    drop(listener);
    if let Some(parking) = &parking {
        // After a hand-over a request may be on its way: each is served once more
        // (with `Connection: close`), as a waiting task's would be; else closed.
        for parked in parking.release() {
            if shared.handed_over() {
                resume(&connections, &shared, parking, parked);
            }
        }
    }
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

/// The 503 for a client past the connection limit (`--max-connections`, or what the
/// descriptor and memory limits hold).
fn busy() -> Reply {
    Reply::error(503).header("Retry-After", BUSY_RETRY_AFTER)
}

/// The TLS handshake, within the header timeout, then the connection served (or
/// refused with 503 when it is not admitted) over it: HTTP/2 where the client chose
/// `h2` by ALPN, else HTTP/1.1. A handshake that fails (plain
/// HTTP sent to the HTTPS port, a client that refuses the certificate, a scanner)
/// closes the connection and is logged at debug level. The metrics count each
/// handshake: by mode, version and cipher suite when it completes, by reason when it
/// fails. Where the kernel has kTLS, the handshake runs over a `CorkStream` and the
/// keys then go to the kernel (`serve/ktls.rs`), within the same timeout.
async fn answer_tls(
    tls: TlsSetup,
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    admission: Admission,
) {
    // The handshake and the serving are each boxed and made in turn, so that an
    // established connection holds what serving it needs and no more: this future
    // stays small, the handshake's state (rustls's, within a timeout) is freed when it
    // completes, and no local of the handshake (a stream moved on) keeps its place
    // here across the connection's life. Awaited in place, this future was 11.5 KB
    // for every HTTPS connection, idle or not.
    let id = admission.slot.worker();
    let header_timeout = shared.live().limits.header_timeout + tls.extra_wait();
    let Some(kernel) = &shared.kernel_tls else {
        let serving = {
            let handshake = Box::pin(tokio::time::timeout(header_timeout, tls.accept(stream)));
            let Some(handshake) = handshake_done(handshake.await, peer, shared, id) else {
                return;
            };
            let Some(stream) = handshake else {
                return tracing::debug!(%peer, "answered a TLS-ALPN-01 validation");
            };
            let session = stream.get_ref().1;
            count_tls(shared, id, TlsMode::Userspace, session);
            let h2 = chose_h2(session);
            answer(stream, peer, shared, admission, h2)
        };
        return serving.await;
    };
    let serving = {
        let handed = Box::pin(tokio::time::timeout(header_timeout, async {
            let Some(stream) = tls.accept(CorkStream::new(stream)).await? else {
                return Ok(None);
            };
            let (version, suite, h2) = {
                let session = stream.get_ref().1;
                (
                    session.protocol_version(),
                    session.negotiated_cipher_suite(),
                    chose_h2(session),
                )
            };
            let handed = kernel.hand_off(stream).await.map_err(ktls_failure)?;
            Ok::<_, io::Error>(Some((handed, version, suite, h2)))
        }));
        let Some(handed) = handshake_done(handed.await, peer, shared, id) else {
            return;
        };
        let Some((handed, version, suite, h2)) = handed else {
            return tracing::debug!(%peer, "answered a TLS-ALPN-01 validation");
        };
        let (version, cipher) = (
            TlsVersion::of(version),
            TlsCipher::of(suite.map(|s| s.suite())),
        );
        match handed {
            HandOff::Kernel(stream) => {
                shared
                    .metrics
                    .tls_connection(id, TlsMode::Ktls, version, cipher);
                answer(stream, peer, shared, admission, h2)
            }
            HandOff::UserSpace(stream) => {
                shared
                    .metrics
                    .tls_connection(id, TlsMode::Userspace, version, cipher);
                answer(*stream, peer, shared, admission, h2)
            }
        }
    };
    serving.await
}

/// The completed handshake, or `None` with its failure counted and logged.
fn handshake_done<T>(
    handshake: Result<io::Result<T>, tokio::time::error::Elapsed>,
    peer: SocketAddr,
    shared: &Shared,
    id: usize,
) -> Option<T> {
    match handshake {
        Ok(Ok(done)) => Some(done),
        Ok(Err(error)) => {
            shared
                .metrics
                .tls_handshake_failure(id, HandshakeFailure::of(&error));
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_elapsed) => {
            shared
                .metrics
                .tls_handshake_failure(id, HandshakeFailure::Timeout);
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// Counts a completed handshake of `session` in `mode`.
fn count_tls(shared: &Shared, id: usize, mode: TlsMode, session: &rustls::ServerConnection) {
    shared.metrics.tls_connection(
        id,
        mode,
        TlsVersion::of(session.protocol_version()),
        TlsCipher::of(session.negotiated_cipher_suite().map(|s| s.suite())),
    );
}

/// A failed hand-off to the kernel as the handshake's error: the client's going away
/// while rustls was drained keeps its own error (counted as `closed`); the kernel
/// refusing keys it took at the probe is logged once as a warning (counted as `other`).
fn ktls_failure(error: ktls::Error) -> io::Error {
    static WARNED: std::sync::Once = std::sync::Once::new();
    match error {
        ktls::Error::DrainError(error) => error,
        error => {
            WARNED.call_once(|| {
                tracing::warn!(%error, "kTLS: the kernel refused a connection's keys; such connections close");
            });
            io::Error::other(error)
        }
    }
}

/// Whether the client chose HTTP/2 by ALPN.
fn chose_h2(session: &rustls::ServerConnection) -> bool {
    session.alpn_protocol() == Some(b"h2")
}

/// Serves a connection after its handshake (HTTP/2 where `h2`, else HTTP/1.1), or
/// refuses it with 503 when it is not admitted. Boxed, with the stream inside: the
/// caller holds a pointer, and the box is as large as this connection's way of being
/// served, not as the largest of them (HTTP/2's, 6 KB, for every HTTP/1.1 client).
/// The stream is used where it was captured: bound again inside a block, it would be
/// held twice (a rustls stream is 1.2 KB).
fn answer<S: Transport + 'static>(
    mut stream: S,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    admission: Admission,
    h2: bool,
) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
    let Admission {
        slot,
        admitted,
        peer_admitted,
    } = admission;
    let id = slot.worker();
    match (admitted, peer_admitted) {
        (true, true) if h2 => Box::pin(async move {
            http2::serve(stream, peer, Arc::clone(shared), &slot).await;
        }),
        (true, false) if h2 => Box::pin(async move {
            http2::refuse_connection(stream, peer, Arc::clone(shared), &slot, per_ip_busy).await;
        }),
        (false, _) if h2 => Box::pin(async move {
            http2::refuse_connection(stream, peer, Arc::clone(shared), &slot, busy).await;
        }),
        // Over TLS the connection's state lives in user space: it keeps its task.
        (true, true) => Box::pin(async move {
            conn::serve(&mut stream, &peer, shared, &slot, 0, false).await;
        }),
        (true, false) => Box::pin(async move {
            conn::refuse_with(&mut stream, &peer, shared, id, per_ip_busy()).await;
        }),
        (false, _) => Box::pin(async move {
            conn::refuse_with(&mut stream, &peer, shared, id, busy()).await;
        }),
    }
}

/// Seconds a client refused at `--max-conns-per-ip` is asked to wait (`Retry-After`):
/// one of its own connections will likely have ended by then.
const PER_IP_RETRY_AFTER: u64 = 1;
/// Seconds a client refused at the connection limit is asked to wait: downloads end,
/// and keep-alive connections make room, within seconds.
const BUSY_RETRY_AFTER: u64 = 2;

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
    parking: Option<&Arc<Parking>>,
    id: usize,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    let (slot, admitted) = ConnectionSlot::acquire(shared, id);
    let per_ip_limit = shared.live().limits.max_conns_per_ip;
    let (peer_slot, peer_admitted) = shared.per_ip.admit(peer.ip().to_canonical(), per_ip_limit);
    if admitted && !peer_admitted {
        shared.metrics.refused_per_ip(id);
    }
    let _ = stream.set_nodelay(true);
    // HTTPS as the settings of this moment say (SIGHUP may load a new certificate).
    let tls = shared.live().tls.clone();
    if tls.is_none() && admitted && peer_admitted {
        let connection = Parked {
            stream,
            peer,
            slot,
            peer_slot,
            served: 0,
        };
        return spawn_plain(connections, shared, parking, connection);
    }
    let shared = Arc::clone(shared);
    // The task owns the stream, the peer's address and both slots; what it runs borrows
    // them, so that none is held twice in the task. The slots give their places back
    // when the task ends, however it ends.
    //
    // A panic is a bug; it ends this connection only (the panic hook has logged it).
    // It is caught around each way of serving, inside the task: a combinator around the
    // task would hold the peer's address a second time in every task.
    let connection = async move {
        let _peer_slot = &peer_slot;
        let served = if let Some(tls) = tls {
            let admission = Admission {
                slot,
                admitted,
                peer_admitted,
            };
            // Boxed: a plain connection's task keeps its size, without the handshake.
            let answering = Box::pin(answer_tls(tls, stream, peer, &shared, admission));
            AssertUnwindSafe(answering).catch_unwind().await
        } else {
            let reply = match admitted {
                true => per_ip_busy(),
                false => busy(),
            };
            // Boxed too: refusals are rare, and their futures (a reply being written)
            // are larger than a served connection's.
            let refusal = Box::pin(conn::refuse_with(&mut stream, &peer, &shared, id, reply));
            AssertUnwindSafe(refusal).catch_unwind().await
        };
        if served.is_err() {
            shared.metrics.panic(id);
            tracing::debug!(%peer, worker = id, "connection ended by a panic");
        }
    };
    connections.spawn(connection);
}

/// Serves a woken parked connection in a task of `connections` again (or closes it,
/// when its socket cannot rejoin the reactor).
fn resume(connections: &TaskTracker, shared: &Arc<Shared>, parking: &Arc<Parking>, parked: Parked) {
    let peer = parked.peer;
    match parked.try_map_stream(TcpStream::from_std) {
        Ok(connection) => spawn_plain(connections, shared, Some(parking), connection),
        Err(error) => {
            tracing::debug!(%peer, %error, "a woken idle connection cannot rejoin the reactor")
        }
    }
}

/// Serves an admitted plain HTTP connection in a task of `connections`: new (`served`
/// 0) or woken from `parking`. Once it has idled for `PARK_AFTER` it is parked and the
/// task ends; where it cannot be (shutdown, a failed epoll_ctl) it goes on in its task.
fn spawn_plain(
    connections: &TaskTracker,
    shared: &Arc<Shared>,
    parking: Option<&Arc<Parking>>,
    connection: Parked<TcpStream>,
) {
    let shared = Arc::clone(shared);
    let mut parking = parking.map(Arc::clone);
    // The task owns the connection and uses its fields in place: bound to locals of
    // their own, they would be held twice in every connection's task (as the captured
    // value and as the locals), 128 bytes more per task.
    let mut connection = connection;
    connections.spawn(async move {
        loop {
            let serving = conn::serve(
                &mut connection.stream,
                &connection.peer,
                &shared,
                &connection.slot,
                connection.served,
                parking.is_some(),
            );
            let deadline = match AssertUnwindSafe(serving).catch_unwind().await {
                Ok(Served::Closed) => return,
                Ok(Served::Idle { served, deadline }) => {
                    connection.served = served;
                    deadline
                }
                Err(_panic) => {
                    let (peer, worker) = (connection.peer, connection.slot.worker());
                    shared.metrics.panic(worker);
                    return tracing::debug!(%peer, worker, "connection ended by a panic");
                }
            };
            let Some(lot) = &parking else {
                return;
            };
            let Ok(idle) = connection.try_map_stream(TcpStream::into_std) else {
                return;
            };
            let Err(back) = lot.park(idle, deadline) else {
                return;
            };
            // At shutdown the lot is closed, and an idle connection closes.
            if shared.shutdown.is_cancelled() {
                return;
            }
            let Ok(back) = back.try_map_stream(TcpStream::from_std) else {
                return;
            };
            connection = back;
            parking = None;
        }
    });
}

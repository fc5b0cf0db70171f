//! One HTTP/3 connection after its handshake: its requests taken and answered, each in
//! a task of its own ([`crate::serve::http3::stream`]), GOAWAY when it has been idle,
//! at shutdown, or to make room for a new client, and its close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::http::request::MAX_HEAD_BYTES;
use crate::serve::http3::stream;
use crate::serve::shared::{ConnectionSlot, Shared};

/// How long a connection told to close (GOAWAY) with no request in flight may stay
/// open before it is closed.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// HTTP/3's application error codes (RFC 9114 §8.1) that the server sends.
pub(super) mod code {
    use quinn::VarInt;
    /// H3_NO_ERROR: a graceful close.
    pub(in crate::serve::http3) const NO_ERROR: VarInt = VarInt::from_u32(0x100);
}

/// A request's place among those in flight on its connection, given back when
/// dropped.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn new(count: &Arc<watch::Sender<usize>>) -> InFlight {
        count.send_modify(|n| *n += 1);
        InFlight(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Serves one QUIC connection after its handshake, to its end.
pub(super) async fn serve(quic: quinn::Connection, shared: Arc<Shared>, slot: ConnectionSlot) {
    let peer: SocketAddr = quic.remote_address();
    let worker = slot.worker();
    let mut builder = h3::server::builder();
    builder.max_field_section_size(MAX_HEAD_BYTES as u64);
    let mut h3 = match builder.build(h3_quinn::Connection::new(quic.clone())).await {
        Ok(h3) => h3,
        Err(error) => return tracing::debug!(%peer, %error, "HTTP/3 connection setup failed"),
    };
    let (in_flight, mut streams) = watch::channel(0);
    let in_flight = Arc::new(in_flight);
    // The first request must come within the header timeout, later ones within the
    // idle timeout of the last request's end.
    let mut wait = shared.live().limits.header_timeout;
    let mut quiet_since = Instant::now();
    let mut closing: Option<Instant> = None;
    let mut served = false;
    let make_room = Arc::new(Notify::new());
    loop {
        let idle = *streams.borrow_and_update() == 0;
        let deadline = match closing {
            Some(closed) => closed.max(quiet_since) + CLOSE_GRACE,
            None => quiet_since + wait,
        };
        let evictable = idle && served && closing.is_none();
        let _waiting = evictable.then(|| slot.idle(&make_room));
        let mut goaway = false;
        tokio::select! {
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    let request = InFlight::new(&in_flight);
                    let shared = Arc::clone(&shared);
                    let quic = quic.clone();
                    tokio::spawn(stream::answer(request, shared, worker, quic, resolver));
                }
                // The client said GOAWAY and its requests are done, or it closed.
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%peer, %error, "HTTP/3 connection ended by an error");
                    break;
                }
            },
            () = make_room.notified(), if evictable => goaway = true,
            () = shared.shutdown.cancelled(), if closing.is_none() => goaway = true,
            changed = streams.changed() => {
                if changed.is_err() {
                    break;
                }
                wait = shared.live().limits.idle_timeout;
                quiet_since = Instant::now();
                served = true;
            }
            () = tokio::time::sleep_until(deadline), if idle => match closing {
                Some(_) => break,
                None => {
                    tracing::debug!(%peer, "HTTP/3 connection idle or incomplete: GOAWAY");
                    goaway = true;
                }
            },
        }
        if goaway {
            // Requests already taken are answered; later ones are refused by h3.
            if let Err(error) = h3.shutdown(0).await {
                tracing::debug!(%peer, %error, "HTTP/3 GOAWAY not sent");
                break;
            }
            closing = Some(Instant::now());
        }
    }
    // Streams still in flight (the connection closed under them) end with it.
    quic.close(code::NO_ERROR, b"");
}

//! One client connection: read request heads (keep-alive and pipelining), answer each
//! with its reply and the configured strategy, enforce the timeouts. The same code
//! serves plain HTTP and HTTPS: it is generic over the connection's
//! `Transport` (`serve/transport.rs`), compiled once for each. An HTTPS connection
//! that chose `h2` by ALPN is served by `serve::http2` instead; both decide, complete
//! and account for each request in `serve::exchange`.
//!
//! Timeouts, as nginx has them:
//! - header timeout: a request head must be complete this long after its first byte (or
//!   after the connection opened); otherwise 408 and close. Slowloris ends here.
//! - idle timeout: a keep-alive connection with no new request for this long is closed.
//! - send timeout: a client that reads nothing for this long is cut off.
//!
//! Errors before a response (malformed head, too large, wrong version) get their status
//! and a close. Errors after the head went out just close: the client sees a short body.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::OptionFuture;
use tokio::sync::Notify;
use tokio::time::error::Elapsed;
use tokio::time::timeout_at;

use crate::http::request::{self, Parsed, RequestError, MAX_HEAD_BYTES};
use crate::http::response::{Body, Reply};
use crate::io::pacing::Pacer;
use crate::ops::access_log::{Outcome, Record};
use crate::serve::exchange::{self, Decided, Decision, Delivery};
use crate::serve::linger;
use crate::serve::parking::PARK_AFTER;
use crate::serve::shared::{ConnectionSlot, Shared};
use crate::serve::transport::Transport;

/// Serves one accepted, admitted connection to its end.
///
/// Memory per connection stays small, because a server holds thousands of slow or idle
/// clients: the read buffer is allocated only when bytes arrive, and released while a
/// body is sent and while the connection waits for its next request. The stream and the
/// peer are borrowed from the connection's task, which owns them: taken by value, they
/// would be held twice in every task (as this future's arguments and as its locals).
///
/// A connection that `may_park` returns [`Served::Idle`] instead of waiting longer than
/// [`PARK_AFTER`] for its next request, to be parked without a task
/// (`serve::parking`); one woken from there goes on with the `served` requests it had
/// (the client's bytes are waiting: it is not parked again before its next answer).
#[allow(clippy::manual_async_fn)]
pub(crate) fn serve<'a, S: Transport>(
    stream: &'a mut S,
    peer: &'a SocketAddr,
    shared: &'a Shared,
    slot: &'a ConnectionSlot,
    mut served: u64,
    may_park: bool,
) -> impl Future<Output = Served> + use<'a, S> {
    // A function returning an `async` block, not an `async fn`: an `async fn` keeps its
    // arguments twice, and this future is part of every connection's task.
    async move {
        let mut buf: Vec<u8> = Vec::new();
        // Notified when this connection, idle, must close to admit a new client.
        let mut close: Option<Arc<Notify>> = None;
        // Whether the next wait for a request may end in parking: not before a woken
        // connection has read what woke it.
        let mut park_next = may_park && served == 0;
        // `--limit-rate` applies to the connection as a whole, across its responses;
        // made at the first response that has a rate.
        let mut pacer: Option<Box<Pacer>> = None;
        // The first request must arrive within the header timeout of the accept.
        // Timeouts come from the settings of the moment (SIGHUP may change them).
        let mut deadline = Instant::now() + shared.live().limits.header_timeout;
        loop {
            // Parsing and deciding are synchronous and leave nothing that borrows the
            // buffer. The decision is boxed and the step taken apart before any await:
            // what is alive across an await keeps its place in this future, and so in
            // every connection's task.
            let (decision, refusal) = match next_step(shared, *peer, slot.worker(), &buf) {
                Step::Partial => (None, None),
                Step::Respond { decision, len } => {
                    buf.drain(..len);
                    if buf.is_empty() {
                        // Nothing pipelined: give the buffer back while the body goes out.
                        buf = Vec::new();
                    }
                    (Some(decision), None)
                }
                Step::Refuse(status) => (None, Some(status)),
            };
            if let Some(status) = refusal {
                Box::pin(refuse(stream, peer, shared, slot.worker(), status)).await;
                return Served::Closed;
            }
            if let Some(decision) = decision {
                // Boxed: only a connection with a response in flight holds it.
                let responding = respond(stream, slot, decision, &mut pacer);
                let keep_alive = match Box::pin(responding).await {
                    Ok(keep_alive) => keep_alive,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "response cut short");
                        return Served::Closed;
                    }
                };
                if !keep_alive {
                    Box::pin(linger::close(stream)).await;
                    return Served::Closed;
                }
                served += 1;
                // `--limit-rate` paces the connection as a whole: its pacer stays with
                // the task.
                park_next = may_park && pacer.is_none();
                // Nothing pipelined: the client may idle; else its head is on its way.
                let live = shared.live();
                let wait = match buf.is_empty() {
                    true => live.limits.idle_timeout,
                    false => live.limits.header_timeout,
                };
                deadline = Instant::now() + wait;
                continue;
            }
            if buf.len() >= MAX_HEAD_BYTES {
                Box::pin(refuse(stream, peer, shared, slot.worker(), 431)).await;
                return Served::Closed;
            }
            let idle = buf.is_empty();
            // Parked once it has waited PARK_AFTER, unless its idle timeout comes first.
            // (The clock is read only for a connection that may park, not per request.)
            let (parks, wait_until) = {
                let park_at = (park_next && idle && served > 0)
                    .then(|| Instant::now() + PARK_AFTER)
                    .filter(|park_at| *park_at < deadline);
                (park_at.is_some(), park_at.unwrap_or(deadline))
            };
            // Before the first request, shutdown closes the connection. Between
            // requests, a new client that needs the slot does too (a client that just
            // connected may have its request in flight: it is not taken for idle). No
            // buffer is held while it waits. One select for both cases keeps the task
            // small.
            let close = match (&mut close, idle && served > 0) {
                (_, false) => None,
                (Some(close), true) => Some(&*close),
                (close, true) => Some(&*close.insert(Arc::new(Notify::new()))),
            };
            // Boxed: a connection holds the wait's futures and its entry in the idle
            // queue only while it waits, not while a response of its own is in flight.
            let first = served == 0;
            let waiting = wait_for_bytes(stream, &mut buf, slot, close, idle, first, wait_until);
            // In a block of its own: what it read is not kept across the 408's await.
            let timed_out = {
                let Some(read) = Box::pin(waiting).await else {
                    return Served::Closed;
                };
                park_next = false;
                match read {
                    // End of stream or an error: the connection is over.
                    Ok(Ok(0) | Err(_)) => return Served::Closed,
                    Ok(Ok(_)) => {
                        if idle {
                            deadline = Instant::now() + shared.live().limits.header_timeout;
                        }
                        false
                    }
                    Err(_elapsed) if parks => return Served::Idle { served, deadline },
                    Err(_elapsed) if idle => return Served::Closed,
                    Err(_elapsed) => true,
                }
            };
            if timed_out {
                Box::pin(refuse(stream, peer, shared, slot.worker(), 408)).await;
                return Served::Closed;
            }
        }
    }
}

/// How [`serve`] left a connection.
#[derive(Debug)]
pub(crate) enum Served {
    /// Closed, or to be closed by dropping it.
    Closed,
    /// Idle for [`PARK_AFTER`] after `served` requests, to be parked until `deadline`
    /// (its idle timeout).
    Idle { served: u64, deadline: Instant },
}

/// Waits for request bytes until `deadline` and appends them to `buf`; `None` when the
/// connection must close first: at shutdown while it is `idle` (no partial head), or
/// when `close` is notified (a new client needs its slot; the connection is in its
/// worker's idle queue while it waits).
///
/// When a new process took the listeners over (a live upgrade), a client may have
/// sent its request already: closing under it would reset the connection and lose the
/// request. So the connection's first request is still awaited (for the header
/// timeout), and a keep-alive connection's next one for [`HANDED_OVER_IDLE`]; either
/// is answered with `Connection: close`, and the client's next connection reaches the
/// new process.
#[allow(clippy::manual_async_fn)]
fn wait_for_bytes<'a, S: Transport>(
    stream: &'a mut S,
    buf: &'a mut Vec<u8>,
    slot: &'a ConnectionSlot,
    close: Option<&'a Arc<Notify>>,
    idle: bool,
    first: bool,
    deadline: Instant,
) -> impl Future<Output = Option<Result<io::Result<usize>, Elapsed>>> + use<'a, S> {
    // A function returning an `async` block: an `async fn` keeps its arguments twice.
    async move {
        // In the worker's idle queue while it waits, so that a new client can close it.
        let _waiting = close.map(|close| slot.idle(close));
        let shared = slot.shared();
        tokio::select! {
            _ = shared.shutdown.cancelled(), if idle => {
                if !shared.handed_over() {
                    return None;
                }
                let deadline = match first {
                    true => deadline,
                    false => deadline.min(Instant::now() + HANDED_OVER_IDLE),
                };
                Some(timeout_at(deadline.into(), stream.read_some(buf)).await)
            }
            _ = OptionFuture::from(close.map(|close| close.notified())), if close.is_some() => None,
            read = timeout_at(deadline.into(), stream.read_some(buf)) => Some(read),
        }
    }
}

/// How long a keep-alive connection left with the old process at a live upgrade waits
/// for its next request before it closes.
const HANDED_OVER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// What to do with the bytes read so far.
enum Step {
    /// The head is not complete yet.
    Partial,
    /// A complete request of `len` bytes, decided.
    Respond { decision: Box<Decision>, len: usize },
    /// A head that cannot be answered: this status, then close.
    Refuse(u16),
}

/// Parses the buffer and, for a complete head, decides the answer.
fn next_step(shared: &Shared, peer: SocketAddr, worker: usize, buf: &[u8]) -> Step {
    let (request, len) = match request::parse(buf) {
        Ok(Parsed::Partial) => return Step::Partial,
        Ok(Parsed::Complete { request, len }) => (request, len),
        Err(error) => {
            tracing::debug!(%peer, %error, "bad request head");
            return Step::Refuse(match error {
                RequestError::Bad(_) => 400,
                RequestError::TooLarge => 431,
                RequestError::Version => 505,
            });
        }
    };
    let decision = Box::new(exchange::decide(shared, peer, worker, &request));
    Step::Respond { decision, len }
}

/// Answers one decided request: completes its reply (what may wait for the disk runs on
/// the blocking pool: `exchange::complete`), sends it with the settings it was decided
/// with, and counts it (for the worker of `slot`). Returns whether the connection
/// stays open.
///
/// (A function returning an `async` block, not an `async fn`: an `async fn` keeps its
/// arguments twice, and this future is part of every response in flight.)
#[allow(clippy::manual_async_fn)]
fn respond<'a, S: Transport>(
    stream: &'a mut S,
    slot: &'a ConnectionSlot,
    decision: Box<Decision>,
    pacer: &'a mut Option<Box<Pacer>>,
) -> impl Future<Output = io::Result<bool>> + use<'a, S> {
    async move {
        // The server and the worker are the slot's, read where they are needed: as
        // locals they would take room in this future.
        // Bound by patterns and in a block, so that nothing moved or borrowed here keeps
        // room in this future while the body goes out.
        let (
            completing,
            Decided {
                live,
                started,
                keep_alive,
                http10,
                log,
            },
        ) = decision.start_completing(slot.shared(), slot.worker(), S::ENCRYPTED);
        let reply = completing.await;
        let mut out = stream.output(live.limits.send_timeout);
        if let Some(pacer) = Pacer::for_response(pacer, live.limits.pace) {
            out = out.paced_by(pacer);
        }
        let (delivery, body) = {
            let (status, head, body) = reply.into_parts(keep_alive, http10);
            let head_len = head.len() as u64;
            out.queue_owned(head);
            (
                Delivery::start(slot.shared(), slot.worker(), status, head_len, &body),
                body,
            )
        };
        // `exchange::deliver` in its halves: its future would keep the body (and its
        // other arguments) in this one, which every response in flight holds.
        let sent = exchange::send_body(&mut out, &live, body).await;
        delivery.end(
            slot.shared(),
            &live,
            slot.worker(),
            &out,
            &sent,
            log.as_deref(),
        );
        slot.shared()
            .metrics
            .duration(slot.worker(), started.elapsed());
        sent.map(|()| keep_alive)
    }
}

/// Sends an error status that ends the connection (the request stream cannot be
/// trusted any more), then closes.
pub(crate) async fn refuse<S: Transport>(
    stream: &mut S,
    peer: &SocketAddr,
    shared: &Shared,
    worker: usize,
    status: u16,
) {
    refuse_with(stream, peer, shared, worker, Reply::error(status)).await;
}

/// As [`refuse`], with `reply` (an error status with headers of its own).
pub(crate) async fn refuse_with<S: Transport>(
    stream: &mut S,
    peer: &SocketAddr,
    shared: &Shared,
    worker: usize,
    reply: Reply,
) {
    let live = shared.live();
    let status = reply.status;
    let head = reply.finish_head(false, false);
    let mut out = stream.output(live.limits.send_timeout);
    out.queue(&head);
    let sent = match reply.body {
        Body::Bytes(bytes) => out.write(&bytes).await.map(|()| out.sent()),
        _ => out.flush(false).await.map(|()| out.sent()),
    };
    let sent_bytes = *sent.as_ref().unwrap_or(&0);
    shared.metrics.request(worker, status, sent_bytes);
    if let Some(access_log) = &live.access_log {
        access_log.write(
            &Record::refused(*peer),
            Outcome {
                status,
                bytes: sent_bytes.saturating_sub(head.len() as u64),
                strategy: live.strategy.kind().name(),
                complete: sent.is_ok(),
            },
        );
    }
    if sent.is_ok() {
        linger::close(stream).await;
    }
}

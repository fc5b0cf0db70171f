//! One client connection: read request heads (keep-alive and pipelining), answer each
//! with its reply and the configured strategy, enforce the timeouts. The same code
//! serves plain HTTP and HTTPS: it is generic over the connection's
//! `Transport` (`serve/transport.rs`), compiled once for each.
//!
//! Timeouts, as nginx has them:
//! - header timeout: a request head must be complete this long after its first byte (or
//!   after the connection opened); otherwise 408 and close. Slowloris ends here.
//! - idle timeout: a keep-alive connection with no new request for this long is closed.
//! - send timeout: a client that reads nothing for this long is cut off.
//!
//! Errors before a response (malformed head, too large, wrong version) get their status
//! and a close. Errors after the head went out just close: the client sees a short body.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::OptionFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::timeout_at;

use crate::http::auth::{Check, Pending};
use crate::http::reply::{self, Answer, Blocking};
use crate::http::request::{self, Method, Parsed, RequestError, Version, MAX_HEAD_BYTES};
use crate::http::resolve::Resolved;
use crate::http::response::{Body, Reply};
use crate::http::site::Site;
use crate::http::tar;
use crate::io::output::Output;
use crate::io::pacing::Pacer;
use crate::io::strategy::ColdReads;
use crate::ops::access_log::{Outcome, Record};
use crate::serve::shared::{ConnectionSlot, Live, Shared};
use crate::serve::transport::Transport;

/// How long a closing connection keeps reading (and dropping) what the client still
/// sends, so that the kernel does not answer it with a reset that destroys our response.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and dropped while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// Serves one accepted, admitted connection to its end.
///
/// Memory per connection stays small, because a server holds thousands of slow or idle
/// clients: the read buffer is allocated only when bytes arrive, and released while a
/// body is sent and while the connection waits for its next request.
pub(crate) async fn serve<S: Transport>(
    mut stream: S,
    peer: SocketAddr,
    shared: &Shared,
    slot: &ConnectionSlot,
) {
    let worker = slot.worker();
    // Timeouts come from the settings of the moment (SIGHUP may change them).
    let limits = || shared.live().limits.clone();
    let mut buf: Vec<u8> = Vec::new();
    // Notified when this connection, idle, must close to admit a new client.
    let mut close: Option<Arc<Notify>> = None;
    // Requests answered on this connection.
    let mut served = 0u64;
    // `--limit-rate` applies to the connection as a whole, across its responses.
    let mut pacer = Pacer::new(limits().pace);
    // The first request must arrive within the header timeout of the accept.
    let mut deadline = Instant::now() + limits().header_timeout;
    loop {
        // Parsing and deciding are synchronous and leave nothing that borrows the
        // buffer, so the parsed request is not part of the task while it waits.
        match next_step(shared, peer, worker, &buf) {
            Step::Partial => {}
            Step::Respond { decision, len } => {
                buf.drain(..len);
                if buf.is_empty() {
                    // Nothing pipelined: give the buffer back while the body goes out.
                    buf = Vec::new();
                }
                pacer.set_limits(decision.live.limits.pace);
                let started = decision.started;
                // Boxed, as the sending below: most requests wait for nothing here.
                let (live, log, prepared) = Box::pin(prepare::<S>(shared, worker, decision)).await;
                // Boxed: only a connection with a response in flight holds its sending.
                let sending = send(
                    &mut stream,
                    shared,
                    &live,
                    worker,
                    prepared,
                    log,
                    &mut pacer,
                );
                let sent = Box::pin(sending).await;
                shared.metrics.duration(worker, started.elapsed());
                let keep_alive = match sent {
                    Ok(keep_alive) => keep_alive,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "response cut short");
                        return;
                    }
                };
                if !keep_alive {
                    return Box::pin(linger_close(stream)).await;
                }
                served += 1;
                // Nothing pipelined: the client may idle; else its head is on its way.
                let limits = limits();
                let wait = if buf.is_empty() {
                    limits.idle_timeout
                } else {
                    limits.header_timeout
                };
                deadline = Instant::now() + wait;
                continue;
            }
            Step::Refuse(status) => {
                return Box::pin(refuse(stream, peer, shared, worker, status)).await;
            }
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Box::pin(refuse(stream, peer, shared, worker, 431)).await;
        }
        let idle = buf.is_empty();
        // Before the first request, shutdown closes the connection. Between requests, a
        // new client that needs the slot does too (a client that just connected may
        // have its request in flight: it is not taken for idle). No buffer is held
        // while it waits. One select for both cases keeps the task small.
        let close = match (&mut close, idle && served > 0) {
            (_, false) => None,
            (Some(close), true) => Some(&*close),
            (close, true) => Some(&*close.insert(Arc::new(Notify::new()))),
        };
        let _waiting = close.map(|close| slot.idle(close));
        // Boxed: a connection holds the wait's futures only while it waits, not while a
        // response of its own is in flight.
        let close = close.map(|close| &**close);
        let waiting = wait_for_bytes(&mut stream, &mut buf, shared, close, idle, deadline);
        let Some(read) = Box::pin(waiting).await else {
            return;
        };
        match read {
            // End of stream or an error: the connection is over.
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) if idle => deadline = Instant::now() + limits().header_timeout,
            Ok(Ok(_)) => {}
            Err(_elapsed) if idle => return,
            Err(_elapsed) => return Box::pin(refuse(stream, peer, shared, worker, 408)).await,
        }
    }
}

/// Waits for request bytes until `deadline` and appends them to `buf`; `None` when the
/// connection must close first: at shutdown while it is `idle` (no partial head), or
/// when `close` is notified (a new client needs its slot).
async fn wait_for_bytes<S: Transport>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    shared: &Shared,
    close: Option<&Notify>,
    idle: bool,
    deadline: Instant,
) -> Option<Result<io::Result<usize>, tokio::time::error::Elapsed>> {
    tokio::select! {
        _ = shared.shutdown.cancelled(), if idle => None,
        _ = OptionFuture::from(close.map(|close| close.notified())), if close.is_some() => None,
        read = timeout_at(deadline.into(), stream.read_some(buf)) => Some(read),
    }
}

/// What to do with the bytes read so far.
enum Step {
    /// The head is not complete yet.
    Partial,
    /// A complete request of `len` bytes, decided.
    Respond { decision: Decision, len: usize },
    /// A head that cannot be answered: this status, then close.
    Refuse(u16),
}

/// A request's answer and everything its response needs, owned (the request, which
/// borrows the read buffer, is gone).
struct Decision {
    /// The settings it was decided with, which its response keeps to the end.
    live: Arc<Live>,
    /// When the head was complete.
    started: Instant,
    answer: Answer,
    /// Basic credentials to verify before `answer` may go out.
    unverified: Option<Unverified>,
    keep_alive: bool,
    http10: bool,
    log: Option<Box<Record>>,
}

/// Credentials that the blocking pool verifies (a password hash is slow by design),
/// and whether a refusal answers a HEAD.
struct Unverified {
    pending: Pending,
    head_only: bool,
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
    let started = Instant::now();
    let live = shared.live();
    let log = live
        .access_log
        .as_ref()
        .map(|_| Box::new(Record::new(peer, &request)));
    // Where cold data is waited for on the pool, the loop does not open files either
    // (a path walk or open of a cold inode reads the disk too).
    let blocking = match live.strategy.cold_reads() {
        ColdReads::Pool => Blocking::Never,
        ColdReads::Inline => Blocking::Allowed,
    };
    // Basic authentication comes first, for every path: files, listings and errors.
    let head_only = matches!(request.method, Method::Head);
    let (answer, unverified) = match live
        .auth
        .as_ref()
        .map(|auth| (auth, auth.check(request.authorization)))
    {
        None | Some((_, Check::Granted)) => {
            (reply::respond(&live.site, worker, &request, blocking), None)
        }
        Some((auth, Check::Refused(failure))) => {
            shared.metrics.auth_failure(worker, failure);
            (Answer::Ready(auth.challenge(head_only)), None)
        }
        // Decided without IO (nothing is opened for a client not yet known), and sent
        // only once the pool has verified the password.
        Some((_, Check::Verify(pending))) => (
            reply::respond(&live.site, worker, &request, Blocking::Never),
            Some(Unverified { pending, head_only }),
        ),
    };
    let decision = Decision {
        live,
        started,
        answer,
        unverified,
        keep_alive: request.keep_alive && !request.has_body && !shared.shutdown.is_cancelled(),
        http10: request.version == Version::Http10,
        log,
    };
    Step::Respond { decision, len }
}

/// Completes a decision into a reply ready to go out, with the settings it was decided
/// with and its access-log record.
///
/// What may wait for the disk runs on the blocking pool, where it stalls no other
/// connection of this worker: a listing (reading a large directory), and with
/// `--cold-reads pool` a path that the open-file cache does not hold (the path walk,
/// open and fstat of a cold inode). Apart from the sending, which the caller boxes: a
/// download then holds only what sending needs, not the decision it came from.
async fn prepare<S: Transport>(
    shared: &Shared,
    worker: usize,
    decision: Decision,
) -> (Arc<Live>, Option<Box<Record>>, Prepared) {
    let Decision {
        live,
        started: _,
        answer,
        unverified,
        keep_alive,
        http10,
        log,
    } = decision;
    let answer = match unverified {
        None => answer,
        Some(Unverified { pending, head_only }) => {
            let auth = pending.auth();
            match tokio::task::spawn_blocking(move || pending.verify()).await {
                Ok(Ok(())) => answer,
                Ok(Err(failure)) => {
                    shared.metrics.auth_failure(worker, failure);
                    Answer::Ready(auth.challenge(head_only))
                }
                Err(_) => Answer::Ready(Reply::error(500)),
            }
        }
    };
    let reply = match answer {
        Answer::Ready(reply) => reply,
        Answer::Listing { job, head_only } => {
            tokio::task::spawn_blocking(move || reply::listing_reply(&job, head_only))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
        Answer::Tar { job, head_only } => {
            tokio::task::spawn_blocking(move || reply::tar_reply(&job, head_only))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
        Answer::Offload(resolved) => {
            shared.metrics.offloaded_open(worker);
            let site = Arc::clone(&live.site);
            tokio::task::spawn_blocking(move || answer_off_loop(&site, worker, *resolved))
                .await
                .unwrap_or_else(|_| Reply::error(500))
        }
    };
    // HSTS only where it is true: a plain response may come from anyone on the path.
    let reply = match (S::ENCRYPTED, live.hsts) {
        (true, Some(max_age)) => reply.header(
            "Strict-Transport-Security",
            format_args!("max-age={max_age}"),
        ),
        _ => reply,
    };
    let head = reply.finish_head(keep_alive, http10);
    let prepared = Prepared {
        status: reply.status,
        head,
        body: reply.body,
        keep_alive,
    };
    (live, log, prepared)
}

/// The reply to a resolved request, on the blocking pool: it may open files and read a
/// directory here.
fn answer_off_loop(site: &Site, worker: usize, resolved: Resolved) -> Reply {
    match reply::answer(site, worker, resolved, Blocking::Allowed) {
        Answer::Ready(reply) => reply,
        Answer::Listing { job, head_only } => reply::listing_reply(&job, head_only),
        Answer::Tar { job, head_only } => reply::tar_reply(&job, head_only),
        Answer::Offload(_) => Reply::error(500),
    }
}

/// A reply ready to go out.
struct Prepared {
    status: u16,
    head: Vec<u8>,
    body: Body,
    keep_alive: bool,
}

/// Sends one reply; returns whether the connection stays open.
async fn send<S: Transport>(
    stream: &mut S,
    shared: &Shared,
    live: &Live,
    worker: usize,
    prepared: Prepared,
    log: Option<Box<Record>>,
    pacer: &mut Pacer,
) -> io::Result<bool> {
    let Prepared {
        status,
        head,
        body,
        keep_alive,
    } = prepared;
    let mut out = stream.output(live.limits.send_timeout);
    if live.limits.pace.rate > 0 {
        out = out.paced_by(pacer);
    }
    out.queue(&head);
    let head_len = head.len() as u64;
    drop(head);
    let is_download = matches!(
        body,
        Body::File { .. } | Body::Multipart { .. } | Body::Tar(_)
    );
    if is_download {
        shared.metrics.download(worker, 1);
    }
    let result = send_body(&mut out, live, body).await;
    if is_download {
        shared.metrics.download(worker, -1);
        shared.metrics.cold_windows(worker, out.cold_windows());
    }
    shared.metrics.paced(worker, out.paced());
    let sent = out.sent();
    shared.metrics.request(worker, status, sent);
    if let (Some(access_log), Some(record)) = (&live.access_log, &log) {
        access_log.write(
            record,
            Outcome {
                status,
                bytes: sent.saturating_sub(head_len),
                strategy: live.strategy.kind().name(),
                complete: result.is_ok(),
            },
        );
    }
    result.map(|()| keep_alive)
}

async fn send_body(out: &mut Output<'_>, live: &Live, body: Body) -> io::Result<()> {
    match body {
        // Boxed, as the strategy's sending is: the future of a download in flight
        // keeps no room for the writes of the other kinds of body.
        Body::Empty => Box::pin(out.flush(false)).await,
        Body::Bytes(bytes) => Box::pin(out.write(&bytes)).await,
        // Boxed: only the strategy in use takes room, and only while it sends.
        Body::File { file, range } => Box::pin(live.strategy.send(out, &file, range)).await,
        Body::Multipart {
            file,
            parts,
            closing,
        } => {
            for (part_head, range) in &parts {
                out.queue(part_head);
                Box::pin(live.strategy.send(out, &file, *range)).await?;
            }
            out.queue(&closing);
            out.flush(false).await
        }
        Body::Tar(plan) => {
            Box::pin(tar::stream::send(out, &live.strategy, &live.site, &plan)).await
        }
    }
}

/// Sends an error status that ends the connection (the request stream cannot be
/// trusted any more), then closes.
pub(crate) async fn refuse<S: Transport>(
    stream: S,
    peer: SocketAddr,
    shared: &Shared,
    worker: usize,
    status: u16,
) {
    refuse_with(stream, peer, shared, worker, Reply::error(status)).await;
}

/// As [`refuse`], with `reply` (an error status with headers of its own).
pub(crate) async fn refuse_with<S: Transport>(
    mut stream: S,
    peer: SocketAddr,
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
            &Record::refused(peer),
            Outcome {
                status,
                bytes: sent_bytes.saturating_sub(head.len() as u64),
                strategy: live.strategy.kind().name(),
                complete: sent.is_ok(),
            },
        );
    }
    if sent.is_ok() {
        linger_close(stream).await;
    }
}

/// Closes our side, then reads and drops what the client still sends for a short
/// while, so that our last response is not destroyed by a reset.
async fn linger_close<S: Transport>(mut stream: S) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    // On the heap, and only now: a buffer in the future itself would be part of every
    // connection's task, idle or not.
    let mut scratch = vec![0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}

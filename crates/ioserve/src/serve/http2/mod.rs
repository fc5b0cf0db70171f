//! HTTP/2, for TLS connections that chose `h2` by ALPN: hyper's server connection
//! runs the protocol (frames, HPACK, flow control, stream states); each request goes
//! through the same decision code as HTTP/1.1 ([`crate::serve::exchange`]) and its
//! body is sent by the selected strategy through a bounded channel ([`body`]).
//!
//! The limits are explicit ([`MAX_CONCURRENT_STREAMS`] and the constants beside it).
//! Timeouts, as for HTTP/1.1:
//! - header timeout: a connection must complete its first request this long after the
//!   handshake (a HEADERS frame never ended by END_HEADERS, a slowloris, ends here);
//! - idle timeout: a connection with no stream in flight for this long is closed;
//! - send timeout: a stream whose client does not take its data (no WINDOW_UPDATE, or
//!   an unread socket) for this long ends its connection, as nginx does.
//!
//! Each closes with GOAWAY, and the connection is dropped [`CLOSE_GRACE`] later if the
//! client does not close it first. Shutdown sends GOAWAY too; streams in flight complete.
//! After a graceful end the connection lingers as an HTTP/1.1 one does
//! ([`crate::serve::linger`]): it is read until the client closes it, for two seconds
//! at most, so that the close is a FIN and not a reset.

mod held;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use hyper::body::Body as _;
use hyper::header::HeaderMap;
use hyper::server::conn::http2::Builder;
use hyper::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::http::request::{Version, MAX_HEAD_BYTES};
use crate::http::response::{self, Reply};
use crate::io::output::{Collected, Output};
use crate::io::pacing::Pacer;
use crate::ops::access_log::Record;
use crate::serve::body::{self, BodyWriter, ResponseBody};
use crate::serve::exchange::{self, Decision, Sent};
use crate::serve::fields::{self, fields_of};
use crate::serve::http2::held::Held;
use crate::serve::linger;
use crate::serve::shared::{ConnectionSlot, Live, Shared};
use crate::serve::transport::Transport;

/// Streams a client may have open at once (nginx's `http2_max_concurrent_streams`).
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Largest header list (decoded, as HPACK counts it) of a request: the bound of an
/// HTTP/1.1 head ([`MAX_HEAD_BYTES`]).
pub const MAX_HEADER_LIST_SIZE: u32 = MAX_HEAD_BYTES as u32;
/// The receive window of each stream: the server reads no request bodies, so this only
/// bounds what a client may send unasked. A download's pace is set by the client's
/// windows, which the server follows.
pub const STREAM_WINDOW: u32 = 1 << 20;
/// The receive window of the connection, all streams together.
pub const CONNECTION_WINDOW: u32 = 1 << 20;
/// Largest frame the server accepts (the protocol's default and minimum).
pub const MAX_FRAME_SIZE: u32 = 16 * 1024;
/// Bytes hyper buffers per stream for sending (on top of the body's chunks in flight).
pub const MAX_SEND_BUFFER: usize = 256 * 1024;
/// Streams the client opened and reset before the server took them, pending at once:
/// more is a rapid reset attack (CVE-2023-44487), and the connection ends with GOAWAY.
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset for protocol errors of the client before it ends the
/// connection with GOAWAY (h2's default, kept explicit).
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;
/// Most bytes of a request body read (and dropped) before the request is answered.
/// The server serves GET and HEAD; a body is read only so that the protocol sees its
/// framing (a `content-length` that its DATA frames contradict resets the stream),
/// within the header timeout. A longer body is answered anyway, and its stream reset.
pub const MAX_READ_BODY: u64 = 64 * 1024;
/// How long a connection told to close (GOAWAY) with no stream in flight may stay
/// open before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long a connection waits for its client after GOAWAY at shutdown, and after its
/// graceful end for the client to close it (the shutdown timeout cuts it first when it
/// is shorter).
const SHUTDOWN_LINGER: Duration = Duration::from_secs(300);

/// What every stream of one connection shares.
struct Connection {
    shared: Arc<Shared>,
    peer: SocketAddr,
    worker: usize,
    /// Streams being answered (their bodies included).
    in_flight: watch::Sender<usize>,
    /// Cancelled when a stream was not read for the send timeout: the connection ends.
    stalled: CancellationToken,
    /// The reply to every request of a connection that is not admitted (503): it
    /// closes after its first stream.
    refusal: Option<fn() -> Reply>,
}

/// A stream's place in [`Connection::in_flight`], given back when dropped.
struct InFlight(Arc<Connection>);

impl InFlight {
    fn new(connection: &Arc<Connection>) -> InFlight {
        connection.in_flight.send_modify(|n| *n += 1);
        InFlight(Arc::clone(connection))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n -= 1);
    }
}

/// Serves one TLS connection that chose `h2`, to its end.
pub(crate) async fn serve<S>(
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    slot: &ConnectionSlot,
) where
    S: Transport + 'static,
{
    run(stream, peer, shared, slot, None).await;
}

/// Answers the requests of a TLS connection that chose `h2` but is not admitted with
/// `refusal` (a 503), then closes it with GOAWAY after its first stream: the HTTP/2
/// counterpart of the HTTP/1.1 refusal.
pub(crate) async fn refuse_connection<S>(
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    slot: &ConnectionSlot,
    refusal: fn() -> Reply,
) where
    S: Transport + 'static,
{
    run(stream, peer, shared, slot, Some(refusal)).await;
}

async fn run<S>(
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    slot: &ConnectionSlot,
    refusal: Option<fn() -> Reply>,
) where
    S: Transport + 'static,
{
    let limits = shared.live().limits.clone();
    let (in_flight, mut streams) = watch::channel(0);
    let connection = Arc::new(Connection {
        shared: Arc::clone(&shared),
        peer,
        worker: slot.worker(),
        in_flight,
        stalled: CancellationToken::new(),
        refusal,
    });
    let service = {
        let connection = Arc::clone(&connection);
        hyper::service::service_fn(move |request| {
            let connection = Arc::clone(&connection);
            async move { Ok::<_, Infallible>(answer(connection, request).await) }
        })
    };
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_send_buf_size(MAX_SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        // Every reply carries its Date already.
        .auto_date_header(false);
    let held = Held::new(stream);
    let graceful = {
        let protocol = builder.serve_connection(TokioIo::new(held.io()), service);
        tokio::pin!(protocol);
        // The first request must come within the header timeout, later ones within the
        // idle timeout of the last stream's end.
        let mut wait = limits.header_timeout;
        let mut quiet_since = Instant::now();
        let mut closing: Option<Instant> = None;
        let mut served = false;
        // Notified when this connection, idle, must close to admit a new client.
        let make_room = Arc::new(Notify::new());
        loop {
            let idle = *streams.borrow_and_update() == 0;
            if idle && served && closing.is_none() && refusal.is_some() {
                protocol.as_mut().graceful_shutdown();
                closing = Some(Instant::now());
            }
            // After GOAWAY, the grace counts from the end of the last stream. At shutdown
            // the connection is not dropped at all (the shutdown timeout bounds it): a
            // client reading slowly may have the end of a download in the socket buffers
            // still, and the PING that completes the GOAWAY queued behind it.
            let deadline = match closing {
                Some(closed) => {
                    let grace = match shared.shutdown.is_cancelled() {
                        true => SHUTDOWN_LINGER,
                        false => CLOSE_GRACE,
                    };
                    closed.max(quiet_since) + grace
                }
                None => quiet_since + wait,
            };
            // Between streams, as an idle HTTP/1.1 connection, it may be closed for a
            // new client.
            let evictable = idle && served && closing.is_none();
            let _waiting = evictable.then(|| slot.idle(&make_room));
            tokio::select! {
                () = make_room.notified(), if evictable => {
                    protocol.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
                ended = turn(protocol.as_mut(), &held) => {
                    if let Err(error) = &ended {
                        tracing::debug!(%peer, %error, "HTTP/2 connection ended by an error");
                    }
                    break ended.is_ok();
                }
                () = connection.stalled.cancelled() => {
                    tracing::debug!(%peer, "HTTP/2 stream not read for the send timeout");
                    break false;
                }
                () = shared.shutdown.cancelled(), if closing.is_none() => {
                    protocol.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
                changed = streams.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    wait = shared.live().limits.idle_timeout;
                    quiet_since = Instant::now();
                    served = true;
                }
                () = tokio::time::sleep_until(deadline), if idle => match closing {
                    Some(_) => {
                        tracing::debug!(%peer, "HTTP/2 connection dropped after GOAWAY");
                        break false;
                    }
                    None => {
                        tracing::debug!(%peer, "HTTP/2 connection idle or incomplete: GOAWAY");
                        protocol.as_mut().graceful_shutdown();
                        closing = Some(Instant::now());
                    }
                },
            }
        }
    };
    // The protocol is dropped: hyper is done with the stream.
    if graceful {
        let stream = held.into_inner();
        // At shutdown (or a live upgrade's hand-over) the GOAWAY may reach a client
        // that has the end of its downloads in its socket buffer, unread (a
        // rate-limited download): it still sends WINDOW_UPDATEs as it reads, and a
        // socket closed under them would reset the connection and lose that end.
        // So the connection lingers until the client closes it; the shutdown
        // timeout bounds the wait.
        let linger = match shared.shutdown.is_cancelled() {
            true => SHUTDOWN_LINGER,
            false => linger::LINGER,
        };
        Box::pin(linger::close_within(stream, linger)).await;
    }
}

/// Polls the connection's `protocol` (hyper's HTTP/2) for one turn, then sends what the
/// turn wrote ([`Held`]): the responses that are ready leave together. Ready when the
/// connection ends, or when what it wrote cannot be sent (an error of the socket).
fn turn<'a, P, S>(
    mut protocol: Pin<&'a mut P>,
    held: &'a Held<S>,
) -> impl Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> + 'a
where
    P: Future<Output = hyper::Result<()>>,
    S: Transport,
{
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(ended) = protocol.as_mut().poll(cx) {
            return Poll::Ready(ended.map_err(Into::into));
        }
        match held.poll_send(cx) {
            Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
            Poll::Ready(Ok(())) | Poll::Pending => Poll::Pending,
        }
    })
}

/// Answers one request (a stream): the same decision as HTTP/1.1's, the reply's
/// headers as HTTP/2 fields, and a file body sent by the strategy: read whole here
/// when it fits one chunk (and is not paced), else in a task of its own.
async fn answer(
    connection: Arc<Connection>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<ResponseBody> {
    let in_flight = InFlight::new(&connection);
    let Connection {
        shared,
        peer,
        worker,
        refusal,
        ..
    } = &*connection;
    if let Some(refusal) = refusal {
        return refuse(shared, *peer, *worker, refusal());
    }
    let (parts, mut request_body) = request.into_parts();
    // Read even where the HEADERS ended the stream: a stream that h2 has reset since
    // (a malformed trailer) says so here, and its request is not answered.
    let within = shared.live().limits.header_timeout;
    match tokio::time::timeout(within, read_body(&mut request_body)).await {
        Ok(Ok(())) => {}
        // The stream is reset already (a framing error): this goes nowhere.
        Ok(Err(_)) => return refuse(shared, *peer, *worker, Reply::error(400)),
        Err(_elapsed) => return refuse(shared, *peer, *worker, Reply::error(408)),
    }
    let decided = fields::decide(shared, *peer, *worker, &parts, Version::Http2);
    drop(parts);
    let Decision {
        live,
        started,
        answer,
        unverified,
        log,
        ..
    } = match decided {
        Ok(decision) => decision,
        Err(status) => return refuse(shared, *peer, *worker, Reply::error(status)),
    };
    let reply = exchange::complete(shared, *worker, &live, answer, unverified, true).await;
    let status = reply.status;
    let fields = fields_of(reply.headers);
    let (body, sent) = match reply.body {
        response::Body::Empty => (ResponseBody::Empty, Some(0)),
        response::Body::Bytes(bytes) => {
            let len = bytes.len() as u64;
            (ResponseBody::Bytes(Some(bytes.into())), Some(len))
        }
        file if file.len() <= body::MAX_CHUNK as u64 && live.limits.pace.rate == 0 => {
            // A body of one chunk is read here, in the stream's own task, and handed to
            // hyper whole: no second task, no channel (most requests for small files).
            let len = file.len();
            let mut collected = Collected::for_len(len as usize);
            let mut out = Output::collecting(&mut collected, live.limits.send_timeout);
            let log = log.as_deref();
            let result = exchange::deliver(shared, &live, *worker, &mut out, status, 0, file, log);
            let result = result.await;
            drop(out);
            shared.metrics.duration(*worker, started.elapsed());
            let body = match result {
                Ok(()) => ResponseBody::Bytes(Some(collected.into_bytes())),
                Err(error) => {
                    tracing::debug!(%peer, %error, "HTTP/2 response cut short");
                    // A body that ends short: hyper resets the stream after the HEADERS,
                    // as when a streamed body fails.
                    body::channel(len, Box::new(())).1
                }
            };
            return response(status, fields, body);
        }
        file => {
            let len = file.len();
            let sending = Streaming {
                connection: Arc::clone(&in_flight.0),
                live: Arc::clone(&live),
                status,
                body: file,
                log,
                started,
            };
            // The stream counts as in flight until hyper has taken its whole body, not
            // only until the strategy has written it into the channel.
            let (writer, body) = body::channel(len, Box::new(in_flight));
            tokio::spawn(sending.run(writer));
            return response(status, fields, body);
        }
    };
    if let Some(bytes) = sent {
        let sent = Sent {
            status,
            bytes,
            head_len: 0,
            complete: true,
        };
        exchange::account(shared, &live, *worker, sent, log.as_deref());
        shared.metrics.duration(*worker, started.elapsed());
    }
    response(status, fields, body)
}

/// Reads and drops a request body, up to [`MAX_READ_BODY`] bytes.
async fn read_body(body: &mut hyper::body::Incoming) -> Result<(), hyper::Error> {
    let mut read = 0;
    while read <= MAX_READ_BODY {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => break,
            Some(frame) => read += frame?.data_ref().map_or(0, |data| data.len() as u64),
        }
    }
    Ok(())
}

/// The error `reply` to a request that cannot be answered, counted and logged as
/// HTTP/1.1's refusals are.
fn refuse(
    shared: &Shared,
    peer: SocketAddr,
    worker: usize,
    reply: Reply,
) -> hyper::Response<ResponseBody> {
    let status = reply.status;
    let live = shared.live();
    let len = reply.body.len();
    let sent = Sent {
        status,
        bytes: len,
        head_len: 0,
        complete: true,
    };
    exchange::account(shared, &live, worker, sent, Some(&Record::refused(peer)));
    let body = match reply.body {
        response::Body::Bytes(bytes) => ResponseBody::Bytes(Some(bytes.into())),
        _ => ResponseBody::Empty,
    };
    response(status, fields_of(reply.headers), body)
}

fn response(status: u16, fields: HeaderMap, body: ResponseBody) -> hyper::Response<ResponseBody> {
    let mut response = hyper::Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = fields;
    response
}

/// A file, multipart or tar body on its way: the strategy writes it through an
/// [`Output`] over the stream's [`BodyWriter`].
struct Streaming {
    connection: Arc<Connection>,
    live: Arc<Live>,
    status: u16,
    body: response::Body,
    log: Option<Box<Record>>,
    started: std::time::Instant,
}

impl Streaming {
    async fn run(self, mut writer: BodyWriter) {
        let Streaming {
            connection,
            live,
            status,
            body,
            log,
            started,
        } = self;
        let (shared, worker) = (&connection.shared, connection.worker);
        // `--limit-rate` paces each stream, as nginx's limit_rate paces each request.
        let mut pacer = Pacer::new(live.limits.pace);
        let mut out = Output::through(&mut writer, live.limits.send_timeout);
        if live.limits.pace.rate > 0 {
            out = out.paced_by(&mut pacer);
        }
        let log = log.as_deref();
        let result = exchange::deliver(shared, &live, worker, &mut out, status, 0, body, log).await;
        shared.metrics.duration(worker, started.elapsed());
        match result {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::TimedOut => {
                connection.stalled.cancel();
            }
            Err(error) => {
                tracing::debug!(peer = %connection.peer, %error, "HTTP/2 response cut short");
            }
        }
    }
}

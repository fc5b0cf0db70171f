//! One HTTP/3 request stream: its HEADERS decided as HTTP/1.1's and HTTP/2's are, the
//! reply's fields sent, then its body: bytes made by the server at once, a file's
//! through the strategy into the bounded channel of [`crate::serve::body`], drained
//! into the stream as the client's flow control and the congestion window allow.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf as _, Bytes};
use h3::error::Code;
use h3::server::{RequestResolver, RequestStream};
use hyper::body::Body as _;
use hyper::StatusCode;

use crate::http::request::Version;
use crate::http::response::{self, Reply};
use crate::io::output::Output;
use crate::io::pacing::Pacer;
use crate::ops::access_log::Record;
use crate::serve::body::{self, ResponseBody};
use crate::serve::exchange::{self, Decision, Sent};
use crate::serve::fields::{self, fields_of};
use crate::serve::shared::Shared;

/// Most bytes of a request body read (and dropped) before the request is answered, as
/// over HTTP/2.
pub const MAX_READ_BODY: u64 = 64 * 1024;

type Stream = RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Answers the request that `resolver` reads from the connection `quic`, on worker
/// `worker`; `in_flight`, the request's place among its connection's, is held until
/// the response has ended.
pub(super) async fn answer<G: Send>(
    in_flight: G,
    shared: Arc<Shared>,
    worker: usize,
    quic: quinn::Connection,
    resolver: RequestResolver<h3_quinn::Connection, Bytes>,
) {
    let peer = quic.remote_address();
    let shared = &shared;
    let within = shared.live().limits.header_timeout;
    let (request, mut stream) = match tokio::time::timeout(within, resolver.resolve_request()).await
    {
        Ok(Ok(resolved)) => resolved,
        // h3 has reset the stream or closed the connection already.
        Ok(Err(error)) => return tracing::debug!(%peer, %error, "bad HTTP/3 request"),
        Err(_elapsed) => return tracing::debug!(%peer, "HTTP/3 request head timed out"),
    };
    let (parts, ()) = request.into_parts();
    match tokio::time::timeout(within, read_body(&mut stream)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return tracing::debug!(%peer, %error, "HTTP/3 request body failed"),
        Err(_elapsed) => {
            return refuse(&mut stream, shared, worker, peer, Reply::error(408)).await;
        }
    }
    let decided = fields::decide(shared, peer, worker, &parts, Version::Http3);
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
        Err(status) => {
            return refuse(&mut stream, shared, worker, peer, Reply::error(status)).await;
        }
    };
    let reply = exchange::complete(shared, worker, &live, answer, unverified, true).await;
    let status = reply.status;
    let head = response(status, reply.headers);
    let send_timeout = live.limits.send_timeout;
    if let Err(error) = within_send_timeout(send_timeout, stream.send_response(head)).await {
        return tracing::debug!(%peer, %error, "HTTP/3 response head not sent");
    }
    let sent = match reply.body {
        response::Body::Empty => Ok(0),
        response::Body::Bytes(bytes) => {
            let len = bytes.len() as u64;
            within_send_timeout(send_timeout, stream.send_data(bytes.into()))
                .await
                .map(|()| len)
        }
        file => {
            // The strategy writes into the channel while this task drains it into the
            // stream; either side ending (the client resets the stream, the file cannot
            // be read) ends the other.
            let len = file.len();
            let (writer, body) = body::channel(len, Box::new(()));
            let sending = async {
                let mut writer = writer;
                let mut pacer = Pacer::new(live.limits.pace);
                let mut out = Output::through(&mut writer, send_timeout);
                if live.limits.pace.rate > 0 {
                    out = out.paced_by(&mut pacer);
                }
                let log = log.as_deref();
                let result =
                    exchange::deliver(shared, &live, worker, &mut out, status, 0, file, log).await;
                shared.metrics.duration(worker, started.elapsed());
                result
            };
            // The body goes with the draining: when the client is gone it is dropped,
            // and the strategy's next write fails at once instead of waiting out the
            // send timeout for room in a channel nobody drains.
            let draining = drain(&mut stream, body, &quic, send_timeout);
            let (delivered, drained) = tokio::join!(sending, draining);
            if let Err(error) = delivered.and(drained) {
                tracing::debug!(%peer, %error, "HTTP/3 response cut short");
                // Never ended as if whole: the client sees the stream reset.
                stream.stop_stream(Code::H3_INTERNAL_ERROR);
            } else if let Err(error) = stream.finish().await {
                tracing::debug!(%peer, %error, "HTTP/3 stream not finished");
            }
            drop(in_flight);
            return;
        }
    };
    let (bytes, complete) = match sent {
        Ok(len) => match stream.finish().await {
            Ok(()) => (len, true),
            Err(error) => {
                tracing::debug!(%peer, %error, "HTTP/3 stream not finished");
                (0, false)
            }
        },
        Err(error) => {
            tracing::debug!(%peer, %error, "HTTP/3 response cut short");
            (0, false)
        }
    };
    let sent = Sent {
        status,
        bytes,
        head_len: 0,
        complete,
    };
    exchange::account(shared, &live, worker, sent, log.as_deref());
    shared.metrics.duration(worker, started.elapsed());
    drop(in_flight);
}

/// Sends the chunks of `body` on `stream` until its end, each within `send_timeout`
/// (a client that never extends its flow-control window has its stream reset then),
/// and fails as soon as the connection `quic` closes (a write waiting for flow-control
/// credit is not always woken by the close); `body` is dropped when this returns,
/// ended or failed.
async fn drain(
    stream: &mut Stream,
    mut body: ResponseBody,
    quic: &quinn::Connection,
    send_timeout: std::time::Duration,
) -> io::Result<()> {
    let closed = quic.closed();
    tokio::pin!(closed);
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let chunk = match frame {
            None => return Ok(()),
            Some(Err(error)) => return Err(error),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => chunk,
                Err(_) => continue,
            },
        };
        tokio::select! {
            sent = within_send_timeout(send_timeout, stream.send_data(chunk)) => sent?,
            error = &mut closed => {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, error.to_string()));
            }
        }
    }
}

/// `sending`, failed with `TimedOut` when it takes longer than `limit`.
async fn within_send_timeout<E: std::fmt::Display>(
    limit: std::time::Duration,
    sending: impl std::future::Future<Output = Result<(), E>>,
) -> io::Result<()> {
    match tokio::time::timeout(limit, sending).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, error.to_string())),
        Err(_elapsed) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client did not take the response within the send timeout",
        )),
    }
}

/// Reads and drops a request body, up to [`MAX_READ_BODY`] bytes.
async fn read_body(stream: &mut Stream) -> Result<(), h3::error::StreamError> {
    let mut read = 0;
    while read <= MAX_READ_BODY {
        match stream.recv_data().await? {
            None => break,
            Some(data) => read += data.remaining() as u64,
        }
    }
    Ok(())
}

/// Answers with the error `reply`, counted and logged as the other protocols'
/// refusals are.
async fn refuse(
    stream: &mut Stream,
    shared: &Shared,
    worker: usize,
    peer: SocketAddr,
    reply: Reply,
) {
    let status = reply.status;
    let live = shared.live();
    let len = reply.body.len();
    let send_timeout = live.limits.send_timeout;
    let head = response(status, reply.headers);
    let sent = async {
        within_send_timeout(send_timeout, stream.send_response(head)).await?;
        if let response::Body::Bytes(bytes) = reply.body {
            within_send_timeout(send_timeout, stream.send_data(bytes.into())).await?;
        }
        within_send_timeout(send_timeout, stream.finish()).await
    };
    let complete = match sent.await {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(%peer, %error, "HTTP/3 refusal not sent");
            false
        }
    };
    let sent = Sent {
        status,
        bytes: if complete { len } else { 0 },
        head_len: 0,
        complete,
    };
    exchange::account(shared, &live, worker, sent, Some(&Record::refused(peer)));
}

/// The response head of `status` with the fields of a reply's `headers`.
fn response(status: u16, headers: String) -> hyper::http::Response<()> {
    let mut response = hyper::http::Response::new(());
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = fields_of(headers);
    response
}

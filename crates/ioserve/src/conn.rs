//! One client connection: read request heads (keep-alive and pipelining), answer each
//! with the handler's reply and the configured strategy, enforce the timeouts.
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

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout_at;

use crate::handler;
use crate::output::Output;
use crate::request::{self, Parsed, Request, RequestError, Version, MAX_HEAD_BYTES};
use crate::response::{Body, Reply};
use crate::server::Shared;

/// How long a closing connection keeps reading (and dropping) what the client still
/// sends, so that the kernel does not answer it with a reset that destroys our response.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and dropped while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// Serves one accepted connection to its end.
pub async fn serve(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, worker: usize) {
    let limits = &shared.limits;
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    // The first request must arrive within the header timeout of the accept.
    let mut deadline = Instant::now() + limits.header_timeout;
    loop {
        match request::parse(&buf) {
            Ok(Parsed::Partial) => {}
            Ok(Parsed::Complete { request, len }) => {
                let keep_alive = match answer(&stream, peer, &shared, worker, &request).await {
                    Ok(keep_alive) => keep_alive,
                    Err(error) => {
                        tracing::debug!(%peer, %error, "response cut short");
                        return;
                    }
                };
                // The request borrows the buffer; it must be gone before the buffer moves.
                drop(request);
                if !keep_alive {
                    return linger_close(stream).await;
                }
                buf.drain(..len);
                deadline = Instant::now()
                    + if buf.is_empty() {
                        limits.idle_timeout
                    } else {
                        limits.header_timeout
                    };
                continue;
            }
            Err(error) => {
                let status = match error {
                    RequestError::Bad(_) => 400,
                    RequestError::TooLarge => 431,
                    RequestError::Version => 505,
                };
                tracing::debug!(%peer, %error, "bad request head");
                return refuse(stream, peer, &shared, worker, status).await;
            }
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return refuse(stream, peer, &shared, worker, 431).await;
        }
        let idle = buf.is_empty();
        buf.reserve(4096);
        let read = tokio::select! {
            // Between requests, shutdown closes the connection; inside one, it finishes.
            _ = shared.shutdown.cancelled(), if idle => return,
            read = timeout_at(deadline.into(), stream.read_buf(&mut buf)) => read,
        };
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {
                if idle {
                    deadline = Instant::now() + limits.header_timeout;
                }
            }
            Err(_elapsed) if idle => return,
            Err(_elapsed) => return refuse(stream, peer, &shared, worker, 408).await,
        }
    }
}

/// Answers one request; returns whether the connection stays open.
async fn answer(
    stream: &TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    worker: usize,
    request: &Request<'_>,
) -> io::Result<bool> {
    let started = Instant::now();
    let reply = handler::respond(&shared.site, worker, request);
    let keep_alive =
        request.keep_alive && !request.has_body && !reply.close && !shared.shutdown.is_cancelled();
    let head = reply.finish_head(keep_alive, request.version == Version::Http10);
    let mut out = Output::new(stream, shared.limits.send_timeout);
    out.queue(&head);
    let is_download = matches!(reply.body, Body::File { .. } | Body::Multipart { .. });
    if is_download {
        shared.metrics.download(worker, 1);
    }
    let result = send_body(&mut out, shared, reply.body).await;
    if is_download {
        shared.metrics.download(worker, -1);
    }
    let sent = out.sent();
    shared.metrics.request(worker, reply.status, sent);
    if shared.limits.access_log {
        tracing::info!(
            target: "ioserve::access",
            %peer,
            method = request.method.as_str(),
            path = request.target,
            status = reply.status,
            bytes = sent.saturating_sub(head.len() as u64),
            micros = started.elapsed().as_micros() as u64,
            strategy = shared.strategy.kind().name(),
            complete = result.is_ok(),
        );
    }
    result.map(|()| keep_alive)
}

async fn send_body(out: &mut Output<'_>, shared: &Shared, body: Body) -> io::Result<()> {
    match body {
        Body::Empty => out.flush(false).await,
        Body::Bytes(bytes) => out.write(&bytes).await,
        Body::File { file, range } => shared.strategy.send(out, &file, range).await,
        Body::Multipart {
            file,
            parts,
            closing,
        } => {
            for (part_head, range) in &parts {
                out.queue(part_head);
                shared.strategy.send(out, &file, *range).await?;
            }
            out.queue(&closing);
            out.flush(false).await
        }
    }
}

/// Sends an error status that ends the connection (the request stream cannot be
/// trusted any more), then closes.
pub(crate) async fn refuse(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    worker: usize,
    status: u16,
) {
    let reply = Reply::error(status);
    let head = reply.finish_head(false, false);
    let mut out = Output::new(&stream, shared.limits.send_timeout);
    out.queue(&head);
    let sent = match reply.body {
        Body::Bytes(bytes) => out.write(&bytes).await.map(|()| out.sent()),
        _ => out.flush(false).await.map(|()| out.sent()),
    };
    shared
        .metrics
        .request(worker, status, *sent.as_ref().unwrap_or(&0));
    if shared.limits.access_log {
        tracing::info!(target: "ioserve::access", %peer, status, "refused request");
    }
    if sent.is_ok() {
        linger_close(stream).await;
    }
}

/// Closes our side, then reads and drops what the client still sends for a short
/// while, so that our last response is not destroyed by a reset.
async fn linger_close(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut scratch = [0u8; 8192];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}

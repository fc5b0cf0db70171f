//! `--redirect-http ADDR`: a plain HTTP listener beside the HTTPS ones that answers
//! every request with 308 to the same URL over HTTPS, and closes; with ACME's HTTP-01
//! challenge pending, it answers `GET /.well-known/acme-challenge/TOKEN` with the key
//! authorization instead (this process's, or a replica's from the state directory).
//!
//! The location is `https://` + the request's `Host` without its port + `:PORT` of the
//! HTTPS listener (none for 443) + the request target (path and query). A request
//! without a usable `Host` (missing, repeated, or not a host name or IP literal) gets
//! 400: the server never redirects to a name it cannot vouch is a host.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;

use crate::acme::certificates::Certificates;
use crate::acme::challenge::HTTP01_PREFIX;
use crate::http::request::MAX_HEAD_BYTES;
use crate::http::response::{Body, Reply};
use crate::serve::shared::Shared;

/// Most header lines a redirected request may have.
const MAX_HEADERS: usize = 64;

/// Answers the connections of `listener` with redirects to `https_port` until
/// shutdown, then waits for those in flight (each lasts at most the header timeout
/// and the send timeout).
pub(super) async fn serve(
    listener: std::net::TcpListener,
    https_port: u16,
    shared: Arc<Shared>,
    acme: Option<Arc<Certificates>>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => return tracing::error!(%error, "redirect listener unusable"),
    };
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let limits = shared.live().limits.clone();
                let acme = acme.clone();
                connections.spawn(async move {
                    let answered =
                        answer(stream, https_port, limits.header_timeout, acme.as_deref());
                    if tokio::time::timeout(limits.send_timeout, answered)
                        .await
                        .is_err()
                    {
                        tracing::debug!(%peer, "redirect: the client did not read the answer");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "redirect: accept failed; backing off");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Reads one request head (within `header_timeout`) and answers it.
async fn answer(
    mut stream: TcpStream,
    https_port: u16,
    header_timeout: Duration,
    acme: Option<&Certificates>,
) {
    let mut buf = Vec::with_capacity(1024);
    let reply = match tokio::time::timeout(header_timeout, read_head(&mut stream, &mut buf)).await {
        Ok(Head::Complete) => reply_to(&buf, https_port, acme),
        Ok(Head::TooLarge) => Reply::error(431),
        Ok(Head::Closed) => return,
        Err(_elapsed) => Reply::error(408),
    };
    let mut bytes = reply.finish_head(false, false);
    if let Body::Bytes(body) = &reply.body {
        bytes.extend_from_slice(body);
    }
    if stream.write_all(&bytes).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// How reading a head ended.
enum Head {
    /// `buf` holds a complete head.
    Complete,
    /// No head within [`MAX_HEAD_BYTES`].
    TooLarge,
    /// The client closed or failed first.
    Closed,
}

async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Head {
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Head::Complete;
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Head::TooLarge;
        }
        buf.reserve(1024);
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return Head::Closed,
            Ok(_) => {}
        }
    }
}

/// The answer to the complete head in `buf`: an HTTP-01 key authorization, 308 to its
/// HTTPS URL, or 400.
fn reply_to(buf: &[u8], https_port: u16, acme: Option<&Certificates>) -> Reply {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(request.parse(buf), Ok(httparse::Status::Complete(_))) {
        return Reply::error(400);
    }
    let token = request
        .path
        .and_then(|path| path.strip_prefix(HTTP01_PREFIX));
    if let (Some(token), Some(acme), Some("GET")) = (token, acme, request.method) {
        if let Some(key_authorization) = acme.challenges.http01_answer(token) {
            tracing::debug!(token, "answered an HTTP-01 validation");
            return Reply::new(200)
                .header("Content-Type", "application/octet-stream")
                .with_bytes(key_authorization.into_bytes());
        }
    }
    let mut hosts = request
        .headers
        .iter()
        .filter(|header| header.name.eq_ignore_ascii_case("host"));
    let (Some(host), None) = (hosts.next(), hosts.next()) else {
        return Reply::error(400);
    };
    match location(host.value, request.path.unwrap_or_default(), https_port) {
        Some(location) => Reply::error(308).header("Location", location),
        None => Reply::error(400),
    }
}

/// `https://HOST[:PORT]TARGET` for a `Host` field value and an origin-form target, or
/// `None` when either is unusable.
pub(crate) fn location(host: &[u8], target: &str, https_port: u16) -> Option<String> {
    let host = std::str::from_utf8(host).ok()?.trim();
    let name = host_without_port(host)?;
    if !target.starts_with('/') {
        return None;
    }
    Some(match https_port {
        443 => format!("https://{name}{target}"),
        port => format!("https://{name}:{port}{target}"),
    })
}

/// The host of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), checked to
/// be a DNS name or an IP literal.
fn host_without_port(host: &str) -> Option<&str> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let end = rest.find(']')?;
            let literal = &rest[..end];
            let valid = !literal.is_empty()
                && literal
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
            if !valid {
                return None;
            }
            (&host[..end + 2], &rest[end + 1..])
        }
        None => {
            let (name, port) = host.split_at(host.find(':').unwrap_or(host.len()));
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
            if !valid {
                return None;
            }
            (name, port)
        }
    };
    match port.strip_prefix(':') {
        None if port.is_empty() => Some(name),
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some(name)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_keeps_the_host_and_target_and_names_the_https_port() {
        let cases: [(&str, &str, u16, Option<&str>); 9] = [
            (
                "example.org",
                "/a/b?c=d",
                443,
                Some("https://example.org/a/b?c=d"),
            ),
            (
                "example.org:80",
                "/",
                8443,
                Some("https://example.org:8443/"),
            ),
            ("[::1]:8080", "/x", 443, Some("https://[::1]/x")),
            (
                "[2001:db8::1]",
                "/x",
                4443,
                Some("https://[2001:db8::1]:4443/x"),
            ),
            ("evil.example/path", "/", 443, None),
            ("user@example.org", "/", 443, None),
            ("example.org:80x", "/", 443, None),
            ("", "/", 443, None),
            ("example.org", "*", 443, None),
        ];
        for (host, target, port, expected) in cases {
            assert_eq!(
                location(host.as_bytes(), target, port).as_deref(),
                expected,
                "{host} {target}"
            );
        }
    }
}

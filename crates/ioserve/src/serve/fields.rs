//! Requests and replies as the header fields of HTTP/2 and HTTP/3: a request's
//! pseudo-header and fields (the `http` crate's, as hyper and h3 give them) parsed into
//! the same [`crate::http::request::Request`] as an HTTP/1.1 head and decided by
//! [`crate::serve::exchange`], and a reply's header lines turned back into fields,
//! without the ones that describe an HTTP/1.1 connection.

use std::net::SocketAddr;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use crate::http::request::{self, RequestError, Version, MAX_HEADERS};
use crate::serve::exchange::{self, Decision};
use crate::serve::shared::Shared;

/// The decision for a request's fields (`parts`) of protocol `version`, or the status
/// that refuses them.
pub(super) fn decide(
    shared: &Shared,
    peer: SocketAddr,
    worker: usize,
    parts: &hyper::http::request::Parts,
    version: Version,
) -> Result<Decision, u16> {
    if parts.headers.len() > MAX_HEADERS {
        return Err(431);
    }
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()));
    let request = request::origin_path(target)
        .and_then(|target| request::from_fields(parts.method.as_str(), target, version, fields));
    match request {
        Ok(request) => Ok(exchange::decide(shared, peer, worker, &request)),
        Err(error) => {
            tracing::debug!(%peer, %error, ?version, "bad request");
            Err(match error {
                RequestError::Bad(_) => 400,
                RequestError::TooLarge => 431,
                RequestError::Version => 505,
            })
        }
    }
}

/// Header fields HTTP/2 and HTTP/3 forbid in a response (RFC 9113 §8.2.2, RFC 9114
/// §4.2): they describe an HTTP/1.1 connection.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Room for the fields of most replies (a file's: `Server`, `Date`, `Content-Type`,
/// `Content-Length`, `Last-Modified`, `ETag`, `Accept-Ranges`, and a few more), so
/// that the map is allocated once.
const USUAL_FIELDS: usize = 12;

/// A reply's header lines (after its status line) as fields, without the
/// connection-specific ones. The values are slices of `headers`, which becomes one
/// shared buffer, with no copy and no allocation per field.
pub(super) fn fields_of(headers: String) -> HeaderMap {
    let head = Bytes::from(headers);
    let mut fields = HeaderMap::with_capacity(USUAL_FIELDS);
    // The line after the status line.
    let Some(mut start) = head.iter().position(|&b| b == b'\n').map(|end| end + 1) else {
        return fields;
    };
    while start < head.len() {
        let end = head[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(head.len(), |at| start + at);
        let line = &head[start..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        start = end + 1;
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        if CONNECTION_SPECIFIC
            .iter()
            .any(|forbidden| name.eq_ignore_ascii_case(forbidden.as_bytes()))
        {
            continue;
        }
        let value = line[colon + 1..].trim_ascii();
        match (
            HeaderName::from_bytes(name),
            HeaderValue::from_maybe_shared(head.slice_ref(value)),
        ) {
            (Ok(name), Ok(value)) => {
                fields.append(name, value);
            }
            _ => tracing::warn!(
                line = %String::from_utf8_lossy(line),
                "a reply header that fields cannot carry is left out"
            ),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::response::Reply;

    #[test]
    fn reply_headers_become_fields_without_the_connection_specific_ones() {
        let reply = Reply::error(404)
            .header("Connection", "close")
            .header("Transfer-Encoding", "chunked")
            .header("X-Custom", "a, b")
            .header("X-Spaced", "  a  b  ")
            .header("X-Empty", "");
        let fields = fields_of(reply.headers);
        assert_eq!(fields["content-length"], "14");
        assert_eq!(fields["server"], "ioserve");
        assert_eq!(fields["x-custom"], "a, b");
        assert_eq!(fields["x-spaced"], "a  b");
        assert_eq!(fields["x-empty"], "");
        assert!(fields.contains_key("date"));
        assert!(!fields.contains_key("connection"));
        assert!(!fields.contains_key("transfer-encoding"));
        assert_eq!(fields.len(), 7);
    }
}

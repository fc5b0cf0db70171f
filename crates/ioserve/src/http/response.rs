//! Responses: the head as bytes, and a body described by what to send, not by its bytes.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::clock::with_http_date;
use crate::http::range::ByteRange;
use crate::http::tar::plan::Plan;
use crate::io::shared_file::SharedFile;

/// What follows the head.
#[derive(Debug)]
pub enum Body {
    /// Nothing (HEAD, 304, or a 206/200 to HEAD).
    Empty,
    /// Small bytes made by the server: error texts, listings.
    Bytes(Vec<u8>),
    /// A range of an open file, sent by the IO strategy.
    File {
        /// The open file (shared with the open-file cache).
        file: Arc<SharedFile>,
        /// Which bytes of it.
        range: ByteRange,
    },
    /// `multipart/byteranges` (boxed: rare, and twice the size of the other kinds,
    /// which every response in flight would otherwise make room for).
    Multipart(Box<Multipart>),
    /// A directory as a tar: headers made by the server, file bodies by the strategy.
    Tar(Box<Plan>),
}

/// A `multipart/byteranges` body: each part's header, then its range of the file; then
/// the closing delimiter.
#[derive(Debug)]
pub struct Multipart {
    /// The open file (shared with the open-file cache).
    pub file: Arc<SharedFile>,
    /// The parts in the order they are sent.
    pub parts: Vec<(Vec<u8>, ByteRange)>,
    /// The closing delimiter line.
    pub closing: Vec<u8>,
}

impl Body {
    /// Bytes the body occupies on the wire.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Bytes(bytes) => bytes.len() as u64,
            Body::File { range, .. } => range.len,
            Body::Multipart(multipart) => {
                let Multipart { parts, closing, .. } = &**multipart;
                parts
                    .iter()
                    .map(|(head, range)| head.len() as u64 + range.len)
                    .sum::<u64>()
                    + closing.len() as u64
            }
            Body::Tar(plan) => plan.len,
        }
    }
}

/// A response ready to be sent: status, header lines, body.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Header lines, each ending in CRLF, without `Connection` and the blank line: the
    /// connection adds those once it knows whether it stays open.
    pub headers: String,
    /// The body.
    pub body: Body,
}

impl Reply {
    /// Starts a response with the status line and the headers every response carries.
    pub fn new(status: u16) -> Reply {
        let mut headers = String::with_capacity(256);
        let _ = write!(headers, "HTTP/1.1 {status} {}\r\n", reason(status));
        headers.push_str("Server: ioserve\r\n");
        with_http_date(|date| {
            headers.push_str("Date: ");
            headers.push_str(date);
            headers.push_str("\r\n");
        });
        Reply {
            status,
            headers,
            body: Body::Empty,
        }
    }

    /// Adds a header line.
    pub fn header(mut self, name: &str, value: impl std::fmt::Display) -> Reply {
        let _ = write!(self.headers, "{name}: {value}\r\n");
        self
    }

    /// A short plain-text response for an error status, with `Content-Length`.
    pub fn error(status: u16) -> Reply {
        let text = format!("{status} {}\n", reason(status));
        Reply::new(status)
            .header("Content-Type", "text/plain; charset=utf-8")
            .with_bytes(text.into_bytes())
    }

    /// Sets a byte body and its `Content-Length`.
    pub fn with_bytes(self, bytes: Vec<u8>) -> Reply {
        let mut reply = self.header("Content-Length", bytes.len());
        reply.body = Body::Bytes(bytes);
        reply
    }

    /// 301 to `location`, which the caller builds from the normalised path (so that it
    /// is never `//host`-like).
    pub fn redirect(location: &str) -> Reply {
        debug_assert!(location.starts_with('/') && !location.starts_with("//"));
        Reply::error(301).header("Location", location)
    }

    /// The head as sent: header lines, `Connection`, blank line.
    pub fn finish_head(&self, keep_alive: bool, http10: bool) -> Vec<u8> {
        let connection = connection_line(keep_alive, http10);
        let mut head = Vec::with_capacity(self.headers.len() + connection.len() + 2);
        head.extend_from_slice(self.headers.as_bytes());
        head.extend_from_slice(connection.as_bytes());
        head.extend_from_slice(b"\r\n");
        head
    }

    /// The reply as it goes out: its status, its head as [`Reply::finish_head`] makes
    /// it (in the buffer of the header lines, not a copy), and its body.
    pub fn into_parts(self, keep_alive: bool, http10: bool) -> (u16, Vec<u8>, Body) {
        let mut head = self.headers.into_bytes();
        head.extend_from_slice(connection_line(keep_alive, http10).as_bytes());
        head.extend_from_slice(b"\r\n");
        (self.status, head, self.body)
    }
}

/// The `Connection` header line a response needs, if any: `close` where the connection
/// ends, `keep-alive` where an HTTP/1.0 client's stays open.
fn connection_line(keep_alive: bool, http10: bool) -> &'static str {
    match (keep_alive, http10) {
        (false, _) => "Connection: close\r\n",
        (true, true) => "Connection: keep-alive\r\n",
        (true, false) => "",
    }
}

/// The reason phrase of the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_reply_has_length_and_date() {
        let reply = Reply::error(404);
        let head = String::from_utf8(reply.finish_head(true, false)).unwrap();
        assert!(head.starts_with("HTTP/1.1 404 Not Found\r\nServer: ioserve\r\nDate: "));
        assert!(head.contains("Content-Length: 14\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
        assert!(!head.contains("Connection"));
        assert_eq!(reply.body.len(), 14);
    }

    #[test]
    fn connection_header() {
        let reply = Reply::new(200);
        let close = String::from_utf8(reply.finish_head(false, false)).unwrap();
        assert!(close.ends_with("Connection: close\r\n\r\n"));
        let ka10 = String::from_utf8(reply.finish_head(true, true)).unwrap();
        assert!(ka10.ends_with("Connection: keep-alive\r\n\r\n"));
    }
}

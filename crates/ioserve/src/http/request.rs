//! Parsing an HTTP/1.x request head into the few facts the server acts on.
//!
//! The head is parsed in place with `httparse`; [`Request`] borrows from the read buffer.
//! An HTTP/2 request (whose HEADERS hyper has decoded) gives the same facts to
//! [`from_fields`], so both protocols reach the same decisions.

use crate::http::conditional::Preconditions;

/// Largest request head accepted, request line included; a larger one gets 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header lines accepted; more get 431.
pub const MAX_HEADERS: usize = 64;

/// The request method, as far as this server distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method<'a> {
    /// GET
    Get,
    /// HEAD
    Head,
    /// Anything else (answered 405).
    Other(&'a str),
}

impl Method<'_> {
    /// The method's name.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Other(m) => m,
        }
    }
}

/// HTTP/1.0, HTTP/1.1 or HTTP/2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless the client asked for
    /// keep-alive.
    Http10,
    /// HTTP/1.1: persistent unless `Connection: close`.
    Http11,
    /// HTTP/2 (over TLS, by ALPN): one stream per request, the host in `:authority`,
    /// no `Connection` or `Transfer-Encoding`.
    Http2,
    /// HTTP/3 (over QUIC): as HTTP/2, one stream per request and no connection-specific
    /// fields.
    Http3,
}

impl Version {
    /// The protocol as a request line and the access log name it (`HTTP/1.1`,
    /// `HTTP/2.0`).
    pub fn name(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
            Version::Http3 => "HTTP/3.0",
        }
    }
}

/// A parsed request head.
#[derive(Debug)]
pub struct Request<'a> {
    /// The method.
    pub method: Method<'a>,
    /// The request target as sent (origin-form, or absolute-form reduced to its path).
    pub target: &'a str,
    /// The protocol version.
    pub version: Version,
    /// Whether the client wants the connection kept open after this response.
    pub keep_alive: bool,
    /// Whether a request body follows the head (`Content-Length` > 0 or
    /// `Transfer-Encoding`). The server does not read bodies: it answers and closes.
    pub has_body: bool,
    /// The `Range` field, if exactly one was sent (a repeated `Range` is ignored).
    pub range: Option<&'a [u8]>,
    /// The precondition fields.
    pub preconditions: Preconditions<'a>,
    /// The `Accept` lines (directory listings are negotiated with them).
    pub accept: Vec<&'a [u8]>,
    /// The `Accept-Encoding` lines (precompressed files are negotiated with them).
    pub accept_encoding: Vec<&'a [u8]>,
    /// `Referer`, for the access log.
    pub referer: Option<&'a [u8]>,
    /// `User-Agent`, for the access log.
    pub user_agent: Option<&'a [u8]>,
    /// The `Want-Repr-Digest` lines (RFC 9530).
    pub want_repr_digest: Vec<&'a [u8]>,
    /// The `Want-Content-Digest` lines (RFC 9530).
    pub want_content_digest: Vec<&'a [u8]>,
    /// The `Authorization` field, if exactly one was sent (a repeated one counts as
    /// none: Basic authentication then refuses the request).
    pub authorization: Option<&'a [u8]>,
}

/// Why a head could not be turned into a [`Request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// 400: syntax error, missing `Host` in HTTP/1.1, conflicting framing.
    #[error("bad request: {0}")]
    Bad(&'static str),
    /// 431: too many header lines (size is checked by the reader).
    #[error("request header fields too large")]
    TooLarge,
    /// 505: a version other than 1.0 and 1.1.
    #[error("HTTP version not supported")]
    Version,
}

/// The result of trying to parse the bytes read so far.
#[derive(Debug)]
// A transient return value, matched at once: boxing the request would cost an
// allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Parsed<'a> {
    /// A complete head of `len` bytes.
    Complete {
        /// The request.
        request: Request<'a>,
        /// Bytes of the buffer the head occupied.
        len: usize,
    },
    /// More bytes are needed.
    Partial,
}

/// Parses a request head from the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Parsed<'_>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut raw = httparse::Request::new(&mut headers);
    let len = match raw.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooLarge),
        Err(httparse::Error::Version) => return Err(RequestError::Version),
        Err(_) => return Err(RequestError::Bad("malformed request head")),
    };
    let version = match raw.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(RequestError::Version),
    };
    let target = origin_path(raw.path.unwrap_or_default())?;
    let fields = raw.headers.iter().map(|header| (header.name, header.value));
    let request = from_fields(raw.method.unwrap_or_default(), target, version, fields)?;
    Ok(Parsed::Complete { request, len })
}

/// The request of `method` on `target` (a path, see [`origin_path`]) with the header
/// `fields` (name, value), as HTTP/1.x's head and HTTP/2's HEADERS both give them.
pub fn from_fields<'a>(
    method: &'a str,
    target: &'a str,
    version: Version,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Request<'a>, RequestError> {
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        other => Method::Other(other),
    };
    let mut request = Request {
        method,
        target,
        version,
        keep_alive: version != Version::Http10,
        has_body: false,
        range: None,
        preconditions: Preconditions::default(),
        accept: Vec::new(),
        accept_encoding: Vec::new(),
        referer: None,
        user_agent: None,
        want_repr_digest: Vec::new(),
        want_content_digest: Vec::new(),
        authorization: None,
    };
    let mut framing = Framing::default();
    for (name, value) in fields {
        take_header(&mut request, &mut framing, name, value)?;
    }
    framing.check(&mut request)?;
    Ok(request)
}

/// What the headers say about the message's framing and header counts, judged once
/// all are read.
#[derive(Default)]
struct Framing<'a> {
    hosts: usize,
    ranges: usize,
    authorizations: usize,
    content_length: Option<&'a [u8]>,
    chunked: bool,
}

impl Framing<'_> {
    /// Refuses a head without its one Host (HTTP/1.1) or with conflicting framing,
    /// ignores a repeated Range or Authorization, and notes whether a body follows.
    fn check(&self, request: &mut Request<'_>) -> Result<(), RequestError> {
        if request.version == Version::Http11 && self.hosts != 1 {
            return Err(RequestError::Bad("HTTP/1.1 needs exactly one Host"));
        }
        if self.ranges > 1 {
            request.range = None;
        }
        if self.authorizations > 1 {
            request.authorization = None;
        }
        if self.chunked && self.content_length.is_some() {
            return Err(RequestError::Bad(
                "both Content-Length and Transfer-Encoding",
            ));
        }
        if let Some(value) = self.content_length {
            let digits = value.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(RequestError::Bad("invalid Content-Length"));
            }
            request.has_body = digits.iter().any(|&d| d != b'0');
        }
        request.has_body |= self.chunked;
        Ok(())
    }
}

/// Takes one header into `request` (the ones ioserve acts on) or `framing`.
fn take_header<'a>(
    request: &mut Request<'a>,
    framing: &mut Framing<'a>,
    name: &str,
    value: &'a [u8],
) -> Result<(), RequestError> {
    let is = |wanted: &str| name.eq_ignore_ascii_case(wanted);
    let preconditions = &mut request.preconditions;
    if is("host") {
        framing.hosts += 1;
    } else if is("connection") {
        for option in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if option.eq_ignore_ascii_case(b"close") {
                request.keep_alive = false;
            } else if option.eq_ignore_ascii_case(b"keep-alive")
                && request.version == Version::Http10
            {
                request.keep_alive = true;
            }
        }
    } else if is("range") {
        framing.ranges += 1;
        request.range = Some(value);
    } else if is("if-match") {
        preconditions.if_match.push(value);
    } else if is("if-none-match") {
        preconditions.if_none_match.push(value);
    } else if is("if-modified-since") {
        preconditions.if_modified_since = Some(value);
    } else if is("if-unmodified-since") {
        preconditions.if_unmodified_since = Some(value);
    } else if is("if-range") {
        preconditions.if_range = Some(value);
    } else if is("accept") {
        request.accept.push(value);
    } else if is("accept-encoding") {
        request.accept_encoding.push(value);
    } else if is("referer") {
        request.referer = Some(value);
    } else if is("user-agent") {
        request.user_agent = Some(value);
    } else if is("want-repr-digest") {
        request.want_repr_digest.push(value);
    } else if is("want-content-digest") {
        request.want_content_digest.push(value);
    } else if is("authorization") {
        framing.authorizations += 1;
        request.authorization = Some(value);
    } else if is("content-length") {
        if framing.content_length.is_some_and(|seen| seen != value) {
            return Err(RequestError::Bad("conflicting Content-Length"));
        }
        framing.content_length = Some(value);
    } else if is("transfer-encoding") {
        framing.chunked = true;
    }
    Ok(())
}

/// Reduces the request target to its path: origin-form is kept, absolute-form
/// (`http://host/path`) loses its scheme and authority. Other forms are errors.
pub fn origin_path(target: &str) -> Result<&str, RequestError> {
    if target.starts_with('/') {
        return Ok(target);
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return Err(RequestError::Bad("request target is not a path"));
    };
    Ok(rest.find('/').map_or("/", |at| &rest[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(head: &[u8]) -> Request<'_> {
        match parse(head) {
            Ok(Parsed::Complete { request, len }) => {
                assert_eq!(len, head.len());
                request
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_get() {
        let r = complete(b"GET /a?b HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n");
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, "/a?b");
        assert!(r.keep_alive);
        assert!(!r.has_body);
        assert_eq!(r.range, Some(&b"bytes=0-1"[..]));
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(
            !complete(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n").keep_alive
        );
    }

    #[test]
    fn absolute_form() {
        assert_eq!(
            complete(b"GET http://h:1/x/y HTTP/1.1\r\nHost: h\r\n\r\n").target,
            "/x/y"
        );
        assert_eq!(
            complete(b"GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n").target,
            "/"
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\n\r\n").unwrap_err(),
            RequestError::Bad("HTTP/1.1 needs exactly one Host")
        );
        assert_eq!(
            parse(b"GET / HTTP/2.0\r\n\r\n").unwrap_err(),
            RequestError::Version
        );
        assert!(matches!(
            parse(b"GARBAGE\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            parse(b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let head = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
        assert_eq!(parse(head.as_bytes()).unwrap_err(), RequestError::TooLarge);
    }

    #[test]
    fn bodies_and_partial() {
        assert!(complete(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").has_body);
        assert!(!complete(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").has_body);
        assert!(
            complete(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").has_body
        );
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost"),
            Ok(Parsed::Partial)
        ));
    }

    #[test]
    fn repeated_range_is_ignored() {
        let r =
            complete(b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nRange: bytes=2-3\r\n\r\n");
        assert_eq!(r.range, None);
    }
}

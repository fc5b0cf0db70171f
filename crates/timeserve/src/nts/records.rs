//! NTS-KE records (RFC 8915 §4): reading the client's request and writing the
//! server's answer. Pure functions over bytes, so that every branch is tested without
//! a TLS connection.
//!
//! A record is a critical bit and a 15-bit type, a 16-bit body length and the body.
//! The client sends NTS Next Protocol Negotiation (NTPv4 = 0), AEAD Algorithm
//! Negotiation and End of Message; the server answers the protocol and algorithm it
//! chose, eight New Cookie records, the NTPv4 server and port when the operator set
//! them, and End of Message, or an Error record.

use crate::nts::cookie::AEAD_AES_SIV_CMAC_256;

/// Record types (RFC 8915 §7.6).
mod kind {
    pub const END_OF_MESSAGE: u16 = 0;
    pub const NEXT_PROTOCOL: u16 = 1;
    pub const ERROR: u16 = 2;
    pub const WARNING: u16 = 3;
    pub const AEAD_ALGORITHM: u16 = 4;
    pub const NEW_COOKIE: u16 = 5;
    pub const SERVER: u16 = 6;
    pub const PORT: u16 = 7;
}

/// The critical bit of a record's type field.
const CRITICAL: u16 = 0x8000;

/// The NTS Next Protocol number of NTPv4.
pub const PROTOCOL_NTPV4: u16 = 0;

/// The largest request read; a client sends about 20 bytes.
pub const MAX_REQUEST_LEN: usize = 1024;

/// The error codes a server sends (RFC 8915 §4.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// A critical record of a type the server does not know.
    UnrecognizedCriticalRecord = 0,
    /// The request is malformed.
    BadRequest = 1,
    /// The server failed for a reason of its own.
    InternalServerError = 2,
}

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The protocols it offered, in its order of preference.
    pub protocols: Vec<u16>,
    /// The AEAD algorithms it offered, in its order of preference.
    pub algorithms: Vec<u16>,
}

/// The outcome of reading the bytes a client has sent so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// End of Message has not arrived yet.
    Incomplete,
    /// A whole request.
    Complete(Request),
    /// A request the server answers with an Error record.
    Refused(ErrorCode),
}

/// Reads a client's request from `bytes`, all it sent so far.
pub fn parse_request(bytes: &[u8]) -> Parsed {
    let mut protocols = None;
    let mut algorithms = None;
    let mut rest = bytes;
    loop {
        if rest.len() < 4 {
            return incomplete_or_too_long(bytes);
        }
        let field = u16::from_be_bytes([rest[0], rest[1]]);
        let length = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        if rest.len() < 4 + length {
            return incomplete_or_too_long(bytes);
        }
        let body = &rest[4..4 + length];
        rest = &rest[4 + length..];
        let critical = field & CRITICAL != 0;
        match field & !CRITICAL {
            kind::END_OF_MESSAGE => {
                if !critical || !body.is_empty() || !rest.is_empty() {
                    return Parsed::Refused(ErrorCode::BadRequest);
                }
                return match (protocols, algorithms) {
                    (Some(protocols), Some(algorithms)) => Parsed::Complete(Request {
                        protocols,
                        algorithms,
                    }),
                    // The request names no protocol, or NTPv4 without an algorithm.
                    (Some(protocols), None) if !protocols.contains(&PROTOCOL_NTPV4) => {
                        Parsed::Complete(Request {
                            protocols,
                            algorithms: Vec::new(),
                        })
                    }
                    _ => Parsed::Refused(ErrorCode::BadRequest),
                };
            }
            kind::NEXT_PROTOCOL => {
                if !critical || protocols.is_some() {
                    return Parsed::Refused(ErrorCode::BadRequest);
                }
                match numbers(body) {
                    // RFC 8915 §4.1.2: at least one protocol.
                    Some(list) if !list.is_empty() => protocols = Some(list),
                    _ => return Parsed::Refused(ErrorCode::BadRequest),
                }
            }
            kind::AEAD_ALGORITHM => {
                if algorithms.is_some() {
                    return Parsed::Refused(ErrorCode::BadRequest);
                }
                match numbers(body) {
                    // RFC 8915 §4.1.5: at least one algorithm.
                    Some(list) if !list.is_empty() => algorithms = Some(list),
                    _ => return Parsed::Refused(ErrorCode::BadRequest),
                }
            }
            // A client sends no errors, warnings or cookies.
            kind::ERROR | kind::WARNING | kind::NEW_COOKIE => {
                return Parsed::Refused(ErrorCode::BadRequest);
            }
            // A client may ask for a server or port; this one answers its own.
            kind::SERVER | kind::PORT => {}
            _ if critical => return Parsed::Refused(ErrorCode::UnrecognizedCriticalRecord),
            _ => {}
        }
    }
}

/// More bytes may complete the request, unless there are already too many.
fn incomplete_or_too_long(bytes: &[u8]) -> Parsed {
    if bytes.len() >= MAX_REQUEST_LEN {
        Parsed::Refused(ErrorCode::BadRequest)
    } else {
        Parsed::Incomplete
    }
}

/// A body of 16-bit numbers.
fn numbers(body: &[u8]) -> Option<Vec<u16>> {
    if !body.len().is_multiple_of(2) {
        return None;
    }
    Some(
        body.chunks_exact(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
            .collect(),
    )
}

/// What the server answers a [`Request`]: the protocol and algorithm it chose, if
/// it supports one of those offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// NTPv4, when offered.
    pub protocol: Option<u16>,
    /// AEAD_AES_SIV_CMAC_256, when offered with NTPv4.
    pub algorithm: Option<u16>,
}

impl Choice {
    /// The server's choice for `request`.
    pub fn of(request: &Request) -> Choice {
        let protocol = request
            .protocols
            .contains(&PROTOCOL_NTPV4)
            .then_some(PROTOCOL_NTPV4);
        let algorithm = (protocol.is_some() && request.algorithms.contains(&AEAD_AES_SIV_CMAC_256))
            .then_some(AEAD_AES_SIV_CMAC_256);
        Choice {
            protocol,
            algorithm,
        }
    }

    /// Whether the client gets cookies (and keys are exported).
    pub fn agreed(self) -> bool {
        self.protocol.is_some() && self.algorithm.is_some()
    }
}

/// Where the operator tells clients to send their NTP requests, when not to the
/// key-exchange server's own address and port 123.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NtpEndpoint {
    /// A host name or IP address (NTPv4 Server Negotiation).
    pub server: Option<String>,
    /// A UDP port (NTPv4 Port Negotiation).
    pub port: Option<u16>,
}

/// Writes the answer to a request: `choice`, then `cookies` and the endpoint when
/// the client got both a protocol and an algorithm, then End of Message.
pub fn write_response(
    out: &mut Vec<u8>,
    choice: Choice,
    cookies: &[impl AsRef<[u8]>],
    endpoint: &NtpEndpoint,
) {
    record(out, kind::NEXT_PROTOCOL | CRITICAL, |body| {
        if let Some(protocol) = choice.protocol {
            body.extend_from_slice(&protocol.to_be_bytes());
        }
    });
    if choice.protocol.is_some() {
        record(out, kind::AEAD_ALGORITHM | CRITICAL, |body| {
            if let Some(algorithm) = choice.algorithm {
                body.extend_from_slice(&algorithm.to_be_bytes());
            }
        });
    }
    if choice.agreed() {
        for cookie in cookies {
            record(out, kind::NEW_COOKIE, |body| {
                body.extend_from_slice(cookie.as_ref())
            });
        }
        if let Some(server) = &endpoint.server {
            record(out, kind::SERVER | CRITICAL, |body| {
                body.extend_from_slice(server.as_bytes())
            });
        }
        if let Some(port) = endpoint.port {
            record(out, kind::PORT | CRITICAL, |body| {
                body.extend_from_slice(&port.to_be_bytes())
            });
        }
    }
    record(out, kind::END_OF_MESSAGE | CRITICAL, |_| {});
}

/// Writes an Error record and End of Message.
pub fn write_error(out: &mut Vec<u8>, code: ErrorCode) {
    record(out, kind::ERROR | CRITICAL, |body| {
        body.extend_from_slice(&(code as u16).to_be_bytes())
    });
    record(out, kind::END_OF_MESSAGE | CRITICAL, |_| {});
}

/// Appends a record of type `field` whose body `write` appends.
fn record(out: &mut Vec<u8>, field: u16, write: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(&field.to_be_bytes());
    let length_at = out.len();
    out.extend_from_slice(&[0, 0]);
    write(out);
    let length = (out.len() - length_at - 2) as u16;
    out[length_at..length_at + 2].copy_from_slice(&length.to_be_bytes());
}

/// A client's request (for tests and load generators): NTPv4 with `algorithms`.
pub fn client_request(algorithms: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    record(&mut out, kind::NEXT_PROTOCOL | CRITICAL, |body| {
        body.extend_from_slice(&PROTOCOL_NTPV4.to_be_bytes())
    });
    record(&mut out, kind::AEAD_ALGORITHM | CRITICAL, |body| {
        for algorithm in algorithms {
            body.extend_from_slice(&algorithm.to_be_bytes());
        }
    });
    record(&mut out, kind::END_OF_MESSAGE | CRITICAL, |_| {});
    out
}

/// A server's answer as a client reads it (for tests and load generators).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The Next Protocol record's protocols.
    pub protocols: Vec<u16>,
    /// The AEAD record's algorithms, if there was one.
    pub algorithms: Option<Vec<u16>>,
    /// The cookies.
    pub cookies: Vec<Vec<u8>>,
    /// The NTPv4 server named.
    pub server: Option<String>,
    /// The NTPv4 port named.
    pub port: Option<u16>,
    /// The error code, if the server refused.
    pub error: Option<u16>,
}

impl Response {
    /// Reads a whole answer; `None` until End of Message or when malformed.
    pub fn parse(mut bytes: &[u8]) -> Option<Response> {
        let mut response = Response::default();
        while bytes.len() >= 4 {
            let field = u16::from_be_bytes([bytes[0], bytes[1]]) & !CRITICAL;
            let length = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
            let body = bytes.get(4..4 + length)?;
            bytes = &bytes[4 + length..];
            match field {
                kind::END_OF_MESSAGE => return Some(response),
                kind::NEXT_PROTOCOL => response.protocols = numbers(body)?,
                kind::AEAD_ALGORITHM => response.algorithms = Some(numbers(body)?),
                kind::NEW_COOKIE => response.cookies.push(body.to_vec()),
                kind::SERVER => response.server = Some(String::from_utf8(body.to_vec()).ok()?),
                kind::PORT => response.port = numbers(body)?.first().copied(),
                kind::ERROR => response.error = numbers(body)?.first().copied(),
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(field: u16, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        record(&mut out, field, |b| b.extend_from_slice(body));
        out
    }

    fn end() -> Vec<u8> {
        raw(kind::END_OF_MESSAGE | CRITICAL, &[])
    }

    #[test]
    fn a_client_request_is_read_whole_and_only_when_whole() {
        let request = client_request(&[17, AEAD_AES_SIV_CMAC_256]);
        for cut in 0..request.len() {
            assert_eq!(parse_request(&request[..cut]), Parsed::Incomplete, "{cut}");
        }
        let Parsed::Complete(read) = parse_request(&request) else {
            panic!("not complete");
        };
        assert_eq!(read.protocols, [PROTOCOL_NTPV4]);
        assert_eq!(read.algorithms, [17, 15]);
        assert_eq!(
            Choice::of(&read),
            Choice {
                protocol: Some(0),
                algorithm: Some(15)
            }
        );
    }

    #[test]
    fn malformed_requests_are_refused_with_their_code() {
        let protocol = raw(kind::NEXT_PROTOCOL | CRITICAL, &[0, 0]);
        let aead = raw(kind::AEAD_ALGORITHM | CRITICAL, &[0, 15]);
        let cases: [(Vec<u8>, ErrorCode); 9] = [
            // No Next Protocol record.
            ([aead.clone(), end()].concat(), ErrorCode::BadRequest),
            // NTPv4 without an algorithm.
            ([protocol.clone(), end()].concat(), ErrorCode::BadRequest),
            // Next Protocol without its critical bit.
            (
                [raw(kind::NEXT_PROTOCOL, &[0, 0]), aead.clone(), end()].concat(),
                ErrorCode::BadRequest,
            ),
            // Two Next Protocol records.
            (
                [protocol.clone(), protocol.clone(), aead.clone(), end()].concat(),
                ErrorCode::BadRequest,
            ),
            // An empty list of protocols, or of algorithms.
            (
                [
                    raw(kind::NEXT_PROTOCOL | CRITICAL, &[]),
                    aead.clone(),
                    end(),
                ]
                .concat(),
                ErrorCode::BadRequest,
            ),
            (
                [
                    protocol.clone(),
                    raw(kind::AEAD_ALGORITHM | CRITICAL, &[]),
                    end(),
                ]
                .concat(),
                ErrorCode::BadRequest,
            ),
            // An odd-length list.
            (
                [
                    raw(kind::NEXT_PROTOCOL | CRITICAL, &[0]),
                    aead.clone(),
                    end(),
                ]
                .concat(),
                ErrorCode::BadRequest,
            ),
            // A critical record of an unknown type.
            (
                [
                    protocol.clone(),
                    raw(0x4000 | CRITICAL, b"x"),
                    aead.clone(),
                    end(),
                ]
                .concat(),
                ErrorCode::UnrecognizedCriticalRecord,
            ),
            // Bytes after End of Message.
            (
                [protocol.clone(), aead.clone(), end(), end()].concat(),
                ErrorCode::BadRequest,
            ),
        ];
        for (bytes, code) in cases {
            assert_eq!(parse_request(&bytes), Parsed::Refused(code), "{bytes:?}");
        }
        // An unknown record without the critical bit is ignored.
        let tolerated = [protocol, raw(0x4000, b"xy"), aead, end()].concat();
        assert!(matches!(parse_request(&tolerated), Parsed::Complete(_)));
        // A request that never ends is refused once it is too long.
        let endless = raw(0x4000, &[0; MAX_REQUEST_LEN]);
        assert_eq!(
            parse_request(&endless),
            Parsed::Refused(ErrorCode::BadRequest)
        );
    }

    #[test]
    fn the_answer_has_eight_cookies_and_the_endpoint_only_when_agreed() {
        let endpoint = NtpEndpoint {
            server: Some("time.example.net".into()),
            port: Some(1123),
        };
        let cookies = vec![vec![7u8; 104]; 8];
        let mut out = Vec::new();
        let agreed = Choice {
            protocol: Some(0),
            algorithm: Some(15),
        };
        write_response(&mut out, agreed, &cookies, &endpoint);
        let response = Response::parse(&out).unwrap();
        assert_eq!(response.protocols, [0]);
        assert_eq!(response.algorithms, Some(vec![15]));
        assert_eq!(response.cookies, cookies);
        assert_eq!(response.server.as_deref(), Some("time.example.net"));
        assert_eq!(response.port, Some(1123));

        // An algorithm the server lacks: an empty AEAD record and no cookies.
        let Parsed::Complete(request) = parse_request(&client_request(&[17])) else {
            panic!()
        };
        let choice = Choice::of(&request);
        assert!(!choice.agreed());
        let mut out = Vec::new();
        write_response(&mut out, choice, &cookies, &endpoint);
        let response = Response::parse(&out).unwrap();
        assert_eq!(response.algorithms, Some(vec![]));
        assert!(response.cookies.is_empty() && response.server.is_none());

        let mut out = Vec::new();
        write_error(&mut out, ErrorCode::BadRequest);
        assert_eq!(Response::parse(&out).unwrap().error, Some(1));
    }
}

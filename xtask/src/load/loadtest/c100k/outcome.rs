//! How asking went, and the errors that make a refusal or a failure of it.

use std::io;

/// How asking went, before the hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A 200 with the whole body (for a download, the head of its 200).
    Answered,
    /// A 503, or the connection refused, reset or closed before the answer.
    Refused(String),
    /// Anything else: a timeout, another status, a short body, a TLS error.
    Failed(String),
}

/// A 200, or why not: 503 is a refusal, anything else a failure.
pub(crate) fn expect_ok(status: u16) -> Result<(), Outcome> {
    match status {
        200 => Ok(()),
        503 => Err(Outcome::Refused("503".into())),
        other => Err(Outcome::Failed(format!("status {other}"))),
    }
}

/// An I/O error `during` a step as an outcome: refused, reset or closed is a refusal.
pub(crate) fn io_outcome(error: &io::Error, during: &str) -> Outcome {
    use io::ErrorKind::*;
    let text = format!("{during}: {error}");
    match error.kind() {
        ConnectionRefused | ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
            Outcome::Refused(text)
        }
        _ => Outcome::Failed(text),
    }
}

/// An HTTP/2 error `during` a step as an outcome: a refused stream, a GOAWAY or a
/// reset connection is a refusal.
pub(crate) fn h2_outcome(error: h2::Error, during: &str) -> Outcome {
    if error.reason() == Some(h2::Reason::REFUSED_STREAM) || error.is_go_away() {
        return Outcome::Refused(format!("{during}: {error}"));
    }
    match error.into_io() {
        Some(io) => io_outcome(&io, during),
        None => Outcome::Failed(format!("{during}: HTTP/2 error")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_reset_or_close_is_a_refusal_and_anything_else_a_failure() {
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(matches!(io_outcome(&reset, "answer"), Outcome::Refused(_)));
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert!(matches!(
            io_outcome(&refused, "connect"),
            Outcome::Refused(_)
        ));
        let full = io::Error::from(io::ErrorKind::AddrNotAvailable);
        assert!(matches!(io_outcome(&full, "connect"), Outcome::Failed(_)));
        assert_eq!(expect_ok(200), Ok(()));
        assert_eq!(expect_ok(503), Err(Outcome::Refused("503".into())));
        assert_eq!(expect_ok(404), Err(Outcome::Failed("status 404".into())));
    }
}

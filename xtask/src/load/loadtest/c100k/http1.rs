//! HTTP/1.1 on the wire, as the client's connections speak it: a keep-alive GET, its
//! answer read to the end of the body, or its head alone.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::outcome::{expect_ok, io_outcome, Outcome};

/// The small file every kind but the downloads asks for, and its length.
pub(crate) const SMALL_FILE: (&str, u64) = ("/4k.bin", 4096);

/// The largest response head read.
pub(crate) const MOST_HEAD_BYTES: usize = 16 << 10;

/// `GET path` over HTTP/1.1, keep-alive.
pub(crate) fn request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
}

/// Asks for the small file on `stream` and reads the whole answer, leaving the
/// connection idle.
pub(crate) async fn get_small_file<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
) -> Result<(), Outcome> {
    let (path, length) = SMALL_FILE;
    stream
        .write_all(request(path).as_bytes())
        .await
        .map_err(|e| io_outcome(&e, "request"))?;
    let mut head = Vec::with_capacity(MOST_HEAD_BYTES);
    let answer = read_head(stream, &mut head).await?;
    expect_ok(answer.status)?;
    if answer.content_length != Some(length) {
        return Err(Outcome::Failed(format!(
            "Content-Length {:?} for {path}, not {length}",
            answer.content_length
        )));
    }
    let mut left = length as usize - answer.body_read.min(length as usize);
    let mut body = vec![0u8; left];
    while left > 0 {
        let n = stream
            .read(&mut body[..left])
            .await
            .map_err(|e| io_outcome(&e, "body"))?;
        if n == 0 {
            return Err(Outcome::Refused(format!(
                "closed with {left} bytes of the body to come"
            )));
        }
        left -= n;
    }
    Ok(())
}

/// A response head as read.
pub(crate) struct Head {
    /// The status code.
    pub status: u16,
    /// Its Content-Length, if any.
    pub content_length: Option<u64>,
    /// Body bytes read with the head.
    pub body_read: usize,
}

/// Reads a response head from `stream` into `buffer` (with whatever of the body came
/// with it).
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
) -> Result<Head, Outcome> {
    loop {
        if let Some(head) = parse_head(buffer)? {
            return Ok(head);
        }
        if buffer.len() >= MOST_HEAD_BYTES {
            return Err(Outcome::Failed(format!(
                "no end of the head in {MOST_HEAD_BYTES} bytes"
            )));
        }
        let n = stream
            .read_buf(buffer)
            .await
            .map_err(|e| io_outcome(&e, "answer"))?;
        if n == 0 {
            return Err(Outcome::Refused("closed before answering".into()));
        }
    }
}

/// The head at the start of `bytes`, if it is all there.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, Outcome> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(Outcome::Failed(format!("not an HTTP response: {error}"))),
    };
    let content_length = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok());
    Ok(Some(Head {
        status: response.code.unwrap_or(0),
        content_length,
        body_read: bytes.len() - length,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_its_status_length_and_the_body_read_with_it() {
        let bytes = b"HTTP/1.1 200 OK\r\ncontent-length: 4096\r\nServer: x\r\n\r\nabc";
        let head = parse_head(bytes).unwrap().unwrap();
        assert_eq!(
            (head.status, head.content_length, head.body_read),
            (200, Some(4096), 3)
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le")
            .unwrap()
            .is_none());
        assert!(matches!(
            parse_head(b"SSH-2.0\r\n\r\n"),
            Err(Outcome::Failed(_))
        ));
        assert_eq!(
            request("/4k.bin"),
            "GET /4k.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        );
    }
}

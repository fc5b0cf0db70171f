//! The lingering close every connection ends with, as nginx's `lingering_close`: our
//! side is shut (TLS close_notify, FIN), then what the client still sends is read and
//! dropped for a short while. Closed at once, a socket with unread bytes (a pipelined
//! request, an HTTP/2 WINDOW_UPDATE or PING ACK sent while our GOAWAY was on its way)
//! makes the kernel answer with a reset instead of FIN, and the reset can destroy our
//! last response or GOAWAY before the client reads it.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::time::timeout_at;

/// How long a closing connection keeps reading (and dropping) what the client sends.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and dropped while lingering.
const LINGER_BYTES: usize = 256 * 1024;

/// Closes our side of `stream`, then reads and drops what the client still sends until
/// it closes, fails, [`LINGER`] passes or [`LINGER_BYTES`] came; `stream` is dropped
/// (closed) at the end.
pub(crate) async fn close<S: AsyncRead + AsyncWrite + Unpin>(stream: S) {
    close_within(stream, LINGER).await;
}

/// As [`close`], lingering for at most `linger`.
pub(crate) async fn close_within<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    linger: Duration,
) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + linger;
    // On the heap, and only now: a buffer in the future itself would be part of every
    // connection's task, idle or not.
    let mut scratch = vec![0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn a_lingering_close_reads_until_the_client_closes() {
        let (mut server, mut client) = tokio::io::duplex(64);
        // What the server sent last (a GOAWAY), still unread by the client.
        server.write_all(b"GOAWAY").await.unwrap();
        let client = tokio::spawn(async move {
            let mut goaway = [0; 6];
            client.read_exact(&mut goaway).await.unwrap();
            // More than the pipe holds: the close must read it, or this write blocks.
            client.write_all(&[0; 1024]).await.unwrap();
            goaway
        });
        let started = tokio::time::Instant::now();
        // Takes the stream and drops (closes) it at the end: a client still writing
        // then fails instead of hanging the test.
        close(server).await;
        assert!(started.elapsed() < LINGER, "it waited for the limit");
        assert_eq!(&client.await.unwrap(), b"GOAWAY");
    }
}

//! A lingering close for HTTP/2 connections, as nginx's `lingering_close`: after a
//! graceful end (GOAWAY sent, no stream in flight) the stream is read and discarded
//! until the client closes it or [`LINGER`] passes, and only then closed. Closed at
//! once, a socket with unread bytes (a WINDOW_UPDATE or PING ACK the client sent while
//! the GOAWAY was on its way) makes the kernel send RST instead of FIN, and the client
//! can lose the GOAWAY and the data before it: it sees a reset where the server meant
//! "done, reconnect".
//!
//! hyper owns the stream while it serves the connection and drops it at the end;
//! [`Returned`] hands it back then, so the connection's task (still holding its slot
//! among the connections) does the lingering.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::oneshot;

/// The longest a closed connection is read for its client's close.
pub const LINGER: Duration = Duration::from_secs(2);

/// A stream that is sent back through a channel when dropped (by hyper, at the end of
/// the connection) instead of being closed.
pub(super) struct Returned<S> {
    stream: Option<S>,
    back: Option<oneshot::Sender<S>>,
}

impl<S> Returned<S> {
    /// `stream`, and the receiver that gets it back when the wrapper is dropped.
    pub(super) fn new(stream: S) -> (Returned<S>, oneshot::Receiver<S>) {
        let (back, returned) = oneshot::channel();
        let wrapper = Returned {
            stream: Some(stream),
            back: Some(back),
        };
        (wrapper, returned)
    }

    fn stream(&mut self) -> &mut S {
        self.stream
            .as_mut()
            .expect("the stream is taken only by drop")
    }
}

impl<S> Drop for Returned<S> {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.stream.take(), self.back.take()) {
            // A receiver gone (the connection's task ended first) closes the stream
            // here, as a plain drop would.
            let _ = back.send(stream);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Returned<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Returned<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.get_mut().stream()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().stream()).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.get_mut().stream()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(S::is_write_vectored)
    }
}

/// Ends the sending side (TLS close_notify and FIN, where hyper has not already) and
/// reads and drops what the client still sends until it closes, fails or [`LINGER`]
/// passes; the caller then drops the stream.
pub(super) async fn close<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let _ = tokio::time::timeout(LINGER, async {
        let _ = stream.shutdown().await;
        let mut scratch = [0u8; 4096];
        while let Ok(1..) = stream.read(&mut scratch).await {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lingering_close_reads_what_the_client_still_sends_until_it_closes() {
        let (server, mut client) = tokio::io::duplex(64);
        let (mut returned, back) = Returned::new(server);
        // What hyper does: writes, then drops the stream, which comes back unclosed.
        returned.write_all(b"GOAWAY").await.unwrap();
        drop(returned);
        let mut server = back.await.expect("the stream came back");
        let client = tokio::spawn(async move {
            let mut goaway = [0; 6];
            client.read_exact(&mut goaway).await.unwrap();
            // More than the pipe holds: the close must read it, or this write blocks.
            client.write_all(&[0; 1024]).await.unwrap();
            goaway
        });
        let started = tokio::time::Instant::now();
        close(&mut server).await;
        assert!(started.elapsed() < LINGER, "it waited for the limit");
        // Closed now: a client still writing would fail instead of hanging the test.
        drop(server);
        assert_eq!(&client.await.unwrap(), b"GOAWAY");
    }
}

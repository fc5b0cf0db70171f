//! hyper owns an HTTP/2 connection's stream while it serves it and drops it at the end;
//! [`Returned`] hands the stream back then instead of closing it, so that the
//! connection's task (still holding its slot among the connections) ends it with the
//! lingering close every connection gets ([`crate::serve::linger`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::serve::linger::{self, LINGER};

    #[tokio::test]
    async fn the_returned_stream_lingers_until_the_client_closes() {
        let (server, mut client) = tokio::io::duplex(64);
        let (mut returned, back) = Returned::new(server);
        // What hyper does: writes, then drops the stream, which comes back unclosed.
        returned.write_all(b"GOAWAY").await.unwrap();
        drop(returned);
        let server = back.await.expect("the stream came back");
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
        linger::close(server).await;
        assert!(started.elapsed() < LINGER, "it waited for the limit");
        assert_eq!(&client.await.unwrap(), b"GOAWAY");
    }
}

//! A response body of HTTP/2 and HTTP/3: small bodies made by the server as they are,
//! file bodies fed by the IO strategy through a bounded channel.
//!
//! The strategy writes through an [`crate::io::output::Output`] over a [`BodyWriter`]:
//! each write becomes a chunk of at most [`MAX_CHUNK`] bytes in a channel of
//! [`CHUNKS_IN_FLIGHT`], which the protocol's stream drains (hyper's HTTP/2 stream, or
//! the HTTP/3 stream's sender) as the client's flow-control windows allow. A client that reads slowly holds at most those chunks (and hyper's
//! send buffer) in memory: a full channel makes the writer wait, and that wait is bounded
//! by the send timeout like a full socket buffer's.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

/// Most bytes of one chunk: a few DATA frames of the largest size a client usually
/// allows (16 KiB by default).
pub(crate) const MAX_CHUNK: usize = 64 * 1024;
/// Chunks a stream may have written and not yet handed to hyper.
pub(crate) const CHUNKS_IN_FLIGHT: usize = 4;

/// A body of `len` bytes that a [`BodyWriter`] fills; `held` is dropped with the body,
/// when hyper has taken all of it (or gave up on the stream).
pub(crate) fn channel(len: u64, held: Box<dyn Send>) -> (BodyWriter, ResponseBody) {
    let (sender, receiver) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let writer = BodyWriter {
        sender: PollSender::new(sender),
    };
    (
        writer,
        ResponseBody::Streamed {
            receiver,
            left: len,
            _held: Held { _guard: held },
        },
    )
}

/// What a response carries after its HEADERS.
#[derive(Debug)]
pub(crate) enum ResponseBody {
    /// Nothing: END_STREAM on the HEADERS frame.
    Empty,
    /// Bytes made by the server (error texts, listings), sent once.
    Bytes(Option<Bytes>),
    /// Chunks from a [`BodyWriter`]; `left` bytes are still to come.
    Streamed {
        receiver: mpsc::Receiver<Bytes>,
        left: u64,
        _held: Held,
    },
}

/// What a streamed body keeps until it is dropped (the stream's place among those in
/// flight).
pub(crate) struct Held {
    _guard: Box<dyn Send>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            ResponseBody::Empty => Poll::Ready(None),
            ResponseBody::Bytes(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Streamed { receiver, left, .. } => match ready!(receiver.poll_recv(cx)) {
                Some(chunk) => {
                    *left = left.saturating_sub(chunk.len() as u64);
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                None if *left == 0 => Poll::Ready(None),
                // The strategy failed (a file truncated under it): the stream is reset,
                // never ended as if the short body were whole.
                None => Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the response body ended before its Content-Length",
                )))),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Empty => true,
            ResponseBody::Bytes(bytes) => bytes.is_none(),
            ResponseBody::Streamed { .. } => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Empty => SizeHint::with_exact(0),
            ResponseBody::Bytes(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::Streamed { left, .. } => SizeHint::with_exact(*left),
        }
    }
}

/// The writing end of a [`ResponseBody::Streamed`]: each write copies up to
/// [`MAX_CHUNK`] bytes into a chunk, waiting while [`CHUNKS_IN_FLIGHT`] are queued.
/// Writes fail with `BrokenPipe` once the stream is gone (reset by the client, or its
/// connection closed).
#[derive(Debug)]
pub(crate) struct BodyWriter {
    sender: PollSender<Bytes>,
}

fn stream_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the stream is gone")
}

impl AsyncWrite for BodyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let sender = &mut self.get_mut().sender;
        ready!(sender.poll_reserve(cx)).map_err(|_| stream_gone())?;
        let n = buf.len().min(MAX_CHUNK);
        sender
            .send_item(Bytes::copy_from_slice(&buf[..n]))
            .map_err(|_| stream_gone())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().sender.close();
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_streamed_body_holds_is_released_with_the_body_not_the_writer() {
        let held = std::sync::Arc::new(());
        let (writer, body) = channel(0, Box::new(std::sync::Arc::clone(&held)));
        drop(writer);
        assert_eq!(std::sync::Arc::strong_count(&held), 2);
        drop(body);
        assert_eq!(std::sync::Arc::strong_count(&held), 1);
    }
    use hyper::body::Body as _;
    use std::future::poll_fn;
    use tokio::io::AsyncWriteExt as _;

    async fn next(body: &mut ResponseBody) -> Option<io::Result<Bytes>> {
        let frame = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        Some(frame.map(|frame| frame.into_data().unwrap()))
    }

    #[tokio::test]
    async fn a_whole_body_ends_and_a_short_one_fails() {
        let (mut writer, mut body) = channel(5, Box::new(()));
        writer.write_all(b"hello").await.unwrap();
        drop(writer);
        assert_eq!(next(&mut body).await.unwrap().unwrap(), &b"hello"[..]);
        assert!(next(&mut body).await.is_none());

        let (mut writer, mut body) = channel(5, Box::new(()));
        writer.write_all(b"hel").await.unwrap();
        drop(writer);
        assert_eq!(next(&mut body).await.unwrap().unwrap(), &b"hel"[..]);
        let error = next(&mut body).await.unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn a_writer_waits_for_room_and_fails_once_the_body_is_gone() {
        let len = (CHUNKS_IN_FLIGHT + 1) * MAX_CHUNK;
        let (mut writer, body) = channel(len as u64, Box::new(()));
        let data = vec![7u8; len];
        // All but the last chunk fit; the last waits for the reader.
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            writer.write_all(&data),
        )
        .await;
        assert!(waited.is_err(), "the channel is bounded");
        drop(body);
        let error = writer.write_all(&data).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    }
}

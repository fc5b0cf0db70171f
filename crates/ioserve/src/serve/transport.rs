//! What a connection runs over: the plain TCP socket, TLS in user space over it, or
//! TLS that the kernel encrypts (kTLS).
//!
//! [`crate::serve::conn`] is generic over [`Transport`], so the plain path is compiled
//! on its own, with no branch or indirection per request: it waits for readability
//! holding no buffer, and hands the socket to the kernel's `writev` and `sendfile`.
//! Over TLS in user space the bytes go through rustls's reads and writes; over kTLS
//! the responses go to the socket as over plain TCP, and the kernel makes the records.

use std::future::Future;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use ktls::CorkStream;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::http::request::MAX_HEAD_BYTES;
use crate::io::output::Output;
use crate::serve::ktls::KernelTlsStream;

/// The first allocation of a connection's read buffer: most request heads fit. It
/// doubles, up to [`MAX_HEAD_BYTES`], for the rare large head.
const FIRST_READ: usize = 1024;

/// A connection's byte stream.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send + Sync {
    /// Whether the bytes are encrypted (HTTPS).
    const ENCRYPTED: bool;

    /// Waits for request bytes and appends them to `buf`, growing it as a head needs
    /// (up to [`MAX_HEAD_BYTES`]). Returns how many came: 0 at the end of the stream.
    /// Cancel-safe: cancelled, it has taken nothing from the stream.
    fn read_some(&mut self, buf: &mut Vec<u8>) -> impl Future<Output = io::Result<usize>> + Send;

    /// A writer for one response, each wait bounded by `send_timeout`.
    fn output(&mut self, send_timeout: Duration) -> Output<'_>;

    /// Writes `bufs` toward the client, where this transport has a buffer of its own for
    /// what it sends (rustls's records) leaving them there until the next flush: HTTP/2
    /// writes this way and flushes once per turn of a connection's task
    /// ([`crate::serve::http2`]). Elsewhere the bytes go to the socket at once.
    fn poll_write_held(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, bufs)
    }
}

/// Grows a full `buf` for the next read.
fn make_room(buf: &mut Vec<u8>) {
    if buf.len() == buf.capacity() {
        let grow = buf.capacity().clamp(FIRST_READ, MAX_HEAD_BYTES);
        buf.reserve_exact(grow);
    }
}

impl Transport for TcpStream {
    const ENCRYPTED: bool = false;

    /// Holds no buffer while it waits: `buf` is grown only once bytes are there, and
    /// an empty one left by a spurious wake-up is released.
    ///
    /// Written on tokio's poll functions, whose wakers live in the socket's
    /// registration: `readable()` would keep a waiter node in this future, which is
    /// part of every idle connection. The read is `poll_read`, not `try_read_buf`: a
    /// read shorter than the room it was offered tells tokio that the socket is
    /// drained, so the wait for a keep-alive client's next request goes to epoll at once
    /// instead of first making a read that fails with `EAGAIN`, one syscall per request.
    async fn read_some(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        std::future::poll_fn(|cx| {
            std::task::ready!(self.poll_read_ready(cx))?;
            make_room(buf);
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut *self), cx, buf);
            if read.is_pending() && buf.is_empty() {
                // Not readable after all (tokio cleared its readiness and waits again).
                *buf = Vec::new();
            }
            read
        })
        .await
    }

    fn output(&mut self, send_timeout: Duration) -> Output<'_> {
        Output::new(self, send_timeout)
    }
}

/// What TLS in user space runs over: the socket, or the `ktls` crate's `CorkStream`
/// of it (the handshake of a connection whose keys then go to the kernel, kept where
/// the kernel refused the negotiated cipher).
pub(crate) trait TlsSocket: AsyncRead + AsyncWrite + Unpin + Send + Sync {
    /// Ready once the socket has something for rustls to read (bytes, its end, an
    /// error); ready at once where this cannot be told without reading.
    fn poll_socket_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl TlsSocket for TcpStream {
    fn poll_socket_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

impl TlsSocket for CorkStream<TcpStream> {
    /// The cork may hold part of a record's header already: read at once.
    fn poll_socket_readable(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// TLS in user space, over the socket (or over the `ktls` crate's `CorkStream` of it,
/// where the kernel refused the negotiated cipher).
impl<IO: TlsSocket> Transport for TlsStream<IO> {
    const ENCRYPTED: bool = true;

    /// Holds no buffer of its own while it waits, as over plain TCP: when rustls has
    /// no decrypted bytes waiting (it wants to read), `buf` is grown only once the
    /// socket is readable, and an empty one left by a wake-up that brought no whole
    /// record is released. rustls keeps its own record buffer (4 KiB) either way.
    fn read_some(&mut self, buf: &mut Vec<u8>) -> impl Future<Output = io::Result<usize>> + Send {
        std::future::poll_fn(|cx| {
            let (socket, session) = self.get_ref();
            if buf.is_empty() && session.wants_read() {
                std::task::ready!(socket.poll_socket_readable(cx))?;
            }
            make_room(buf);
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut *self), cx, buf);
            if read.is_pending() && buf.is_empty() {
                *buf = Vec::new();
            }
            read
        })
    }

    fn output(&mut self, send_timeout: Duration) -> Output<'_> {
        Output::through(self, send_timeout)
    }

    /// Encrypts `bufs` into rustls's records and leaves them there while rustls has room
    /// (its limit: 64 KiB of records); when it has none, its records are sent first.
    fn poll_write_held(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let held = this.get_mut().1.writer().write_vectored(bufs)?;
        if held > 0 || bufs.iter().all(|buf| buf.is_empty()) {
            return Poll::Ready(Ok(held));
        }
        std::task::ready!(Pin::new(&mut *this).poll_flush(cx))?;
        Pin::new(this).poll_write_vectored(cx, bufs)
    }
}

impl Transport for KernelTlsStream {
    const ENCRYPTED: bool = true;

    /// Request bytes that rustls decrypted before the hand-off may be waiting, so this
    /// reads into `buf` at once, as over TLS in user space.
    async fn read_some(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        make_room(buf);
        self.read_buf(buf).await
    }

    /// The socket itself: `writev`, `sendfile` and mappings go to the kernel, which
    /// encrypts them.
    fn output(&mut self, send_timeout: Duration) -> Output<'_> {
        Output::new(self.socket(), send_timeout)
    }
}

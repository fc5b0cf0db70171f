//! An HTTP/2 connection's stream, shared between hyper, which reads and writes it, and
//! the connection's task, which sends what a turn of the protocol wrote once the turn
//! is over ([`Held::poll_send`]), and takes the stream back at the end ([`Held::into_inner`])
//! to close it with the lingering close every connection gets ([`crate::serve::linger`]).
//!
//! Why: h2 cannot buffer a frame behind a DATA frame whose payload it writes from the
//! body's own buffer (any over 256 bytes), so it flushes after each, and tokio-rustls
//! sends on every write. Each response of a turn then left in a `writev` of its own (a
//! TLS record and a TCP segment each: ten for the ten streams of `h2load -m10`, where
//! one read had brought the ten requests). Through [`Held`], writes go to the
//! transport's own buffer where it has one ([`Transport::poll_write_held`]: rustls's
//! records, up to its limit of 64 KiB, beyond which they are sent first), hyper's
//! flushes wait for the end of the turn, and the records of the whole turn leave in one
//! `writev`.

use std::io;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::serve::transport::Transport;

/// The stream and whether bytes written to it may wait in user space for a flush.
#[derive(Debug)]
pub(super) struct Held<S> {
    state: Mutex<State<S>>,
}

#[derive(Debug)]
struct State<S> {
    stream: S,
    /// Written since the last flush that reached the socket.
    owed: bool,
}

impl<S: Transport> Held<S> {
    /// Holds `stream`.
    pub(super) fn new(stream: S) -> Held<S> {
        Held {
            state: Mutex::new(State {
                stream,
                owed: false,
            }),
        }
    }

    /// The side hyper reads and writes.
    pub(super) fn io(&self) -> HeldIo<'_, S> {
        HeldIo(self)
    }

    /// Sends what the protocol wrote and left held: called at the end of each turn of
    /// the connection's task. Pending while the socket is full (the task is woken when
    /// it has room).
    pub(super) fn poll_send(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        if !state.owed {
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(Pin::new(&mut state.stream).poll_flush(cx))?;
        state.owed = false;
        Poll::Ready(Ok(()))
    }

    /// The stream, once hyper is done with it.
    pub(super) fn into_inner(self) -> S {
        self.state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .stream
    }

    /// The state: only this connection's task takes it, one call at a time, so it is
    /// never contended; a panic while it was held leaves the stream as usable as the
    /// panic left it.
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What hyper reads and writes: writes are held until [`Held::poll_send`] (or until the
/// transport's buffer is full), and its flushes leave them held.
#[derive(Debug)]
pub(super) struct HeldIo<'a, S>(&'a Held<S>);

impl<S: Transport> AsyncRead for HeldIo<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.lock().stream).poll_read(cx, buf)
    }
}

impl<S: Transport> AsyncWrite for HeldIo<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.0.lock();
        let written = std::task::ready!(Pin::new(&mut state.stream).poll_write_held(cx, bufs))?;
        state.owed |= written > 0;
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.lock().stream.is_write_vectored()
    }

    /// Leaves the bytes held: the connection's task sends them when the turn is over.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Sends what is held, then shuts the stream down (TLS's close_notify).
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.0.lock();
        std::task::ready!(Pin::new(&mut state.stream).poll_shutdown(cx))?;
        state.owed = false;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;
    type ClientStream = tokio_rustls::client::TlsStream<TcpStream>;

    /// A TLS connection over loopback TCP: the server's side and the client's.
    async fn tls_pair() -> (ServerStream, ClientStream) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(cert.der().to_vec()))
            .unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let accepted = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            acceptor.accept(tcp).await.unwrap()
        });
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let client = connector.connect(name, tcp).await.unwrap();
        (accepted.await.unwrap(), client)
    }

    /// Whether rustls holds records not yet written to the socket.
    fn records_held(held: &Held<ServerStream>) -> bool {
        held.lock().stream.get_ref().1.wants_write()
    }

    #[tokio::test]
    async fn writes_wait_in_rustls_until_the_turn_is_sent() {
        let (server, mut client) = tls_pair().await;
        let held = Held::new(server);
        let mut io = held.io();
        // Three frames and the flushes h2 makes after each: all stay in user space.
        for frame in [&b"first "[..], b"second ", b"third"] {
            io.write_all(frame).await.unwrap();
            io.flush().await.unwrap();
        }
        assert!(records_held(&held), "the writes were sent at once");
        std::future::poll_fn(|cx| held.poll_send(cx)).await.unwrap();
        assert!(!records_held(&held), "records were left unsent");
        let mut got = [0; 18];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"first second third");
    }

    #[tokio::test]
    async fn a_full_buffer_is_sent_without_waiting_for_the_turn() {
        let (server, mut client) = tls_pair().await;
        let held = Held::new(server);
        // Four times rustls's limit of held records, never sent by `poll_send`: the
        // writes send what rustls cannot hold, so the client gets all but the last.
        let body: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
        let reader = tokio::spawn(async move {
            let mut got = vec![0; 192 * 1024];
            client.read_exact(&mut got).await.unwrap();
            got
        });
        held.io().write_all(&body).await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got[..], body[..got.len()]);
    }

    #[tokio::test]
    async fn shutting_down_sends_what_is_held_first() {
        let (server, mut client) = tls_pair().await;
        let held = Held::new(server);
        let mut io = held.io();
        io.write_all(b"the last frame").await.unwrap();
        io.shutdown().await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"the last frame");
    }
}

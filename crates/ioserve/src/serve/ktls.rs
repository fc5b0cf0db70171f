//! kTLS: after rustls's handshake, a connection's keys go to the kernel (the `tls`
//! upper layer protocol), which then encrypts what `writev` and `sendfile` hand the
//! socket and decrypts what comes in, so HTTPS keeps the zero-copy strategies.
//!
//! [`probe`] asks the kernel once, at start, whether it has the `tls` ULP and which
//! ciphers it takes (the `ktls` crate sets zero keys on loopback sockets). Over a
//! kernel that has it, each handshake runs over the `ktls` crate's `CorkStream`, which
//! stops rustls at a record boundary, so that [`KernelTls::hand_off`] can give the
//! keys and sequence numbers to the kernel with no record half read
//! (`ktls::config_ktls_server`). A suite the kernel does not take stays in user space.
//!
//! Both directions go to the kernel. [`KernelTlsStream`] reads records with
//! `recvmsg`, which says each record's type: application data are the request bytes,
//! a `close_notify` alert is the end, any other alert or post-handshake message ends
//! the connection with an error. The server sends no TLS 1.3 `KeyUpdate` (a response
//! would need 2^24.5 full records under AES-GCM to reach that limit) and the kernels
//! this serves on take no new receive keys, so a client's `KeyUpdate` closes the
//! connection (the client reconnects; curl, browsers and OpenSSL send none unasked).
//! Shutting the stream down sends `close_notify` through the kernel.

use std::io::{self, IoSliceMut};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd as _, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ktls::{CompatibleCiphers, CorkStream, KtlsStream};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, TlsGetRecordType};
use rustls::CipherSuite;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::ops::tls_outcome::TlsCipher;

/// Why the kernel cannot encrypt TLS records here.
#[derive(Debug, thiserror::Error)]
pub enum KtlsUnavailable {
    /// `setsockopt(TCP_ULP, "tls")` fails: no `tls` module (CONFIG_TLS) or not allowed.
    #[error("the kernel has no TLS upper layer protocol (setsockopt TCP_ULP \"tls\": {0}; it comes with the tls module, CONFIG_TLS)")]
    NoUlp(io::Error),
    /// The ULP is there but takes none of the AES-GCM and ChaCha20-Poly1305 ciphers.
    #[error("the kernel's TLS takes none of the ciphers AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305 (their crypto modules are missing)")]
    NoCipher,
    /// The loopback sockets of the probe cannot be made.
    #[error("cannot probe the kernel's TLS on loopback sockets: {0}")]
    Probe(io::Error),
}

/// What the kernel's TLS takes, as [`probe`] found it.
#[derive(Debug)]
pub(crate) struct KernelTls {
    ciphers: CompatibleCiphers,
}

/// Asks the kernel whether it can encrypt TLS records and with which ciphers.
pub(crate) fn probe() -> Result<KernelTls, KtlsUnavailable> {
    tls_ulp_available()?;
    // The crate's probe is async; a runtime of its own on a thread of its own, so that
    // it never runs inside a caller's runtime.
    let ciphers = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()?
                    .block_on(CompatibleCiphers::new())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the kTLS probe panicked")))
    })
    .map_err(KtlsUnavailable::Probe)?;
    let kernel = KernelTls { ciphers };
    if !suites().any(|suite| kernel.takes(suite)) {
        return Err(KtlsUnavailable::NoCipher);
    }
    Ok(kernel)
}

/// The suites of the ring provider, whose ciphers the kernel may take.
fn suites() -> impl Iterator<Item = CipherSuite> {
    TlsCipher::SUITES.into_iter().map(|(suite, _)| suite)
}

/// Sets the `tls` ULP on a connected loopback socket, as a hand-off will.
fn tls_ulp_available() -> Result<(), KtlsUnavailable> {
    let listener =
        std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(KtlsUnavailable::Probe)?;
    let addr = listener.local_addr().map_err(KtlsUnavailable::Probe)?;
    let client = std::net::TcpStream::connect(addr).map_err(KtlsUnavailable::Probe)?;
    let _accepted = listener.accept().map_err(KtlsUnavailable::Probe)?;
    set_tls_ulp(&client).map_err(KtlsUnavailable::NoUlp)
}

/// `setsockopt(SOL_TCP, TCP_ULP, "tls")`.
fn set_tls_ulp(socket: &impl AsFd) -> io::Result<()> {
    const NAME: &[u8] = b"tls";
    // SAFETY: the descriptor is open for the call (borrowed from `socket`), and the
    // value points to NAME's 3 bytes, which the kernel only reads.
    let result = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            NAME.as_ptr().cast(),
            NAME.len() as libc::socklen_t,
        )
    };
    match result {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A connection after [`KernelTls::hand_off`].
pub(crate) enum HandOff {
    /// The kernel took the keys: it encrypts and decrypts from here on.
    Kernel(KernelTlsStream),
    /// The kernel does not take the negotiated suite: rustls goes on in user space
    /// (boxed: rustls's state is large beside the kernel's stream).
    UserSpace(Box<TlsStream<CorkStream<TcpStream>>>),
}

impl KernelTls {
    /// Whether the kernel takes the cipher of `suite` (the version decides the record
    /// format, the bulk cipher the crypto module).
    pub(crate) fn takes(&self, suite: CipherSuite) -> bool {
        use CipherSuite as S;
        let (tls12, tls13) = (&self.ciphers.tls12, &self.ciphers.tls13);
        match suite {
            S::TLS13_AES_128_GCM_SHA256 => tls13.aes_gcm_128,
            S::TLS13_AES_256_GCM_SHA384 => tls13.aes_gcm_256,
            S::TLS13_CHACHA20_POLY1305_SHA256 => tls13.chacha20_poly1305,
            S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => tls12.aes_gcm_128,
            S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => tls12.aes_gcm_256,
            S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => tls12.chacha20_poly1305,
            _ => false,
        }
    }

    /// The suites of the ring provider whose cipher the kernel refuses.
    pub(crate) fn refused_suites(&self) -> Vec<CipherSuite> {
        suites().filter(|&suite| !self.takes(suite)).collect()
    }

    /// Gives the keys of a completed handshake to the kernel, where it takes the
    /// negotiated suite. An error leaves the connection unusable.
    pub(crate) async fn hand_off(
        &self,
        stream: TlsStream<CorkStream<TcpStream>>,
    ) -> Result<HandOff, ktls::Error> {
        let suite = stream.get_ref().1.negotiated_cipher_suite();
        if !suite.is_some_and(|suite| self.takes(suite.suite())) {
            return Ok(HandOff::UserSpace(Box::new(stream)));
        }
        let (drained, socket) = ktls::config_ktls_server(stream).await?.into_raw();
        Ok(HandOff::Kernel(KernelTlsStream {
            writer: KtlsStream::new(socket, None),
            drained: drained.unwrap_or_default(),
            read_closed: false,
            control: Vec::new(),
        }))
    }
}

/// A connection whose records the kernel encrypts and decrypts.
pub(crate) struct KernelTlsStream {
    /// The socket, for writes and the close: the `ktls` crate's stream sends
    /// `close_notify` when it is shut down.
    writer: KtlsStream<TcpStream>,
    /// Request bytes that rustls had decrypted before the hand-off, read first.
    drained: Vec<u8>,
    /// A `close_notify` came: reads end.
    read_closed: bool,
    /// The control-message buffer of `recvmsg`, kept between reads.
    control: Vec<u8>,
}

impl KernelTlsStream {
    /// The socket, which takes plaintext: the kernel makes the records.
    pub(crate) fn socket(&self) -> &TcpStream {
        self.writer.get_ref()
    }
}

/// What one `recvmsg` brought.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    /// This many plaintext bytes of application data.
    Data(usize),
    /// The end: `close_notify`, or the TCP stream ended.
    End,
}

/// Receives the next record's plaintext into `into`, with its type.
fn receive(fd: RawFd, into: &mut [u8], control: &mut Vec<u8>) -> io::Result<Record> {
    if control.capacity() == 0 {
        *control = nix::cmsg_space!(u8);
    }
    control.clear();
    let mut iov = [IoSliceMut::new(into)];
    let message = recvmsg::<()>(fd, &mut iov, Some(control), MsgFlags::empty())?;
    let record_type = message
        .cmsgs()?
        .find_map(|cmsg| match cmsg {
            ControlMessageOwned::TlsGetRecordType(record_type) => Some(record_type),
            _ => None,
        })
        .unwrap_or(TlsGetRecordType::ApplicationData);
    let len = message.bytes;
    let [into] = iov;
    record(record_type, &into[..len])
}

/// What a record of `record_type` with `payload` means to the connection.
fn record(record_type: TlsGetRecordType, payload: &[u8]) -> io::Result<Record> {
    /// The alert description `close_notify`.
    const CLOSE_NOTIFY: u8 = 0;
    /// The handshake message type `key_update` (TLS 1.3).
    const KEY_UPDATE: u8 = 24;
    match (record_type, payload) {
        (TlsGetRecordType::ApplicationData, []) => Ok(Record::End),
        (TlsGetRecordType::ApplicationData, data) => Ok(Record::Data(data.len())),
        (TlsGetRecordType::Alert, [_, CLOSE_NOTIFY]) => Ok(Record::End),
        (TlsGetRecordType::Alert, alert) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the client sent the TLS alert {alert:?}"),
        )),
        (TlsGetRecordType::Handshake, [KEY_UPDATE, ..]) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the client updated its TLS keys (KeyUpdate), which kTLS here cannot follow",
        )),
        (record_type, payload) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "unexpected TLS record after the handshake: {record_type:?}, {} bytes",
                payload.len()
            ),
        )),
    }
}

impl AsyncRead for KernelTlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.drained.is_empty() {
            let n = this.drained.len().min(buf.remaining());
            buf.put_slice(&this.drained[..n]);
            this.drained.drain(..n);
            if this.drained.is_empty() {
                this.drained = Vec::new();
            }
            return Poll::Ready(Ok(()));
        }
        if this.read_closed || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let socket = this.writer.get_ref();
        loop {
            ready!(socket.poll_read_ready(cx))?;
            let into = buf.initialize_unfilled();
            let control = &mut this.control;
            match socket.try_io(Interest::READABLE, || {
                receive(socket.as_raw_fd(), into, control)
            }) {
                Ok(Record::Data(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Record::End) => {
                    this.read_closed = true;
                    return Poll::Ready(Ok(()));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl AsyncWrite for KernelTlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().writer).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().writer).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().writer).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(ciphers: CompatibleCiphers) -> KernelTls {
        KernelTls { ciphers }
    }

    #[test]
    fn every_suite_maps_to_its_kernel_cipher() {
        let mut all = CompatibleCiphers::default();
        for version in [&mut all.tls12, &mut all.tls13] {
            version.aes_gcm_128 = true;
            version.aes_gcm_256 = true;
            version.chacha20_poly1305 = true;
        }
        let all = kernel(all);
        assert!(suites().all(|suite| all.takes(suite)));
        assert!(all.refused_suites().is_empty());
        let none = kernel(CompatibleCiphers::default());
        assert_eq!(none.refused_suites(), suites().collect::<Vec<_>>());
        // A kernel without ChaCha20 under TLS 1.2 refuses just those two suites.
        let mut no_chacha12 = CompatibleCiphers::default();
        no_chacha12.tls12.aes_gcm_128 = true;
        no_chacha12.tls12.aes_gcm_256 = true;
        no_chacha12.tls13.aes_gcm_128 = true;
        no_chacha12.tls13.aes_gcm_256 = true;
        no_chacha12.tls13.chacha20_poly1305 = true;
        assert_eq!(
            kernel(no_chacha12).refused_suites(),
            [
                CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            ]
        );
    }

    #[test]
    fn records_after_the_handshake_mean_data_the_end_or_an_error() {
        use TlsGetRecordType as T;
        assert_eq!(
            record(T::ApplicationData, b"GET /").unwrap(),
            Record::Data(5)
        );
        assert_eq!(record(T::ApplicationData, b"").unwrap(), Record::End);
        // close_notify, at warning level (TLS 1.2) or any (TLS 1.3).
        assert_eq!(record(T::Alert, &[1, 0]).unwrap(), Record::End);
        assert_eq!(record(T::Alert, &[2, 0]).unwrap(), Record::End);
        let error = record(T::Alert, &[2, 40]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted, "{error}");
        let key_update = [24, 0, 0, 1, 0];
        let error = record(T::Handshake, &key_update).unwrap_err();
        assert!(error.to_string().contains("KeyUpdate"), "{error}");
        for (record_type, payload) in [
            (T::ChangeCipherSpec, &[1][..]),
            (T::Handshake, &[4, 0, 0, 0][..]),
            (T::Unknown(99), &[][..]),
        ] {
            let error = record(record_type, payload).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        }
    }

    #[test]
    fn the_probe_answers_without_failing_the_caller() {
        // Where the kernel has no `tls` ULP (this project's CI hosts), the reason names
        // the setsockopt; where it has, the probe finds at least one cipher.
        match probe() {
            Ok(kernel) => assert!(kernel.refused_suites().len() < TlsCipher::SUITES.len()),
            Err(error) => assert!(
                matches!(error, KtlsUnavailable::NoUlp(_) | KtlsUnavailable::NoCipher),
                "{error}"
            ),
        }
    }
}

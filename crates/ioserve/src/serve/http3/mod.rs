//! HTTP/3 (RFC 9114) over QUIC (RFC 9000), on UDP at the TLS listener's address and
//! port (`--http3`, on by default with TLS): quinn runs QUIC (packet protection, loss
//! recovery, congestion control, path validation and migration, UDP GSO and GRO where
//! the kernel has them), hyperium's h3 the HTTP/3 framing and QPACK; each request goes
//! through the same decision code as HTTP/1.1 and HTTP/2 ([`crate::serve::exchange`])
//! and its body is sent by the selected strategy through the same bounded channel as
//! HTTP/2's ([`crate::serve::body`]).
//!
//! One endpoint (one UDP socket) serves the process: a client that changes address
//! keeps its connection IDs, and only the endpoint that issued them knows them (a
//! SO_REUSEPORT group hashes the new address to any socket). The endpoint's driver
//! (receiving, GRO, demultiplexing) runs on a thread of its own, `ioserve-quic`; every
//! worker waits on the endpoint for new connections, and a connection (its QUIC driver,
//! which encrypts and sends its packets, and its streams) stays on the worker that took
//! it.
//!
//! The limits are explicit (the constants below), as for HTTP/2; timeouts as well:
//! the handshake and the first request within the header timeout, GOAWAY after the
//! idle timeout without a request in flight (QUIC's own idle timeout closes a
//! connection whose client went silent), a stream not read for the send timeout is
//! reset. Shutdown sends GOAWAY and lets the requests in flight finish, up to
//! `--shutdown-timeout`. New connection attempts are answered with a stateless Retry
//! (address validation, RFC 9000 §8.1) while many handshakes are under way, so that a
//! flood of Initials from forged addresses costs one packet each.

mod connection;
mod stream;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::task::TaskTracker;

use crate::serve::http3::connection::code;
use crate::serve::shared::{ConnectionSlot, Shared};
use crate::serve::tls;

/// Request streams a client may have open at once (as HTTP/2's).
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Unidirectional streams a client may open: its control stream and QPACK's two, and a
/// few to spare (RFC 9114 §6.2 lets a peer open reserved kinds, which are ignored).
pub const MAX_UNI_STREAMS: u32 = 8;
/// Request bytes a client may send on a stream before the server reads them: the
/// server serves GET and HEAD, and reads at most [`stream::MAX_READ_BODY`] of a body.
pub const STREAM_RECEIVE_WINDOW: u32 = 64 * 1024;
/// Request bytes a client may send on all its streams together.
pub const RECEIVE_WINDOW: u32 = 1 << 20;
/// Response bytes a connection may have in flight (sent, not acknowledged) and queued:
/// a download's pace is set by the client's flow-control windows and the congestion
/// window within this; 8 MiB fills 640 Mbit/s at a 100 ms round trip.
pub const SEND_WINDOW: u64 = 8 << 20;
/// Largest UDP payload the server accepts and sends: an Ethernet frame's (1500 bytes
/// less the IPv4 and UDP headers). Paths start at QUIC's 1200 bytes and grow to it by
/// path MTU discovery.
pub const MAX_UDP_PAYLOAD: u16 = 1472;
/// Receive and send buffers asked for the UDP socket (quic-go's choice): a burst of
/// packets from many clients waits there for the endpoint's thread. The kernel caps
/// them at net.core.rmem_max and wmem_max; the log says when it did.
pub const SOCKET_BUFFER: usize = 7 << 20;
/// Connection attempts the endpoint holds before the server has accepted, refused or
/// retried them; more are dropped.
pub const MAX_INCOMING: usize = 4096;
/// Handshakes under way above which a new client must first prove its address with a
/// Retry round trip.
pub const RETRY_ABOVE: usize = 64;
/// How long a worker waits, at its end, for the close of its connections to reach
/// their clients.
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

/// The HTTP/3 endpoint: its UDP socket and the state its workers share.
#[derive(Clone, Debug)]
pub(crate) struct Http3 {
    endpoint: quinn::Endpoint,
    /// Handshakes under way, all workers together.
    handshaking: Arc<AtomicUsize>,
}

impl Http3 {
    /// An endpoint serving HTTP/3 on `socket` with the certificate of the settings in
    /// force, the connections' transport limits derived from `idle_timeout`; its driver
    /// runs on `runtime`.
    pub(crate) fn new(
        socket: std::net::UdpSocket,
        shared: &Arc<Shared>,
        idle_timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> io::Result<Http3> {
        let crypto = tls::quic_server_config(Arc::new(CurrentCertificate(Arc::clone(shared))))
            .map_err(io::Error::other)?;
        let crypto = QuicServerConfig::try_from(crypto).map_err(io::Error::other)?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server
            .transport_config(Arc::new(transport(idle_timeout)))
            .max_incoming(MAX_INCOMING)
            // A client may move (a NAT rebinding, Wi-Fi to cellular): the new path is
            // validated, then the connection continues on it.
            .migration(true);
        let mut endpoint_config = quinn::EndpointConfig::default();
        endpoint_config
            .max_udp_payload_size(MAX_UDP_PAYLOAD)
            .map_err(io::Error::other)?;
        let _context = runtime.enter();
        let endpoint = quinn::Endpoint::new(
            endpoint_config,
            Some(server),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?;
        Ok(Http3 {
            endpoint,
            handshaking: Arc::default(),
        })
    }

    /// Leaves the UDP socket to the process a live upgrade started: no new connection
    /// is taken, the connections open are closed (H3_NO_ERROR; their clients reconnect,
    /// to the new process), and once their closes are out the endpoint moves to a
    /// socket of its own, so that it reads none of the packets meant for the new
    /// process.
    pub(crate) async fn hand_over(&self) {
        self.endpoint.set_server_config(None);
        self.endpoint
            .close(code::NO_ERROR, b"the server was upgraded; reconnect");
        self.flush_closes().await;
        let addr = self.endpoint.local_addr().ok();
        let unspecified = match addr {
            Some(SocketAddr::V6(_)) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
            _ => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
        };
        let moved =
            std::net::UdpSocket::bind(unspecified).and_then(|socket| self.endpoint.rebind(socket));
        if let Err(error) = moved {
            tracing::warn!(%error, "live upgrade: HTTP/3 cannot leave the shared UDP socket");
        }
    }

    /// Waits (at most [`CLOSE_FLUSH`]) until the connections closed have told their
    /// clients.
    pub(crate) async fn flush_closes(&self) {
        let _ = tokio::time::timeout(CLOSE_FLUSH, self.endpoint.wait_idle()).await;
    }
}

/// The certificate of the settings in force, asked at each QUIC handshake: SIGHUP's
/// new files and ACME's renewals reach HTTP/3 without a new endpoint configuration.
#[derive(Debug)]
struct CurrentCertificate(Arc<Shared>);

impl ResolvesServerCert for CurrentCertificate {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.live().tls.as_ref()?.resolve(hello)
    }
}

/// The transport parameters and limits of every connection.
fn transport(idle_timeout: Duration) -> TransportConfig {
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_CONCURRENT_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .stream_receive_window(VarInt::from_u32(STREAM_RECEIVE_WINDOW))
        .receive_window(VarInt::from_u32(RECEIVE_WINDOW))
        .send_window(SEND_WINDOW)
        // Past the idle timeout between requests the connection gets GOAWAY; QUIC's own
        // closes one whose client sent nothing for that long (the larger of the two
        // sides' values applies, RFC 9000 §10.1).
        .max_idle_timeout(Some(
            IdleTimeout::try_from(idle_timeout).unwrap_or(IdleTimeout::from(VarInt::MAX)),
        ))
        // No datagrams: HTTP/3 here has no use for them.
        .datagram_receive_buffer_size(None);
    transport
}

/// Binds the HTTP/3 socket on `addr` (the TLS listener's address and port), shared
/// with other processes when `reuse_port`, with [`SOCKET_BUFFER`] asked for.
pub(crate) fn bind_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    size_buffers(&socket);
    Ok(socket.into())
}

/// Asks for [`SOCKET_BUFFER`] of receive and send buffer, and says what the kernel gave.
pub(crate) fn size_buffers(socket: &socket2::Socket) {
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    let received = socket.recv_buffer_size().unwrap_or(0);
    // The kernel doubles what it is asked for, for its bookkeeping.
    if received < SOCKET_BUFFER {
        tracing::info!(
            asked = SOCKET_BUFFER,
            given = received,
            "HTTP/3: the UDP receive buffer is capped by net.core.rmem_max; bursts of \
             packets may be dropped under load (`sysctl -w net.core.rmem_max={}` allows it)",
            SOCKET_BUFFER
        );
    }
}

/// Says what the kernel offers the UDP path: segmentation offload (GSO) sends a train
/// of packets in one call, receive offload (GRO) takes them in one.
pub(crate) fn log_offloads(socket: &std::net::UdpSocket) {
    match quinn::udp::UdpSocketState::new(socket.into()) {
        Ok(state) => {
            let gso = state.max_gso_segments();
            let gro = state.gro_segments();
            if gso > 1 {
                tracing::info!(gso, gro, "HTTP/3: UDP segmentation offload (GSO) in use");
            } else {
                tracing::info!(
                    gro,
                    "HTTP/3: no UDP segmentation offload (GSO) here; each packet is sent \
                     with its own system call"
                );
            }
        }
        Err(error) => tracing::warn!(%error, "HTTP/3: cannot query the UDP socket's offloads"),
    }
}

/// Takes new connections from the endpoint for worker `worker` until shutdown, then
/// lets the connections it started finish, up to `shutdown_timeout`.
pub(crate) async fn accept_loop(
    http3: Http3,
    shared: Arc<Shared>,
    shutdown_timeout: Duration,
    worker: usize,
) {
    let connections = TaskTracker::new();
    loop {
        let incoming = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            incoming = http3.endpoint.accept() => incoming,
        };
        let Some(incoming) = incoming else { break };
        admit(incoming, &http3, &shared, worker, &connections);
    }
    connections.close();
    if tokio::time::timeout(shutdown_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            worker,
            left = connections.len(),
            "shutdown timeout: cutting the HTTP/3 connections still open"
        );
    }
    // Closing a connection queues its CONNECTION_CLOSE; this worker's runtime, which
    // drives the connections it took, must run until it is sent.
    http3.flush_closes().await;
}

/// Answers a connection attempt: a Retry first while many handshakes are under way
/// and the address is not validated yet, a refusal at the connection limits (the
/// client goes on over TCP), else the connection served in a task of `connections`.
fn admit(
    incoming: quinn::Incoming,
    http3: &Http3,
    shared: &Arc<Shared>,
    worker: usize,
    connections: &TaskTracker,
) {
    if !incoming.remote_address_validated()
        && incoming.may_retry()
        && http3.handshaking.load(Ordering::Relaxed) >= RETRY_ABOVE
    {
        // Answered by one packet, with no state kept: a client at a real address comes
        // back with the token, a forged one never does.
        shared.metrics.quic_retry(worker);
        let _ = incoming.retry();
        return;
    }
    let peer = incoming.remote_address();
    let (slot, admitted) = ConnectionSlot::acquire(shared, worker);
    let per_ip_limit = shared.live().limits.max_conns_per_ip;
    let (peer_slot, peer_admitted) = shared.per_ip.admit(peer.ip().to_canonical(), per_ip_limit);
    if !(admitted && peer_admitted) {
        if admitted {
            shared.metrics.refused_per_ip(worker);
        }
        incoming.refuse();
        return;
    }
    let handshaking = Handshaking::start(&http3.handshaking);
    let connecting = match incoming.accept() {
        Ok(connecting) => connecting,
        Err(error) => {
            return tracing::debug!(%peer, %error, "QUIC connection attempt failed");
        }
    };
    let shared = Arc::clone(shared);
    connections.spawn(async move {
        let _peer_slot = peer_slot;
        let header_timeout = shared.live().limits.header_timeout;
        let connection = match tokio::time::timeout(header_timeout, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                return tracing::debug!(%peer, %error, "QUIC handshake failed");
            }
            Err(_elapsed) => {
                return tracing::debug!(%peer, "QUIC handshake timed out");
            }
        };
        drop(handshaking);
        connection::serve(connection, shared, slot).await;
    });
}

/// A place among the handshakes under way, given back when dropped.
struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    fn start(count: &Arc<AtomicUsize>) -> Handshaking {
        count.fetch_add(1, Ordering::Relaxed);
        Handshaking(Arc::clone(count))
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

//! The listening sockets: those the process this one replaces passed (a live upgrade,
//! `serve::handover`), else those systemd passed (socket activation), else one per
//! per-core worker on the same address with SO_REUSEPORT (one for `--runtime multi`),
//! with `--send-buffer` set on them, and the metrics endpoint's and the redirect's own.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::ops::config::{Config, RuntimeKind};
use crate::serve::error::ServerError;

/// The accept loops' listening sockets, bound or inherited.
#[derive(Debug)]
pub(super) struct Bound {
    /// The address served (the first socket's).
    pub(super) local_addr: SocketAddr,
    /// One per accept loop.
    pub(super) loops: Vec<std::net::TcpListener>,
    /// How many of the first `loops` are the distinct sockets (the others are copies).
    pub(super) distinct: usize,
    /// A UDP socket that socket activation passed beside them (`ListenDatagram=`), for
    /// HTTP/3.
    pub(super) activated_udp: Option<std::net::UdpSocket>,
    /// Whether the kernel picked the port (`--listen` with port 0 and nothing passed).
    pub(super) picked_port: bool,
}

/// How many ports the kernel picks (`--listen` with port 0) before HTTP/3 gives up
/// finding one whose UDP side is free too: the kernel picks TCP ports without looking
/// at UDP, so the TCP port it gives may be taken by a UDP socket.
const PICKED_PORT_TRIES: usize = 16;

/// The TCP listeners as [`bind`] gives them and HTTP/3's UDP socket as [`bind_http3`]
/// gives it, on one port: where the kernel picked the TCP port and its UDP side is
/// taken, both are bound again on another port.
pub(super) fn bind_with_http3(
    config: &Config,
    mut upgraded: Option<Vec<std::net::TcpListener>>,
    mut upgraded_quic: Option<std::net::UdpSocket>,
    socket_activation: bool,
) -> Result<(Bound, Option<std::net::UdpSocket>), ServerError> {
    let mut tries = 1;
    loop {
        let mut bound = bind(config, upgraded.take())?;
        match bind_http3(
            config,
            bound.local_addr,
            upgraded_quic.take(),
            bound.activated_udp.take(),
            socket_activation,
        ) {
            Err(ServerError::Http3 { source, .. })
                if bound.picked_port
                    && source.kind() == io::ErrorKind::AddrInUse
                    && tries < PICKED_PORT_TRIES =>
            {
                tries += 1;
            }
            udp => return Ok((bound, udp?)),
        }
    }
}

/// The accept loops' listeners and the address they serve: the sockets `upgraded` from
/// the process this one replaces, else those passed in `LISTEN_FDS`, else new ones
/// bound to `--listen`.
pub(super) fn bind(
    config: &Config,
    upgraded: Option<Vec<std::net::TcpListener>>,
) -> Result<Bound, ServerError> {
    let mut activated_udp = None;
    let passed = match upgraded {
        Some(sockets) => {
            tracing::info!(
                sockets = sockets.len(),
                "live upgrade: serving the listeners of the process this one replaces (--listen is not used)"
            );
            Some(sockets)
        }
        None => match inherited_listeners()? {
            Some((listeners, udp)) => {
                activated_udp = udp;
                Some(listeners)
            }
            None => None,
        },
    };
    let distinct = passed.as_ref().map(Vec::len);
    let picked_port = passed.is_none() && config.listen.port() == 0;
    let (local_addr, listeners) = match passed {
        Some(inherited) => share_inherited(inherited, config)?,
        None => {
            let sockets = match config.runtime {
                RuntimeKind::PerCore => config.workers,
                RuntimeKind::Multi => 1,
            };
            // With port 0 the kernel picks a port: every worker binds that one.
            let (local_addr, mut listeners) = if config.reuse_port {
                // Other processes may share the address: the first socket joins (or
                // starts) its SO_REUSEPORT group and names the port.
                let first = bind_reuseport(config.listen).map_err(listen_error(config.listen))?;
                let local_addr = first.local_addr().map_err(listen_error(config.listen))?;
                (local_addr, vec![first])
            } else {
                let local_addr = claim(config.listen).map_err(listen_error(config.listen))?;
                (local_addr, Vec::new())
            };
            while listeners.len() < sockets {
                listeners.push(bind_reuseport(local_addr).map_err(listen_error(local_addr))?);
            }
            (local_addr, listeners)
        }
    };
    if let Some(asked) = config.send_buffer {
        set_send_buffer(&listeners, asked).map_err(listen_error(local_addr))?;
    }
    Ok(Bound {
        local_addr,
        distinct: distinct.unwrap_or(listeners.len()),
        loops: listeners,
        activated_udp,
        picked_port,
    })
}

/// Sets SO_SNDBUF to `asked` bytes on `listeners`, whose connections inherit it (as
/// nginx's `listen ... sndbuf=` does), and says what the kernel gave: it doubles the
/// size for its bookkeeping and caps it at net.core.wmem_max, silently.
fn set_send_buffer(listeners: &[std::net::TcpListener], asked: usize) -> io::Result<()> {
    let mut given = 0;
    for listener in listeners {
        let socket = socket2::SockRef::from(listener);
        socket.set_send_buffer_size(asked)?;
        given = socket.send_buffer_size()?;
    }
    if given < asked.saturating_mul(2) {
        let cap = std::fs::read_to_string(WMEM_MAX)
            .map_or_else(|_| "unreadable".into(), |text| text.trim().to_string());
        tracing::warn!(
            asked,
            given,
            "--send-buffer {asked} is above net.core.wmem_max ({cap}), which caps it: each \
             connection gets {} (SO_SNDBUF reads {given}, doubled for the kernel's \
             bookkeeping); `sysctl -w net.core.wmem_max={asked}` allows the full size",
            given / 2
        );
    } else {
        tracing::info!(
            asked,
            given,
            "send buffer per connection: {given} bytes (SO_SNDBUF)"
        );
    }
    Ok(())
}

/// The cap on SO_SNDBUF for processes without CAP_NET_ADMIN's SO_SNDBUFFORCE.
const WMEM_MAX: &str = "/proc/sys/net/core/wmem_max";

/// The metrics endpoint's listener, when `--metrics-listen` asks for one: the one
/// `upgraded` from the process this one replaces, else a new one.
pub(super) fn bind_metrics(
    config: &Config,
    upgraded: Option<std::net::TcpListener>,
) -> Result<Option<std::net::TcpListener>, ServerError> {
    let Some(addr) = config.metrics_listen else {
        return Ok(None);
    };
    match upgraded {
        Some(listener) => Ok(Some(listener)),
        None => bind_exclusive(addr).map(Some).map_err(listen_error(addr)),
    }
}

/// The plain listener of `--redirect-http`, when it is set.
/// With `--reuse-port`, replicas share it too (whichever the CA's HTTP-01 validation
/// reaches answers it from the shared state directory).
/// The one `upgraded` from the process this one replaces is served if there is one.
pub(super) fn bind_redirect(
    config: &Config,
    upgraded: Option<std::net::TcpListener>,
) -> Result<Option<std::net::TcpListener>, ServerError> {
    let bind = match config.reuse_port {
        true => bind_reuseport,
        false => bind_exclusive,
    };
    let Some(addr) = config.redirect_http else {
        return Ok(None);
    };
    match upgraded {
        Some(listener) => Ok(Some(listener)),
        None => bind(addr).map(Some).map_err(listen_error(addr)),
    }
}

/// The error for a socket that cannot listen on `addr`.
fn listen_error(addr: SocketAddr) -> impl Fn(io::Error) -> ServerError {
    move |source| ServerError::Listen { addr, source }
}

/// What socket activation passed: its TCP listeners, and the one UDP socket among them
/// (HTTP/3's), if there is one.
type Activated = (Vec<std::net::TcpListener>, Option<std::net::UdpSocket>);

/// The sockets systemd (or `systemd-socket-activate`) passed in `LISTEN_FDS`, when it
/// passed any.
fn inherited_listeners() -> Result<Option<Activated>, ServerError> {
    let mut passed = listenfd::ListenFd::from_env();
    if passed.len() == 0 {
        return Ok(None);
    }
    tracing::info!(
        sockets = passed.len(),
        "socket activation: serving the listeners passed in LISTEN_FDS (--listen is not used)"
    );
    let mut listeners = Vec::with_capacity(passed.len());
    let mut udp: Option<std::net::UdpSocket> = None;
    for index in 0..passed.len() {
        let descriptor = 3 + index;
        match passed.take_tcp_listener(index) {
            Ok(Some(listener)) => {
                listener
                    .set_nonblocking(true)
                    .map_err(ServerError::Worker)?;
                listeners.push(listener);
            }
            Ok(None) => {}
            Err(tcp_error) => match passed.take_udp_socket(index) {
                Ok(Some(socket)) if udp.is_none() => {
                    socket.set_nonblocking(true).map_err(ServerError::Worker)?;
                    udp = Some(socket);
                }
                Ok(Some(_)) => {
                    return Err(ServerError::Activation(format!(
                        "descriptor {descriptor} is a second UDP socket: HTTP/3 serves one"
                    )))
                }
                Ok(None) => {}
                Err(_) => {
                    return Err(ServerError::Activation(format!(
                        "descriptor {descriptor} is neither a TCP listening socket nor a \
                         UDP socket: {tcp_error}"
                    )))
                }
            },
        }
    }
    if listeners.is_empty() {
        return Err(ServerError::Activation(format!(
            "{} descriptors passed and none is a TCP listening socket",
            passed.len()
        )));
    }
    Ok(Some((listeners, udp)))
}

/// The HTTP/3 socket beside the TLS listener at `tcp_addr`, when HTTP/3 is served: the
/// one `upgraded` from the process this one replaces, else socket activation's
/// (`activated`), else a new one on `tcp_addr`. Under socket activation without a
/// UDP socket, a bind that fails (a privileged port) leaves HTTP/3 off with a warning
/// that says how to pass one; elsewhere it is an error.
fn bind_http3(
    config: &Config,
    tcp_addr: SocketAddr,
    upgraded: Option<std::net::UdpSocket>,
    activated: Option<std::net::UdpSocket>,
    socket_activation: bool,
) -> Result<Option<std::net::UdpSocket>, ServerError> {
    if !config.serves_http3() {
        return Ok(None);
    }
    if let Some(socket) = upgraded.or(activated) {
        crate::serve::http3::size_buffers(&socket2::SockRef::from(&socket));
        return Ok(Some(socket));
    }
    match crate::serve::http3::bind_socket(tcp_addr, config.reuse_port) {
        Ok(socket) => Ok(Some(socket)),
        Err(error) if socket_activation => {
            tracing::warn!(
                %error,
                udp = %tcp_addr,
                "HTTP/3 is off: its UDP socket cannot be bound here; pass it with \
                 `ListenDatagram={}` in the socket unit beside ListenStream=",
                tcp_addr.port()
            );
            Ok(None)
        }
        Err(source) => Err(ServerError::Http3 {
            addr: tcp_addr,
            source,
        }),
    }
}

/// Spreads inherited sockets over the accept loops: per-core, one loop per worker (and
/// at least one per socket), worker `i` accepting on socket `i % n`; multi, one loop
/// per socket. Returns the first socket's address and the loops' listeners.
fn share_inherited(
    inherited: Vec<std::net::TcpListener>,
    config: &Config,
) -> Result<(SocketAddr, Vec<std::net::TcpListener>), ServerError> {
    let local_addr = inherited[0].local_addr().map_err(ServerError::Worker)?;
    let loops = match config.runtime {
        RuntimeKind::PerCore => config.workers.max(inherited.len()),
        RuntimeKind::Multi => inherited.len(),
    };
    let listeners = (0..loops)
        .map(|i| inherited[i % inherited.len()].try_clone())
        .collect::<io::Result<Vec<_>>>()
        .map_err(ServerError::Worker)?;
    Ok((local_addr, listeners))
}

/// Makes sure nothing else listens on `addr` and returns it, with the port the kernel
/// picked when it was 0. A socket bound without SO_REUSEPORT conflicts with any other
/// socket on the address, so another ioserve (which would otherwise join our
/// SO_REUSEPORT group and take part of the traffic) makes this fail with "address
/// already in use"; the socket is closed again before the workers bind. Replicas that
/// mean to share the address say so with `--reuse-port`, which skips this.
fn claim(addr: SocketAddr) -> io::Result<SocketAddr> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("the bound address is not an IP address"))
}

/// A listener that nothing else may share (the metrics endpoint, the redirect).
fn bind_exclusive(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// One worker's listener; the workers of this process (and, with `--reuse-port`, of
/// other processes) share the address.
fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

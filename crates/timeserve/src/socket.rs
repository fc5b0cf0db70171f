//! The server's UDP sockets: one per worker, all bound to the same address with
//! SO_REUSEPORT so that the kernel spreads clients over them by a hash of their
//! address and port (seed 002's fix for a single socket whose buffer overflowed).
//!
//! SO_REUSEPORT alone would also let a second timeserve (same user) bind the same
//! address and silently take a share of the traffic. So the address is first bound
//! once without the option: if anything holds it, that bind fails and the error names
//! the address; then that socket is closed and the group bound.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::error::Error;

/// How long a worker waits in `recvmmsg` before it looks at the stop flag.
pub const RECEIVE_TIMEOUT: Duration = Duration::from_millis(100);

/// Socket options every worker's socket gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// SO_RCVBUF in bytes (`--receive-buffer`); the kernel default when `None`.
    pub receive_buffer: Option<usize>,
}

/// Binds `count` SO_REUSEPORT sockets to `address` (port 0: one free port for all).
pub fn bind_group(
    address: SocketAddr,
    count: usize,
    options: &SocketOptions,
) -> Result<Vec<UdpSocket>, Error> {
    let address = claim(address)?;
    (0..count.max(1))
        .map(|_| bind_one(address, options).map_err(|cause| bind_error(address, cause)))
        .collect()
}

/// Binds `address` once without SO_REUSEPORT, so that the bind fails when any other
/// socket holds it, and returns the address with the port the kernel chose.
fn claim(address: SocketAddr) -> Result<SocketAddr, Error> {
    let socket = new_socket(address).map_err(|cause| bind_error(address, cause))?;
    socket
        .bind(&address.into())
        .map_err(|cause| bind_error(address, cause))?;
    let bound = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or(address);
    Ok(bound)
}

fn new_socket(address: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if address.is_ipv6() {
        // An IPv6 socket serves IPv6 only; IPv4 has its own listen address.
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

fn bind_one(address: SocketAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    let socket = new_socket(address)?;
    socket.set_reuse_port(true)?;
    if let Some(bytes) = options.receive_buffer {
        // As root, SO_RCVBUFFORCE passes net.core.rmem_max; otherwise the kernel
        // caps SO_RCVBUF at it (the effective size is logged at start-up).
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, bytes).is_err() {
            socket.set_recv_buffer_size(bytes)?;
        }
    }
    set_int(&socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    set_int(&socket, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)?;
    if address.is_ipv6() {
        set_int(&socket, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    } else {
        set_int(&socket, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    }
    socket.set_read_timeout(Some(RECEIVE_TIMEOUT))?;
    socket.bind(&address.into())?;
    Ok(socket.into())
}

/// Sets an integer socket option that neither socket2 nor rustix wraps
/// (SO_TIMESTAMPNS, SO_RXQ_OVFL, IP_PKTINFO, IPV6_RECVPKTINFO).
fn set_int(socket: &Socket, level: i32, name: i32, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: `value` is a live c_int and the length passed is its size; the kernel
    // only reads it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The receive buffer the kernel gave a socket (it doubles what was asked, for its
/// bookkeeping).
pub fn receive_buffer(socket: &UdpSocket) -> io::Result<usize> {
    socket2::SockRef::from(socket).recv_buffer_size()
}

/// The error of binding `address`, naming what an operator can do about it.
pub(crate) fn bind_error(address: SocketAddr, cause: io::Error) -> Error {
    match cause.raw_os_error() {
        Some(libc::EADDRINUSE) => Error::AddressInUse { address },
        Some(libc::EACCES) if address.port() < 1024 => Error::PrivilegedPort { address },
        Some(libc::EADDRNOTAVAIL) => Error::AddressNotAvailable { address },
        _ => Error::Bind { address, cause },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_shares_one_port_and_a_second_group_is_refused() {
        let options = SocketOptions::default();
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 3, &options).unwrap();
        let address = group[0].local_addr().unwrap();
        assert_ne!(address.port(), 0);
        assert!(group.iter().all(|s| s.local_addr().unwrap() == address));
        let error = bind_group(address, 1, &options).unwrap_err();
        assert!(matches!(error, Error::AddressInUse { .. }), "{error}");
        assert!(error.to_string().contains(&address.to_string()), "{error}");
    }

    #[test]
    fn a_plain_socket_on_the_address_also_refuses_the_group() {
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = plain.local_addr().unwrap();
        let error = bind_group(address, 2, &SocketOptions::default()).unwrap_err();
        assert!(matches!(error, Error::AddressInUse { .. }), "{error}");
    }

    #[test]
    fn the_receive_buffer_option_applies() {
        let small = SocketOptions {
            receive_buffer: Some(4096),
        };
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 1, &small).unwrap();
        // The kernel doubles the request and has a floor of a few KiB.
        assert!(receive_buffer(&group[0]).unwrap() <= 16384);
    }
}

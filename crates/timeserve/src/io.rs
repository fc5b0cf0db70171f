//! Batched datagram IO: `recvmmsg` with the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`), the socket's drop counter (`SO_RXQ_OVFL`) and the address the
//! request was sent to (`IP_PKTINFO`/`IPV6_RECVPKTINFO`), and `sendmmsg` of the
//! replies from that same local address (so that a server bound to a wildcard
//! address on a multi-homed host answers from the address the client asked).
//!
//! This module holds the crate's pointer work; the rest sees [`Received`] values and
//! byte slices.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::time::Duration;

use crate::packet::{HEADER_LEN, MAX_REQUEST_LEN};

/// Room for the control messages of one received datagram: a timestamp (32 bytes),
/// the drop counter (24) and IPv6 packet info (40), with slack.
const CONTROL_LEN: usize = 256;

/// Room for the one control message of a reply: IPv6 packet info (40 bytes) at most.
/// Small, because [`SendBatch::push`] copies one per reply.
const SEND_CONTROL_LEN: usize = 48;

/// A control-message buffer of `N` bytes aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Control<const N: usize = CONTROL_LEN>([u8; N]);

/// The local address a datagram arrived at, from packet info.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAddr {
    /// An IPv4 destination and the interface it came in on.
    V4 {
        /// The local address the client reached (a reply is sent from it).
        address: Ipv4Addr,
        /// The receiving interface.
        ifindex: i32,
    },
    /// An IPv6 destination and the interface it came in on.
    V6 {
        /// The address the client sent to.
        address: Ipv6Addr,
        /// The receiving interface.
        ifindex: u32,
    },
}

/// One received datagram's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes received (at most [`MAX_REQUEST_LEN`] + 4).
    pub len: usize,
    /// The datagram was longer than the buffer.
    pub truncated: bool,
    /// Where it came from.
    pub source: Option<SocketAddr>,
    /// Where it was sent to.
    pub local: Option<LocalAddr>,
    /// When the kernel received it (since the Unix epoch), if it said.
    pub timestamp: Option<Duration>,
}

/// Buffers for receiving up to `capacity` datagrams with one system call.
pub struct RecvBatch {
    buffers: Vec<[u8; MAX_REQUEST_LEN + 4]>,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<Control>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    received: Vec<Received>,
    kernel_drops: Option<u32>,
}

impl RecvBatch {
    /// Buffers for `capacity` datagrams (at least 1).
    pub fn new(capacity: usize) -> RecvBatch {
        let capacity = capacity.max(1);
        RecvBatch {
            buffers: vec![[0; MAX_REQUEST_LEN + 4]; capacity],
            // SAFETY: sockaddr_storage, iovec and mmsghdr are plain C data for which
            // all-zero bytes are valid (null pointers, zero lengths).
            names: vec![unsafe { zeroed() }; capacity],
            controls: vec![Control([0; CONTROL_LEN]); capacity],
            // SAFETY: as above.
            iovecs: vec![unsafe { zeroed() }; capacity],
            // SAFETY: as above.
            headers: vec![unsafe { zeroed() }; capacity],
            received: Vec::with_capacity(capacity),
            kernel_drops: None,
        }
    }

    /// Waits for at least one datagram (up to the socket's receive timeout), then
    /// takes every datagram already queued, up to the batch's capacity. Returns how
    /// many arrived; 0 when the timeout passed or a signal interrupted the wait.
    pub fn recv(&mut self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        let capacity = self.buffers.len();
        for i in 0..capacity {
            self.iovecs[i] = libc::iovec {
                iov_base: self.buffers[i].as_mut_ptr().cast(),
                iov_len: self.buffers[i].len(),
            };
            let header = &mut self.headers[i].msg_hdr;
            header.msg_name = (&raw mut self.names[i]).cast();
            header.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_iov = &raw mut self.iovecs[i];
            header.msg_iovlen = 1;
            header.msg_control = self.controls[i].0.as_mut_ptr().cast();
            header.msg_controllen = CONTROL_LEN as _;
            header.msg_flags = 0;
            self.headers[i].msg_len = 0;
        }
        // SAFETY: every header points at buffers owned by `self` that stay alive and
        // unmoved for the call (the vectors are not resized), with their true lengths;
        // a null timeout is allowed (the socket's SO_RCVTIMEO bounds the wait).
        let count = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                capacity as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        self.received.clear();
        if count < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(error),
            };
        }
        for i in 0..count as usize {
            let header = &self.headers[i];
            let mut received = Received {
                len: (header.msg_len as usize).min(self.buffers[i].len()),
                truncated: header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                source: socket_addr(&self.names[i], header.msg_hdr.msg_namelen),
                local: None,
                timestamp: None,
            };
            // SAFETY: the kernel filled `msg_control` up to `msg_controllen` bytes of
            // well-formed control messages in a buffer that `self` owns.
            unsafe { read_controls(&header.msg_hdr, &mut received, &mut self.kernel_drops) };
            self.received.push(received);
        }
        Ok(count as usize)
    }

    /// The `i`th datagram of the last [`RecvBatch::recv`]: its bytes and metadata.
    pub fn datagram(&self, i: usize) -> (&[u8], &Received) {
        let received = &self.received[i];
        (&self.buffers[i][..received.len], received)
    }

    /// The socket's count of datagrams dropped for a full receive buffer, as of the
    /// last datagram that carried it (the kernel adds it once the count is non-zero).
    pub fn kernel_drops(&self) -> Option<u32> {
        self.kernel_drops
    }
}

/// Reads the control messages of one received datagram.
///
/// # Safety
///
/// `header.msg_control` must point at `header.msg_controllen` readable bytes of
/// control messages as the kernel writes them.
unsafe fn read_controls(
    header: &libc::msghdr,
    received: &mut Received,
    kernel_drops: &mut Option<u32>,
) {
    // SAFETY: the caller guarantees the control buffer; CMSG_FIRSTHDR/CMSG_NXTHDR stay
    // within msg_controllen and return null at its end.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(header) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is a non-null header within the buffer (see above).
        let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
        // SAFETY: CMSG_DATA of a header within the buffer points at its payload,
        // whose type the level and kind determine; read_unaligned makes no alignment
        // assumption.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        match (level, kind) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                // SAFETY: an SCM_TIMESTAMPNS payload is a timespec.
                let ts = unsafe { data.cast::<libc::timespec>().read_unaligned() };
                received.timestamp = Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                // SAFETY: an SO_RXQ_OVFL payload is a u32 counter.
                *kernel_drops = Some(unsafe { data.cast::<u32>().read_unaligned() });
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                // SAFETY: an IP_PKTINFO payload is an in_pktinfo.
                let info = unsafe { data.cast::<libc::in_pktinfo>().read_unaligned() };
                // ipi_spec_dst is the local address a reply is routed from: the
                // request's destination, except for broadcasts.
                received.local = Some(LocalAddr::V4 {
                    address: Ipv4Addr::from(u32::from_be(info.ipi_spec_dst.s_addr)),
                    ifindex: info.ipi_ifindex,
                });
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                // SAFETY: an IPV6_PKTINFO payload is an in6_pktinfo.
                let info = unsafe { data.cast::<libc::in6_pktinfo>().read_unaligned() };
                received.local = Some(LocalAddr::V6 {
                    address: Ipv6Addr::from(info.ipi6_addr.s6_addr),
                    ifindex: info.ipi6_ifindex,
                });
            }
            _ => {}
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        cmsg = unsafe { libc::CMSG_NXTHDR(header, cmsg) };
    }
}

/// A socket address from what the kernel wrote into a `sockaddr_storage`.
fn socket_addr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family is AF_INET and the length covers a sockaddr_in, which
            // sockaddr_storage is large and aligned enough to hold.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for AF_INET6 and sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The longest datagram [`SendBatch`] sends: an NTS reply is never longer than its
/// request, which is at most [`MAX_REQUEST_LEN`].
pub const MAX_REPLY_LEN: usize = MAX_REQUEST_LEN;

/// One datagram being written: a 48-byte header, or longer with extension fields.
pub struct Outgoing {
    bytes: [u8; MAX_REPLY_LEN],
    len: usize,
    sealed: bool,
}

impl Outgoing {
    /// The header, making the datagram the header alone.
    pub fn header_mut(&mut self) -> &mut [u8; HEADER_LEN] {
        self.len = HEADER_LEN;
        (&mut self.bytes[..HEADER_LEN])
            .try_into()
            .expect("HEADER_LEN bytes")
    }

    /// The whole buffer, to write extension fields after the header; say how much
    /// was written with [`Outgoing::seal`].
    pub fn buffer_mut(&mut self) -> &mut [u8; MAX_REPLY_LEN] {
        &mut self.bytes
    }

    /// Makes the datagram the first `len` bytes of the buffer, with its transmit
    /// timestamp final (it is authenticated): [`SendBatch::stamp_transmit`] leaves it.
    pub fn seal(&mut self, len: usize) {
        self.len = len.min(MAX_REPLY_LEN);
        self.sealed = true;
    }
}

/// Replies waiting to go out with one `sendmmsg`.
pub struct SendBatch {
    /// Kept between batches (only the first `count` are queued), so that a reply
    /// costs no allocation and no clearing of its kilobyte.
    packets: Vec<Outgoing>,
    count: usize,
    destinations: Vec<socket2::SockAddr>,
    controls: Vec<Control<SEND_CONTROL_LEN>>,
    control_lens: Vec<usize>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

/// The outcome of [`SendBatch::send`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Replies the kernel took.
    pub sent: usize,
    /// Replies it refused (unreachable destination, no buffer...).
    pub failed: usize,
}

impl SendBatch {
    /// Room for `capacity` replies.
    pub fn new(capacity: usize) -> SendBatch {
        SendBatch {
            packets: Vec::with_capacity(capacity),
            count: 0,
            destinations: Vec::with_capacity(capacity),
            controls: Vec::with_capacity(capacity),
            control_lens: Vec::with_capacity(capacity),
            iovecs: Vec::with_capacity(capacity),
            headers: Vec::with_capacity(capacity),
        }
    }

    /// Queues a reply to `destination`, sent from `local` when known; returns the
    /// datagram to fill in (empty until its header or a seal is written).
    pub fn push(&mut self, destination: SocketAddr, local: Option<LocalAddr>) -> &mut Outgoing {
        let mut control = Control([0; SEND_CONTROL_LEN]);
        let control_len = write_pktinfo(&mut control, local);
        self.controls.push(control);
        self.control_lens.push(control_len);
        self.destinations.push(socket2::SockAddr::from(destination));
        if self.count == self.packets.len() {
            self.packets.push(Outgoing {
                bytes: [0; MAX_REPLY_LEN],
                len: 0,
                sealed: false,
            });
        }
        let packet = &mut self.packets[self.count];
        self.count += 1;
        packet.len = 0;
        packet.sealed = false;
        packet
    }

    /// Takes back the reply queued last (one that could not be finished).
    pub fn pop(&mut self) {
        if self.count > 0 {
            self.count -= 1;
            self.controls.pop();
            self.control_lens.pop();
            self.destinations.pop();
        }
    }

    /// The replies queued.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No reply is queued.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes `transmit` (T3, taken just before sending) into every queued reply but
    /// the sealed ones, which carry their own.
    pub fn stamp_transmit(&mut self, transmit: [u8; 8]) {
        for packet in &mut self.packets[..self.count] {
            if !packet.sealed && packet.len >= HEADER_LEN {
                packet.bytes[40..48].copy_from_slice(&transmit);
            }
        }
    }

    /// Sends every queued reply (retrying the rest after a partial send, skipping a
    /// reply the kernel refuses) and empties the batch.
    pub fn send(&mut self, socket: BorrowedFd<'_>) -> Sent {
        let count = self.count;
        self.iovecs.clear();
        self.headers.clear();
        for packet in &mut self.packets[..count] {
            self.iovecs.push(libc::iovec {
                iov_base: packet.bytes.as_mut_ptr().cast(),
                iov_len: packet.len,
            });
        }
        for i in 0..count {
            // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
            let mut header: libc::mmsghdr = unsafe { zeroed() };
            header.msg_hdr.msg_name = self.destinations[i].as_ptr() as *mut libc::c_void;
            header.msg_hdr.msg_namelen = self.destinations[i].len();
            header.msg_hdr.msg_iov = &raw mut self.iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            if self.control_lens[i] > 0 {
                header.msg_hdr.msg_control = self.controls[i].0.as_mut_ptr().cast();
                header.msg_hdr.msg_controllen = self.control_lens[i] as _;
            }
            self.headers.push(header);
        }
        let mut outcome = Sent::default();
        let mut next = 0;
        while next < count {
            // SAFETY: headers[next..] point at packets, addresses, iovecs and control
            // buffers owned by `self`, not resized during the call, with true lengths.
            let rc = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    self.headers[next..].as_mut_ptr(),
                    (count - next) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc > 0 {
                outcome.sent += rc as usize;
                next += rc as usize;
            } else if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            } else {
                // The first remaining reply was refused: skip it, try the others.
                outcome.failed += 1;
                next += 1;
            }
        }
        self.count = 0;
        self.destinations.clear();
        self.controls.clear();
        self.control_lens.clear();
        outcome
    }
}

// CMSG_SPACE(sizeof(struct in6_pktinfo)) on LP64 (a 16-byte header and 20 bytes of
// payload rounded up to 8) fits in a reply's control buffer; in_pktinfo is smaller.
const _: () = assert!(16 + size_of::<libc::in6_pktinfo>().next_multiple_of(8) <= SEND_CONTROL_LEN);

/// Writes the packet-info control message that sends from `local`; returns its
/// length (0 when there is none).
fn write_pktinfo(control: &mut Control<SEND_CONTROL_LEN>, local: Option<LocalAddr>) -> usize {
    let Some(local) = local else { return 0 };
    // SAFETY: all-zero is a valid msghdr; it only tells the CMSG macros where the
    // control buffer is and how long it is.
    let mut header: libc::msghdr = unsafe { zeroed() };
    header.msg_control = control.0.as_mut_ptr().cast();
    header.msg_controllen = SEND_CONTROL_LEN as _;
    // SAFETY: the buffer is SEND_CONTROL_LEN bytes, aligned for cmsghdr, and large
    // enough for one header and either payload (asserted above at compile time), so
    // CMSG_FIRSTHDR is non-null and CMSG_DATA points inside it; write_unaligned makes
    // no alignment assumption.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        match local {
            LocalAddr::V4 { address, .. } => {
                (*cmsg).cmsg_level = libc::IPPROTO_IP;
                (*cmsg).cmsg_type = libc::IP_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(address).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                libc::CMSG_DATA(cmsg)
                    .cast::<libc::in_pktinfo>()
                    .write_unaligned(info);
                libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize
            }
            LocalAddr::V6 { address, ifindex } => {
                (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: address.octets(),
                    },
                    ipi6_ifindex: ifindex,
                };
                libc::CMSG_DATA(cmsg)
                    .cast::<libc::in6_pktinfo>()
                    .write_unaligned(info);
                libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize
            }
        }
    }
}

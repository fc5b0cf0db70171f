//! Writing a response to the client socket: queued head bytes, then body bytes, with a
//! send timeout that bounds how long the client may leave the socket unread.
//!
//! All writes go straight to the non-blocking socket (`writev`, `send`, `sendfile`) and
//! wait for writability through tokio when the kernel says `EAGAIN`. The head is never a
//! packet of its own: it goes out in the same `writev` as the first body bytes, or, before
//! `sendfile`, with `MSG_MORE` so that the kernel merges it with the file's first bytes.
//!
//! Over a stream that encrypts in user space (TLS), every byte goes through the stream's
//! writes instead ([`Output::through`]): the kernel cannot send file pages or mapped
//! memory into it, so the strategies read the file into a buffer there
//! ([`Output::copies_in_user_space`]).
//!
//! Body bytes (those of `write` and `sendfile`, not the queued head) are paced by the
//! connection's [`Pacer`] when it has one: each call is given at most what the pacer
//! allows now, and waits on the timer when it allows nothing.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use memmap2::MmapRaw;
use rustix::net::SendFlags;
use tokio::io::{AsyncWrite, AsyncWriteExt as _, Interest};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::io::pacing::Pacer;

/// Where a response's bytes go.
enum Sink<'a> {
    /// The plain socket: the kernel takes head, buffers, mappings and file pages.
    Socket(&'a TcpStream),
    /// A stream that encrypts in user space (TLS): only buffers, through its writes.
    Stream(&'a mut (dyn AsyncWrite + Unpin + Send + Sync)),
    /// A body gathered in memory: bytes written are copied in, a small file's kept
    /// bytes shared where they are the whole body.
    Collect(&'a mut Collected),
}

/// A response body gathered in memory by an [`Output::collecting`], for a protocol
/// that hands it on whole (HTTP/2's bodies of one chunk): the bytes written, or the
/// kept bytes of a small file ([`crate::io::kept_contents`]) it shares instead of
/// copying them.
#[derive(Debug, Default)]
pub struct Collected {
    written: Vec<u8>,
    shared: Option<Bytes>,
    /// The body's expected length: what the first write reserves (none is made for
    /// a shared body).
    expected: usize,
}

impl Collected {
    /// For a body of `len` bytes, allocated at the first write, not before: a shared
    /// body needs no buffer.
    pub fn for_len(len: usize) -> Self {
        Collected {
            expected: len,
            ..Collected::default()
        }
    }

    /// The body: the shared bytes, or those written.
    pub fn into_bytes(self) -> Bytes {
        match self.shared {
            Some(shared) => shared,
            None => self.written.into(),
        }
    }

    /// Whether nothing has been written or shared yet.
    fn is_empty(&self) -> bool {
        self.written.is_empty() && self.shared.is_none()
    }

    /// Appends `bufs` in order, after the shared bytes if there are some (copied then:
    /// [`Output::write_kept`] shares only a whole body, so this is never expected).
    fn append(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let n: usize = bufs.iter().map(|buf| buf.len()).sum();
        let shared = self.shared.take().unwrap_or_default();
        if self.written.capacity() == 0 {
            self.written.reserve(self.expected.max(shared.len() + n));
        }
        self.written.extend_from_slice(&shared);
        for buf in bufs {
            self.written.extend_from_slice(buf);
        }
        Ok(n)
    }
}

impl AsyncWrite for Collected {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().append(&[io::IoSlice::new(buf)]))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().append(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl std::fmt::Debug for Sink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Socket(stream) => f.debug_tuple("Socket").field(stream).finish(),
            Sink::Stream(_) => f.write_str("Stream"),
            Sink::Collect(_) => f.write_str("Collect"),
        }
    }
}

/// A response writer over one connection.
#[derive(Debug)]
pub struct Output<'a> {
    sink: Sink<'a>,
    pending: Vec<u8>,
    pending_sent: usize,
    send_timeout: SendTimeout,
    sent: u64,
    cold_windows: u32,
    kept_bodies: u32,
    /// A duplicate of the socket's descriptor for sendfile calls on the blocking pool,
    /// made at the first one: if this response is dropped mid-call, the pool thread
    /// still holds the socket it writes to, never a number since reused.
    pool_socket: Option<Arc<OwnedFd>>,
    /// The connection's pacing (`--limit-rate`), if it has a rate.
    pacer: Option<&'a mut Pacer>,
    /// Time this response waited for the pacer.
    paced: Duration,
}

impl<'a> Output<'a> {
    /// A writer whose every wait for the socket is bounded by `send_timeout`.
    pub fn new(stream: &'a TcpStream, send_timeout: Duration) -> Self {
        Self::to(Sink::Socket(stream), send_timeout)
    }

    /// A writer through `stream`, which encrypts in user space (TLS): every byte goes
    /// through its writes, each wait bounded by `send_timeout`.
    pub fn through(
        stream: &'a mut (dyn AsyncWrite + Unpin + Send + Sync),
        send_timeout: Duration,
    ) -> Self {
        Self::to(Sink::Stream(stream), send_timeout)
    }

    /// A writer that gathers the body in `into` (HTTP/2's bodies of one chunk, handed
    /// to the protocol whole): as [`Output::through`], except that a small file's kept
    /// bytes are shared, not copied (`Output::write_kept`).
    pub fn collecting(into: &'a mut Collected, send_timeout: Duration) -> Self {
        Self::to(Sink::Collect(into), send_timeout)
    }

    fn to(sink: Sink<'a>, send_timeout: Duration) -> Self {
        Output {
            sink,
            pending: Vec::new(),
            pending_sent: 0,
            send_timeout: SendTimeout {
                limit: send_timeout,
                timer: None,
            },
            sent: 0,
            cold_windows: 0,
            kept_bodies: 0,
            pool_socket: None,
            pacer: None,
            paced: Duration::ZERO,
        }
    }

    /// Whether file bytes must be copied into this process to be sent: the stream
    /// encrypts in user space, so [`Output::sendfile`] and [`Output::write_mapped`]
    /// cannot be used and a strategy reads the file into a buffer instead.
    pub fn copies_in_user_space(&self) -> bool {
        matches!(self.sink, Sink::Stream(_) | Sink::Collect(_))
    }

    /// Paces the body bytes of this response by the connection's `pacer`.
    pub fn paced_by(mut self, pacer: &'a mut Pacer) -> Self {
        self.pacer = Some(pacer);
        self
    }

    /// Time this response has waited for its pacer (`--limit-rate`).
    pub fn paced(&self) -> Duration {
        self.paced
    }

    /// How many of `want` body bytes may go now, waiting for the pacer if it allows
    /// none; with `head_waiting`, queued head bytes can go meanwhile, so no wait. The
    /// answer is kept in `granted` until the write it is for has gone (the caller
    /// clears it then), so that a poll after a wait for the socket does not ask the
    /// pacer again.
    fn poll_allowance(
        &mut self,
        cx: &mut Context<'_>,
        granted: &mut Option<usize>,
        want: usize,
        head_waiting: bool,
    ) -> Poll<usize> {
        if let Some(granted) = *granted {
            return Poll::Ready(granted);
        }
        let Some(pacer) = self.pacer.as_deref_mut() else {
            return Poll::Ready(*granted.insert(want));
        };
        if want == 0 || head_waiting {
            return Poll::Ready(*granted.insert(pacer.allowed_now(want)));
        }
        let before = pacer.waited();
        let allowed = std::task::ready!(pacer.poll_allowed(cx, want));
        self.paced += pacer.waited() - before;
        Poll::Ready(*granted.insert(allowed))
    }

    /// Tells the pacer that `n` body bytes went.
    fn spent(&mut self, n: usize) {
        if let Some(pacer) = self.pacer.as_deref_mut() {
            pacer.spend(n);
        }
    }

    /// Bytes written to the socket so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Windows of file data that this response found out of the page cache and read on
    /// the blocking pool (see [`crate::io::strategy::cold`]).
    pub fn cold_windows(&self) -> u32 {
        self.cold_windows
    }

    /// Adds to [`Output::cold_windows`].
    pub(crate) fn count_cold_windows(&mut self, windows: u32) {
        self.cold_windows += windows;
    }

    /// Bodies (or multipart parts) of this response written from a small file's bytes
    /// kept in memory (see [`crate::io::kept_contents`]).
    pub fn kept_bodies(&self) -> u32 {
        self.kept_bodies
    }

    /// Adds one to [`Output::kept_bodies`].
    pub(crate) fn count_kept_body(&mut self) {
        self.kept_bodies += 1;
    }

    /// The last `len` bytes queued (what [`Output::queue_from_file`] just read).
    pub(crate) fn queued_tail(&self, len: usize) -> &[u8] {
        &self.pending[self.pending.len() - len..]
    }

    /// Queues bytes to go out before the next body bytes.
    pub fn queue(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// As [`Output::queue`], taking the buffer itself where nothing is queued yet (a
    /// response's head: no copy).
    pub fn queue_owned(&mut self, bytes: Vec<u8>) {
        match self.pending.is_empty() {
            true => self.pending = bytes,
            false => self.pending.extend_from_slice(&bytes),
        }
    }

    /// Queues `len` bytes of `file` from `offset` (pread), so that a small body goes out
    /// in the same write as the head. Returns the bytes read: fewer than `len` means the
    /// file ended early.
    pub fn queue_from_file(&mut self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        let start = self.pending.len();
        self.pending.resize(start + len, 0);
        let read = rustix::io::pread(file, &mut self.pending[start..], offset);
        let n = *read.as_ref().unwrap_or(&0);
        self.pending.truncate(start + n);
        Ok(read?)
    }

    /// As [`Output::queue_from_file`], but only if every byte is in the page cache
    /// (`preadv2(RWF_NOWAIT)`): `Ok(None)`, with nothing queued, where reading would
    /// wait for the disk.
    pub fn queue_from_cache(
        &mut self,
        file: &File,
        offset: u64,
        len: usize,
    ) -> io::Result<Option<usize>> {
        let start = self.pending.len();
        self.pending.resize(start + len, 0);
        let mut bufs = [io::IoSliceMut::new(&mut self.pending[start..])];
        let read = rustix::io::preadv2(file, &mut bufs, offset, rustix::io::ReadWriteFlags::NOWAIT);
        let (kept, result) = match read {
            // A short read stops at a page that is not cached, or at the end of the file.
            Ok(n) if n == len || n == 0 => (n, Ok(Some(n))),
            // EOPNOTSUPP: this file system cannot tell; the caller asks another way.
            Ok(_) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::OPNOTSUPP) => (0, Ok(None)),
            Err(error) => (0, Err(error.into())),
        };
        self.pending.truncate(start + kept);
        result
    }

    /// Writes the queued bytes and then all of `data`, in as few `writev` calls as the
    /// socket allows.
    ///
    /// This and the other writes are poll functions under small futures, not `async`
    /// functions: a future of this writer is part of every response in flight, and an
    /// `async` function keeps its arguments twice and each callee's state inside its
    /// own.
    pub fn write<'s>(
        &'s mut self,
        data: &'s [u8],
    ) -> impl Future<Output = io::Result<()>> + use<'a, 's> {
        match self.copies_in_user_space() {
            // Boxed: the plain path's futures stay small, and TLS costs far more than
            // an allocation.
            true => Either::Left(Box::pin(self.write_through(data))),
            false => Either::Right(
                self.write_with(data.len(), Short::BufferFull, |from| data[from..].as_ptr()),
            ),
        }
    }

    /// Writes `range` of a small file's bytes kept in memory, as [`Output::write`]
    /// would, but shares them instead of copying where this writer collects a whole
    /// body ([`Output::collecting`]) that has nothing else in it and no pacer: an
    /// HTTP/2 body of one chunk is then the kept bytes themselves.
    pub(crate) fn write_kept<'s>(
        &'s mut self,
        kept: &'s Arc<[u8]>,
        range: std::ops::Range<usize>,
    ) -> impl Future<Output = io::Result<()>> + use<'a, 's> {
        let nothing_queued = self.pending_sent == self.pending.len();
        match &mut self.sink {
            Sink::Collect(collected)
                if nothing_queued && self.pacer.is_none() && collected.is_empty() =>
            {
                let len = range.len();
                collected.shared = Some(Bytes::from_owner(Arc::clone(kept)).slice(range));
                self.sent += len as u64;
                Either::Left(std::future::ready(Ok(())))
            }
            _ => Either::Right(self.write(&kept[range])),
        }
    }

    /// Writes the queued bytes and then `map[start..end]`, handing the mapping's
    /// addresses to `writev` without forming a Rust slice over them: the kernel copies
    /// the bytes, and a page that a truncation left unbacked makes the call fail with
    /// `EFAULT` instead of raising SIGBUS in this process.
    ///
    /// Panics if `start..end` is not inside the mapping.
    pub fn write_mapped<'s>(
        &'s mut self,
        map: &'s MmapRaw,
        start: usize,
        end: usize,
    ) -> impl Future<Output = io::Result<()>> + use<'a, 's> {
        assert!(
            start <= end && end <= map.len(),
            "range outside the mapping"
        );
        // A short write may have stopped at a page that cannot be read in (the file
        // shrank, the disk failed), which leaves the socket writable with no event to
        // come: the next write says which.
        self.write_with(end - start, Short::Unexplained, move |from| {
            map.as_ptr().wrapping_add(start + from)
        })
    }

    /// The loop of [`Output::write`] and [`Output::write_mapped`]: `len` data bytes, of
    /// which `data_at(i)` gives the address of byte `i` onwards (`len - i` bytes that
    /// stay mapped for the call); `short` says what a short write means.
    fn write_with<'s, D: Fn(usize) -> *const u8 + Send + 's>(
        &'s mut self,
        len: usize,
        short: Short,
        data_at: D,
    ) -> impl Future<Output = io::Result<()>> + use<'a, 's, D> {
        let mut data_sent = 0;
        let mut granted = None;
        let mut waiting = None;
        std::future::poll_fn(move |cx| {
            let socket = self.socket()?;
            while self.pending_sent < self.pending.len() || data_sent < len {
                let head_waiting = self.pending_sent < self.pending.len();
                let allowed = std::task::ready!(self.poll_allowance(
                    cx,
                    &mut granted,
                    len - data_sent,
                    head_waiting
                ));
                let pending = &self.pending[self.pending_sent..];
                let data = data_at(data_sent);
                let write = |cx: &mut Context<'_>| {
                    poll_write(socket, cx, pending.len() + allowed, short, || {
                        let iovecs = [
                            libc::iovec {
                                iov_base: pending.as_ptr().cast_mut().cast(),
                                iov_len: pending.len(),
                            },
                            libc::iovec {
                                iov_base: data.cast_mut().cast(),
                                iov_len: allowed,
                            },
                        ];
                        // SAFETY: both iovecs describe mapped memory that outlives the
                        // call: the rest of the queue, which `self` owns, and `allowed`
                        // (at most `len - data_sent`) bytes from `data_at(data_sent)` (a
                        // borrowed slice, or a range inside a mapping the caller holds).
                        // writev only reads them, in the kernel, which checks each page.
                        let n = unsafe { libc::writev(socket.as_raw_fd(), iovecs.as_ptr(), 2) };
                        if n < 0 {
                            Err(io::Error::last_os_error())
                        } else {
                            Ok(n as usize)
                        }
                    })
                };
                let n = std::task::ready!(self.send_timeout.poll(cx, &mut waiting, write))?;
                granted = None;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                data_sent += self.count_written(n);
            }
            self.clear_pending();
            Poll::Ready(Ok(()))
        })
    }

    /// Writes the queued bytes. With `more`, the kernel is told that more data follows
    /// (`MSG_MORE`), so a `sendfile` right after shares their packet.
    pub fn flush<'s>(
        &'s mut self,
        more: bool,
    ) -> impl Future<Output = io::Result<()>> + use<'a, 's> {
        if self.copies_in_user_space() {
            return Either::Left(Box::pin(self.write_through(&[])));
        }
        let flags = if more {
            SendFlags::MORE | SendFlags::NOSIGNAL
        } else {
            SendFlags::NOSIGNAL
        };
        let mut waiting = None;
        Either::Right(std::future::poll_fn(move |cx| {
            let socket = self.socket()?;
            while self.pending_sent < self.pending.len() {
                let pending = &self.pending[self.pending_sent..];
                let send = |cx: &mut Context<'_>| {
                    poll_write(socket, cx, pending.len(), Short::BufferFull, || {
                        Ok(rustix::net::send(socket, pending, flags)?)
                    })
                };
                let n = std::task::ready!(self.send_timeout.poll(cx, &mut waiting, send))?;
                self.pending_sent += n;
                self.sent += n as u64;
            }
            self.clear_pending();
            Poll::Ready(Ok(()))
        }))
    }

    /// Sends up to `count` bytes of `file` from `*offset` with sendfile(2), advancing
    /// `offset`. Returns the bytes sent: 0 means the file ended early. `resident` says
    /// the bytes are in the page cache: a short count then means a full socket buffer;
    /// otherwise it may be a page the disk could not read, and the next call says which.
    pub fn sendfile<'s>(
        &'s mut self,
        file: &'s File,
        offset: &'s mut u64,
        count: usize,
        resident: bool,
    ) -> impl Future<Output = io::Result<usize>> + use<'a, 's> {
        let mut granted = None;
        let mut waiting = None;
        std::future::poll_fn(move |cx| {
            let socket = self.socket()?;
            let count = std::task::ready!(self.poll_allowance(cx, &mut granted, count, false));
            let send = |cx: &mut Context<'_>| {
                let short = match resident {
                    true => Short::BufferFull,
                    false => Short::Unexplained,
                };
                poll_write(socket, cx, count, short, || {
                    Ok(rustix::fs::sendfile(
                        socket,
                        file,
                        Some(&mut *offset),
                        count,
                    )?)
                })
            };
            let n = std::task::ready!(self.send_timeout.poll(cx, &mut waiting, send))?;
            self.sent += n as u64;
            self.spent(n);
            Poll::Ready(Ok(n))
        })
    }

    /// As [`Output::sendfile`], with the sendfile(2) call made on the blocking pool
    /// (nginx's `aio threads` with `sendfile on`), so that the worker's event loop
    /// never runs the copy into the socket, once `threads` lets it; a full socket
    /// buffer is awaited here, without the permit.
    pub async fn sendfile_on_pool(
        &mut self,
        file: &Arc<crate::io::shared_file::SharedFile>,
        offset: &mut u64,
        count: usize,
        threads: &crate::io::cold_threads::ColdThreads,
    ) -> io::Result<usize> {
        let stream = self.socket()?;
        let mut granted = None;
        let count =
            std::future::poll_fn(|cx| self.poll_allowance(cx, &mut granted, count, false)).await;
        let socket = match &self.pool_socket {
            Some(socket) => Arc::clone(socket),
            None => {
                let socket = Arc::new(rustix::io::fcntl_dupfd_cloexec(stream, 0)?);
                self.pool_socket = Some(Arc::clone(&socket));
                socket
            }
        };
        loop {
            let socket = Arc::clone(&socket);
            let file = Arc::clone(file);
            let mut at = *offset;
            let permit = threads.send_permit().await;
            let (result, at) = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let result = rustix::fs::sendfile(&*socket, &**file, Some(&mut at), count);
                (result, at)
            })
            .await
            .map_err(io::Error::other)?;
            match result {
                Ok(n) => {
                    *offset = at;
                    self.sent += n as u64;
                    self.spent(n);
                    return Ok(n);
                }
                Err(rustix::io::Errno::INTR) => {}
                // The buffer was full on the pool thread. What tokio knows of the
                // socket's readiness may predate that, so ask the kernel: writable now,
                // or (readiness cleared) wait for the next writability event, which no
                // event before this poll can stand in for.
                Err(rustix::io::Errno::AGAIN) => {
                    let mut waiting = None;
                    let writable =
                        |cx: &mut Context<'_>| poll_io(stream, cx, || poll_writable(stream));
                    std::future::poll_fn(|cx| self.send_timeout.poll(cx, &mut waiting, writable))
                        .await?
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Forgets the queued bytes, all sent, and gives their buffer back: a download
    /// would otherwise hold its head's allocation to its end.
    fn clear_pending(&mut self) {
        self.pending = Vec::new();
        self.pending_sent = 0;
    }

    /// Counts `n` bytes written from the queued head onwards (the head's bytes first,
    /// then the body's, which the pacer is told of); returns how many were body bytes.
    fn count_written(&mut self, n: usize) -> usize {
        let from_pending = n.min(self.pending.len() - self.pending_sent);
        self.pending_sent += from_pending;
        let body = n - from_pending;
        self.spent(body);
        self.sent += n as u64;
        body
    }

    /// The plain socket, for the calls that hand it to the kernel; an error over a
    /// stream that encrypts in user space (the strategies do not make those calls there).
    fn socket(&self) -> io::Result<&'a TcpStream> {
        match self.sink {
            Sink::Socket(stream) => Ok(stream),
            Sink::Stream(_) | Sink::Collect(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "file pages and mappings cannot be sent through a stream encrypted in user space",
            )),
        }
    }

    /// Writes the queued bytes and then all of `data` through the user-space stream,
    /// pacing the data, and flushes it: each write may wait at most the send timeout.
    /// The head and the first data go in one vectored write, so one TLS record can
    /// carry both.
    async fn write_through(&mut self, data: &[u8]) -> io::Result<()> {
        let mut data_sent = 0;
        while self.pending_sent < self.pending.len() || data_sent < data.len() {
            let head_waiting = self.pending_sent < self.pending.len();
            let mut granted = None;
            let want = data.len() - data_sent;
            let allowed = std::future::poll_fn(|cx| {
                self.poll_allowance(cx, &mut granted, want, head_waiting)
            })
            .await;
            let pending = &self.pending[self.pending_sent..];
            let stream: &mut (dyn AsyncWrite + Unpin + Send + Sync) = match &mut self.sink {
                Sink::Stream(stream) => &mut **stream,
                Sink::Collect(collected) => &mut **collected,
                Sink::Socket(_) => return Err(io::ErrorKind::Unsupported.into()),
            };
            let bufs = [
                io::IoSlice::new(pending),
                io::IoSlice::new(&data[data_sent..data_sent + allowed]),
            ];
            let written =
                tokio::time::timeout(self.send_timeout.limit, stream.write_vectored(&bufs));
            let n = match written
                .await
                .unwrap_or_else(|_elapsed| Err(send_timed_out()))?
            {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => n,
            };
            data_sent += self.count_written(n);
        }
        self.clear_pending();
        let Sink::Stream(stream) = &mut self.sink else {
            return Ok(());
        };
        tokio::time::timeout(self.send_timeout.limit, stream.flush())
            .await
            .unwrap_or_else(|_elapsed| Err(send_timed_out()))
    }
}

/// Whether `socket` has room now (`poll` with no wait), as `WouldBlock` if not.
fn poll_writable(socket: &TcpStream) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(socket, PollFlags::OUT)];
    // An error or hang-up counts as ready: the next sendfile reports it.
    poll(&mut fds, Some(&Timespec::default()))?;
    match fds[0].revents().is_empty() {
        true => Err(io::ErrorKind::WouldBlock.into()),
        false => Ok(()),
    }
}

/// A response's send timeout: each wait for room in the socket lasts at most `limit`.
///
/// One timer serves every wait of the response: made at its first wait, moved to the
/// new deadline at each later one. A timer in each wait's future (`tokio::time::timeout`)
/// took 112 bytes of every response in flight, in every future that awaits a write,
/// where most responses never wait at all.
#[derive(Debug)]
struct SendTimeout {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl SendTimeout {
    /// Polls `attempt`; while it is pending, the send timeout runs from the first poll
    /// that found it so (`waiting` keeps that wait's deadline, for the caller's future
    /// to hold between polls), and once it has passed, the error.
    fn poll<R>(
        &mut self,
        cx: &mut Context<'_>,
        waiting: &mut Option<Instant>,
        attempt: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if let Poll::Ready(done) = attempt(cx) {
            *waiting = None;
            return Poll::Ready(done);
        }
        let deadline = *waiting.get_or_insert_with(|| Instant::now() + self.limit);
        let timer = match &mut self.timer {
            Some(timer) => {
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(send_timed_out())),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs a non-blocking operation on `socket` once it is writable, waiting for the next
/// writability event on `EAGAIN`.
///
/// The wait is tokio's `poll_write_ready`, whose waker lives in the socket's
/// registration (one writer per connection), not `async_io`, which keeps a waiter node
/// in its future: this state is part of every response in flight, and most of them
/// wait here.
fn poll_io<R>(
    socket: &TcpStream,
    cx: &mut Context<'_>,
    mut f: impl FnMut() -> io::Result<R>,
) -> Poll<io::Result<R>> {
    loop {
        std::task::ready!(socket.poll_write_ready(cx))?;
        match socket.try_io(Interest::WRITABLE, &mut f) {
            // tokio cleared the readiness: the next poll waits for the next event.
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            done => return Poll::Ready(done),
        }
    }
}

/// What a write that took fewer bytes than offered means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Short {
    /// The socket's buffer is full: its data came from memory, or from the page cache.
    BufferFull,
    /// Perhaps a full buffer, perhaps the end of what the kernel could read of the
    /// source (a mapped page or a file page it could not read in): then the socket stays
    /// writable and no epoll event comes, so the next write must be tried to tell.
    Unexplained,
}

/// As [`poll_io`], for a write `f` that is offered `offered` bytes and returns how many
/// it took. Where `short` says a write that took fewer (but some) filled the socket's
/// buffer, tokio is told so, as its own `poll_write` does after a short write, and the
/// next write waits for epoll's word of room instead of first failing with `EAGAIN`.
///
/// The telling is `try_io`'s: `f`'s result counts as `WouldBlock`, which makes tokio
/// clear the readiness it saw before the call, never an event that came in during it
/// (on the multi-thread runtime the driver runs beside this task); the count is kept
/// aside and returned.
fn poll_write(
    socket: &TcpStream,
    cx: &mut Context<'_>,
    offered: usize,
    short_write: Short,
    mut f: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        std::task::ready!(socket.poll_write_ready(cx))?;
        let mut short = None;
        let result = socket.try_io(Interest::WRITABLE, || {
            let n = f()?;
            if 0 < n && n < offered && short_write == Short::BufferFull {
                short = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match (result, short) {
            (Err(_), Some(n)) => return Poll::Ready(Ok(n)),
            // tokio cleared the readiness: the next poll waits for the next event.
            (Err(error), None) if error.kind() == io::ErrorKind::WouldBlock => {}
            (done, _) => return Poll::Ready(done),
        }
    }
}

/// The error of a client that did not read for the send timeout.
fn send_timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client did not read for the send timeout",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    fn kept() -> Arc<[u8]> {
        Arc::from(&b"0123456789"[..])
    }

    #[tokio::test]
    async fn a_collected_body_of_kept_bytes_shares_them() {
        let kept = kept();
        let mut collected = Collected::for_len(5);
        let mut out = Output::collecting(&mut collected, LIMIT);
        out.write_kept(&kept, 2..7).await.unwrap();
        assert_eq!(out.sent(), 5);
        drop(out);
        assert_eq!(
            collected.written.capacity(),
            0,
            "no buffer for a shared body"
        );
        let body = collected.into_bytes();
        assert_eq!(body, &b"23456"[..]);
        assert_eq!(body.as_ptr(), kept[2..].as_ptr(), "shared, not copied");
    }

    #[tokio::test]
    async fn kept_bytes_after_a_head_or_other_bytes_are_copied_in_order() {
        let kept = kept();
        let mut collected = Collected::default();
        let mut out = Output::collecting(&mut collected, LIMIT);
        out.queue(b"head:");
        out.write_kept(&kept, 0..3).await.unwrap();
        out.write_kept(&kept, 8..10).await.unwrap();
        assert_eq!(out.sent(), 10);
        drop(out);
        assert_eq!(collected.into_bytes(), &b"head:01289"[..]);

        let mut collected = Collected::default();
        let mut out = Output::collecting(&mut collected, LIMIT);
        out.write(b"ab").await.unwrap();
        out.write_kept(&kept, 0..1).await.unwrap();
        drop(out);
        assert_eq!(collected.into_bytes(), &b"ab0"[..]);
    }

    #[tokio::test]
    async fn bytes_written_after_a_shared_body_follow_it() {
        let kept = kept();
        let mut collected = Collected::default();
        let mut out = Output::collecting(&mut collected, LIMIT);
        out.write_kept(&kept, 0..2).await.unwrap();
        out.write(b"more").await.unwrap();
        assert_eq!(out.sent(), 6);
        drop(out);
        assert_eq!(collected.into_bytes(), &b"01more"[..]);
    }
}

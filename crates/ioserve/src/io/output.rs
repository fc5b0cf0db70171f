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
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use memmap2::MmapRaw;
use rustix::net::SendFlags;
use tokio::io::{AsyncWrite, AsyncWriteExt as _, Interest};
use tokio::net::TcpStream;

use crate::io::pacing::Pacer;

/// Where a response's bytes go.
enum Sink<'a> {
    /// The plain socket: the kernel takes head, buffers, mappings and file pages.
    Socket(&'a TcpStream),
    /// A stream that encrypts in user space (TLS): only buffers, through its writes.
    Stream(&'a mut (dyn AsyncWrite + Unpin + Send + Sync)),
}

impl std::fmt::Debug for Sink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Socket(stream) => f.debug_tuple("Socket").field(stream).finish(),
            Sink::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// A response writer over one connection.
#[derive(Debug)]
pub struct Output<'a> {
    sink: Sink<'a>,
    pending: Vec<u8>,
    pending_sent: usize,
    send_timeout: Duration,
    sent: u64,
    cold_windows: u32,
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

    fn to(sink: Sink<'a>, send_timeout: Duration) -> Self {
        Output {
            sink,
            pending: Vec::new(),
            pending_sent: 0,
            send_timeout,
            sent: 0,
            cold_windows: 0,
            pool_socket: None,
            pacer: None,
            paced: Duration::ZERO,
        }
    }

    /// Whether file bytes must be copied into this process to be sent: the stream
    /// encrypts in user space, so [`Output::sendfile`] and [`Output::write_mapped`]
    /// cannot be used and a strategy reads the file into a buffer instead.
    pub fn copies_in_user_space(&self) -> bool {
        matches!(self.sink, Sink::Stream(_))
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
    /// none; with `head_waiting`, queued head bytes can go meanwhile, so no wait.
    async fn allowance(&mut self, want: usize, head_waiting: bool) -> usize {
        let Some(pacer) = self.pacer.as_deref_mut() else {
            return want;
        };
        if want == 0 || head_waiting {
            return pacer.allowed_now(want);
        }
        let before = pacer.waited();
        let allowed = pacer.allowed(want).await;
        self.paced += pacer.waited() - before;
        allowed
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

    /// Queues bytes to go out before the next body bytes.
    pub fn queue(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
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
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if self.copies_in_user_space() {
            // Boxed: the plain path's futures stay small (they are part of every
            // response in flight), and TLS costs far more than an allocation.
            return Box::pin(self.write_through(data)).await;
        }
        self.write_with(data.len(), |from| data[from..].as_ptr())
            .await
    }

    /// Writes the queued bytes and then `map[start..end]`, handing the mapping's
    /// addresses to `writev` without forming a Rust slice over them: the kernel copies
    /// the bytes, and a page that a truncation left unbacked makes the call fail with
    /// `EFAULT` instead of raising SIGBUS in this process.
    ///
    /// Panics if `start..end` is not inside the mapping.
    pub async fn write_mapped(
        &mut self,
        map: &MmapRaw,
        start: usize,
        end: usize,
    ) -> io::Result<()> {
        assert!(
            start <= end && end <= map.len(),
            "range outside the mapping"
        );
        self.socket()?;
        self.write_with(end - start, |from| map.as_ptr().wrapping_add(start + from))
            .await
    }

    /// The loop of [`Output::write`] and [`Output::write_mapped`]: `len` data bytes, of
    /// which `data_at(i)` gives the address of byte `i` onwards (`len - i` bytes that
    /// stay mapped for the call).
    async fn write_with(
        &mut self,
        len: usize,
        data_at: impl Fn(usize) -> *const u8,
    ) -> io::Result<()> {
        let socket = self.socket()?;
        let mut data_sent = 0;
        while self.pending_sent < self.pending.len() || data_sent < len {
            let head_waiting = self.pending_sent < self.pending.len();
            let allowed = self.allowance(len - data_sent, head_waiting).await;
            let pending = &self.pending[self.pending_sent..];
            let n = self
                .write_io(pending.len() + allowed, || {
                    let iovecs = [
                        libc::iovec {
                            iov_base: pending.as_ptr().cast_mut().cast(),
                            iov_len: pending.len(),
                        },
                        libc::iovec {
                            iov_base: data_at(data_sent).cast_mut().cast(),
                            iov_len: allowed,
                        },
                    ];
                    // SAFETY: both iovecs describe mapped memory that outlives the call:
                    // the rest of the queue, which `self` owns, and `allowed` (at most
                    // `len - data_sent`) bytes from `data_at(data_sent)` (a borrowed
                    // slice, or a range inside a mapping the caller holds). writev only
                    // reads them, in the kernel, which checks each page.
                    let n = unsafe { libc::writev(socket.as_raw_fd(), iovecs.as_ptr(), 2) };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                })
                .await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            data_sent += self.count_written(n);
        }
        self.clear_pending();
        Ok(())
    }

    /// Writes the queued bytes. With `more`, the kernel is told that more data follows
    /// (`MSG_MORE`), so a `sendfile` right after shares their packet.
    pub async fn flush(&mut self, more: bool) -> io::Result<()> {
        if self.copies_in_user_space() {
            return Box::pin(self.write_through(&[])).await;
        }
        let socket = self.socket()?;
        let flags = if more {
            SendFlags::MORE | SendFlags::NOSIGNAL
        } else {
            SendFlags::NOSIGNAL
        };
        while self.pending_sent < self.pending.len() {
            let pending = &self.pending[self.pending_sent..];
            let n = self
                .write_io(pending.len(), || {
                    Ok(rustix::net::send(socket, pending, flags)?)
                })
                .await?;
            self.pending_sent += n;
            self.sent += n as u64;
        }
        self.clear_pending();
        Ok(())
    }

    /// Sends up to `count` bytes of `file` from `*offset` with sendfile(2), advancing
    /// `offset`. Returns the bytes sent: 0 means the file ended early.
    pub async fn sendfile(
        &mut self,
        file: &File,
        offset: &mut u64,
        count: usize,
    ) -> io::Result<usize> {
        let socket = self.socket()?;
        let count = self.allowance(count, false).await;
        let n = self
            .write_io(count, || {
                Ok(rustix::fs::sendfile(
                    socket,
                    file,
                    Some(&mut *offset),
                    count,
                )?)
            })
            .await?;
        self.sent += n as u64;
        self.spent(n);
        Ok(n)
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
        let count = self.allowance(count, false).await;
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
                Err(rustix::io::Errno::AGAIN) => self.io(|| self.poll_writable()).await?,
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Whether the socket has room now (`poll` with no wait), as `WouldBlock` if not.
    fn poll_writable(&self) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(self.socket()?, PollFlags::OUT)];
        // An error or hang-up counts as ready: the next sendfile reports it.
        poll(&mut fds, Some(&Timespec::default()))?;
        match fds[0].revents().is_empty() {
            true => Err(io::ErrorKind::WouldBlock.into()),
            false => Ok(()),
        }
    }

    /// Forgets the queued bytes, all sent, and gives their buffer back: a download
    /// would otherwise hold its head's allocation to its end.
    fn clear_pending(&mut self) {
        self.pending = Vec::new();
        self.pending_sent = 0;
    }

    /// Runs a non-blocking socket operation, waiting for writability on `EAGAIN`, for at
    /// most the send timeout.
    ///
    /// The wait is tokio's `poll_write_ready`, whose waker lives in the socket's
    /// registration (one writer per connection), not `async_io`, which keeps a waiter
    /// node in its future: this future is part of every response in flight, and most
    /// of them wait here.
    async fn io<R>(&self, mut f: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        let socket = self.socket()?;
        let attempt = std::future::poll_fn(|cx| loop {
            if let Err(error) = std::task::ready!(socket.poll_write_ready(cx)) {
                return std::task::Poll::Ready(Err(error));
            }
            match socket.try_io(Interest::WRITABLE, &mut f) {
                // tokio cleared the readiness: the next poll waits for the next event.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                done => return std::task::Poll::Ready(done),
            }
        });
        tokio::time::timeout(self.send_timeout, attempt)
            .await
            .unwrap_or_else(|_elapsed| Err(send_timed_out()))
    }

    /// As [`Output::io`], for a write `f` that is offered `offered` bytes and returns
    /// how many it took. One that took fewer (but some) filled the socket's buffer:
    /// tokio is told so, as its own `poll_write` does after a short write, and the next
    /// write waits for epoll's word of room instead of first failing with `EAGAIN`.
    ///
    /// The telling is `try_io`'s: `f`'s result counts as `WouldBlock`, which makes tokio
    /// clear the readiness it saw before the call, never an event that came in during
    /// it (on the multi-thread runtime the driver runs beside this task); the count is
    /// kept aside and returned.
    async fn write_io(
        &self,
        offered: usize,
        mut f: impl FnMut() -> io::Result<usize>,
    ) -> io::Result<usize> {
        let socket = self.socket()?;
        let mut short = None;
        let attempt = std::future::poll_fn(|cx| loop {
            if let Err(error) = std::task::ready!(socket.poll_write_ready(cx)) {
                return std::task::Poll::Ready(Err(error));
            }
            let result = socket.try_io(Interest::WRITABLE, || {
                let n = f()?;
                if 0 < n && n < offered {
                    short = Some(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match result {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(n) = short.take() {
                        return std::task::Poll::Ready(Ok(n));
                    }
                }
                done => return std::task::Poll::Ready(done),
            }
        });
        tokio::time::timeout(self.send_timeout, attempt)
            .await
            .unwrap_or_else(|_elapsed| Err(send_timed_out()))
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
            Sink::Stream(_) => Err(io::Error::new(
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
            let allowed = self.allowance(data.len() - data_sent, head_waiting).await;
            let pending = &self.pending[self.pending_sent..];
            let Sink::Stream(stream) = &mut self.sink else {
                return Err(io::ErrorKind::Unsupported.into());
            };
            let bufs = [
                io::IoSlice::new(pending),
                io::IoSlice::new(&data[data_sent..data_sent + allowed]),
            ];
            let written = tokio::time::timeout(self.send_timeout, stream.write_vectored(&bufs));
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
        tokio::time::timeout(self.send_timeout, stream.flush())
            .await
            .unwrap_or_else(|_elapsed| Err(send_timed_out()))
    }
}

/// The error of a client that did not read for the send timeout.
fn send_timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client did not read for the send timeout",
    )
}

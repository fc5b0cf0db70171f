//! `sendfile`: the kernel moves page-cache pages to the socket; no byte of the file
//! passes through this process.
//!
//! Except small bodies: a range of at most [`SMALL_BODY`] bytes is read into the buffer
//! that holds the head and sent with it in one write. For a few KiB, sendfile's fixed
//! cost (a second syscall, pinning page references) outweighs the copy: on 4 KiB files
//! this path measured 11% more requests per second. A small file of the open-file
//! cache keeps its bytes in memory after the first such read (`--small-file-cache`,
//! [`crate::io::kept_contents`]), and its later bodies are written from there.

use std::future::Future;
use std::io;

use super::cold::ReadAhead;
use super::ended::{ended_early, file_shrank};
use crate::io::byte_range::ByteRange;
use crate::io::kept_contents::KeptContents;
use crate::io::output::Output;
use crate::io::read_error::{file_read_error, is_from_reading};
use crate::io::shared_file::SharedFile;

/// Largest count handed to one sendfile(2) call on the event loop, after which the task
/// yields to the other connections of its worker: nginx's `sendfile_max_chunk` (2 MiB
/// by default), which likewise goes back to its event loop after each chunk. One call
/// can move megabytes on loopback while every other client of the worker waits; each
/// chunk costs a call and a turn of the loop (an `epoll_wait`), so smaller ones cost
/// CPU: 256 KiB made an 8 MiB download 37 sendfile calls and 27 epoll_waits where nginx
/// made 8.5 and 4 (`cargo xtask loadtest`'s syscall table).
const MAX_PER_CALL: u64 = 2 << 20;

/// Largest count of one sendfile(2) call on the blocking pool, for a window that was
/// brought in from the disk: a pool thread holds one of the few `--cold-threads`
/// permits for the call, which other cold downloads wait for. (Chosen when these calls
/// still ran on the loop: with cold downloads beside hot requests, 256 KiB and a yield
/// after each call took the hot p99 from 87 ms to 37 ms in one quick run of `cargo
/// xtask loadtest --cold`.)
const MAX_PER_POOL_CALL: u64 = 256 << 10;

/// Largest body sent by copy instead of sendfile(2).
pub const SMALL_BODY: u64 = 16 * 1024;

/// Writes the queued head of `out` and then `range` of `file` with sendfile(2).
///
/// (A function returning an `async` block, not an `async fn`: an `async fn` keeps its
/// arguments twice, 40 bytes more in every download in flight, which took its boxed
/// future into the allocator's next size class.)
#[allow(clippy::manual_async_fn)]
pub(super) fn send<'a, 'o, 'r>(
    out: &'a mut Output<'o>,
    file: &'a SharedFile,
    range: ByteRange,
    ahead: &'a mut ReadAhead<'r>,
) -> impl Future<Output = io::Result<()>> + Send + use<'a, 'o, 'r> {
    async move {
        if range.len <= SMALL_BODY {
            // Boxed: a download holds no room for the small body's futures.
            return Box::pin(send_small(out, file, range, ahead)).await;
        }
        out.flush(true).await?;
        let mut offset = range.start;
        while offset < range.end() {
            let ready = ahead.ready(offset).await;
            let on_pool = ahead.brought_in();
            let most = if on_pool {
                MAX_PER_POOL_CALL
            } else {
                MAX_PER_CALL
            };
            let count = (ready - offset).min(most) as usize;
            let at = offset;
            let sent = match on_pool {
                // Boxed: only a cold range sends from the pool, and its future holds the
                // pool's hand-offs.
                true => {
                    let file = ahead.file();
                    Box::pin(out.sendfile_on_pool(file, &mut offset, count, ahead.threads())).await
                }
                // With the pool, a span sent from the loop was found in the page cache.
                false => out.sendfile(file, &mut offset, count, ahead.pooled()).await,
            };
            // sendfile(2) reports the bytes before a page it cannot read, then the error
            // from that page: the error names the byte.
            let sent = sent.map_err(|error| match is_from_reading(&error) {
                true => file_read_error(file, at, error),
                false => error,
            })?;
            if sent == 0 {
                return Err(file_shrank());
            }
            // A whole chunk went: the other connections of the worker get their turn. A
            // short one filled the socket's buffer (or met the pacer): the next call waits,
            // and they run meanwhile, so a yield now would only cost a turn of the loop.
            if sent == count {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }
}

/// Writes the queued head and a body of at most [`SMALL_BODY`] bytes in one write: from
/// the file's bytes kept in memory, else read into the head's buffer (and kept, where
/// they may be).
async fn send_small(
    out: &mut Output<'_>,
    file: &SharedFile,
    range: ByteRange,
    ahead: &mut ReadAhead<'_>,
) -> io::Result<()> {
    let kept = file.kept();
    if let Some(bytes) = kept.and_then(KeptContents::bytes) {
        // A range past the kept version's end is read instead, and found short.
        let body = range.start as usize..range.end() as usize;
        if body.end <= bytes.len() {
            out.count_kept_body();
            return out.write_kept(&bytes, body).await;
        }
    }
    let want = range.len as usize;
    // The ticket is taken before the read, and nothing is awaited between the two
    // and the keeping: bytes of the whole file that no other version's fstat has
    // come between.
    let whole = range.start == 0;
    let ticket = || kept.filter(|_| whole).and_then(KeptContents::ticket);
    let cached = match ahead.pooled() {
        true => {
            let ticket = ticket();
            out.queue_from_cache(file, range.start, want)
                .map_err(|error| file_read_error(file, range.start, error))?
                .map(|read| (read, ticket))
        }
        false => None,
    };
    let (read, ticket) = match cached {
        Some(read) => read,
        None => {
            ahead.ready_through(range.start, range.end()).await;
            let ticket = ticket();
            let read = out
                .queue_from_file(file, range.start, want)
                .map_err(|error| file_read_error(file, range.start, error))?;
            (read, ticket)
        }
    };
    if read < want {
        return Err(ended_early(file, range.start + read as u64));
    }
    if let (Some(kept), Some(ticket)) = (kept, ticket) {
        kept.keep(ticket, out.queued_tail(read));
    }
    out.flush(false).await
}

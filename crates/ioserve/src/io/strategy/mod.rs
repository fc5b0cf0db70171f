//! IO strategies: how the bytes of `(file, offset, len)` reach the socket.
//!
//! Every strategy gets the same [`ByteRange`]s from the reply and writes exactly those
//! bytes after the queued head, or fails; a failure after the head has gone out closes
//! the connection, so the client sees a short body, never wrong framing.
//!
//! | strategy | how | copies in user space |
//! |---|---|---|
//! | `sendfile` | sendfile(2) from the page cache to the socket; bodies and parts of at most 16 KiB are pread into the head's buffer and sent with it in one write (or from the file's bytes kept in memory) | none (above 16 KiB) |
//! | `mmap` | writev(2)s from one shared read-only mapping of the file (madvise WILLNEED on the range) | none (the kernel copies from the mapping) |
//! | `read` | pread(2) into a pooled, page-aligned buffer of `--chunk-size`, then writev(2) | one |
//! | `buffered` | tokio::fs + a BufReader (reads on tokio's blocking pool) | two (the baseline of most Rust servers) |
//!
//! Over a stream that encrypts in user space (TLS), the kernel can take neither file
//! pages nor mappings: `sendfile` and `mmap` then send as `read` does (pread into a
//! pooled buffer, written through the stream), `read` and `buffered` as always;
//! `sendfile`'s small bodies, copied on a plain socket too, go as they go there.
//!
//! `sendfile` keeps the bytes of small files of the open-file cache in memory
//! (`--small-file-cache`, see [`crate::io::kept_contents`]) and writes their bodies
//! from there.
//!
//! `sendfile`, `mmap` and `read` block their thread while the disk reads a page that is
//! not cached; with `--cold-reads pool` (the default) they first bring such pages in on
//! the blocking pool (see [`cold`]). `buffered` reads on the pool anyway.

mod buffered;
pub mod cold;
mod ended;
mod mmap;
mod read;
mod sendfile;

use std::borrow::Borrow;
use std::future::Future;
use std::io;
use std::sync::Arc;

use serde::Deserialize;

use crate::io::byte_range::ByteRange;
use crate::io::output::Output;
use crate::io::shared_file::SharedFile;

pub use crate::io::cold_threads::ColdThreads;
pub use cold::ColdReads;
pub use read::{BufferPool, PooledBuf};
pub use sendfile::SMALL_BODY;

/// The strategy names accepted by `--strategy` and the config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// sendfile(2) from the page cache straight to the socket: no copy through user space.
    Sendfile,
    /// mmap(2) the file and write from the mapping: no read(2), the kernel copies once.
    Mmap,
    /// pread(2) into reused page-aligned buffers of --chunk-size, then write.
    Read,
    /// tokio::fs with a buffered reader: the plain async baseline, for comparison.
    Buffered,
}

impl StrategyKind {
    /// The name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Sendfile => "sendfile",
            StrategyKind::Mmap => "mmap",
            StrategyKind::Read => "read",
            StrategyKind::Buffered => "buffered",
        }
    }

    /// Descriptors one download holds besides its socket: the file (when it is not in
    /// the open-file cache), and for `buffered` its own reopened descriptor too.
    pub fn descriptors_per_download(self) -> usize {
        match self {
            StrategyKind::Sendfile | StrategyKind::Mmap | StrategyKind::Read => 1,
            StrategyKind::Buffered => 2,
        }
    }
}

/// A configured strategy, shared by all connections of the server.
#[derive(Debug)]
pub struct Strategy {
    kind: StrategyKind,
    chunk_size: usize,
    pool: BufferPool,
    cold: ColdReads,
    cold_threads: ColdThreads,
}

impl Strategy {
    /// A strategy whose `read` and `buffered` variants read `chunk_size` bytes at a
    /// time (sendfile and mmap hand the kernel larger spans), and which waits for cold
    /// file data where `cold` says, with at most `cold_threads` pool threads of each
    /// kind on cold ranges at once ([`ColdThreads`]).
    pub fn new(
        kind: StrategyKind,
        chunk_size: usize,
        cold: ColdReads,
        cold_threads: usize,
    ) -> Strategy {
        Strategy {
            kind,
            chunk_size,
            pool: BufferPool::new(chunk_size),
            cold,
            cold_threads: ColdThreads::new(cold_threads),
        }
    }

    /// Which strategy this is.
    pub fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// Where cold file data is waited for: on the pool, the event loop must not open
    /// files either (a path walk or open of a cold inode reads the disk too).
    pub fn cold_reads(&self) -> ColdReads {
        self.cold
    }

    /// Writes the queued head of `out` and then `range` of `file`.
    ///
    /// Fails with `UnexpectedEof` when the file turns out shorter than the range (it was
    /// truncated after the response head was made).
    ///
    /// `file` is the file or a reference to it: a response in flight hands its own over,
    /// so that its future holds the file once. (A function returning an `async` block,
    /// not an `async fn`, for the same reason: an `async fn` keeps its arguments twice.)
    #[allow(clippy::manual_async_fn)]
    pub fn send<'s, 'o, F>(
        &'s self,
        out: &'s mut Output<'o>,
        file: F,
        range: ByteRange,
    ) -> impl Future<Output = io::Result<()>> + use<'s, 'o, F>
    where
        F: Borrow<Arc<SharedFile>> + Send + 's,
    {
        async move {
            let file = file.borrow();
            if range.len == 0 {
                return out.flush(false).await;
            }
            // buffered reads on the pool already, from a descriptor of its own.
            let cold = match self.kind {
                StrategyKind::Buffered => ColdReads::Inline,
                _ => self.cold,
            };
            let mut ahead =
                cold::ReadAhead::new(file, cold, &self.cold_threads, range.start, range.end());
            let kind = match self.kind {
                // sendfile copies small bodies anyway, the same over any stream.
                StrategyKind::Sendfile if range.len <= SMALL_BODY => StrategyKind::Sendfile,
                StrategyKind::Sendfile | StrategyKind::Mmap if out.copies_in_user_space() => {
                    StrategyKind::Read
                }
                kind => kind,
            };
            // The default strategy's sending in line; the others boxed, so that a download
            // by sendfile holds no room for their larger futures.
            let sent = match kind {
                StrategyKind::Sendfile => sendfile::send(out, file, range, &mut ahead).await,
                StrategyKind::Mmap => Box::pin(mmap::send(out, file, range, &mut ahead)).await,
                StrategyKind::Read => {
                    Box::pin(read::send(out, file, range, &self.pool, &mut ahead)).await
                }
                StrategyKind::Buffered => {
                    Box::pin(buffered::send(out, file, range, self.chunk_size)).await
                }
            };
            out.count_cold_windows(ahead.cold_windows());
            sent
        }
    }
}

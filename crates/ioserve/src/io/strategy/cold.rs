//! Cold ranges: file data that is not in the page cache is read on tokio's blocking
//! pool before a strategy's syscall touches it, so that a download from a cold disk
//! does not stall the other connections of its worker (nginx's `aio threads`).
//!
//! sendfile(2), pread(2) and a fault on a mapping all block the calling thread while
//! the disk reads; on a per-core worker that thread is the event loop of hundreds of
//! connections. So each strategy asks a `ReadAhead` before every syscall how far it may
//! go without waiting: the read-ahead probes the next window (up to [`WINDOW`] bytes) with
//! mincore(2) ([`SharedFile::residency`]), and a window that is not all cached is brought
//! in on the pool by sendfile(2) to `/dev/null` (the kernel reads the pages into the page
//! cache and drops its references: no copy). While one window is sent, the next one is
//! read, so a cold download streams at disk speed.
//!
//! The sendfile(2) calls into the socket of a window that was brought in run on the pool
//! too ([`crate::io::output::Output::sendfile_on_pool`]); once the read-ahead finds a
//! window cached again, the range goes back to the loop's own calls (a hot file with a
//! few pages evicted takes the pool for those windows only). [`ColdThreads`] bounds both
//! kinds of pool work: a pool thread per cold download would leave the event loops one
//! runnable thread among many.
//!
//! Where mincore cannot see (a file this process neither owns nor may write, see
//! [`crate::io::shared_file::Residency::Unknown`]) every window goes through the pool: that costs a
//! thread hop per window of a cached file, never a stalled loop.

use std::fs::File;
use std::io;
use std::sync::{Arc, OnceLock};

use clap::ValueEnum;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::io::cold_threads::ColdThreads;
use crate::io::shared_file::{Residency, SharedFile};

/// Largest span probed and brought in at once, aligned to multiples of itself in the
/// file: 2 MiB, a large folio of the page cache and the `mmap` strategy's window.
pub const WINDOW: u64 = crate::io::shared_file::VERDICT_SPAN;

/// Where a strategy waits for file data that is not in the page cache
/// (`--cold-reads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ColdReads {
    /// On the blocking pool: the event loop never waits for the disk.
    #[default]
    Pool,
    /// On the worker thread, as a plain sendfile/pread would: every other connection of
    /// the worker waits too (for comparison, and for data that is always cached).
    Inline,
}

impl ColdReads {
    /// The name as written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ColdReads::Pool => "pool",
            ColdReads::Inline => "inline",
        }
    }
}

/// The read-ahead of one range of one response.
#[derive(Debug)]
pub(super) struct ReadAhead<'a> {
    file: &'a Arc<SharedFile>,
    threads: &'a ColdThreads,
    /// Off for `--cold-reads inline`.
    on: bool,
    /// The end of the range being sent.
    end: u64,
    /// `[start, ready)` is known to be cached (or was brought in).
    ready: u64,
    /// A window being brought in on the pool: its end and the task.
    reading: Option<(u64, JoinHandle<()>)>,
    /// Windows that were not cached and went to the pool.
    cold_windows: u32,
    /// Whether `[.., ready)` ends in a window that was brought in on the pool (not
    /// found cached).
    brought_in: bool,
}

impl<'a> ReadAhead<'a> {
    /// The read-ahead for sending `file[start..end]`, whose pool work `threads` bounds.
    pub(super) fn new(
        file: &'a Arc<SharedFile>,
        cold: ColdReads,
        threads: &'a ColdThreads,
        start: u64,
        end: u64,
    ) -> Self {
        if cold == ColdReads::Pool && end - start > WINDOW {
            file.own_read_ahead();
        }
        ReadAhead {
            file,
            threads,
            on: cold == ColdReads::Pool,
            end,
            ready: start,
            reading: None,
            cold_windows: 0,
            brought_in: false,
        }
    }

    /// Waits until the file from `offset` on is in the page cache, up to the returned
    /// end (at most the range's end), and looks at the window after it: found cached,
    /// it is ready too (a syscall may run on into it, and it is not probed again);
    /// otherwise it is brought in while this one is sent. A syscall that stays below
    /// the returned end does not wait for the disk.
    ///
    /// Once less than a window of the ready span is left, the window after it is looked
    /// at too, so that a syscall need not stop at the span's end: a sendfile call that
    /// came back short a few KiB before it would otherwise send those KiB alone, after
    /// a wait for room in the socket that could have sent megabytes (strace found such a
    /// call in about one 8 MiB download of four).
    pub(super) async fn ready(&mut self, offset: u64) -> u64 {
        if !self.on {
            return self.end;
        }
        if offset < self.ready {
            if self.ready - offset < WINDOW {
                self.look_ahead();
            }
            return self.ready;
        }
        let this_end = window_end(offset, self.end);
        match self.reading.take() {
            Some((end, task)) if end == this_end => {
                // The window being read is this one: wait for it.
                let _ = task.await;
                self.brought_in = true;
            }
            other => {
                // Nothing for this window yet (a new range, or a jump): a read of another
                // window that has not started is called off; one that has runs on and
                // is not waited for.
                if let Some((_, task)) = other {
                    task.abort();
                }
                self.brought_in = !self.resident(offset, this_end);
                if self.brought_in {
                    let _ = self.bring_in(offset, this_end).await;
                }
            }
        }
        self.ready = this_end;
        self.look_ahead();
        self.ready
    }

    /// Looks at the window after the ready span, unless it is being read already:
    /// found cached, the span takes it in; otherwise it is brought in on the pool.
    fn look_ahead(&mut self) {
        if self.ready >= self.end || self.reading.is_some() {
            return;
        }
        let (start, end) = (self.ready, window_end(self.ready, self.end));
        match self.resident(start, end) {
            true => self.ready = end,
            false => self.reading = Some((end, self.bring_in(start, end))),
        }
    }

    /// Whether `file[start..end]` is cached, trusting a recent verdict
    /// ([`SharedFile::residency_trusting_recent`]).
    fn resident(&self, start: u64, end: u64) -> bool {
        self.file.residency_trusting_recent(start, end - start) == Residency::Resident
    }

    /// The file being read ahead.
    pub(super) fn file(&self) -> &'a Arc<SharedFile> {
        self.file
    }

    /// The bounds on this range's pool work.
    pub(super) fn threads(&self) -> &'a ColdThreads {
        self.threads
    }

    /// Whether cold windows are brought in on the pool (`--cold-reads pool`).
    pub(super) fn pooled(&self) -> bool {
        self.on
    }

    /// Waits until all of `file[start..end]` is cached (for a small body read in one
    /// pread).
    pub(super) async fn ready_through(&mut self, start: u64, end: u64) {
        let mut at = start;
        while at < end {
            at = self.ready(at).await;
        }
    }

    /// Windows of this range that were not cached and were read on the pool.
    pub(super) fn cold_windows(&self) -> u32 {
        self.cold_windows
    }

    /// Whether the data that [`ReadAhead::ready`] last made ready was read from the
    /// disk on the pool just now (the window it ends in was not found cached): its
    /// sending runs on the pool too. A window found cached, later in the same range,
    /// goes back to the event loop's own calls.
    pub(super) fn brought_in(&self) -> bool {
        self.brought_in
    }

    /// Reads `file[start..end]` into the page cache on the blocking pool, once a read
    /// permit is free. Aborting the task before then calls the read off; after, the
    /// read finishes and only then gives its permit back.
    fn bring_in(&mut self, start: u64, end: u64) -> JoinHandle<()> {
        self.cold_windows += 1;
        let file = Arc::clone(self.file);
        let read_permit = self.threads.read_permit();
        tokio::spawn(async move {
            let permit = read_permit.await;
            let read = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                if let Err(error) = bring_in(&file, start, end) {
                    // The strategy's own read meets the same error and reports it.
                    tracing::debug!(%error, "reading ahead failed");
                }
            });
            let _ = read.await;
        })
    }
}

impl Drop for ReadAhead<'_> {
    /// A response that ends early (a client gone) calls off its queued read.
    fn drop(&mut self) {
        if let Some((_, task)) = &self.reading {
            task.abort();
        }
    }
}

/// The end of the window that holds `offset`: the next multiple of [`WINDOW`], or `end`.
fn window_end(offset: u64, end: u64) -> u64 {
    (offset / WINDOW + 1).saturating_mul(WINDOW).min(end)
}

/// Reads `file[start..end]` into the page cache, blocking: `POSIX_FADV_WILLNEED` starts
/// the reads of the whole window at once (the descriptor's own read-ahead is off), then
/// sendfile(2) to `/dev/null` waits for them (the pages are released, not copied), or
/// where that is refused, pread(2) into a scratch buffer.
fn bring_in(file: &File, start: u64, end: u64) -> io::Result<()> {
    let _ = rustix::fs::fadvise(
        file,
        start,
        std::num::NonZeroU64::new(end - start),
        rustix::fs::Advice::WillNeed,
    );
    static DEV_NULL: OnceLock<Option<File>> = OnceLock::new();
    let null = DEV_NULL.get_or_init(|| {
        File::options()
            .write(true)
            .open("/dev/null")
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot open /dev/null: cold ranges are read with pread");
            })
            .ok()
    });
    let mut offset = start;
    if let Some(null) = null {
        while offset < end {
            let count = (end - offset) as usize;
            match rustix::fs::sendfile(null, file, Some(&mut offset), count) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => break,
                Err(error) => return Err(error.into()),
            }
        }
    }
    let mut scratch = vec![0u8; (end - offset).min(WINDOW) as usize];
    while offset < end {
        let want = ((end - offset) as usize).min(scratch.len());
        match rustix::io::pread(file, &mut scratch[..want], offset) {
            Ok(0) => break,
            Ok(n) => offset += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd as _;

    fn cold_file(len: usize) -> (tempfile::NamedTempFile, Arc<SharedFile>) {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut temp, &vec![7u8; len]).unwrap();
        temp.as_file().sync_all().unwrap();
        let file = File::open(temp.path()).unwrap();
        rustix::fs::fadvise(file.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
        (temp, Arc::new(SharedFile::new(file)))
    }

    #[test]
    fn windows_end_on_window_multiples_and_the_range_end() {
        assert_eq!(window_end(0, 10 * WINDOW), WINDOW);
        assert_eq!(window_end(WINDOW - 1, 10 * WINDOW), WINDOW);
        assert_eq!(window_end(WINDOW, 10 * WINDOW), 2 * WINDOW);
        assert_eq!(window_end(5, 100), 100);
        assert_eq!(window_end(u64::MAX - 1, u64::MAX), u64::MAX);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn cold_windows_are_brought_in_and_hot_ones_left_alone() {
        let len = 3 * WINDOW as usize + 100;
        let (_temp, file) = cold_file(len);
        // Dropped pages of a file on a disk (not tmpfs): mincore must see them.
        if file.residency(0, len as u64) == Residency::Resident {
            eprintln!("skipped: the temporary directory keeps files in memory (tmpfs)");
            return;
        }
        let threads = ColdThreads::new(1);
        let mut ahead = ReadAhead::new(&file, ColdReads::Pool, &threads, 10, len as u64);
        assert_eq!(ahead.ready(10).await, WINDOW);
        assert!(ahead.brought_in(), "the first window came from the disk");
        assert_eq!(file.residency(10, WINDOW - 10), Residency::Resident);
        assert_eq!(
            ahead.ready(WINDOW - 1).await,
            WINDOW,
            "inside the ready span"
        );
        assert_eq!(ahead.ready(WINDOW).await, 2 * WINDOW, "read ahead, awaited");
        assert_eq!(file.residency(0, 2 * WINDOW), Residency::Resident);
        // A jump past the window being read ahead (which runs on, unawaited).
        assert_eq!(ahead.ready(3 * WINDOW).await, len as u64);
        assert_eq!(file.residency(3 * WINDOW, 100), Residency::Resident);
        // The first window went to the pool; the kernel's own read-ahead may have
        // brought in later ones with it.
        let cold = ahead.cold_windows();
        assert!((1..=4).contains(&cold), "{cold} windows went to the pool");

        // All cached now: nothing goes to the pool.
        let mut again = ReadAhead::new(&file, ColdReads::Pool, &threads, 0, 2 * WINDOW);
        assert_eq!(
            again.ready(0).await,
            2 * WINDOW,
            "the next window, cached, is ready too"
        );
        assert_eq!(again.cold_windows(), 0);
        assert!(!again.brought_in());

        // A cold window between cached ones: its sending alone goes to the pool.
        let (_temp, gap_file) = cold_file(len);
        gap_file.own_read_ahead(); // The kernel's read-ahead off: the gap stays cold.
        let mut scratch = vec![0u8; WINDOW as usize];
        rustix::io::pread(&**gap_file, &mut scratch, 0).unwrap();
        rustix::io::pread(&**gap_file, &mut scratch, 2 * WINDOW).unwrap();
        if gap_file.residency(WINDOW, WINDOW) == Residency::Cold {
            let mut gap = ReadAhead::new(&gap_file, ColdReads::Pool, &threads, 0, 3 * WINDOW);
            assert_eq!(gap.ready(0).await, WINDOW, "the next window is being read");
            assert!(!gap.brought_in());
            assert_eq!(gap.ready(WINDOW).await, 3 * WINDOW);
            assert!(gap.brought_in(), "the second window came from the disk");
            assert_eq!(gap.cold_windows(), 1);
        } else {
            eprintln!("skipped the gap: the second window did not stay cold");
        }

        // Inline: never probes, never reads ahead.
        let (_temp, cold_file) = cold_file(len);
        let mut inline = ReadAhead::new(&cold_file, ColdReads::Inline, &threads, 0, len as u64);
        assert_eq!(inline.ready(0).await, len as u64);
        assert_eq!(cold_file.residency(0, len as u64), Residency::Cold);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_cached_next_window_joins_the_span_before_its_end_is_reached() {
        let len = 4 * WINDOW + 100;
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut temp, &vec![7u8; len as usize]).unwrap();
        let file = Arc::new(SharedFile::new(File::open(temp.path()).unwrap()));
        if file.residency(0, len) != Residency::Resident {
            eprintln!("skipped: the file just written is not all in the page cache");
            return;
        }
        let threads = ColdThreads::new(1);
        let mut ahead = ReadAhead::new(&file, ColdReads::Pool, &threads, 0, len);
        assert_eq!(
            ahead.ready(0).await,
            2 * WINDOW,
            "the first window and the next"
        );
        assert_eq!(ahead.ready(WINDOW).await, 2 * WINDOW, "a window is left");
        assert_eq!(
            ahead.ready(2 * WINDOW - 3000).await,
            3 * WINDOW,
            "less than a window left: a call may run on past the span's end"
        );
        assert_eq!(ahead.ready(4 * WINDOW - 1).await, len);
        assert_eq!(ahead.cold_windows(), 0);
        assert!(!ahead.brought_in());
    }

    #[test]
    fn bring_in_stops_at_the_end_of_a_short_file() {
        let (_temp, file) = cold_file(5000);
        bring_in(&file, 0, 3 * WINDOW).unwrap();
        bring_in(&file, 4000, 4001).unwrap();
    }
}

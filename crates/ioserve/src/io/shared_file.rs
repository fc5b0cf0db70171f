//! An open file that responses share: its descriptor, one read-only mapping of the
//! whole file made on first use, and which of its pages are in the page cache
//! (cachestat(2), mincore(2) before Linux 6.5; with the spans lately found cached, see
//! [`SharedFile::residency_trusting_recent`]).

use std::fs::{File, Metadata};
use std::io;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use crate::io::kept_contents::{ContentBudget, KeptContents};
use crate::io::page_cache::{self, Cached};

/// An open file that responses share: the descriptor and, made on first use, one
/// read-only mapping of the whole file (the `mmap` strategy writes from it; every
/// strategy asks it which pages are in the page cache, see [`SharedFile::residency`]).
///
/// Sharing the mapping matters: page-table entries are filled once per file instead of
/// once per response, and mapped page-cache pages count once in the server's RSS
/// instead of once per connection.
#[derive(Debug)]
pub struct SharedFile {
    file: File,
    mapping: Mutex<Option<Mapping>>,
    /// Whether the kernel's read-ahead is off for this descriptor (see
    /// [`SharedFile::own_read_ahead`]).
    own_read_ahead: AtomicBool,
    /// Spans lately found resident (see [`SharedFile::residency_trusting_recent`]).
    recent: Mutex<RecentSpans>,
    /// The file's bytes kept in memory, for a small file of the open-file cache.
    kept: Option<KeptContents>,
}

/// How long a span found resident is taken for resident without asking the kernel
/// again. Every response that sends a hot file would otherwise probe each of its
/// windows (a cachestat(2), or mincore(2)'s 512 page-cache lookups, and two preadv2(2)
/// calls per 2 MiB); with this, a window read by a hundred downloads a second is probed
/// ten times a second. The cost of a verdict gone stale (pages evicted in those 100 ms)
/// is one syscall that waits for the disk on the event loop, as `--cold-reads inline`
/// would.
pub const RESIDENT_TRUSTED_FOR: Duration = Duration::from_millis(100);

/// The spans whose verdicts are kept apart: the read-ahead's windows (2 MiB, aligned to
/// multiples of themselves), each of which is probed as one span.
pub const VERDICT_SPAN: u64 = 2 << 20;

/// Most verdicts kept per file: its first 64 windows (128 MiB) each have their own,
/// later ones share them (window `i` takes slot `i % 64`), so that a hundred downloads
/// of a large file at a hundred places keep theirs. (Eight shared by every window of a
/// 64 MiB file, 32 windows, were overwritten before they were asked again: mincore
/// took a fifth of the CPU of such downloads.)
const VERDICT_SLOTS: u64 = 64;

/// The spans of a file lately found resident, each with when: one slot per window of
/// the file, up to [`VERDICT_SLOTS`], made at the first verdict.
#[derive(Debug, Default)]
struct RecentSpans {
    slots: Vec<Option<(u64, u64, Instant)>>,
}

impl RecentSpans {
    /// The slot of the window that holds `offset`, in a table of `slots` (> 0).
    fn slot(offset: u64, slots: usize) -> usize {
        ((offset / VERDICT_SPAN) % slots as u64) as usize
    }

    /// Whether `start..end` lies in the span found resident since `since` that the
    /// slot of its window holds.
    fn cover(&self, start: u64, end: u64, since: Instant) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        matches!(
            self.slots[Self::slot(start, self.slots.len())],
            Some((from, to, at)) if from <= start && end <= to && at >= since
        )
    }

    /// Notes that `start..end` was found resident at `at`, in the slot of the window
    /// that holds `start`; the first call sizes the table for a file of `file_len()`
    /// bytes.
    fn record(&mut self, start: u64, end: u64, at: Instant, file_len: impl FnOnce() -> u64) {
        if self.slots.is_empty() {
            let windows = file_len()
                .max(end)
                .div_ceil(VERDICT_SPAN)
                .clamp(1, VERDICT_SLOTS);
            self.slots = vec![None; windows as usize];
        }
        let slot = Self::slot(start, self.slots.len());
        self.slots[slot] = Some((start, end, at));
    }
}

/// A mapping of a [`SharedFile`], and whether mincore(2) tells the truth about it.
#[derive(Debug)]
struct Mapping {
    map: Arc<MmapRaw>,
    /// mincore(2) reports page-cache residency only to a process that owns the file or
    /// could open it for writing (Linux 5.0's side-channel fix); for any other file it
    /// reports every page as resident. The mapping reaches one page past the end of the
    /// file, which is never cached: where mincore calls that page resident, it is lying.
    residency_visible: bool,
}

/// Whether a span of a file is in the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Every page is cached and its first and last pages are read in: reading it does
    /// not wait for the disk.
    Resident,
    /// Some page is not cached, or still being read (a page the kernel's own
    /// read-ahead inserted is present before its data is).
    Cold,
    /// This process cannot tell: cachestat(2) and mincore(2) hide the residency of
    /// files it neither owns nor may write, or (mincore) the file cannot be mapped.
    Unknown,
}

impl SharedFile {
    /// Wraps an open file.
    pub fn new(file: File) -> SharedFile {
        SharedFile {
            file,
            mapping: Mutex::new(None),
            own_read_ahead: AtomicBool::new(false),
            recent: Mutex::new(RecentSpans::default()),
            kept: None,
        }
    }

    /// Wraps an open file whose bytes may be kept in memory, counted against `budget`
    /// (see [`KeptContents`]); `meta` is its fstat, which tells their version.
    pub fn with_kept_contents(
        file: File,
        meta: &Metadata,
        budget: Arc<ContentBudget>,
    ) -> SharedFile {
        let kept = KeptContents::new(budget);
        kept.observe(meta);
        SharedFile {
            kept: Some(kept),
            ..SharedFile::new(file)
        }
    }

    /// The file's metadata now (`fstat`), for a response about to describe it: kept
    /// bytes of another version than the one it shows are dropped.
    pub fn fstat(&self) -> io::Result<Metadata> {
        let meta = self.file.metadata()?;
        if let Some(kept) = &self.kept {
            kept.observe(&meta);
        }
        Ok(meta)
    }

    /// Where this file's bytes may be kept in memory, if they may.
    pub fn kept(&self) -> Option<&KeptContents> {
        self.kept.as_ref()
    }

    /// Turns the kernel's read-ahead off for this descriptor (`POSIX_FADV_RANDOM`), once:
    /// the server reads ahead itself, a window at a time on its pool. Otherwise the
    /// kernel reads far ahead of a window (`read_ahead_kb`, often MBs) and leaves marks
    /// in the pages it read; the event loop's sendfile meeting such a mark starts the
    /// next read-ahead from the loop, and a page the kernel inserted ahead counts as
    /// cached (mincore) while its read is still in flight.
    pub fn own_read_ahead(&self) {
        if !self.own_read_ahead.swap(true, Ordering::Relaxed) {
            let _ = rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::Random);
        }
    }

    /// A read-only shared mapping of the whole file, at least `len` (> 0) bytes long,
    /// made again when the file has grown past the current one.
    ///
    /// It is an [`MmapRaw`]: it hands out addresses, never a Rust slice, because the
    /// file may shrink under the mapping and a slice would claim bytes that may no
    /// longer be readable. The addresses go to the kernel only (writev), which reports
    /// `EFAULT` for a page past the new end where this process would take SIGBUS.
    pub fn mapping(&self, len: u64) -> io::Result<Arc<MmapRaw>> {
        self.with_mapping(len, |mapping| Arc::clone(&mapping.map))
    }

    /// Whether `file[start..start + len]` is in the page cache: one cachestat(2)
    /// ([`page_cache::all_cached`]), or before Linux 6.5 one mincore(2) per 512 pages
    /// on the shared mapping (no fault); then a one-byte `preadv2(RWF_NOWAIT)` of the
    /// first and the last page, because both count a page that is present but whose
    /// read is still in flight. Read-ahead fills a span in order, so the last page read
    /// in means the span is.
    pub fn residency(&self, start: u64, len: u64) -> Residency {
        if len == 0 {
            return Residency::Resident;
        }
        let Some(end) = start.checked_add(len) else {
            return Residency::Unknown;
        };
        let cached = match page_cache::all_cached(&self.file, start, len) {
            Cached::All(all) => Some(all),
            Cached::Hidden => None,
            Cached::Unanswered => self.all_cached_by_mincore(start, end),
        };
        match cached {
            Some(true) if self.read_in(start) && self.read_in(end - 1) => Residency::Resident,
            Some(_) => Residency::Cold,
            None => Residency::Unknown,
        }
    }

    /// Whether every page of `file[start..end]` is in the page cache by mincore(2) on
    /// the shared mapping; `None` where mincore cannot tell (it would lie, or the file
    /// cannot be mapped).
    fn all_cached_by_mincore(&self, start: u64, end: u64) -> Option<bool> {
        self.with_mapping(end, |mapping| {
            mapping
                .residency_visible
                .then(|| all_resident(&mapping.map, start as usize, end as usize))
        })
        .ok()
        .flatten()
        .and_then(Result::ok)
    }

    /// As [`SharedFile::residency`], but a span that lies inside one found resident in
    /// the last [`RESIDENT_TRUSTED_FOR`] is taken for resident with no syscall, and a
    /// span found resident now is remembered (the last few per file).
    pub fn residency_trusting_recent(&self, start: u64, len: u64) -> Residency {
        let end = start.saturating_add(len);
        let now = Instant::now();
        let lock = || self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = now.checked_sub(RESIDENT_TRUSTED_FOR) {
            if lock().cover(start, end, since) {
                return Residency::Resident;
            }
        }
        let residency = self.residency(start, len);
        if residency == Residency::Resident {
            let file_len = || self.file.metadata().map_or(end, |m| m.len());
            lock().record(start, end, now, file_len);
        }
        residency
    }

    /// Whether the byte at `offset` can be read without waiting for the disk.
    ///
    /// A file system that cannot say (`EOPNOTSUPP`: tmpfs before Linux 6.6, some
    /// network file systems) leaves mincore's word standing.
    fn read_in(&self, offset: u64) -> bool {
        let mut byte = [0u8; 1];
        let mut bufs = [io::IoSliceMut::new(&mut byte)];
        let flags = rustix::io::ReadWriteFlags::NOWAIT;
        // 0 (past the end) waits for nothing either.
        match rustix::io::preadv2(&self.file, &mut bufs, offset, flags) {
            Ok(_) | Err(rustix::io::Errno::OPNOTSUPP) => true,
            Err(_) => false,
        }
    }

    fn with_mapping<T>(&self, len: u64, f: impl FnOnce(&Mapping) -> T) -> io::Result<T> {
        let mut mapping = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = mapping.as_ref().filter(|m| m.map.len() as u64 >= len) {
            return Ok(f(current));
        }
        let page = rustix::param::page_size() as u64;
        let file_len = self.file.metadata()?.len();
        // One page past the end of the file (and of `len`): see `residency_visible`.
        let spare = len.max(file_len).next_multiple_of(page);
        let too_large = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "file larger than the address space",
            )
        };
        let map_len = usize::try_from(spare + page).map_err(|_| too_large())?;
        let map = Arc::new(
            MmapOptions::new()
                .len(map_len)
                .map_raw_read_only(&self.file)?,
        );
        let spare = spare as usize;
        let residency_visible = all_resident(&map, spare, spare + 1).is_ok_and(|cached| !cached);
        Ok(f(mapping.insert(Mapping {
            map,
            residency_visible,
        })))
    }
}

/// Whether every page of `map[start..end]` is in the page cache, by mincore(2).
fn all_resident(map: &MmapRaw, start: usize, end: usize) -> io::Result<bool> {
    const PAGES_PER_CALL: usize = 512;
    let page = rustix::param::page_size();
    let end = end.min(map.len());
    let mut at = start - start % page;
    let mut vec = [0u8; PAGES_PER_CALL];
    while at < end {
        let len = (end - at).min(PAGES_PER_CALL * page);
        let pages = len.div_ceil(page);
        // SAFETY: mincore(2) reads no memory of the range, it only looks the pages up;
        // `at` is page-aligned and `at..at + len` lies inside the mapping, which `map`
        // keeps alive. It writes one byte per page of the range, `pages` <= vec.len().
        let rc = unsafe {
            libc::mincore(
                map.as_ptr().add(at).cast_mut().cast(),
                len,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if vec[..pages].iter().any(|&v| v & 1 == 0) {
            return Ok(false);
        }
        at += len;
    }
    Ok(true)
}

impl Deref for SharedFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd as _;

    #[test]
    fn recent_spans_cover_what_they_hold_while_fresh_one_per_window() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(50);
        let mut recent = RecentSpans::default();
        assert!(!recent.cover(0, 1, t0), "nothing recorded");
        recent.record(0, 100, later, || 10 * VERDICT_SPAN);
        assert_eq!(recent.slots.len(), 10, "one slot per window of the file");
        assert!(recent.cover(0, 100, t0));
        assert!(recent.cover(10, 20, later));
        assert!(!recent.cover(50, 101, t0), "reaches past the span");
        assert!(
            !recent.cover(0, 100, later + Duration::from_nanos(1)),
            "too old"
        );
        // Every other window has a slot of its own: the first window's verdict stays.
        for window in 1..10 {
            let start = window * VERDICT_SPAN;
            recent.record(start, start + VERDICT_SPAN, later, || unreachable!());
        }
        assert!(recent.cover(0, 100, t0), "kept beside nine other windows");
        assert!(recent.cover(9 * VERDICT_SPAN + 5, 10 * VERDICT_SPAN, t0));
        assert!(
            !recent.cover(VERDICT_SPAN - 1, VERDICT_SPAN + 1, t0),
            "spans two windows"
        );
    }

    #[test]
    fn a_large_file_shares_slots_between_far_windows() {
        let t0 = Instant::now();
        let mut recent = RecentSpans::default();
        recent.record(0, VERDICT_SPAN, t0, || 1000 * VERDICT_SPAN);
        assert_eq!(recent.slots.len(), VERDICT_SLOTS as usize);
        let far = VERDICT_SLOTS * VERDICT_SPAN;
        recent.record(far, far + VERDICT_SPAN, t0, || unreachable!());
        assert!(recent.cover(far, far + 1, t0));
        assert!(
            !recent.cover(0, 1, t0),
            "the window 64 windows on took its slot"
        );
        let mut small = RecentSpans::default();
        small.record(0, 4096, t0, || 4096);
        assert_eq!(small.slots.len(), 1, "a small file keeps one verdict");
    }

    #[test]
    fn a_cold_span_is_never_remembered() {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut temp, &vec![1u8; 1 << 20]).unwrap();
        temp.as_file().sync_all().unwrap();
        let file = File::open(temp.path()).unwrap();
        rustix::fs::fadvise(file.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let shared = SharedFile::new(file);
        if shared.residency(0, 1 << 20) != Residency::Cold {
            eprintln!("skipped: the temporary directory keeps files in memory (tmpfs)");
            return;
        }
        assert_eq!(
            shared.residency_trusting_recent(0, 1 << 20),
            Residency::Cold
        );
        assert_eq!(
            shared.residency_trusting_recent(0, 1 << 20),
            Residency::Cold
        );
        // Read in: found resident, and remembered.
        let mut scratch = vec![0u8; 1 << 20];
        rustix::io::pread(&*shared, &mut scratch, 0).unwrap();
        let before = Instant::now();
        assert_eq!(
            shared.residency_trusting_recent(0, 1 << 20),
            Residency::Resident
        );
        let recent = shared.recent.lock().unwrap();
        assert!(
            recent.cover(4096, 8192, before),
            "remembered as of the probe"
        );
    }

    #[test]
    fn cachestat_and_mincore_agree() {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut temp, &vec![3u8; 1 << 20]).unwrap();
        temp.as_file().sync_all().unwrap();
        let shared = SharedFile::new(File::open(temp.path()).unwrap());
        // All dropped (a part of a large folio cannot be), then the first half read
        // back with the kernel's read-ahead off.
        rustix::fs::fadvise(shared.as_fd(), 0, None, rustix::fs::Advice::DontNeed).unwrap();
        rustix::fs::fadvise(shared.as_fd(), 0, None, rustix::fs::Advice::Random).unwrap();
        let mut scratch = vec![0u8; 1 << 19];
        rustix::io::pread(&*shared, &mut scratch, 0).unwrap();
        let spans = [
            (0, 1 << 19),
            (4096, 100),
            (0, 1 << 20),
            ((1 << 19) + 1, 4096),
        ];
        for (start, len) in spans {
            let by_mincore = shared.all_cached_by_mincore(start, start + len);
            match page_cache::all_cached(&shared, start, len) {
                Cached::All(all) => assert_eq!(Some(all), by_mincore, "{start}+{len}"),
                Cached::Hidden | Cached::Unanswered => {
                    eprintln!("skipped: no cachestat(2) here");
                    return;
                }
            }
        }
        if shared.all_cached_by_mincore(0, 1 << 20) == Some(true) {
            eprintln!("skipped: the temporary directory keeps files in memory (tmpfs)");
        }
    }
}

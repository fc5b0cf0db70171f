//! An open file that responses share: its descriptor, one read-only mapping of the
//! whole file made on first use, and what mincore(2) says about its pages (with the
//! spans it lately found cached, see [`SharedFile::residency_trusting_recent`]).

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

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
}

/// How long a span found resident is taken for resident without asking the kernel
/// again. Every response that sends a hot file would otherwise probe each of its
/// windows (a mincore(2) of 512 page-cache lookups and two preadv2(2) calls per 2 MiB);
/// with this, a window read by a hundred downloads a second is probed ten times a
/// second. The cost of a verdict gone stale (pages evicted in those 100 ms) is one
/// syscall that waits for the disk on the event loop, as `--cold-reads inline` would.
pub const RESIDENT_TRUSTED_FOR: Duration = Duration::from_millis(100);

/// Spans kept, the oldest replaced first: a hot file's windows, or the ranges of a few.
const RECENT_SPANS: usize = 8;

/// The last spans of a file found resident, each with when.
#[derive(Debug, Default)]
struct RecentSpans {
    spans: [Option<(u64, u64, Instant)>; RECENT_SPANS],
    /// The slot written next (the oldest).
    next: usize,
}

impl RecentSpans {
    /// Whether `start..end` lies in one span found resident since `since`.
    fn cover(&self, start: u64, end: u64, since: Instant) -> bool {
        self.spans
            .iter()
            .flatten()
            .any(|&(from, to, at)| from <= start && end <= to && at >= since)
    }

    /// Notes that `start..end` was found resident at `at`.
    fn record(&mut self, start: u64, end: u64, at: Instant) {
        self.spans[self.next] = Some((start, end, at));
        self.next = (self.next + 1) % RECENT_SPANS;
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
    /// This process cannot tell: mincore(2) hides residency of files it neither owns
    /// nor may write, or the file cannot be mapped.
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
        }
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

    /// Whether `file[start..start + len]` is in the page cache: one mincore(2) per 512
    /// pages on the shared mapping (no fault), then a one-byte `preadv2(RWF_NOWAIT)`
    /// of the first and the last page, because mincore counts a page that is present
    /// but whose read is still in flight. Read-ahead fills a span in order, so the
    /// last page read in means the span is.
    pub fn residency(&self, start: u64, len: u64) -> Residency {
        if len == 0 {
            return Residency::Resident;
        }
        let Some(end) = start.checked_add(len) else {
            return Residency::Unknown;
        };
        let probed = self.with_mapping(end, |mapping| {
            mapping
                .residency_visible
                .then(|| all_resident(&mapping.map, start as usize, end as usize))
        });
        match probed {
            Ok(Some(Ok(true))) if self.read_in(start) && self.read_in(end - 1) => {
                Residency::Resident
            }
            Ok(Some(Ok(_))) => Residency::Cold,
            _ => Residency::Unknown,
        }
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
            lock().record(start, end, now);
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
    fn recent_spans_cover_what_they_hold_while_fresh_and_drop_the_oldest() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(50);
        let mut recent = RecentSpans::default();
        assert!(!recent.cover(0, 1, t0), "nothing recorded");
        recent.record(0, 100, later);
        assert!(recent.cover(0, 100, t0));
        assert!(recent.cover(10, 20, later));
        assert!(!recent.cover(50, 101, t0), "reaches past the span");
        assert!(
            !recent.cover(0, 100, later + Duration::from_nanos(1)),
            "too old"
        );
        for i in 1..=RECENT_SPANS as u64 {
            recent.record(i * 1000, i * 1000 + 10, later);
        }
        assert!(!recent.cover(0, 100, t0), "the oldest span was replaced");
        assert!(recent.cover(1000, 1010, t0) && recent.cover(8000, 8010, t0));
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
}

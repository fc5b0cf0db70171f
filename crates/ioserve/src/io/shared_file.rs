//! An open file that responses share: its descriptor, one read-only mapping of the
//! whole file made on first use, and what mincore(2) says about its pages.

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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

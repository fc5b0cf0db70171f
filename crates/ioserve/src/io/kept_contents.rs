//! Small files kept in memory (`--small-file-cache`): the sendfile strategy copies a
//! body of at most [`SMALL_BODY`](crate::io::strategy::SMALL_BODY) bytes through the
//! process anyway (it goes out in one write with the head), and reading it from the
//! file each time, one `pread` per request, took about a tenth of the server's CPU on
//! 4 KiB requests. A file in the open-file cache keeps its bytes here after the first
//! such read, and later responses write them from memory.
//!
//! Correctness rules:
//! - Kept bytes belong to one version of the file, as `fstat` tells it: size, mtime
//!   and ctime to the nanosecond. Each request's `fstat` ([`KeptContents::observe`])
//!   drops bytes of another version, so headers and body always come from the same
//!   version (a file rewritten in place is read again at once).
//! - Only a settled version is kept: one whose ctime and mtime are at least
//!   [`SETTLED_AFTER`] in the past. A file system stamps a change with the clock of the
//!   moment, truncated to its granularity (a jiffy for ext4, 2 s for FAT), so any change
//!   after a settled version gets another ctime; changes within one tick of a version
//!   still being written could share its stamps, and such a version is read anew each
//!   time, as without this cache.
//! - The bytes are read after the version was observed, and kept only if no other
//!   version was observed meanwhile (a [`Ticket`]): bytes newer than the version they
//!   are kept for are dropped by the next `fstat`, which sees the newer version.
//! - What is kept counts against one budget shared by the workers ([`ContentBudget`]);
//!   a file that does not fit is read each time. Its bytes are freed with the file's
//!   open-file-cache entry (and the last response still sending them).
//!
//! A write through a shared writable mapping that is already dirty changes the bytes
//! without touching the timestamps until the kernel writes the page back; such a file
//! is served as of its last stamped change for up to that long. Serving a file that a
//! process is rewriting through a mapping has no consistent answer anyway.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long ago a version's last change must be for its bytes to be kept: more than the
/// coarsest timestamp granularity of a Linux file system (FAT's 2 s).
pub const SETTLED_AFTER: Duration = Duration::from_secs(3);

/// Bytes of kept contents, shared by every worker's open-file cache, and their limit.
#[derive(Debug)]
pub struct ContentBudget {
    limit: usize,
    used: AtomicUsize,
}

impl ContentBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<ContentBudget> {
        Arc::new(ContentBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes kept now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` from the budget, if they fit.
    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    /// Returns `bytes` taken before.
    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What changes whenever a file's bytes do, as `fstat` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Version {
    fn of(meta: &Metadata) -> Version {
        Version {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the version's last change (its later stamp) is [`SETTLED_AFTER`] before
    /// `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let latest = self.mtime.max(self.ctime);
        let changed = match u64::try_from(latest.0) {
            Ok(secs) => UNIX_EPOCH + Duration::new(secs, latest.1.clamp(0, 999_999_999) as u32),
            // Stamped before 1970: long settled.
            Err(_) => return true,
        };
        now.duration_since(changed)
            .is_ok_and(|ago| ago >= SETTLED_AFTER)
    }
}

/// A permission to keep bytes read after it was given: void once another version of
/// the file is observed.
#[derive(Debug)]
#[must_use]
pub struct Ticket {
    generation: u64,
}

/// One open file's kept bytes, the version they belong to, and the budget they count
/// against.
#[derive(Debug)]
pub struct KeptContents {
    budget: Arc<ContentBudget>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The version the latest `fstat` showed.
    version: Option<Version>,
    /// Counts the versions observed: a [`Ticket`] of an older one is void.
    generation: u64,
    /// Whether `version` is settled (see [`Version::settled`]).
    settled: bool,
    /// The whole file as of `version`.
    bytes: Option<Arc<[u8]>>,
}

impl KeptContents {
    /// Nothing kept yet, counted against `budget`.
    pub fn new(budget: Arc<ContentBudget>) -> KeptContents {
        KeptContents {
            budget,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the version that `meta`, a request's `fstat` of the file, shows: bytes
    /// kept for another version are dropped.
    pub fn observe(&self, meta: &Metadata) {
        let version = Version::of(meta);
        let mut state = self.lock();
        if state.version != Some(version) {
            state.version = Some(version);
            state.generation += 1;
            state.settled = version.settled(SystemTime::now());
            if let Some(dropped) = state.bytes.take() {
                self.budget.give_back(dropped.len());
            }
        } else if !state.settled {
            state.settled = version.settled(SystemTime::now());
        }
    }

    /// The whole file as of the version last observed, if kept.
    pub fn bytes(&self) -> Option<Arc<[u8]>> {
        self.lock().bytes.clone()
    }

    /// A ticket to keep the file's bytes about to be read, where they would be kept:
    /// none are yet and the version last observed is settled.
    pub fn ticket(&self) -> Option<Ticket> {
        let state = self.lock();
        (state.settled && state.bytes.is_none()).then_some(Ticket {
            generation: state.generation,
        })
    }

    /// Keeps `bytes`, the whole file read after `ticket` was given, unless another
    /// version was observed since, they are not the size of the version, or they do not
    /// fit the budget.
    pub fn keep(&self, ticket: Ticket, bytes: &[u8]) {
        let mut state = self.lock();
        let current = state.generation == ticket.generation && state.bytes.is_none();
        let whole = state.version.is_some_and(|v| v.len == bytes.len() as u64);
        if current && whole && self.budget.take(bytes.len()) {
            state.bytes = Some(Arc::from(bytes));
        }
    }
}

impl Drop for KeptContents {
    fn drop(&mut self) {
        if let Some(bytes) = self.lock().bytes.take() {
            self.budget.give_back(bytes.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, FileTimes};
    use std::io::Write;

    /// A file holding `bytes`, open for reading, and its path.
    fn file_with(dir: &tempfile::TempDir, bytes: &[u8]) -> (File, std::path::PathBuf) {
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        file.write_all(bytes).unwrap();
        (File::open(&path).unwrap(), path)
    }

    fn version(len: u64, changed: SystemTime) -> Version {
        let since = changed.duration_since(UNIX_EPOCH).unwrap();
        let stamp = (since.as_secs() as i64, i64::from(since.subsec_nanos()));
        Version {
            len,
            mtime: stamp,
            ctime: stamp,
        }
    }

    #[test]
    fn a_version_settles_after_the_margin_by_its_later_stamp() {
        let now = SystemTime::now();
        assert!(version(1, now - SETTLED_AFTER).settled(now));
        assert!(!version(1, now - SETTLED_AFTER + Duration::from_millis(1)).settled(now));
        // A stamp in the future (a clock set back, a copied mtime) is not settled.
        assert!(!version(1, now + Duration::from_secs(60)).settled(now));
        let mut touched = version(1, now - Duration::from_secs(60));
        touched.ctime = version(1, now).ctime;
        assert!(!touched.settled(now));
        assert!(Version {
            len: 1,
            mtime: (-5, 0),
            ctime: (-5, 0)
        }
        .settled(now));
    }

    #[test]
    fn a_fresh_file_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = file_with(&dir, b"fresh");
        let kept = KeptContents::new(ContentBudget::new(1 << 20));
        kept.observe(&file.metadata().unwrap());
        assert!(kept.ticket().is_none(), "changed just now: not settled");
        assert!(kept.bytes().is_none());
    }

    /// A kept state as if `meta` had been observed and found settled.
    fn settled(kept: &KeptContents, meta: &Metadata) {
        kept.observe(meta);
        kept.lock().settled = true;
    }

    #[test]
    fn bytes_are_kept_for_their_version_and_dropped_by_another() {
        let dir = tempfile::tempdir().unwrap();
        let (file, path) = file_with(&dir, b"first");
        let budget = ContentBudget::new(1 << 20);
        let kept = KeptContents::new(Arc::clone(&budget));
        settled(&kept, &file.metadata().unwrap());
        let ticket = kept.ticket().expect("settled, nothing kept");
        kept.keep(ticket, b"first");
        assert_eq!(kept.bytes().as_deref(), Some(&b"first"[..]));
        assert_eq!(budget.used(), 5);
        assert!(kept.ticket().is_none(), "kept already");
        // The same size and mtime, other bytes: the ctime tells.
        let mtime = file.metadata().unwrap().modified().unwrap();
        std::fs::write(&path, b"other").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_times(FileTimes::new().set_modified(mtime))
            .unwrap();
        kept.observe(&file.metadata().unwrap());
        assert!(kept.bytes().is_none());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_ticket_is_void_once_another_version_is_observed() {
        let dir = tempfile::tempdir().unwrap();
        let (file, path) = file_with(&dir, b"first");
        let kept = KeptContents::new(ContentBudget::new(1 << 20));
        settled(&kept, &file.metadata().unwrap());
        let ticket = kept.ticket().unwrap();
        // Read before the change, kept after another request saw the change (and, as
        // much later as it may be, found the new version settled).
        std::fs::write(&path, b"second").unwrap();
        settled(&kept, &file.metadata().unwrap());
        kept.keep(ticket, b"first");
        assert!(kept.bytes().is_none());
        // Bytes of the wrong size for the version are not kept either.
        let ticket = kept.ticket().unwrap();
        kept.keep(ticket, b"first");
        assert!(kept.bytes().is_none());
    }

    #[test]
    fn the_budget_bounds_what_every_file_keeps_and_gets_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = file_with(&dir, b"12345");
        let meta = file.metadata().unwrap();
        let budget = ContentBudget::new(8);
        let one = KeptContents::new(Arc::clone(&budget));
        let two = KeptContents::new(Arc::clone(&budget));
        settled(&one, &meta);
        settled(&two, &meta);
        one.keep(one.ticket().unwrap(), b"12345");
        two.keep(two.ticket().unwrap(), b"12345");
        assert!(one.bytes().is_some());
        assert!(two.bytes().is_none(), "5 + 5 bytes exceed the budget of 8");
        assert_eq!(budget.used(), 5);
        drop(one);
        assert_eq!(budget.used(), 0);
        two.keep(two.ticket().unwrap(), b"12345");
        assert_eq!(budget.used(), 5);
    }
}

//! An open-file cache, like nginx's `open_file_cache`: a hot file's descriptor is kept
//! open so that a request costs one `fstat` instead of a path walk, an open and a close.
//!
//! Correctness rules:
//! - Every hit `fstat`s the cached descriptor, so headers always describe the bytes that
//!   will be sent (a file rewritten in place gets its new size, mtime and ETag at once).
//! - A path is resolved again once its entry is older than the validity (1 s by
//!   default), so a file replaced by `rename` or deleted is seen within that time;
//!   nginx's default for the same check is 60 s. One request resolves it (on the
//!   blocking pool, [`OpenFileCache::lookup`]); those that come meanwhile are served
//!   from the entry (each `fstat`s it), not sent to the pool as well: a hot path asked
//!   for by many connections at once took a pool thread for each of them every
//!   second, and tokio keeps the threads of such a burst while any work reaches them.
//! - Each worker has its own shard (no lock contention between workers), a
//!   least-recently-used list bounded in entries: a miss on a full shard drops the
//!   least recently used file in O(1).
//! - [`OpenFileCache::sweep`], run every validity period, closes the descriptors (and
//!   mappings) of files deleted or replaced since they were opened (no links left), so
//!   their disk space is returned within about twice the validity even if nobody asks
//!   for them again.
//! - A cached file of at most [`SMALL_BODY`] bytes may keep its bytes in memory, within
//!   a budget shared by the workers (`--small-file-cache`); each hit's `fstat` tells
//!   them which version the response describes ([`crate::io::kept_contents`]).

use std::fs::{File, Metadata};
use std::io;
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ioserve_simd::hash::RandomState;
use lru::LruCache;

use crate::io::kept_contents::ContentBudget;
use crate::io::root::Root;
use crate::io::shared_file::SharedFile;
use crate::io::strategy::SMALL_BODY;

/// What a path opened to.
#[derive(Debug)]
pub enum Opened {
    /// A regular file (possibly from the cache).
    File(OpenFile),
    /// Anything else (a directory, a FIFO): never cached.
    Other(File, Metadata),
}

/// An open regular file and its metadata, as of this request.
#[derive(Clone, Debug)]
pub struct OpenFile {
    /// The descriptor (and mapping), shared with the cache.
    pub file: Arc<SharedFile>,
    /// Its `fstat`, taken for this request.
    pub meta: Metadata,
}

#[derive(Debug)]
struct Entry {
    file: Arc<SharedFile>,
    resolved: Instant,
    /// When a request set out to resolve the path again (the entry being stale); the
    /// claim lapses after the validity, should that resolution never end.
    resolving: Option<Instant>,
}

/// What [`OpenFileCache::lookup`] found for a path.
enum Found {
    /// Nothing cached: the path must be opened.
    Nothing,
    /// The cached file, to serve: fresh, or stale while another request resolves the
    /// path again.
    Serve(Arc<SharedFile>),
    /// A stale entry that this request resolves again.
    Resolve,
}

/// One worker's entries, least recently used last, keyed by the workspace's AES hash
/// (random keys per shard).
type Shard = Mutex<LruCache<PathBuf, Entry, RandomState>>;

/// The cache, one shard per worker; no shards when it is disabled.
#[derive(Debug)]
pub struct OpenFileCache {
    shards: Box<[Shard]>,
    validity: Duration,
    /// What the cached small files may keep in memory; `None` where they keep nothing.
    kept: Option<Arc<ContentBudget>>,
}

impl OpenFileCache {
    /// A cache of at most `capacity` files per worker (0 disables it), each path
    /// resolved again after `validity`, whose small files keep at most `kept_bytes` in
    /// memory, all workers together (0: none).
    pub fn new(
        workers: usize,
        capacity: usize,
        validity: Duration,
        kept_bytes: usize,
    ) -> OpenFileCache {
        let shards: Box<[Shard]> = match NonZeroUsize::new(capacity) {
            Some(capacity) => (0..workers.max(1))
                .map(|_| Mutex::new(LruCache::with_hasher(capacity, RandomState::new())))
                .collect(),
            None => Box::default(),
        };
        let kept = (!shards.is_empty() && kept_bytes > 0).then(|| ContentBudget::new(kept_bytes));
        OpenFileCache {
            shards,
            validity,
            kept,
        }
    }

    /// How often [`OpenFileCache::sweep`] should run: the validity period.
    pub fn sweep_interval(&self) -> Option<Duration> {
        (!self.shards.is_empty()).then_some(self.validity)
    }

    /// Closes the entries whose file has no name left (deleted, or replaced by a
    /// rename): their descriptors, and the disk space they pin, are released once the
    /// downloads still using them end. Returns how many entries were dropped.
    pub fn sweep(&self) -> usize {
        self.drop_where(|meta| meta.nlink() == 0)
    }

    /// Drops every entry (of every worker) for the file `(device, inode)`: after a read
    /// of it failed, the next request opens it anew. Returns how many were dropped.
    pub fn forget(&self, identity: (u64, u64)) -> usize {
        self.drop_where(|meta| (meta.dev(), meta.ino()) == identity)
    }

    /// Drops, in every shard, the entries whose file's `fstat` satisfies `doomed`.
    /// Returns how many were dropped.
    fn drop_where(&self, doomed: impl Fn(&Metadata) -> bool) -> usize {
        let mut dropped = 0;
        for shard in &self.shards {
            let mut entries = shard.lock().unwrap_or_else(|e| e.into_inner());
            let matching: Vec<PathBuf> = entries
                .iter()
                .filter(|(_, entry)| entry.file.metadata().is_ok_and(|m| doomed(&m)))
                .map(|(path, _)| path.clone())
                .collect();
            for path in &matching {
                entries.pop(path);
            }
            dropped += matching.len();
        }
        dropped
    }

    /// `relative`'s file if the cache holds it and its path needs no resolving now (a
    /// fresh entry, or a stale one that another request is resolving again): it costs
    /// an `fstat` of an open descriptor, which never waits for the disk. `None` where
    /// this request must walk the path with [`OpenFileCache::open`]: nothing cached,
    /// or a stale entry, which this request then claims.
    pub fn lookup(&self, worker: usize, relative: &Path) -> Option<io::Result<OpenFile>> {
        match self.find(worker, relative, Instant::now()) {
            Found::Serve(file) => Some(file.fstat().map(|meta| OpenFile { file, meta })),
            Found::Nothing | Found::Resolve => None,
        }
    }

    /// `relative`'s entry in `worker`'s shard as of `now`, claiming a stale one that no
    /// request is resolving yet.
    fn find(&self, worker: usize, relative: &Path, now: Instant) -> Found {
        let Some(shard) = self.shards.get(worker % self.shards.len().max(1)) else {
            return Found::Nothing;
        };
        let mut entries = shard.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = entries.get_mut(relative) else {
            return Found::Nothing;
        };
        let fresh = |since: Instant| now.saturating_duration_since(since) < self.validity;
        if fresh(entry.resolved) || entry.resolving.is_some_and(fresh) {
            return Found::Serve(Arc::clone(&entry.file));
        }
        entry.resolving = Some(now);
        Found::Resolve
    }

    /// `relative`'s cached file in `worker`'s shard, and whether its path was resolved
    /// within the validity before `now`.
    fn entry(
        &self,
        worker: usize,
        relative: &Path,
        now: Instant,
    ) -> Option<(Arc<SharedFile>, bool)> {
        let shard = self.shards.get(worker % self.shards.len().max(1))?;
        let mut entries = shard.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(relative)?;
        let fresh = now.duration_since(entry.resolved) < self.validity;
        Some((Arc::clone(&entry.file), fresh))
    }

    /// Opens `relative` under `root`, from the cache when possible.
    pub fn open(&self, worker: usize, root: &Root, relative: &Path) -> io::Result<Opened> {
        if self.shards.is_empty() {
            return Self::open_uncached(root, relative, None);
        }
        let shard = &self.shards[worker % self.shards.len()];
        let now = Instant::now();
        let cached = match self.entry(worker, relative, now) {
            Some((file, true)) => {
                let meta = file.fstat()?;
                return Ok(Opened::File(OpenFile { file, meta }));
            }
            stale => stale.map(|(file, _)| file),
        };
        let opened = match Self::open_uncached(root, relative, self.kept.as_ref()) {
            Ok(opened) => opened,
            Err(error) => {
                // The path no longer opens (deleted, say): its stale entry, which
                // lookups would serve while this request held the claim, goes.
                shard
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop(relative);
                return Err(error);
            }
        };
        let Opened::File(mut open) = opened else {
            shard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop(relative);
            return Ok(opened);
        };
        // The path still names the cached inode: keep the cached descriptor and its
        // mapping, and drop the new descriptor.
        if let Some(file) = cached {
            let same = file.fstat()?;
            if (same.dev(), same.ino()) == (open.meta.dev(), open.meta.ino()) {
                open = OpenFile { file, meta: same };
            }
        }
        // Full: the least recently used entry goes.
        shard.lock().unwrap_or_else(|e| e.into_inner()).put(
            relative.to_path_buf(),
            Entry {
                file: Arc::clone(&open.file),
                resolved: now,
                resolving: None,
            },
        );
        Ok(Opened::File(open))
    }

    /// Opens `relative` under `root`; a small regular file may keep its bytes within
    /// `kept`.
    fn open_uncached(
        root: &Root,
        relative: &Path,
        kept: Option<&Arc<ContentBudget>>,
    ) -> io::Result<Opened> {
        let file = root.open_file(relative)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(Opened::Other(file, meta));
        }
        let file = match kept {
            Some(budget) if meta.len() <= SMALL_BODY => {
                SharedFile::with_kept_contents(file, &meta, Arc::clone(budget))
            }
            _ => SharedFile::new(file),
        };
        Ok(Opened::File(OpenFile {
            file: Arc::new(file),
            meta,
        }))
    }

    /// Entries held by a worker's shard.
    #[cfg(test)]
    fn len(&self, worker: usize) -> usize {
        self.shards
            .get(worker % self.shards.len().max(1))
            .map_or(0, |shard| {
                shard.lock().unwrap_or_else(|e| e.into_inner()).len()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    fn file(opened: io::Result<Opened>) -> OpenFile {
        match opened.unwrap() {
            Opened::File(open) => open,
            other => panic!("not a file: {other:?}"),
        }
    }

    fn read(open: &OpenFile) -> String {
        let mut text = String::new();
        (&**open.file).read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn hits_see_in_place_changes_and_expire() {
        const VALIDITY: Duration = Duration::from_millis(200);
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 64, VALIDITY, 0);
        // The stale hit is only owed while the entry is valid: a run the scheduler
        // stretches past the validity proves nothing, so it is tried again, on a path
        // of its own (a loaded host may stall a thread for longer than 200 ms).
        for attempt in 0..10 {
            let name = format!("a{attempt}");
            let path = dir.path().join(&name);
            std::fs::write(&path, b"one").unwrap();
            let created_by = std::time::Instant::now();
            let first = file(cache.open(0, &root, Path::new(&name)));
            // Rewritten in place: same inode, new size, seen on the next hit.
            std::fs::write(&path, b"three").unwrap();
            let hit = file(cache.open(0, &root, Path::new(&name)));
            assert!(Arc::ptr_eq(&first.file, &hit.file));
            assert_eq!(hit.meta.len(), 5);

            // Replaced by rename: the old inode until the entry expires, then the new one.
            let staged = dir.path().join("staged");
            std::fs::write(&staged, b"renamed").unwrap();
            std::fs::rename(&staged, &path).unwrap();
            let stale = file(cache.open(0, &root, Path::new(&name)));
            if created_by.elapsed() >= VALIDITY {
                continue;
            }
            assert_eq!(stale.meta.ino(), first.meta.ino());
            // sleep never returns early: the entry has expired after it.
            std::thread::sleep(VALIDITY + Duration::from_millis(50));
            let fresh = file(cache.open(0, &root, Path::new(&name)));
            assert_ne!(fresh.meta.ino(), first.meta.ino());
            assert_eq!(read(&fresh), "renamed");
            return;
        }
        panic!("in 10 attempts, no rename was looked up within the {VALIDITY:?} validity");
    }

    #[test]
    fn one_request_resolves_a_stale_path_and_the_others_are_served_meanwhile() {
        const VALIDITY: Duration = Duration::from_secs(60);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"hot").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 8, VALIDITY, 0);
        let before = Instant::now();
        let first = file(cache.open(0, &root, Path::new("a")));
        let stale = before + VALIDITY + Duration::from_secs(1);
        let served = |found: Found| match found {
            Found::Serve(file) => Arc::ptr_eq(&file, &first.file),
            Found::Nothing | Found::Resolve => false,
        };
        assert!(matches!(
            cache.find(0, Path::new("a"), stale),
            Found::Resolve
        ));
        // Everyone else, while that request walks the path: the entry, not the pool.
        for later in 0..3 {
            let now = stale + Duration::from_millis(later);
            assert!(
                served(cache.find(0, Path::new("a"), now)),
                "sent to the pool"
            );
        }
        // A resolution that never ended gives its claim up after the validity.
        let lapsed = stale + VALIDITY + Duration::from_secs(1);
        assert!(matches!(
            cache.find(0, Path::new("a"), lapsed),
            Found::Resolve
        ));
        assert!(matches!(
            cache.find(0, Path::new("b"), stale),
            Found::Nothing
        ));
    }

    #[test]
    fn a_stale_entry_whose_path_no_longer_opens_is_dropped() {
        const VALIDITY: Duration = Duration::from_millis(50);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"gone soon").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 8, VALIDITY, 0);
        file(cache.open(0, &root, Path::new("a")));
        std::fs::remove_file(dir.path().join("a")).unwrap();
        // sleep never returns early: the entry is stale after it.
        std::thread::sleep(VALIDITY + Duration::from_millis(30));
        assert!(cache.lookup(0, Path::new("a")).is_none(), "claimed");
        let error = cache.open(0, &root, Path::new("a")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        // Not served from the entry that the claim would otherwise keep serving.
        assert!(cache.lookup(0, Path::new("a")).is_none());
        assert_eq!(cache.len(0), 0);
    }

    #[test]
    fn an_unchanged_inode_keeps_its_entry_past_the_validity() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"same").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 8, Duration::from_millis(50), 0);
        let first = file(cache.open(0, &root, Path::new("a")));
        let mapped = first.file.mapping(4).unwrap();
        std::thread::sleep(Duration::from_millis(80));
        let again = file(cache.open(0, &root, Path::new("a")));
        assert!(Arc::ptr_eq(&first.file, &again.file), "same descriptor");
        assert!(
            Arc::ptr_eq(&mapped, &again.file.mapping(4).unwrap()),
            "same mapping"
        );
    }

    #[test]
    fn bounded_and_only_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(i.to_string()), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(2, 3, Duration::from_secs(60), 0);
        for i in 0..5 {
            file(cache.open(1, &root, Path::new(&i.to_string())));
        }
        assert_eq!(cache.len(1), 3);
        assert_eq!(cache.len(0), 0, "shards are per worker");
        // The least recently used went: 0 and 1 (2 was used after them).
        assert!(matches!(
            cache.open(1, &root, Path::new("d")),
            Ok(Opened::Other(..))
        ));
        let missing = cache.open(1, &root, Path::new("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);

        let off = OpenFileCache::new(1, 0, Duration::from_secs(60), 0);
        file(off.open(0, &root, Path::new("0")));
        assert_eq!(off.len(0), 0);
    }

    #[test]
    fn least_recently_used_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 2, Duration::from_secs(60), 0);
        let a = file(cache.open(0, &root, Path::new("a")));
        file(cache.open(0, &root, Path::new("b")));
        // a is used again, so b is the least recently used when c comes.
        file(cache.open(0, &root, Path::new("a")));
        file(cache.open(0, &root, Path::new("c")));
        let again = file(cache.open(0, &root, Path::new("a")));
        assert!(Arc::ptr_eq(&a.file, &again.file), "a stayed");
        assert_eq!(cache.len(0), 2);
    }

    #[test]
    fn sweep_closes_deleted_and_replaced_files_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["kept", "deleted", "replaced"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(2, 8, Duration::from_secs(60), 0);
        let opened: Vec<OpenFile> = ["kept", "deleted", "replaced"]
            .iter()
            .enumerate()
            .map(|(i, name)| file(cache.open(i, &root, Path::new(name))))
            .collect();
        assert_eq!(cache.sweep(), 0);
        std::fs::remove_file(dir.path().join("deleted")).unwrap();
        std::fs::write(dir.path().join("new"), b"new").unwrap();
        std::fs::rename(dir.path().join("new"), dir.path().join("replaced")).unwrap();
        assert_eq!(cache.sweep(), 2);
        assert_eq!(cache.len(0) + cache.len(1), 1);
        // Only the cache let go: a download in progress keeps its descriptor.
        assert_eq!(read(&opened[1]), "deleted");
    }

    #[test]
    fn forget_drops_a_file_from_every_worker_s_shard_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["bad", "good"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(2, 8, Duration::from_secs(60), 0);
        for worker in 0..2 {
            for name in ["bad", "good"] {
                file(cache.open(worker, &root, Path::new(name)));
            }
        }
        let bad = std::fs::metadata(dir.path().join("bad")).unwrap();
        assert_eq!(cache.forget((bad.dev(), bad.ino())), 2);
        assert_eq!((cache.len(0), cache.len(1)), (1, 1));
        assert!(cache.lookup(0, Path::new("bad")).is_none());
        assert!(cache.lookup(1, Path::new("good")).is_some());
        assert_eq!(cache.forget((bad.dev(), bad.ino())), 0);
    }
}

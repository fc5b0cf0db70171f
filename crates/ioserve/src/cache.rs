//! An open-file cache, like nginx's `open_file_cache`: a hot file's descriptor is kept
//! open so that a request costs one `fstat` instead of a path walk, an open and a close.
//!
//! Correctness rules:
//! - Every hit `fstat`s the cached descriptor, so headers always describe the bytes that
//!   will be sent (a file rewritten in place gets its new size, mtime and ETag at once).
//! - A path is resolved again once its entry is older than the validity (1 s by
//!   default), so a file replaced by `rename` or deleted is seen within that time;
//!   nginx's default for the same check is 60 s.
//! - Each worker has its own shard (no lock contention between workers), bounded in
//!   entries; when full, expired entries go first, then the least recently checked.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::path::Root;

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
    /// The descriptor, shared with the cache.
    pub file: Arc<File>,
    /// Its `fstat`, taken for this request.
    pub meta: Metadata,
}

#[derive(Debug)]
struct Entry {
    file: Arc<File>,
    resolved: Instant,
}

/// The cache, one shard per worker.
#[derive(Debug)]
pub struct OpenFileCache {
    shards: Box<[Mutex<HashMap<PathBuf, Entry>>]>,
    capacity: usize,
    validity: Duration,
}

impl OpenFileCache {
    /// A cache of at most `capacity` files per worker (0 disables it), each path
    /// resolved again after `validity`.
    pub fn new(workers: usize, capacity: usize, validity: Duration) -> OpenFileCache {
        OpenFileCache {
            shards: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            capacity,
            validity,
        }
    }

    /// Opens `relative` under `root`, from the cache when possible.
    pub fn open(&self, worker: usize, root: &Root, relative: &Path) -> io::Result<Opened> {
        if self.capacity == 0 {
            return Self::open_uncached(root, relative);
        }
        let shard = &self.shards[worker % self.shards.len()];
        let now = Instant::now();
        let cached = {
            let entries = shard.lock().unwrap_or_else(|e| e.into_inner());
            entries
                .get(relative)
                .filter(|entry| now.duration_since(entry.resolved) < self.validity)
                .map(|entry| Arc::clone(&entry.file))
        };
        if let Some(file) = cached {
            let meta = file.metadata()?;
            return Ok(Opened::File(OpenFile { file, meta }));
        }
        let opened = Self::open_uncached(root, relative)?;
        if let Opened::File(open) = &opened {
            let mut entries = shard.lock().unwrap_or_else(|e| e.into_inner());
            if entries.len() >= self.capacity && !entries.contains_key(relative) {
                self.evict(&mut entries, now);
            }
            entries.insert(
                relative.to_path_buf(),
                Entry {
                    file: Arc::clone(&open.file),
                    resolved: now,
                },
            );
        }
        Ok(opened)
    }

    fn open_uncached(root: &Root, relative: &Path) -> io::Result<Opened> {
        let file = root.open_file(relative)?;
        let meta = file.metadata()?;
        Ok(if meta.is_file() {
            Opened::File(OpenFile {
                file: Arc::new(file),
                meta,
            })
        } else {
            Opened::Other(file, meta)
        })
    }

    /// Makes room for one entry: expired ones first, else the least recently resolved.
    fn evict(&self, entries: &mut HashMap<PathBuf, Entry>, now: Instant) {
        entries.retain(|_, entry| now.duration_since(entry.resolved) < self.validity);
        if entries.len() >= self.capacity {
            let oldest = entries
                .iter()
                .min_by_key(|(_, entry)| entry.resolved)
                .map(|(path, _)| path.clone());
            if let Some(path) = oldest {
                entries.remove(&path);
            }
        }
    }

    /// Entries held by a worker's shard.
    pub fn len(&self, worker: usize) -> usize {
        self.shards[worker % self.shards.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Whether a worker's shard is empty.
    pub fn is_empty(&self, worker: usize) -> bool {
        self.len(worker) == 0
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
        (&*open.file).read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn hits_see_in_place_changes_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 8, Duration::from_millis(200));

        let first = file(cache.open(0, &root, Path::new("a")));
        assert_eq!(cache.len(0), 1);
        // Rewritten in place: same inode, new size, seen on the next hit.
        std::fs::write(dir.path().join("a"), b"three").unwrap();
        let hit = file(cache.open(0, &root, Path::new("a")));
        assert!(Arc::ptr_eq(&first.file, &hit.file));
        assert_eq!(hit.meta.len(), 5);

        // Replaced by rename: the old inode until the entry expires, then the new one.
        let staged = dir.path().join("a.new");
        std::fs::write(&staged, b"renamed").unwrap();
        std::fs::rename(&staged, dir.path().join("a")).unwrap();
        let stale = file(cache.open(0, &root, Path::new("a")));
        assert_eq!(stale.meta.ino(), first.meta.ino());
        std::thread::sleep(Duration::from_millis(250));
        let fresh = file(cache.open(0, &root, Path::new("a")));
        assert_ne!(fresh.meta.ino(), first.meta.ino());
        assert_eq!(read(&fresh), "renamed");
    }

    #[test]
    fn bounded_and_only_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(i.to_string()), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(2, 3, Duration::from_secs(60));
        for i in 0..5 {
            file(cache.open(1, &root, Path::new(&i.to_string())));
        }
        assert_eq!(cache.len(1), 3);
        assert!(cache.is_empty(0), "shards are per worker");
        assert!(matches!(
            cache.open(1, &root, Path::new("d")),
            Ok(Opened::Other(..))
        ));
        let missing = cache.open(1, &root, Path::new("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);

        let off = OpenFileCache::new(1, 0, Duration::from_secs(60));
        file(off.open(0, &root, Path::new("0")));
        assert!(off.is_empty(0));
    }
}

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
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memmap2::{Mmap, MmapOptions};

use crate::path::Root;

/// An open file that responses share: the descriptor and, made on first use by the
/// `mmap` strategy, one read-only mapping of the whole file.
///
/// Sharing the mapping matters: page-table entries are filled once per file instead of
/// once per response, and mapped page-cache pages count once in the server's RSS
/// instead of once per connection.
#[derive(Debug)]
pub struct SharedFile {
    file: File,
    mapping: Mutex<Option<Arc<Mmap>>>,
}

impl SharedFile {
    /// Wraps an open file.
    pub fn new(file: File) -> SharedFile {
        SharedFile {
            file,
            mapping: Mutex::new(None),
        }
    }

    /// A read-only mapping of the whole file, at least `len` (> 0) bytes long, made
    /// again when the file has grown past the current one.
    ///
    /// The bytes must never be read by this process (only handed to the kernel, as
    /// writev does): the file may shrink under the mapping, and touching a page past
    /// its new end would raise SIGBUS.
    pub fn mapping(&self, len: u64) -> io::Result<Arc<Mmap>> {
        let mut mapping = self.mapping.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = mapping.as_ref().filter(|m| m.len() as u64 >= len) {
            return Ok(Arc::clone(map));
        }
        let len = usize::try_from(len.max(self.file.metadata()?.len())).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "file larger than the address space",
            )
        })?;
        // SAFETY: a read-only private mapping. Its bytes are never read by Rust code in
        // this process (see above), so later changes to the file cannot break Rust's
        // aliasing rules or fault in our code; the kernel reports EFAULT to writev.
        let map = Arc::new(unsafe { MmapOptions::new().len(len).map(&self.file)? });
        *mapping = Some(Arc::clone(&map));
        Ok(map)
    }
}

impl Deref for SharedFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

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
        let (cached, fresh) = {
            let entries = shard.lock().unwrap_or_else(|e| e.into_inner());
            match entries.get(relative) {
                Some(entry) => (
                    Some(Arc::clone(&entry.file)),
                    now.duration_since(entry.resolved) < self.validity,
                ),
                None => (None, false),
            }
        };
        if let (Some(file), true) = (&cached, fresh) {
            let meta = file.metadata()?;
            return Ok(Opened::File(OpenFile {
                file: Arc::clone(file),
                meta,
            }));
        }
        let opened = Self::open_uncached(root, relative)?;
        let Opened::File(mut open) = opened else {
            shard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(relative);
            return Ok(opened);
        };
        // The path still names the cached inode: keep the cached descriptor and its
        // mapping, and drop the new descriptor.
        if let Some(file) = cached {
            let same = file.metadata()?;
            if (same.dev(), same.ino()) == (open.meta.dev(), open.meta.ino()) {
                open = OpenFile { file, meta: same };
            }
        }
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
        Ok(Opened::File(open))
    }

    fn open_uncached(root: &Root, relative: &Path) -> io::Result<Opened> {
        let file = root.open_file(relative)?;
        let meta = file.metadata()?;
        Ok(if meta.is_file() {
            Opened::File(OpenFile {
                file: Arc::new(SharedFile::new(file)),
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
        (&**open.file).read_to_string(&mut text).unwrap();
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
    fn an_unchanged_inode_keeps_its_entry_past_the_validity() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"same").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        let cache = OpenFileCache::new(1, 8, Duration::from_millis(50));
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

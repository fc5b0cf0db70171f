//! Whole-file SHA-256 and SHA-512 digests, computed off the event loop once per file
//! version, kept in a bounded cache, and persisted in extended attributes where the
//! filesystem allows.
//!
//! A file version is its [`VersionKey`] (device, inode, size, modification time in
//! nanoseconds). [`FileDigests::get`] never waits for a computation: it answers from
//! the cache (or, where the caller may wait for the disk, from the file's extended
//! attributes) and otherwise queues one computation per version on a small pool of
//! threads and answers `None`. A file that changes while it is hashed (its key differs
//! before and after) has its result discarded, so a changed file is never given a stale
//! digest.

use std::collections::HashSet;
use std::fs::Metadata;
use std::io;
use std::num::NonZeroUsize;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use ioserve_simd::hash::RandomState;
use lru::LruCache;
use sha2::{Digest as _, Sha256, Sha512};

use crate::io::shared_file::SharedFile;

/// Entries the cache keeps (least recently used dropped first).
const CACHE_ENTRIES: usize = 4096;
/// Threads that hash files.
const POOL_THREADS: usize = 2;
/// Bytes read per `pread` while hashing.
const READ_CHUNK: usize = 1 << 20;
/// The extended attribute holding the SHA-256 digest.
const XATTR_SHA256: &str = "user.ioserve.sha256";
/// The extended attribute holding the SHA-512 digest.
const XATTR_SHA512: &str = "user.ioserve.sha512";

/// One version of a file's content: a change of any field is a new version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionKey {
    /// The device holding the file.
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
    /// The size in bytes.
    pub size: u64,
    /// The modification time in nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl VersionKey {
    /// The version `meta` describes.
    pub fn of(meta: &Metadata) -> VersionKey {
        VersionKey {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }

    /// How the key is written beside a digest in an extended attribute.
    fn stamp(&self) -> String {
        format!("{} {} {} {}", self.dev, self.ino, self.size, self.mtime_ns)
    }
}

/// The digests of one file version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digests {
    /// SHA-256 of the whole file.
    pub sha256: [u8; 32],
    /// SHA-512 of the whole file.
    pub sha512: [u8; 64],
}

/// The digest cache and the pool that fills it.
#[derive(Debug)]
pub struct FileDigests {
    state: Arc<State>,
    /// Queues work for the pool; dropping it ends the pool's threads.
    jobs: Mutex<Sender<Job>>,
}

/// What the pool and the callers share.
#[derive(Debug)]
struct State {
    cache: Mutex<Cache>,
    /// Whether the "no persistence" debug line was logged (it is logged once).
    persistence_refused: AtomicBool,
}

/// The cached digests and the versions being hashed.
#[derive(Debug)]
struct Cache {
    ready: LruCache<VersionKey, Digests, RandomState>,
    pending: HashSet<VersionKey, RandomState>,
}

/// A file to hash, as the version `key`.
struct Job {
    file: Arc<SharedFile>,
    key: VersionKey,
}

impl FileDigests {
    /// An empty cache with its hashing threads.
    pub fn new() -> io::Result<FileDigests> {
        let state = Arc::new(State {
            cache: Mutex::new(Cache {
                ready: LruCache::with_hasher(
                    NonZeroUsize::new(CACHE_ENTRIES).expect("non-zero"),
                    RandomState::new(),
                ),
                pending: HashSet::with_hasher(RandomState::new()),
            }),
            persistence_refused: AtomicBool::new(false),
        });
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..POOL_THREADS {
            let state = Arc::clone(&state);
            let receiver = Arc::clone(&receiver);
            std::thread::Builder::new()
                .name(format!("ioserve-digest-{i}"))
                .spawn(move || state.work(&receiver))?;
        }
        Ok(FileDigests {
            state,
            jobs: Mutex::new(sender),
        })
    }

    /// The digests of `file` as the version `meta` describes, if known now. Else a
    /// computation is queued (one per version) and the answer is `None`. With
    /// `may_block`, a version not cached is first looked for in the file's extended
    /// attributes (a system call that may wait for the disk).
    pub fn get(&self, file: &Arc<SharedFile>, meta: &Metadata, may_block: bool) -> Option<Digests> {
        let key = VersionKey::of(meta);
        {
            let mut cache = self.state.lock();
            if let Some(found) = cache.ready.get(&key) {
                return Some(*found);
            }
            if cache.pending.contains(&key) {
                return None;
            }
        }
        if may_block {
            if let Some(stored) = read_xattrs(file, &key) {
                self.state.lock().ready.put(key, stored);
                return Some(stored);
            }
        }
        if !self.state.lock().pending.insert(key) {
            return None;
        }
        let job = Job {
            file: Arc::clone(file),
            key,
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job);
        if sent.is_err() {
            // No thread left to hash it: forget it, so a later call tries again.
            self.state.lock().pending.remove(&key);
        }
        None
    }
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pool thread: hashes queued files until the sender is dropped.
    fn work(&self, receiver: &Mutex<Receiver<Job>>) {
        loop {
            let job = receiver
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv();
            let Ok(job) = job else { return };
            let digests = self.compute(&job);
            let mut cache = self.lock();
            cache.pending.remove(&job.key);
            if let Some(digests) = digests {
                cache.ready.put(job.key, digests);
            }
        }
    }

    /// The digests of the job's version: from its extended attributes, else hashed
    /// (and stored there); `None` when the file is no longer that version or cannot
    /// be read.
    fn compute(&self, job: &Job) -> Option<Digests> {
        let is_version = |file: &SharedFile| {
            file.metadata()
                .is_ok_and(|meta| VersionKey::of(&meta) == job.key)
        };
        if !is_version(&job.file) {
            return None;
        }
        if let Some(stored) = read_xattrs(&job.file, &job.key) {
            return Some(stored);
        }
        let digests = match hash(&job.file) {
            Ok(digests) => digests,
            Err(error) => {
                tracing::warn!(%error, "cannot read a file to compute its digest");
                return None;
            }
        };
        // Changed while it was read: the digest belongs to no version.
        if !is_version(&job.file) {
            return None;
        }
        if let Err(error) = write_xattrs(&job.file, &job.key, &digests) {
            if !self.persistence_refused.swap(true, Ordering::Relaxed) {
                tracing::debug!(
                    %error,
                    "digests are not kept in extended attributes (the filesystem refuses \
                     user xattrs, or is read-only): they are computed again after a restart"
                );
            }
        }
        Some(digests)
    }
}

/// SHA-256 and SHA-512 of the whole file, read with `pread` in one pass.
fn hash(file: &SharedFile) -> io::Result<Digests> {
    let mut sha256 = Sha256::new();
    let mut sha512 = Sha512::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut offset = 0u64;
    loop {
        let n = match file.read_at(&mut buf, offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        sha256.update(&buf[..n]);
        sha512.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(Digests {
        sha256: sha256.finalize().into(),
        sha512: sha512.finalize().into(),
    })
}

/// The digests stored in the file's extended attributes for the version `key`; `None`
/// when either is missing, malformed, or stored for another version.
fn read_xattrs(file: &SharedFile, key: &VersionKey) -> Option<Digests> {
    Some(Digests {
        sha256: read_xattr(file, XATTR_SHA256, key)?,
        sha512: read_xattr(file, XATTR_SHA512, key)?,
    })
}

/// One digest stored as `STAMP HEX` (see [`VersionKey::stamp`]) under `name`, if it is
/// stored for `key`.
fn read_xattr<const N: usize>(file: &SharedFile, name: &str, key: &VersionKey) -> Option<[u8; N]> {
    let mut buf = [0u8; 256];
    let len = rustix::fs::fgetxattr(&**file, name, &mut buf[..]).ok()?;
    let text = std::str::from_utf8(&buf[..len]).ok()?;
    let (stamp, hex) = text.rsplit_once(' ')?;
    if stamp != key.stamp() || hex.len() != 2 * N {
        return None;
    }
    let mut digest = [0u8; N];
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}

/// Stores both digests for the version `key`.
fn write_xattrs(file: &SharedFile, key: &VersionKey, digests: &Digests) -> io::Result<()> {
    write_xattr(file, XATTR_SHA256, key, &digests.sha256)?;
    write_xattr(file, XATTR_SHA512, key, &digests.sha512)
}

fn write_xattr(file: &SharedFile, name: &str, key: &VersionKey, digest: &[u8]) -> io::Result<()> {
    use std::fmt::Write as _;
    let mut value = key.stamp();
    value.push(' ');
    for byte in digest {
        let _ = write!(value, "{byte:02x}");
    }
    rustix::fs::fsetxattr(
        &**file,
        name,
        value.as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn digests_of(
        path: &std::path::Path,
        digests: &FileDigests,
        may_block: bool,
    ) -> Option<Digests> {
        let file = Arc::new(SharedFile::new(std::fs::File::open(path).unwrap()));
        let meta = file.metadata().unwrap();
        digests.get(&file, &meta, may_block)
    }

    fn wait_for(path: &std::path::Path, digests: &FileDigests) -> Digests {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = digests_of(path, digests, false) {
                return found;
            }
            assert!(Instant::now() < deadline, "no digest of {}", path.display());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn digests_are_those_of_the_content_and_follow_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let digests = FileDigests::new().unwrap();
        let first = wait_for(&path, &digests);
        assert_eq!(first.sha256[..], Sha256::digest(b"abc")[..]);
        assert_eq!(first.sha512[..], Sha512::digest(b"abc")[..]);
        std::fs::write(&path, b"abcd").unwrap();
        let second = wait_for(&path, &digests);
        assert_eq!(second.sha256[..], Sha256::digest(b"abcd")[..]);
    }

    #[test]
    fn a_stamp_of_another_version_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let file = SharedFile::new(std::fs::File::open(&path).unwrap());
        let key = VersionKey::of(&file.metadata().unwrap());
        let digests = hash(&file).unwrap();
        if write_xattrs(&file, &key, &digests).is_err() {
            eprintln!("skipped: this filesystem refuses user extended attributes");
            return;
        }
        assert_eq!(read_xattrs(&file, &key), Some(digests));
        let other = VersionKey {
            size: key.size + 1,
            ..key
        };
        assert_eq!(read_xattrs(&file, &other), None);
    }
}

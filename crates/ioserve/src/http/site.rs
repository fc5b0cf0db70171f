//! The served tree as the reply sees it: the root, what may be served from it, and the
//! open-file cache.

use std::time::Duration;

use crate::io::file_digests::FileDigests;
use crate::io::open_file_cache::OpenFileCache;
use crate::io::root::Root;

/// What a reply needs to know about the served tree.
#[derive(Debug)]
pub struct Site {
    /// The served directory.
    pub root: Root,
    /// Whether directories without `index.html` get a listing (else 403), and how
    /// many entries it shows at most.
    pub listing: Option<usize>,
    /// Whether hidden paths (a segment starting with `.`) are served and listed.
    pub hidden: bool,
    /// Whether `NAME.br` / `NAME.gz` are served for `NAME` when the client accepts
    /// their coding.
    pub precompressed: bool,
    /// The `multipart/byteranges` boundary, random per process.
    pub boundary: String,
    /// Open files kept for reuse.
    pub files: OpenFileCache,
    /// Whole-file digests for RFC 9530 `Repr-Digest` (with `--digests`).
    pub digests: Option<FileDigests>,
}

/// Settings of the open-file cache.
#[derive(Clone, Copy, Debug)]
pub struct CacheSettings {
    /// Shards (one per worker).
    pub workers: usize,
    /// Files per shard; 0 disables the cache.
    pub capacity: usize,
    /// How long a cached path is trusted before it is resolved again.
    pub validity: Duration,
    /// Bytes the cached small files may keep in memory, all workers together; 0 keeps
    /// none.
    pub kept_bytes: usize,
}

impl Site {
    /// A site serving `root`.
    pub fn new(root: Root, listing: Option<usize>, hidden: bool, cache: CacheSettings) -> Site {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS's randomness: good enough for a boundary
        // that must not be guessable from the file contents.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Site {
            root,
            listing,
            hidden,
            precompressed: false,
            boundary: format!("ioserve-{random:016x}"),
            files: OpenFileCache::new(
                cache.workers,
                cache.capacity,
                cache.validity,
                cache.kept_bytes,
            ),
            digests: None,
        }
    }
}

impl Site {
    /// The same site, serving precompressed siblings when `on`.
    pub fn with_precompressed(mut self, on: bool) -> Site {
        self.precompressed = on;
        self
    }

    /// The same site, answering RFC 9530 digest requests with `digests`.
    pub fn with_digests(mut self, digests: Option<FileDigests>) -> Site {
        self.digests = digests;
        self
    }
}

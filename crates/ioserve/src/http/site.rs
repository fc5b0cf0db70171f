//! The served tree as the reply sees it: the root, what may be served from it, and the
//! open-file cache.

use std::sync::Arc;
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
    /// Open files kept for reuse; a reload that changes neither the tree nor the
    /// cache's settings keeps them ([`Site::keeping_files_of`]).
    pub files: Arc<OpenFileCache>,
    /// The settings `files` was made with.
    cache: CacheSettings,
    /// Whole-file digests for RFC 9530 `Repr-Digest` (with `--digests`).
    pub digests: Option<FileDigests>,
}

/// Settings of the open-file cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
            files: Arc::new(OpenFileCache::new(
                cache.workers,
                cache.capacity,
                cache.validity,
                cache.kept_bytes,
            )),
            cache,
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

    /// The same site with `previous`'s open files (descriptors, mappings and kept bytes)
    /// where both serve the same directory the same way with the same cache settings:
    /// a reload (SIGHUP) that changes something else, such as the certificate or a
    /// timeout, then does not send every hot path back through an open on the
    /// blocking pool at once. Otherwise the site keeps its own empty cache.
    pub fn keeping_files_of(mut self, previous: &Site) -> Site {
        if self.cache == previous.cache && self.root.same_tree(&previous.root) {
            self.files = Arc::clone(&previous.files);
        }
        self
    }

    /// The same site, answering RFC 9530 digest requests with `digests`.
    pub fn with_digests(mut self, digests: Option<FileDigests>) -> Site {
        self.digests = digests;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(validity: Duration) -> CacheSettings {
        CacheSettings {
            workers: 2,
            capacity: 16,
            validity,
            kept_bytes: 1 << 20,
        }
    }

    fn site(dir: &std::path::Path, follow_symlinks: bool, cache: CacheSettings) -> Site {
        Site::new(
            Root::open(dir, follow_symlinks).unwrap(),
            None,
            false,
            cache,
        )
    }

    #[test]
    fn a_reload_keeps_the_open_files_only_of_the_same_tree_and_settings() {
        let one = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let second = Duration::from_secs(1);
        let previous = site(one.path(), false, settings(second));
        let kept =
            |next: Site| Arc::ptr_eq(&next.keeping_files_of(&previous).files, &previous.files);
        assert!(kept(site(one.path(), false, settings(second))));
        assert!(
            !kept(site(other.path(), false, settings(second))),
            "another root"
        );
        assert!(
            !kept(site(one.path(), true, settings(second))),
            "symlinks followed now"
        );
        assert!(
            !kept(site(one.path(), false, settings(2 * second))),
            "another validity"
        );
    }
}

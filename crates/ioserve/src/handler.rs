//! The HTTP semantics of the server, in one place: from a parsed request to a [`Reply`].
//!
//! Nothing here moves file bytes; a reply names the file and the ranges, and the IO
//! strategy sends them. So every strategy answers with the same status, headers and
//! framing.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::cache::{OpenFile, OpenFileCache, Opened};
use crate::conditional::{self, Outcome, Validators};
use crate::listing;
use crate::path::{self, PathError, Root};
use crate::range::{self, ByteRange, RangePlan};
use crate::request::{Method, Request};
use crate::response::{Body, Reply};

/// What the handler needs to know about the served tree.
#[derive(Debug)]
pub struct Site {
    /// The served directory.
    pub root: Root,
    /// Whether directories without `index.html` get a listing (else 403).
    pub listing: bool,
    /// The `multipart/byteranges` boundary, random per process.
    pub boundary: String,
    /// Open files kept for reuse.
    pub files: OpenFileCache,
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
}

impl Site {
    /// A site serving `root`.
    pub fn new(root: Root, listing: bool, cache: CacheSettings) -> Site {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS's randomness: good enough for a boundary
        // that must not be guessable from the file contents.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Site {
            root,
            listing,
            boundary: format!("ioserve-{random:016x}"),
            files: OpenFileCache::new(cache.workers, cache.capacity, cache.validity),
        }
    }
}

/// Answers a request on behalf of `worker` (which picks the open-file cache shard).
pub fn respond(site: &Site, worker: usize, request: &Request<'_>) -> Reply {
    let head_only = match request.method {
        Method::Get => false,
        Method::Head => true,
        Method::Other(_) => return Reply::error(405).header("Allow", "GET, HEAD"),
    };
    let mut reply = respond_get(site, worker, request);
    if head_only {
        reply.body = Body::Empty;
    }
    reply
}

fn respond_get(site: &Site, worker: usize, request: &Request<'_>) -> Reply {
    let safe = match path::sanitize(request.target) {
        Ok(safe) => safe,
        Err(PathError::Malformed) => return Reply::error(400),
        Err(PathError::Forbidden(_)) => return Reply::error(403),
    };
    let (dir, meta) = match site.files.open(worker, &site.root, &safe.relative) {
        Ok(Opened::File(open)) => return file_reply(site, request, open, &safe.relative),
        Ok(Opened::Other(file, meta)) => (file, meta),
        Err(e) => return io_error_reply(&e),
    };
    if !meta.is_dir() {
        // FIFOs, sockets, devices: never served.
        return Reply::error(403);
    }
    if !safe.trailing_slash {
        let (path, query) = match request.target.split_once('?') {
            Some((path, query)) => (path, format!("?{query}")),
            None => (request.target, String::new()),
        };
        return Reply::error(301).header("Location", format!("{path}/{query}"));
    }
    let index = safe.relative.join("index.html");
    match site.files.open(worker, &site.root, &index) {
        Ok(Opened::File(open)) => return file_reply(site, request, open, &index),
        Ok(Opened::Other(..)) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return io_error_reply(&e),
    }
    if !site.listing {
        return Reply::error(403);
    }
    match listing::render(&dir, &safe.relative, request.wants_json) {
        Ok((content_type, bytes)) => Reply::new(200)
            .header("Content-Type", content_type)
            .header("Cache-Control", "no-cache")
            .with_bytes(bytes),
        Err(e) => io_error_reply(&e),
    }
}

fn file_reply(site: &Site, request: &Request<'_>, open: OpenFile, name: &Path) -> Reply {
    let OpenFile { file, meta } = open;
    let len = meta.len();
    let validators = Validators::new(
        meta.ino(),
        len,
        meta.modified().unwrap_or(std::time::UNIX_EPOCH),
    );
    let with_validators = |reply: Reply| {
        reply
            .header("ETag", &validators.etag)
            .header("Last-Modified", validators.last_modified_header())
    };
    let honor_range = match conditional::evaluate(&request.preconditions, &validators) {
        Outcome::NotModified => return with_validators(Reply::new(304)),
        Outcome::PreconditionFailed => return Reply::error(412),
        Outcome::Proceed { honor_range } => honor_range,
    };
    let content_type = mime_guess::from_path(name)
        .first_raw()
        .unwrap_or("application/octet-stream");
    // RFC 9110 §14.2: range handling is defined for GET only.
    let range_header = match request.method {
        Method::Get if honor_range => request.range,
        _ => None,
    };
    match range::plan(range_header, len) {
        RangePlan::Full => {
            let mut reply = with_validators(Reply::new(200))
                .header("Content-Type", content_type)
                .header("Content-Length", len)
                .header("Accept-Ranges", "bytes");
            reply.body = Body::File {
                file,
                range: ByteRange { start: 0, len },
            };
            reply
        }
        RangePlan::Single(range) => {
            let mut reply = with_validators(Reply::new(206))
                .header("Content-Type", content_type)
                .header("Content-Length", range.len)
                .header("Content-Range", range.content_range(len))
                .header("Accept-Ranges", "bytes");
            reply.body = Body::File { file, range };
            reply
        }
        RangePlan::Multi(ranges) => {
            let boundary = &site.boundary;
            let parts: Vec<(Vec<u8>, ByteRange)> = ranges
                .iter()
                .enumerate()
                .map(|(i, range)| {
                    let head = format!(
                        "{}--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: {}\r\n\r\n",
                        if i == 0 { "" } else { "\r\n" },
                        range.content_range(len)
                    );
                    (head.into_bytes(), *range)
                })
                .collect();
            let body = Body::Multipart {
                file,
                parts,
                closing: format!("\r\n--{boundary}--\r\n").into_bytes(),
            };
            let mut reply = with_validators(Reply::new(206))
                .header(
                    "Content-Type",
                    format!("multipart/byteranges; boundary={boundary}"),
                )
                .header("Content-Length", body.len())
                .header("Accept-Ranges", "bytes");
            reply.body = body;
            reply
        }
        RangePlan::Unsatisfiable => {
            Reply::error(416).header("Content-Range", format!("bytes */{len}"))
        }
    }
}

fn io_error_reply(error: &io::Error) -> Reply {
    match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Reply::error(404),
        io::ErrorKind::PermissionDenied => Reply::error(403),
        _ if error.raw_os_error() == Some(libc::ENAMETOOLONG) => Reply::error(404),
        _ => {
            tracing::warn!(%error, "cannot open a requested file");
            Reply::error(500)
        }
    }
}

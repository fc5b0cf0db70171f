//! The HTTP semantics of the server, in one place: from a [`Resolved`] request to a
//! [`Reply`], opening the file (from the open-file cache where it can), evaluating the
//! preconditions, planning the ranges, negotiating a precompressed sibling.
//!
//! Nothing here moves file bytes; a reply names the file and the ranges, and the IO
//! strategy sends them. So every strategy answers with the same status, headers and
//! framing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use ioserve_simd::hash::RandomState;

use crate::http::conditional::{self, Outcome, Validators};
use crate::http::digest_fields;
use crate::http::listing;
use crate::http::negotiation::Coding;
use crate::http::range::{self, ByteRange, RangePlan};
use crate::http::request::Request;
use crate::http::resolve::{resolve, Resolved};
use crate::http::response::{Body, Multipart, Reply};
use crate::http::site::Site;
use crate::http::tar;
use crate::io::file_digests::Digests;
use crate::io::open_file_cache::{OpenFile, Opened};
use crate::io::shared_file::SharedFile;

/// Whether the reply may wait for the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocking {
    /// On the event loop: only files the open-file cache holds (an `fstat` of an open
    /// descriptor); a path to resolve makes the answer [`Answer::Offload`].
    Never,
    /// Off the loop, or where the loop may wait: opens and path walks as needed.
    Allowed,
}

/// What the reply decided.
#[derive(Debug)]
pub enum Answer {
    /// The reply.
    Ready(Reply),
    /// The answer needs an open or a path walk, which may wait for the disk: complete
    /// the resolved request with [`answer`] and [`Blocking::Allowed`] off the event loop.
    Offload(Box<Resolved>),
    /// A directory listing, to be built with [`listing_reply`] off the event loop.
    Listing {
        /// What to list.
        job: listing::Job,
        /// HEAD: the same head, no body.
        head_only: bool,
    },
    /// A directory as one tar, to be walked with [`tar_reply`] off the event loop.
    Tar {
        /// What to walk.
        job: tar::walk::Job,
        /// HEAD: the same head, no body.
        head_only: bool,
    },
}

/// Answers a request on behalf of `worker` (which picks the open-file cache shard).
pub fn respond(site: &Site, worker: usize, request: &Request<'_>, blocking: Blocking) -> Answer {
    match resolve(site, request) {
        Ok(resolved) => answer(site, worker, resolved, blocking),
        Err(reply) => Answer::Ready(reply),
    }
}

/// Answers a resolved request on behalf of `worker`; [`Answer::Offload`] gives the
/// request back where the answer would wait and `blocking` forbids it.
pub fn answer(site: &Site, worker: usize, resolved: Resolved, blocking: Blocking) -> Answer {
    let head_only = resolved.head_only;
    match answer_get(site, worker, &resolved, blocking) {
        Err(WouldWait) => Answer::Offload(Box::new(resolved)),
        Ok(Answer::Ready(mut reply)) => {
            if head_only {
                reply.body = Body::Empty;
            }
            Answer::Ready(reply)
        }
        Ok(Answer::Listing { job, .. }) => Answer::Listing { job, head_only },
        Ok(Answer::Tar { job, .. }) => Answer::Tar { job, head_only },
        Ok(offload) => offload,
    }
}

/// The decision that a file cannot be opened without waiting.
struct WouldWait;

/// Opens `relative`, unless that may wait for the disk and `blocking` forbids it.
fn open_path(
    site: &Site,
    worker: usize,
    relative: &Path,
    blocking: Blocking,
) -> Result<io::Result<Opened>, WouldWait> {
    match blocking {
        Blocking::Allowed => Ok(site.files.open(worker, &site.root, relative)),
        Blocking::Never => site
            .files
            .lookup(worker, relative)
            .map(|found| found.map(Opened::File))
            .ok_or(WouldWait),
    }
}

/// Builds a listing's reply. It reads the directory and `stat`s entries: blocking.
pub fn listing_reply(job: &listing::Job, head_only: bool) -> Reply {
    match listing::render(job) {
        Ok(listing) => {
            let mut reply = Reply::new(200)
                .header("Content-Type", listing.content_type)
                .header("X-Content-Type-Options", "nosniff")
                .header("Cache-Control", "no-cache")
                // The form was negotiated with Accept: caches must keep them apart.
                .header("Vary", "Accept");
            if let Some(policy) = listing.content_security_policy {
                reply = reply.header("Content-Security-Policy", policy);
            }
            if listing.omitted > 0 {
                reply = reply.header(listing::OMITTED_HEADER, listing.omitted);
            }
            let mut reply = reply.with_bytes(listing.body);
            if head_only {
                reply.body = Body::Empty;
            }
            reply
        }
        Err(e) => io_error_reply(&e),
    }
}

/// Builds a tar download's reply: the walk (a `stat` of every entry: blocking) gives
/// the exact `Content-Length`; a tree over the entry bound is refused with 403 and a
/// message, before anything else is sent. `Range` is ignored: the whole tar, 200, and
/// no `Accept-Ranges`.
pub fn tar_reply(job: &tar::walk::Job, head_only: bool) -> Reply {
    let mut reply = match tar::walk::plan(job) {
        Ok(plan) => {
            let mut reply = Reply::new(200)
                .header("Content-Type", "application/x-tar")
                .header(
                    "Content-Disposition",
                    format_args!("attachment; filename=\"{}.tar\"", file_name(&plan.name)),
                )
                .header("Cache-Control", "no-cache")
                .header("Content-Length", plan.len);
            reply.body = Body::Tar(Box::new(plan));
            reply
        }
        Err(tar::walk::WalkError::Io(e)) => io_error_reply(&e),
        Err(too_many) => Reply::new(403)
            .header("Content-Type", "text/plain; charset=utf-8")
            .with_bytes(format!("403 Forbidden: {too_many}\n").into_bytes()),
    };
    if head_only {
        reply.body = Body::Empty;
    }
    reply
}

/// A directory name as a `Content-Disposition` file name: bytes other than ASCII
/// letters, digits, `.`, `-` and `_` become `_` (the quoted string stays valid).
fn file_name(name: &[u8]) -> String {
    name.iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => b as char,
            _ => '_',
        })
        .collect()
}

/// The name of the directory at `relative`: its last component, or the root's own
/// name (`root` for `/`).
fn directory_name(site: &Site, relative: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    relative
        .file_name()
        .or_else(|| site.root.path().file_name())
        .map_or_else(|| b"root".to_vec(), |name| name.as_bytes().to_vec())
}

/// The answer to a GET of the resolved path (HEAD drops the body afterwards), never
/// [`Answer::Offload`]: `Err(WouldWait)` instead.
fn answer_get(
    site: &Site,
    worker: usize,
    resolved: &Resolved,
    blocking: Blocking,
) -> Result<Answer, WouldWait> {
    let safe = &resolved.path;
    let (dir, meta) = match open_path(site, worker, &safe.relative, blocking)? {
        Ok(Opened::File(open)) => {
            return serve_file(site, worker, resolved, open, &safe.relative, blocking)
                .map(Answer::Ready)
        }
        Ok(Opened::Other(file, meta)) => (file, meta),
        Err(e) => return Ok(Answer::Ready(io_error_reply(&e))),
    };
    if !meta.is_dir() {
        // FIFOs, sockets, devices: never served.
        return Ok(Answer::Ready(Reply::error(403)));
    }
    if !safe.trailing_slash {
        return Ok(Answer::Ready(Reply::redirect(&directory_location(
            &safe.relative,
            &resolved.target,
        ))));
    }
    if resolved.download_tar {
        let Some(max_entries) = site.listing else {
            return Ok(Answer::Ready(Reply::error(403)));
        };
        return Ok(Answer::Tar {
            job: tar::walk::Job {
                dir,
                relative: safe.relative.clone(),
                name: directory_name(site, &safe.relative),
                show_hidden: site.hidden,
                max_entries,
            },
            head_only: false,
        });
    }
    let index = safe.relative.join("index.html");
    // Never on the loop: a directory is not cached, so this runs off it already.
    match site.files.open(worker, &site.root, &index) {
        Ok(Opened::File(open)) => {
            return serve_file(site, worker, resolved, open, &index, blocking).map(Answer::Ready)
        }
        Ok(Opened::Other(..)) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Ok(Answer::Ready(io_error_reply(&e))),
    }
    let Some(max_entries) = site.listing else {
        return Ok(Answer::Ready(Reply::error(403)));
    };
    let sort = match resolved.listing_sort {
        Ok(sort) => sort,
        Err(bad) => {
            return Ok(Answer::Ready(
                Reply::new(400)
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .with_bytes(format!("400 Bad Request: {bad}\n").into_bytes()),
            ))
        }
    };
    Ok(Answer::Listing {
        job: listing::Job {
            dir,
            relative: safe.relative.clone(),
            format: resolved.listing_format,
            show_hidden: site.hidden,
            max_entries,
            sort,
        },
        head_only: false,
    })
}

/// The reply for the file `name`. With `--precompressed`, the representation is
/// negotiated with `Accept-Encoding`: the best accepted coding whose sibling
/// (`NAME.br`, `NAME.gz`) is a regular file, else the file itself, else (identity
/// refused) 406; every such reply says `Vary: Accept-Encoding`.
///
/// A sibling that is not in the open-file cache (absent ones never are) needs an open:
/// `Err(WouldWait)` where `blocking` forbids it.
fn serve_file(
    site: &Site,
    worker: usize,
    resolved: &Resolved,
    open: OpenFile,
    name: &Path,
    blocking: Blocking,
) -> Result<Reply, WouldWait> {
    if !site.precompressed {
        return Ok(file_reply(site, resolved, open, name, None, blocking));
    }
    let preference = &resolved.encodings;
    let mut encoded = None;
    for &coding in &preference.codings {
        let mut sibling = name.as_os_str().to_owned();
        sibling.push(coding.suffix());
        if let Ok(Opened::File(found)) = open_path(site, worker, Path::new(&sibling), blocking)? {
            encoded = Some((coding, found));
            break;
        }
    }
    let reply = match encoded {
        Some((coding, encoded)) => {
            file_reply(site, resolved, encoded, name, Some(coding), blocking)
        }
        None if preference.identity => file_reply(site, resolved, open, name, None, blocking),
        None => Reply::error(406),
    };
    Ok(reply.header("Vary", "Accept-Encoding"))
}

/// The reply for `open`, served as the file `name` (its content type), content-coded
/// with `coding` when `open` is a precompressed sibling. RFC 9530 digests asked for are
/// added when known (see [`with_digests`]).
fn file_reply(
    site: &Site,
    resolved: &Resolved,
    open: OpenFile,
    name: &Path,
    coding: Option<Coding>,
    blocking: Blocking,
) -> Reply {
    let OpenFile { file, meta } = open;
    let len = meta.len();
    let mut validators = Validators::new(len, meta.mtime(), meta.mtime_nsec());
    if let Some(coding) = coding {
        validators = validators.for_coding(coding.token());
    }
    let last_modified = validators.last_modified_header();
    let with_validators = |reply: Reply| {
        let reply = reply.header("ETag", &validators.etag);
        match &last_modified {
            Some(date) => reply.header("Last-Modified", date),
            None => reply,
        }
    };
    let honor_range = match conditional::evaluate(&resolved.preconditions.borrowed(), &validators) {
        Outcome::NotModified => return with_validators(Reply::new(304)),
        Outcome::PreconditionFailed => return Reply::error(412),
        Outcome::Proceed { honor_range } => honor_range,
    };
    let digests = match &site.digests {
        Some(digests) if resolved.digests.any() => {
            digests.get(&file, &meta, blocking == Blocking::Allowed)
        }
        _ => None,
    };
    let content_type = content_type(name);
    let with_representation = |reply: Reply| {
        let reply = with_validators(reply).header("Content-Type", content_type);
        match coding {
            Some(coding) => reply.header("Content-Encoding", coding.token()),
            None => reply,
        }
    };
    // RFC 9110 §14.2: range handling is defined for GET only.
    let range_header = match resolved.head_only {
        false if honor_range => resolved.range.as_deref(),
        _ => None,
    };
    let (status, range) = match range::plan(range_header, len) {
        RangePlan::Full => (200, ByteRange { start: 0, len }),
        RangePlan::Single(range) => (206, range),
        RangePlan::Multi(ranges) => {
            let boundary = &site.boundary;
            let part = PartHeads {
                boundary,
                content_type,
                coding,
                len,
            };
            let body = part.multipart(file, &ranges);
            let mut reply = with_validators(Reply::new(206))
                .header(
                    "Content-Type",
                    format!("multipart/byteranges; boundary={boundary}"),
                )
                .header("Content-Length", body.len())
                .header("Accept-Ranges", "bytes");
            reply = with_digests(reply, resolved, digests.as_ref(), false);
            reply.body = body;
            return reply;
        }
        RangePlan::Unsatisfiable => {
            return Reply::error(416).header("Content-Range", format!("bytes */{len}"))
        }
    };
    let mut reply = with_representation(Reply::new(status)).header("Content-Length", range.len);
    if status == 206 {
        reply = reply.header("Content-Range", range.content_range(len));
    }
    let reply = reply.header("Accept-Ranges", "bytes");
    // The content is the whole representation only in a 200 to a GET.
    let whole_content = status == 200 && !resolved.head_only;
    let mut reply = with_digests(reply, resolved, digests.as_ref(), whole_content);
    reply.body = Body::File { file, range };
    reply
}

/// Extensions whose media type a worker thread remembers (see [`content_type`]); more
/// forget them all. A site's files have a few dozen kinds.
const KNOWN_EXTENSIONS: usize = 256;

/// The media type `Content-Type` gives the file `name`: mime_guess's first for its
/// extension, else `application/octet-stream`. mime_guess reads only the extension,
/// so each thread remembers the type per extension: its lookup (a binary search of
/// mime_guess 2.0.5's ~1,400 extensions, compared without case) was 1.2 % of a hot small file's request.
/// Only files that exist reach this, and the map forgets everything past
/// [`KNOWN_EXTENSIONS`], so requests cannot grow it.
fn content_type(name: &Path) -> &'static str {
    thread_local! {
        static KNOWN: RefCell<HashMap<OsString, &'static str, RandomState>> =
            RefCell::new(HashMap::with_hasher(RandomState::new()));
    }
    let guess = || {
        mime_guess::from_path(name)
            .first_raw()
            .unwrap_or("application/octet-stream")
    };
    let Some(extension) = name.extension() else {
        return guess();
    };
    KNOWN.with_borrow_mut(|known| {
        if let Some(&known) = known.get(extension) {
            return known;
        }
        if known.len() >= KNOWN_EXTENSIONS {
            known.clear();
        }
        let media_type = guess();
        known.insert(extension.to_owned(), media_type);
        media_type
    })
}

/// Adds the RFC 9530 fields `resolved` asks for, where the digests of the served file
/// (the selected representation: a precompressed sibling's are its own) are known:
/// `Repr-Digest` always, `Content-Digest` only where the content is the whole
/// representation (`whole_content`), so that both are honest without hashing ranges.
fn with_digests(
    mut reply: Reply,
    resolved: &Resolved,
    digests: Option<&Digests>,
    whole_content: bool,
) -> Reply {
    let Some(digests) = digests else {
        return reply;
    };
    let want = resolved.digests;
    if let Some(algorithm) = want.repr {
        reply = reply.header(
            "Repr-Digest",
            digest_fields::field_value(algorithm, digests),
        );
    }
    if let Some(algorithm) = want.content.filter(|_| whole_content) {
        reply = reply.header(
            "Content-Digest",
            digest_fields::field_value(algorithm, digests),
        );
    }
    reply
}

/// What each part of a multipart/byteranges body says about itself.
struct PartHeads<'a> {
    boundary: &'a str,
    content_type: &'a str,
    coding: Option<Coding>,
    /// The representation's length, for Content-Range.
    len: u64,
}

impl PartHeads<'_> {
    /// The multipart body of `ranges` of `file`: a head before each part (with a
    /// coded representation's Content-Encoding: the multipart body itself is not
    /// encoded) and the closing boundary.
    fn multipart(&self, file: Arc<SharedFile>, ranges: &[ByteRange]) -> Body {
        let boundary = self.boundary;
        let encoding = self
            .coding
            .map(|c| format!("Content-Encoding: {}\r\n", c.token()))
            .unwrap_or_default();
        let parts = ranges
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let head = format!(
                    "{}--{boundary}\r\nContent-Type: {}\r\n{encoding}Content-Range: {}\r\n\r\n",
                    if i == 0 { "" } else { "\r\n" },
                    self.content_type,
                    range.content_range(self.len)
                );
                (head.into_bytes(), *range)
            })
            .collect();
        Body::Multipart(Box::new(Multipart {
            file,
            parts,
            closing: format!("\r\n--{boundary}--\r\n").into_bytes(),
        }))
    }
}

/// The `Location` of a directory asked for without its slash: the normalised path,
/// percent-encoded, with a slash, and the query as sent. Built from the normalised path,
/// it never starts with `//`, which a browser would read as another host.
fn directory_location(relative: &Path, target: &str) -> String {
    use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
    use std::os::unix::ffi::OsStrExt as _;
    /// Left as they are in a path: RFC 3986 unreserved, and the separator.
    const PATH: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~')
        .remove(b'/');
    let mut location = String::with_capacity(target.len() + 2);
    location.push('/');
    location.extend(percent_encode(relative.as_os_str().as_bytes(), PATH));
    if !relative.as_os_str().is_empty() {
        location.push('/');
    }
    if let Some((_, query)) = target.split_once('?') {
        location.push('?');
        location.push_str(query);
    }
    location
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::conditional::Preconditions;
    use crate::http::request::{Method, Version};
    use crate::http::site::CacheSettings;
    use crate::io::root::Root;
    use proptest::prelude::*;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    fn site(dir: &Path) -> Site {
        let cache = CacheSettings {
            workers: 1,
            capacity: 4,
            validity: Duration::from_secs(1),
            kept_bytes: 1 << 20,
        };
        Site::new(Root::open(dir, false).unwrap(), Some(100), false, cache)
    }

    fn request<'a>(
        target: &'a str,
        head: bool,
        pre: Preconditions<'a>,
        range: Option<&'a [u8]>,
    ) -> Request<'a> {
        Request {
            method: if head { Method::Head } else { Method::Get },
            target,
            version: Version::Http11,
            keep_alive: true,
            has_body: false,
            range,
            preconditions: pre,
            accept: Vec::new(),
            accept_encoding: Vec::new(),
            referer: None,
            user_agent: None,
            want_repr_digest: Vec::new(),
            want_content_digest: Vec::new(),
            authorization: None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any modification time (before 1970, after 9999, the extremes the kernel
        /// keeps), any size (empty, a 1 TiB sparse file), any preconditions and range:
        /// an answer, never a panic; `Last-Modified` exactly when an HTTP-date can
        /// carry the time; a listing of the directory too.
        #[test]
        fn extreme_metadata_is_answered(
            secs in prop_oneof![Just(i64::MIN / 2), Just(-1i64), Just(0i64), -4_000_000_000i64..300_000_000_000, Just(253_402_300_799i64), Just(253_402_300_800i64), Just(i64::MAX / 2)],
            nanos in 0u32..1_000_000_000,
            size in prop_oneof![Just(0u64), 1u64..4096, Just(1u64 << 40)],
            date in prop_oneof![Just("Fri, 31 Dec 9999 23:59:59 GMT"), Just("Thu, 01 Jan 1970 00:00:00 GMT"), Just("junk")],
            range in proptest::option::of("bytes=[0-9]{0,14}-[0-9]{0,14}"),
            head in any::<bool>(),
        ) {
            // tmpfs keeps 64-bit seconds.
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let path = dir.path().join("f");
            let file = std::fs::File::create(&path).unwrap();
            file.set_len(size).unwrap();
            let time = if secs >= 0 {
                UNIX_EPOCH + Duration::new(secs as u64, nanos)
            } else {
                UNIX_EPOCH - Duration::new(secs.unsigned_abs(), 0)
            };
            // The kernel may clamp what it cannot keep; the server sees what it kept.
            let _ = file.set_modified(time);
            let kept = std::fs::metadata(&path).unwrap().mtime();
            let site = site(dir.path());
            let pre = Preconditions {
                if_modified_since: Some(date.as_bytes()),
                if_unmodified_since: Some(date.as_bytes()),
                if_range: Some(date.as_bytes()),
                ..Default::default()
            };
            let Answer::Ready(reply) = respond(&site, 0, &request("/f", head, pre, range.as_deref().map(str::as_bytes)), Blocking::Allowed) else {
                panic!("a file is not listed");
            };
            prop_assert!(matches!(reply.status, 200 | 206 | 304 | 412 | 416), "{}", reply.status);
            let has_date = reply.headers.contains("\r\nLast-Modified: ");
            prop_assert_eq!(has_date, (0..253_402_300_800).contains(&kept) && reply.status != 412 && reply.status != 416);
            let Answer::Listing { job, head_only } = respond(&site, 0, &request("/", false, Preconditions::default(), None), Blocking::Allowed) else {
                panic!("the root is listed");
            };
            prop_assert_eq!(listing_reply(&job, head_only).status, 200);
        }
    }

    #[test]
    fn a_directory_as_a_tar_where_listings_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"data").unwrap();
        let get = |site: &Site, target, head| {
            let request = request(target, head, Preconditions::default(), Some(b"bytes=0-0"));
            respond(site, 0, &request, Blocking::Allowed)
        };
        let site = site(dir.path());
        for head in [false, true] {
            let Answer::Tar { job, head_only } = get(&site, "/d/?download=tar", head) else {
                panic!("a tar is asked for");
            };
            assert_eq!(head_only, head);
            let reply = tar_reply(&job, head_only);
            assert_eq!(reply.status, 200);
            // Three headers (d, d/f), one padded body block, the end blocks.
            let len = 2 * 512 + 512 + 1024;
            for line in [
                "Content-Type: application/x-tar\r\n".to_owned(),
                "Content-Disposition: attachment; filename=\"d.tar\"\r\n".to_owned(),
                format!("Content-Length: {len}\r\n"),
            ] {
                assert!(reply.headers.contains(&line), "{}", reply.headers);
            }
            assert!(!reply.headers.contains("Accept-Ranges"));
            assert_eq!(reply.body.len(), if head { 0 } else { len });
        }
        assert!(matches!(
            get(&site, "/d/?download=zip", false),
            Answer::Listing { .. }
        ));

        let mut unlisted = self::site(dir.path());
        unlisted.listing = None;
        let Answer::Ready(reply) = get(&unlisted, "/d/?download=tar", false) else {
            panic!("no listing, no tar");
        };
        assert_eq!(reply.status, 403);

        let mut bounded = self::site(dir.path());
        bounded.listing = Some(0);
        let Answer::Tar { job, head_only } = get(&bounded, "/d/?download=tar", false) else {
            panic!("a tar is asked for");
        };
        let Body::Bytes(text) = tar_reply(&job, head_only).body else {
            panic!("a refusal with a message");
        };
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "403 Forbidden: the directory holds more than 0 entries (--listing-max-entries)\n"
        );
    }

    #[test]
    fn the_event_loop_answers_only_from_the_open_file_cache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"data").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let site = site(dir.path()).with_precompressed(true);
        let get = |target, blocking| {
            let mut request = request(target, false, Preconditions::default(), None);
            request.accept_encoding = vec![b"gzip".as_slice()];
            respond(&site, 0, &request, blocking)
        };
        let status = |answer| match answer {
            Answer::Ready(reply) => Some(reply.status),
            Answer::Offload(_) => None,
            Answer::Listing { .. } | Answer::Tar { .. } => Some(0),
        };
        // Not cached yet: the loop hands the request off.
        assert_eq!(status(get("/f", Blocking::Never)), None);
        assert_eq!(status(get("/missing", Blocking::Never)), None);
        assert_eq!(status(get("/d/", Blocking::Never)), None);
        // Off the loop it opens (and caches) the file; the missing f.gz is not cached,
        // so with --precompressed the loop still hands f off.
        assert_eq!(status(get("/f", Blocking::Allowed)), Some(200));
        assert_eq!(status(get("/f", Blocking::Never)), None);
        std::fs::write(dir.path().join("f.gz"), b"gz").unwrap();
        assert_eq!(status(get("/f", Blocking::Allowed)), Some(200));
        let Answer::Ready(reply) = get("/f", Blocking::Never) else {
            panic!("f and f.gz are cached: answered on the loop");
        };
        assert!(
            reply.headers.contains("Content-Encoding: gzip"),
            "{}",
            reply.headers
        );
        assert_eq!(status(get("/missing", Blocking::Allowed)), Some(404));
        assert_eq!(status(get("/d/", Blocking::Allowed)), Some(0));
    }

    #[test]
    fn directory_locations_stay_on_this_host() {
        for (relative, target, location) in [
            ("pub", "//pub", "/pub/"),
            ("pub", "///pub?x=1", "/pub/?x=1"),
            ("a/b c", "/a/b%20c", "/a/b%20c/"),
            ("evil.com", "//evil.com", "/evil.com/"),
            ("a", "/./a?q=//x", "/a/?q=//x"),
        ] {
            assert_eq!(
                directory_location(Path::new(relative), target),
                location,
                "{target}"
            );
        }
    }

    #[test]
    fn content_types_are_mime_guess_s_remembered_per_extension() {
        let guessed = |name: &str| {
            mime_guess::from_path(name)
                .first_raw()
                .unwrap_or("application/octet-stream")
        };
        for name in [
            "a.html",
            "b.css",
            "c.JS",
            "d.tar.gz",
            "e",
            ".hidden",
            "f.unknownext",
        ] {
            // Twice: the second from what the thread remembers.
            for _ in 0..2 {
                assert_eq!(content_type(Path::new(name)), guessed(name), "{name}");
            }
        }
        assert_eq!(content_type(Path::new("x/y.png")), "image/png");
        // Past the bound it forgets and stays right.
        for i in 0..2 * KNOWN_EXTENSIONS {
            let name = format!("f.x{i}");
            assert_eq!(content_type(Path::new(&name)), guessed(&name));
        }
        assert_eq!(content_type(Path::new("z.html")), "text/html");
    }
}

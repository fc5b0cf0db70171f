//! Directory listings, as HTML for people and JSON for programs.
//!
//! A listing of a large directory costs a `getdents` walk and a `stat` per shown entry,
//! so it is built on tokio's blocking pool, never on a worker's event loop (where a
//! 100 000-file directory stalled every connection of that worker for 250 ms), and it
//! is bounded: the first `--listing-max-entries` entries in listing order are shown,
//! with a line (HTML) or a header (JSON) saying how many were left out. The names are
//! sorted before anything is `stat`ed, so the cost of the bound is one `stat` per shown
//! entry.
//!
//! Names are bytes: a name that is not UTF-8 is shown with replacement characters and
//! linked by its percent-encoded bytes, so the link works.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::PathBuf;

use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rustix::fs::{AtFlags, FileType};
use serde::Serialize;

use crate::http::conditional::http_date;
use crate::http::negotiation::media_quality;
use crate::http::path::is_hidden;

/// Characters left as they are in an href: RFC 3986 unreserved.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The header that says how many entries a bounded JSON listing left out.
pub(crate) const OMITTED_HEADER: &str = "Ioserve-Listing-Omitted";

/// The form of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/html`, the default.
    Html,
    /// `application/json`.
    Json,
}

impl Format {
    /// Negotiates with the request's `Accept` lines (RFC 9110 §12.5.1): JSON when
    /// `application/json` is preferred to `text/html` by quality, counting the most
    /// specific range that matches each (`application/json;q=0` refuses JSON, and
    /// `*/*` likes both the same, which gives HTML).
    pub fn negotiate(accept: &[&[u8]]) -> Format {
        let json = media_quality(accept, b"application", b"json");
        let html = media_quality(accept, b"text", b"html");
        if json > html {
            Format::Json
        } else {
            Format::Html
        }
    }
}

/// A listing to build: everything it needs, owned, so that it can run on the blocking
/// pool.
#[derive(Debug)]
pub struct Job {
    /// The open directory.
    pub dir: File,
    /// Its path below the root (empty for the root).
    pub relative: PathBuf,
    /// HTML or JSON.
    pub format: Format,
    /// Whether hidden names are listed.
    pub show_hidden: bool,
    /// Most entries shown.
    pub max_entries: usize,
}

/// A built listing.
#[derive(Debug)]
pub(crate) struct Listing {
    /// Its content type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// Entries left out by the bound.
    pub omitted: usize,
}

/// One entry, as JSON gives it.
#[derive(Debug, Serialize)]
struct Entry {
    /// The name, with replacement characters where it is not UTF-8.
    name: String,
    /// The link to it, relative to the listing: its bytes percent-encoded.
    href: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
    /// Seconds since the Unix epoch.
    modified: i64,
}

/// A name read from the directory, before it is `stat`ed.
struct Name {
    bytes: Vec<u8>,
    is_dir: bool,
}

/// Builds the listing: directories first, then by name (bytewise); symlinks are listed
/// as such, not followed. Blocking: run it off the event loop.
pub(crate) fn render(job: &Job) -> io::Result<Listing> {
    let in_root = job.relative.as_os_str().is_empty();
    let mut names = read_names(&job.dir, |name| {
        job.show_hidden || !is_hidden(name, in_root)
    })?;
    names.sort_unstable_by(|a, b| (!a.is_dir, &a.bytes).cmp(&(!b.is_dir, &b.bytes)));
    let omitted = names.len().saturating_sub(job.max_entries);
    names.truncate(job.max_entries);
    let entries: Vec<Entry> = names
        .into_iter()
        .filter_map(|name| stat_entry(&job.dir, name))
        .collect();
    let (content_type, body) = match job.format {
        Format::Json => (
            "application/json",
            serde_json::to_vec(&entries).map_err(io::Error::other)?,
        ),
        Format::Html => (
            "text/html; charset=utf-8",
            html(&job.relative, &entries, omitted, job.max_entries).into_bytes(),
        ),
    };
    Ok(Listing {
        content_type,
        body,
        omitted,
    })
}

fn html(relative: &std::path::Path, entries: &[Entry], omitted: usize, max: usize) -> String {
    let title = format!("/{}", relative.to_string_lossy());
    let title = if title.ends_with('/') {
        title
    } else {
        title + "/"
    };
    let mut html = String::with_capacity(256 + entries.len() * 128);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {0}</title></head>\n\
         <body><h1>Index of {0}</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n",
        escape(&title)
    );
    html.push_str("<p><a download href=\"?download=tar\">Download as tar</a></p>\n");
    if !relative.as_os_str().is_empty() {
        html.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for entry in entries {
        let suffix = if entry.kind == "dir" { "/" } else { "" };
        // A time an HTTP-date cannot carry (before 1970, after 9999) is left blank.
        let modified = http_date(entry.modified).unwrap_or_default();
        let _ = writeln!(
            html,
            "<tr><td><a href=\"{href}{suffix}\">{name}{suffix}</a></td><td>{size}</td><td>{modified}</td></tr>",
            href = entry.href,
            name = escape(&entry.name),
            size = if entry.kind == "dir" { String::from("-") } else { entry.size.to_string() },
        );
    }
    html.push_str("</table>\n");
    if omitted > 0 {
        let _ = writeln!(
            html,
            "<p>{omitted} more entries are not listed (--listing-max-entries {max}).</p>"
        );
    }
    html.push_str("</body></html>\n");
    html
}

fn read_names(dir: &File, shown: impl Fn(&[u8]) -> bool) -> io::Result<Vec<Name>> {
    let mut names = Vec::new();
    for dirent in rustix::fs::Dir::read_from(dir)? {
        let dirent = dirent?;
        let name = dirent.file_name().to_bytes();
        if matches!(name, b"." | b"..") || !shown(name) {
            continue;
        }
        names.push(Name {
            bytes: name.to_vec(),
            // DT_UNKNOWN (some file systems) sorts as a file until stat says otherwise.
            is_dir: dirent.file_type() == FileType::Directory,
        });
    }
    Ok(names)
}

/// `stat`s one shown name; `None` if it went away since the directory was read.
fn stat_entry(dir: &File, name: Name) -> Option<Entry> {
    let name = CString::new(name.bytes).ok()?;
    let stat = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
    let name = name.as_bytes();
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    };
    Some(Entry {
        href: percent_encode(name, HREF).to_string(),
        name: String::from_utf8_lossy(name).into_owned(),
        kind,
        size: stat.st_size as u64,
        modified: stat.st_mtime,
    })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;

    fn job(dir: &std::path::Path, relative: &str, format: Format, max_entries: usize) -> Job {
        Job {
            dir: File::open(dir).unwrap(),
            relative: PathBuf::from(relative),
            format,
            show_hidden: false,
            max_entries,
        }
    }

    #[test]
    fn html_escapes_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b <x>.txt"), b"12345").unwrap();
        std::fs::write(dir.path().join("a"), b"").unwrap();
        std::fs::create_dir(dir.path().join("z-dir")).unwrap();
        let listing = render(&job(dir.path(), "sub", Format::Html, 100)).unwrap();
        assert_eq!(listing.content_type, "text/html; charset=utf-8");
        let html = String::from_utf8(listing.body).unwrap();
        assert!(html.contains("<title>Index of /sub/</title>"));
        assert!(html.contains("<a download href=\"?download=tar\">Download as tar</a>"));
        assert!(html.contains("<a href=\"b%20%3Cx%3E.txt\">b &lt;x&gt;.txt</a></td><td>5</td>"));
        let z = html.find("z-dir/").unwrap();
        let a = html.find(">a</a>").unwrap();
        assert!(z < a, "directories first");

        let listing = render(&job(dir.path(), "", Format::Json, 100)).unwrap();
        assert_eq!(listing.content_type, "application/json");
        let v: serde_json::Value = serde_json::from_slice(&listing.body).unwrap();
        assert_eq!(v[0]["name"], "z-dir");
        assert_eq!(v[0]["type"], "dir");
        assert_eq!(v[2]["name"], "b <x>.txt");
        assert_eq!(v[2]["href"], "b%20%3Cx%3E.txt");
        assert_eq!(v[2]["size"], 5);
    }

    #[test]
    fn bounded_with_a_count_of_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..25 {
            std::fs::write(dir.path().join(format!("f{i:02}")), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("zz")).unwrap();
        let listing = render(&job(dir.path(), "", Format::Html, 10)).unwrap();
        assert_eq!(listing.omitted, 16);
        let html = String::from_utf8(listing.body).unwrap();
        assert_eq!(html.matches("<tr><td><a href").count(), 10);
        assert!(html.contains("zz/") && html.contains("f08") && !html.contains("f09"));
        assert!(html.contains("<p>16 more entries are not listed (--listing-max-entries 10).</p>"));
        let json = render(&job(dir.path(), "", Format::Json, 3)).unwrap();
        assert_eq!(json.omitted, 23);
        let v: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
    }

    #[test]
    fn names_that_are_not_utf8_get_working_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(OsStr::from_bytes(b"caf\xe9.txt")),
            b"latin-1",
        )
        .unwrap();
        let html = String::from_utf8(render(&job(dir.path(), "", Format::Html, 10)).unwrap().body)
            .unwrap();
        assert!(
            html.contains("<a href=\"caf%E9.txt\">caf\u{fffd}.txt</a>"),
            "{html}"
        );
    }

    #[test]
    fn accept_negotiation_honours_quality() {
        for (accept, format) in [
            (&[][..], Format::Html),
            (&[&b"application/json"[..]][..], Format::Json),
            (&[&b"application/json;q=0"[..]], Format::Html),
            (&[&b"application/json; q=0, text/html"[..]], Format::Html),
            (
                &[&b"text/html;q=0.5, application/json;q=0.9"[..]],
                Format::Json,
            ),
            (
                &[&b"text/html;q=0.9, application/json;q=0.5"[..]],
                Format::Html,
            ),
            (&[&b"*/*"[..]], Format::Html),
            (&[&b"application/*"[..]], Format::Json),
            (&[&b"*/*;q=0.1, application/json"[..]], Format::Json),
            (
                &[&b"text/html, application/xhtml+xml, */*;q=0.8"[..]],
                Format::Html,
            ),
            (
                &[&b"text/*;q=0.3"[..], &b"application/json;q=0.4"[..]],
                Format::Json,
            ),
            (&[&b"APPLICATION/JSON;Q=1.0"[..]], Format::Json),
            (&[&b"application/json;q=2"[..]], Format::Json),
            (&[&b"garbage"[..]], Format::Html),
        ] {
            assert_eq!(
                Format::negotiate(accept),
                format,
                "{:?}",
                accept
                    .iter()
                    .map(|a| String::from_utf8_lossy(a))
                    .collect::<Vec<_>>()
            );
        }
    }
}

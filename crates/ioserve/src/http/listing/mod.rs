//! Directory listings, as HTML for people and JSON for programs.
//!
//! A listing of a large directory costs a `getdents` walk and a `stat` per shown entry,
//! so it is built on tokio's blocking pool, never on a worker's event loop (where a
//! 100 000-file directory stalled every connection of that worker for 250 ms), and it
//! is bounded: the first `--listing-max-entries` entries in listing order are shown,
//! with a line (HTML) or a header (JSON) saying how many were left out.
//!
//! The order comes from the query (`?sort=name|size|time&order=asc|desc`, see [`sort`]),
//! the same for both forms; directories come first in every order. In name order (the
//! default) the names are sorted before anything is `stat`ed, so the cost of the bound
//! is one `stat` per shown entry; an order by size or time `stat`s every entry before
//! the bound picks the first ones.
//!
//! Names are bytes (`entry`): a name that is not UTF-8 is shown with replacement
//! characters and linked by its percent-encoded bytes, so the link works. The HTML
//! page, with its style and Content-Security-Policy, is `page`.

mod entry;
mod page;
pub mod sort;

use std::fs::File;
use std::io;
use std::path::PathBuf;

use crate::http::negotiation::media_quality;
use crate::http::path::is_hidden;

use self::entry::{read_names, stat_entry, Entry};
use self::page::Page;
use self::sort::Sort;

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
    /// The order, from the query.
    pub sort: Sort,
}

/// A built listing.
#[derive(Debug)]
pub(crate) struct Listing {
    /// Its content type.
    pub content_type: &'static str,
    /// The `Content-Security-Policy` it needs (HTML).
    pub content_security_policy: Option<&'static str>,
    /// The body.
    pub body: Vec<u8>,
    /// Entries left out by the bound.
    pub omitted: usize,
}

/// Builds the listing in the job's order (directories first); symlinks are listed as
/// such, not followed. Blocking: run it off the event loop.
pub(crate) fn render(job: &Job) -> io::Result<Listing> {
    let in_root = job.relative.as_os_str().is_empty();
    let mut names = read_names(&job.dir, |name| {
        job.show_hidden || !is_hidden(name, in_root)
    })?;
    let (entries, omitted) = if job.sort.needs_stat() {
        // Entries that went away since the directory was read are not counted.
        let mut entries: Vec<Entry> = names
            .into_iter()
            .filter_map(|name| stat_entry(&job.dir, name))
            .collect();
        entries.sort_unstable_by(|a, b| job.sort.compare(&a.sort_fields(), &b.sort_fields()));
        let omitted = entries.len().saturating_sub(job.max_entries);
        entries.truncate(job.max_entries);
        (entries, omitted)
    } else {
        names.sort_unstable_by(|a, b| job.sort.compare(&a.sort_fields(), &b.sort_fields()));
        let omitted = names.len().saturating_sub(job.max_entries);
        names.truncate(job.max_entries);
        let entries = names
            .into_iter()
            .filter_map(|name| stat_entry(&job.dir, name))
            .collect();
        (entries, omitted)
    };
    let listing = match job.format {
        Format::Json => Listing {
            content_type: "application/json",
            content_security_policy: None,
            body: serde_json::to_vec(&entries).map_err(io::Error::other)?,
            omitted,
        },
        Format::Html => Listing {
            content_type: "text/html; charset=utf-8",
            content_security_policy: Some(page::content_security_policy()),
            body: Page {
                relative: &job.relative,
                entries: &entries,
                sort: job.sort,
                omitted,
                max_entries: job.max_entries,
            }
            .render()
            .into_bytes(),
            omitted,
        },
    };
    Ok(listing)
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
            sort: Sort::default(),
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
        assert!(html.contains(
            "<a href=\"b%20%3Cx%3E.txt\">b &lt;x&gt;.txt</a></td>\
             <td class=\"size\" title=\"5 bytes\" data-bytes=\"5\">5 B</td>"
        ));
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
    fn the_page_is_one_accessible_document_with_its_style_inline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let file = File::options()
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_659_000))
            .unwrap();
        let mut sized = job(dir.path(), "a/b", Format::Html, 100);
        sized.sort = Sort::from_target("/a/b/?sort=size&order=desc").unwrap();
        let listing = render(&sized).unwrap();
        assert_eq!(
            listing.content_security_policy,
            Some(page::content_security_policy())
        );
        let html = String::from_utf8(listing.body).unwrap();
        for part in [
            "<html lang=\"en\">",
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
            "<nav aria-label=\"Breadcrumb\"><ol><li><a class=\"crumb\" href=\"../../\">Root</a></li>\
             <li><a class=\"crumb\" href=\"../\">a</a></li><li aria-current=\"page\">b</li></ol></nav>",
            "<caption>Sorted by size, descending; directories first.</caption>",
            "<th scope=\"col\"><a class=\"sort\" href=\"?sort=name&amp;order=asc\">Name",
            "<th scope=\"col\" class=\"size\" aria-sort=\"descending\">\
             <a class=\"sort\" href=\"?sort=size&amp;order=asc\">Size<span aria-hidden=\"true\"> ▼</span></a></th>",
            "<tr><td><a href=\"../\">Parent directory</a></td><td></td><td></td></tr>",
            "<td class=\"time\"><time datetime=\"2026-11-26T02:10:00Z\"><span>2026-11-26</span> <span>02:10</span></time></td>",
        ] {
            assert!(html.contains(part), "{part} in {html}");
        }
        assert_eq!(html.matches("<script").count(), 0);
        assert_eq!(
            html.matches("style=").count(),
            0,
            "no inline style attribute"
        );
    }

    #[test]
    fn both_forms_follow_the_order_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        for (name, size) in [("b", 300), ("a", 20), ("c", 1000), ("d", 20)] {
            std::fs::write(dir.path().join(name), vec![0; size]).unwrap();
        }
        std::fs::create_dir(dir.path().join("dir")).unwrap();
        let names = |query: &str, format| {
            let mut job = job(dir.path(), "", format, 4);
            job.sort = Sort::from_target(query).unwrap();
            let listing = render(&job).unwrap();
            let body = String::from_utf8(listing.body).unwrap();
            let names: Vec<String> = match format {
                Format::Json => serde_json::from_str::<Vec<serde_json::Value>>(&body)
                    .unwrap()
                    .iter()
                    .map(|entry| entry["name"].as_str().unwrap().to_owned())
                    .collect(),
                Format::Html => body
                    .split("<tr><td><a href=\"")
                    .skip(1)
                    .map(|row| row.split('"').next().unwrap().to_owned())
                    .collect(),
            };
            (names, listing.omitted)
        };
        for format in [Format::Json, Format::Html] {
            let dir_name = if format == Format::Json {
                "dir"
            } else {
                "dir/"
            };
            assert_eq!(
                names("/", format),
                (
                    vec![dir_name, "a", "b", "c"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    1
                )
            );
            assert_eq!(
                names("/?sort=size&order=desc", format),
                (
                    vec![dir_name, "c", "b", "d"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    1
                ),
            );
            assert_eq!(
                names("/?sort=size", format),
                (
                    vec![dir_name, "a", "d", "b"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    1
                ),
            );
            assert_eq!(
                names("/?order=desc", format),
                (
                    vec![dir_name, "d", "c", "b"]
                        .into_iter()
                        .map(String::from)
                        .collect(),
                    1
                ),
            );
        }
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

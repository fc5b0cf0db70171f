//! Directory listings, as HTML for people and JSON for programs.

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::Path;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rustix::fs::{AtFlags, FileType};
use serde::Serialize;

use crate::conditional::http_date;
use crate::path::is_hidden;

/// Characters left as they are in an href: RFC 3986 unreserved.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One entry of a listing.
#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
    /// Seconds since the Unix epoch.
    modified: i64,
}

/// Lists the open directory `dir`, whose path below the root is `relative`.
///
/// Returns the content type and the body. Entries are sorted directories first, then by
/// name; symlinks are listed as such, not followed; hidden names (see
/// [`crate::path::is_hidden`]) only with `show_hidden`.
pub fn render(
    dir: &File,
    relative: &Path,
    json: bool,
    show_hidden: bool,
) -> io::Result<(&'static str, Vec<u8>)> {
    let in_root = relative.as_os_str().is_empty();
    let mut entries = read_entries(dir, |name| show_hidden || !is_hidden(name, in_root))?;
    entries.sort_by(|a, b| (a.kind != "dir", &a.name).cmp(&(b.kind != "dir", &b.name)));
    if json {
        let body = serde_json::to_vec(&entries).map_err(io::Error::other)?;
        return Ok(("application/json", body));
    }
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
    if !relative.as_os_str().is_empty() {
        html.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for entry in &entries {
        let suffix = if entry.kind == "dir" { "/" } else { "" };
        // A time an HTTP-date cannot carry (before 1970, after 9999) is left blank.
        let modified = http_date(entry.modified).unwrap_or_default();
        let _ = writeln!(
            html,
            "<tr><td><a href=\"{href}{suffix}\">{name}{suffix}</a></td><td>{size}</td><td>{modified}</td></tr>",
            href = utf8_percent_encode(&entry.name, HREF),
            name = escape(&entry.name),
            size = if entry.kind == "dir" { String::from("-") } else { entry.size.to_string() },
        );
    }
    html.push_str("</table>\n</body></html>\n");
    Ok(("text/html; charset=utf-8", html.into_bytes()))
}

fn read_entries(dir: &File, shown: impl Fn(&[u8]) -> bool) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for dirent in rustix::fs::Dir::read_from(dir)? {
        let dirent = dirent?;
        let name = dirent.file_name();
        if matches!(name.to_bytes(), b"." | b"..") || !shown(name.to_bytes()) {
            continue;
        }
        // An entry removed since the directory was read is skipped.
        let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => "file",
            FileType::Directory => "dir",
            FileType::Symlink => "symlink",
            _ => "other",
        };
        entries.push(Entry {
            name: String::from_utf8_lossy(name.to_bytes()).into_owned(),
            kind,
            size: stat.st_size as u64,
            modified: stat.st_mtime,
        });
    }
    Ok(entries)
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

    #[test]
    fn html_escapes_and_sorts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b <x>.txt"), b"12345").unwrap();
        std::fs::write(dir.path().join("a"), b"").unwrap();
        std::fs::create_dir(dir.path().join("z-dir")).unwrap();
        let file = File::open(dir.path()).unwrap();
        let (ct, body) = render(&file, Path::new("sub"), false, false).unwrap();
        assert_eq!(ct, "text/html; charset=utf-8");
        let html = String::from_utf8(body).unwrap();
        assert!(html.contains("<title>Index of /sub/</title>"));
        assert!(html.contains("<a href=\"b%20%3Cx%3E.txt\">b &lt;x&gt;.txt</a></td><td>5</td>"));
        let z = html.find("z-dir/").unwrap();
        let a = html.find(">a</a>").unwrap();
        assert!(z < a, "directories first");

        let (ct, body) = render(&file, Path::new(""), true, false).unwrap();
        assert_eq!(ct, "application/json");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v[0]["name"], "z-dir");
        assert_eq!(v[0]["type"], "dir");
        assert_eq!(v[2]["name"], "b <x>.txt");
        assert_eq!(v[2]["size"], 5);
    }
}

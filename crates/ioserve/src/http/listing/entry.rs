//! The entries of a listing: names as the directory gives them, then `stat`ed into
//! what both forms show.

use std::ffi::CString;
use std::fs::File;
use std::io;

use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rustix::fs::{AtFlags, FileType};
use serde::Serialize;

use super::sort::SortFields;

/// Characters left as they are in an href: RFC 3986 unreserved.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One entry, as JSON gives it.
#[derive(Debug, Serialize)]
pub(crate) struct Entry {
    /// The name, with replacement characters where it is not UTF-8.
    pub(crate) name: String,
    /// The link to it, relative to the listing: its bytes percent-encoded.
    pub(crate) href: String,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) size: u64,
    /// Seconds since the Unix epoch.
    pub(crate) modified: i64,
    /// The name's bytes, which the order compares.
    #[serde(skip)]
    pub(crate) bytes: Vec<u8>,
}

impl Entry {
    pub(crate) fn sort_fields(&self) -> SortFields<'_> {
        SortFields {
            is_dir: self.kind == "dir",
            name: &self.bytes,
            size: self.size,
            modified: self.modified,
        }
    }
}

/// A name read from the directory, before it is `stat`ed.
pub(crate) struct Name {
    pub(crate) bytes: Vec<u8>,
    is_dir: bool,
}

impl Name {
    pub(crate) fn sort_fields(&self) -> SortFields<'_> {
        SortFields {
            is_dir: self.is_dir,
            name: &self.bytes,
            size: 0,
            modified: 0,
        }
    }
}

/// The names in `dir` that `shown` accepts, without `.` and `..`.
pub(crate) fn read_names(dir: &File, shown: impl Fn(&[u8]) -> bool) -> io::Result<Vec<Name>> {
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
pub(crate) fn stat_entry(dir: &File, name: Name) -> Option<Entry> {
    let name = CString::new(name.bytes).ok()?;
    let stat = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
    let bytes = name.into_bytes();
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        _ => "other",
    };
    Some(Entry {
        href: percent_encode(&bytes, HREF).to_string(),
        name: String::from_utf8_lossy(&bytes).into_owned(),
        kind,
        size: stat.st_size as u64,
        modified: stat.st_mtime,
        bytes,
    })
}

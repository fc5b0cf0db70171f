//! From a request target to a relative path of plain components: the first of two
//! layers, both always on, that keep a request beneath the root.
//!
//! 1. [`sanitize`] turns the target's path into a relative path of plain components. It
//!    refuses, after percent-decoding, any `..` segment, an encoded `/` (`%2f`), a
//!    backslash and NUL. `.` and empty segments are dropped.
//! 2. [`Root::open_file`](crate::io::root::Root::open_file) opens it beneath the root's
//!    directory descriptor, race-free (see [`crate::io::root`]).

use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// Why a request path cannot be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The target is not an origin-form path (`/...`), or has a bad percent-escape.
    #[error("malformed request path")]
    Malformed,
    /// The path tries to leave the root or to smuggle a separator: `..`, `%2f`, `\`, NUL.
    #[error("path not allowed: {0}")]
    Forbidden(&'static str),
}

/// A request path reduced to plain components, relative to the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafePath {
    /// The components joined with `/`; empty for the root itself.
    pub relative: PathBuf,
    /// Whether the request path ended with `/` (asks for a directory).
    pub trailing_slash: bool,
    /// Whether a segment is hidden (starts with `.`), a first segment `.well-known`
    /// (RFC 8615) excepted: served only with `--hidden`.
    pub hidden: bool,
}

/// Whether a directory entry's name is hidden: it starts with `.`. In the root,
/// `.well-known` is not.
pub fn is_hidden(name: &[u8], in_root: bool) -> bool {
    name.starts_with(b".") && !(in_root && name == b".well-known")
}

/// Reduces the path of a request target (query and fragment are cut off here) to a
/// [`SafePath`].
///
/// ```
/// use ioserve::http::path::{sanitize, PathError};
/// assert_eq!(sanitize("/a/./b%20c?x=1").unwrap().relative.to_str(), Some("a/b c"));
/// assert_eq!(sanitize("/a/%2e%2e/%2e%2e/etc/passwd"), Err(PathError::Forbidden("..")));
/// ```
pub fn sanitize(target: &str) -> Result<SafePath, PathError> {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if !path.starts_with('/') {
        return Err(PathError::Malformed);
    }
    let mut relative = Vec::with_capacity(path.len());
    let mut hidden = false;
    for raw in path.split('/') {
        let segment = percent_decode(raw.as_bytes())?;
        match &*segment {
            b"" | b"." => continue,
            b".." => return Err(PathError::Forbidden("..")),
            _ => {}
        }
        if let Some(reason) = segment.iter().find_map(|&b| match b {
            b'/' => Some("encoded '/'"),
            b'\\' => Some("backslash"),
            0 => Some("NUL"),
            _ => None,
        }) {
            return Err(PathError::Forbidden(reason));
        }
        hidden |= is_hidden(&segment, relative.is_empty());
        if !relative.is_empty() {
            relative.push(b'/');
        }
        relative.extend_from_slice(&segment);
    }
    Ok(SafePath {
        relative: PathBuf::from(OsString::from_vec(relative)),
        trailing_slash: path.ends_with('/'),
        hidden,
    })
}

/// `raw` with its percent-escapes decoded; itself where it has none.
fn percent_decode(raw: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    if !raw.contains(&b'%') {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.iter();
    while let Some(&b) = bytes.next() {
        if b == b'%' {
            let hi = bytes.next().and_then(|h| (*h as char).to_digit(16));
            let lo = bytes.next().and_then(|l| (*l as char).to_digit(16));
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
                _ => return Err(PathError::Malformed),
            }
        } else {
            out.push(b);
        }
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(target: &str) -> String {
        sanitize(target)
            .unwrap()
            .relative
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn plain_paths() {
        assert_eq!(rel("/"), "");
        assert_eq!(rel("/a/b.txt"), "a/b.txt");
        assert_eq!(rel("//a///b/./"), "a/b");
        assert_eq!(rel("/%41%62"), "Ab");
        assert_eq!(rel("/a%20b?q=../..#x"), "a b");
        assert!(sanitize("/dir/").unwrap().trailing_slash);
        assert!(!sanitize("/dir").unwrap().trailing_slash);
    }

    #[test]
    fn hidden_segments() {
        for (target, hidden) in [
            ("/.env", true),
            ("/.git/config", true),
            ("/a/.git/HEAD", true),
            ("/%2egit/config", true),
            ("/a/b.txt", false),
            ("/a./b", false),
            ("/./a", false),
            ("/.well-known/acme-challenge/x", false),
            ("/.well-known/", false),
            ("/a/.well-known/x", true),
            ("/.well-known/.secret", true),
        ] {
            assert_eq!(sanitize(target).unwrap().hidden, hidden, "{target}");
        }
    }

    #[test]
    fn refused_paths() {
        for target in [
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/etc/passwd",
            "/%2E%2e/etc",
            "/a/..",
        ] {
            assert_eq!(
                sanitize(target),
                Err(PathError::Forbidden("..")),
                "{target}"
            );
        }
        assert_eq!(sanitize("/a%2fb"), Err(PathError::Forbidden("encoded '/'")));
        assert_eq!(
            sanitize("/%2E%2e%2fetc"),
            Err(PathError::Forbidden("encoded '/'"))
        );
        assert_eq!(
            sanitize("/..%2f..%2fetc"),
            Err(PathError::Forbidden("encoded '/'"))
        );
        assert_eq!(
            sanitize("/a\\..\\b"),
            Err(PathError::Forbidden("backslash"))
        );
        assert_eq!(sanitize("/a%5cb"), Err(PathError::Forbidden("backslash")));
        assert_eq!(sanitize("/a%00.txt"), Err(PathError::Forbidden("NUL")));
        assert_eq!(sanitize("/a%zz"), Err(PathError::Malformed));
        assert_eq!(sanitize("/a%2"), Err(PathError::Malformed));
        assert_eq!(sanitize("etc/passwd"), Err(PathError::Malformed));
        assert_eq!(sanitize("*"), Err(PathError::Malformed));
    }
}

//! From a request target to an open file under the root, with no way out of it.
//!
//! Two layers, both always on:
//! 1. [`sanitize`] turns the target's path into a relative path of plain components. It
//!    refuses, after percent-decoding, any `..` segment, an encoded `/` (`%2f`), a
//!    backslash and NUL. `.` and empty segments are dropped.
//! 2. [`Root::open_file`] opens that path relative to the root's directory descriptor
//!    with `openat2(RESOLVE_BENEATH)`, so the kernel refuses any symlink that would leave
//!    the root, race-free. With `--follow-symlinks` symlinks may point anywhere.
//!
//! Where `openat2` is missing (kernels before 5.6: `ENOSYS`) or refused (older container
//! seccomp profiles: `EPERM`), [`Root::open`] notices and every lookup walks the path
//! one component at a time instead ([`Resolver::Walk`]): `openat(O_NOFOLLOW)` per
//! component from the root's descriptor, each symlink read and followed by hand, a
//! `..` from a link never above the root, an absolute link refused: the same answers.
//!
//! Files are opened `O_NONBLOCK` so that a FIFO in the tree cannot stall a worker; the
//! caller serves only regular files and directories.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

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
        match segment.as_slice() {
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
        relative: PathBuf::from(OsStr::from_bytes(&relative)),
        trailing_slash: path.ends_with('/'),
        hidden,
    })
}

fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, PathError> {
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
    Ok(out)
}

/// How paths are resolved beneath the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2` with `RESOLVE_BENEATH`: the kernel does it in one call.
    Openat2,
    /// A component-by-component walk with `openat(O_NOFOLLOW)`, for kernels and seccomp
    /// profiles without `openat2`.
    Walk,
}

impl Resolver {
    /// The name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            Resolver::Openat2 => "openat2",
            Resolver::Walk => "component walk",
        }
    }
}

/// Most symlinks followed in one lookup, as the kernel's own limit (ELOOP).
const MAX_SYMLINKS: usize = 40;

/// The served directory, held open so that every lookup is relative to it.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    follow_symlinks: bool,
    resolver: Resolver,
}

impl Root {
    /// Opens the directory to serve.
    pub fn open(path: &Path, follow_symlinks: bool) -> io::Result<Root> {
        let path = path.canonicalize()?;
        let dir = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // One lookup of the root itself says whether openat2 is there and allowed.
        let resolver = match rustix::fs::openat2(
            &dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH,
        ) {
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => Resolver::Walk,
            _ => Resolver::Openat2,
        };
        Ok(Root {
            dir,
            path,
            follow_symlinks,
            resolver,
        })
    }

    /// How this root resolves paths.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// The canonical path of the root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `relative` (from [`sanitize`]) read-only beneath the root.
    ///
    /// An empty path opens the root itself. Errors: `NotFound` for a missing file,
    /// `PermissionDenied` for a symlink leaving the root (without `--follow-symlinks`)
    /// or a file the server may not read.
    pub fn open_file(&self, relative: &Path) -> io::Result<File> {
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let resolve = if self.follow_symlinks {
            ResolveFlags::NO_MAGICLINKS
        } else {
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
        };
        let opened = match (self.resolver, self.follow_symlinks) {
            (Resolver::Openat2, _) => {
                rustix::fs::openat2(&self.dir, relative, flags, Mode::empty(), resolve)
            }
            // Links may point anywhere: the kernel's own walk is the answer.
            (Resolver::Walk, true) => rustix::fs::openat(&self.dir, relative, flags, Mode::empty()),
            (Resolver::Walk, false) => self.walk(relative, flags),
        };
        match opened {
            Ok(fd) => Ok(File::from(fd)),
            // EXDEV: the walk would have left the root; ELOOP: a link loop.
            Err(rustix::io::Errno::XDEV | rustix::io::Errno::LOOP) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "symlink leaves the served root",
            )),
            Err(e) => Err(e.into()),
        }
    }
}

impl Root {
    /// Opens `relative` beneath the root without openat2: one `openat(O_NOFOLLOW)` per
    /// component from the descriptor of the directory reached so far, so no component
    /// can be swapped for a symlink between a check and the open. A symlink is read and
    /// its target walked in its place: a relative target from the link's directory, a
    /// `..` popping one directory and never the root, an absolute target refused, as
    /// `RESOLVE_BENEATH` does (`EXDEV`); more than [`MAX_SYMLINKS`] gives `ELOOP`.
    fn walk(&self, relative: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        use rustix::io::Errno;
        // Components still to walk, the next one last.
        let mut pending: Vec<Vec<u8>> = components(relative.as_os_str().as_bytes());
        // The directories entered below the root.
        let mut entered: Vec<OwnedFd> = Vec::new();
        let mut links = 0;
        while let Some(name) = pending.pop() {
            if name == b".." {
                if entered.pop().is_none() {
                    return Err(Errno::XDEV);
                }
                continue;
            }
            let at = entered.last().unwrap_or(&self.dir);
            let last = pending.is_empty();
            let how = if last {
                flags | OFlags::NOFOLLOW
            } else {
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
            };
            match rustix::fs::openat(at, name.as_slice(), how, Mode::empty()) {
                Ok(fd) if last => return Ok(fd),
                Ok(fd) => entered.push(fd),
                // O_NOFOLLOW on a symlink: ELOOP (ENOTDIR with O_DIRECTORY on some
                // kernels). Anything but a link keeps its error.
                Err(error @ (Errno::LOOP | Errno::NOTDIR)) => {
                    let Ok(target) = rustix::fs::readlinkat(at, name.as_slice(), Vec::new()) else {
                        return Err(error);
                    };
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(Errno::LOOP);
                    }
                    let target = target.as_bytes();
                    if target.starts_with(b"/") {
                        return Err(Errno::XDEV);
                    }
                    pending.extend(components(target));
                }
                Err(error) => return Err(error),
            }
        }
        // Nothing left to walk: the path named the root (or a directory reached
        // through `..`); reopen it with the caller's flags.
        let at = entered.last().unwrap_or(&self.dir);
        rustix::fs::openat(at, ".", flags, Mode::empty())
    }
}

/// The non-empty, non-`.` components of a path, last first (a stack to pop).
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

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

    #[test]
    fn symlinks_stay_beneath_the_root() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let root_dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(root_dir.path().join("sub")).unwrap();
        std::fs::write(root_dir.path().join("sub/inside"), b"inside").unwrap();
        symlink(
            outside.path().join("secret"),
            root_dir.path().join("escape"),
        )
        .unwrap();
        symlink("../sub/inside", root_dir.path().join("sub/up")).unwrap();
        symlink("sub/inside", root_dir.path().join("within")).unwrap();

        let root = Root::open(root_dir.path(), false).unwrap();
        let read = |root: &Root, p: &str| std::io::read_to_string(root.open_file(Path::new(p))?);
        assert_eq!(read(&root, "within").unwrap(), "inside");
        assert_eq!(read(&root, "sub/up").unwrap(), "inside");
        let err = read(&root, "escape").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        let err = read(&root, "missing").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);

        let following = Root::open(root_dir.path(), true).unwrap();
        assert_eq!(read(&following, "escape").unwrap(), "secret");
    }

    #[test]
    fn the_component_walk_gives_the_answers_of_openat2() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let at = |p: &str| dir.path().join(p);
        std::fs::create_dir_all(at("sub/deeper")).unwrap();
        std::fs::write(at("sub/inside"), b"inside").unwrap();
        std::fs::write(at("top"), b"top").unwrap();
        symlink(outside.path().join("secret"), at("absolute-out")).unwrap();
        symlink("../sub/inside", at("sub/up")).unwrap();
        symlink("../../top", at("sub/deeper/two-up")).unwrap();
        symlink("../../outside", at("sub/escape")).unwrap();
        symlink("sub", at("sub-link")).unwrap();
        symlink("loop-b", at("loop-a")).unwrap();
        symlink("loop-a", at("loop-b")).unwrap();
        symlink("top/x", at("through-file")).unwrap();

        let kernel = Root::open(dir.path(), false).unwrap();
        let mut walk = Root::open(dir.path(), false).unwrap();
        walk.resolver = Resolver::Walk;
        let outcome = |root: &Root, p: &str| match root.open_file(Path::new(p)) {
            Ok(file) => Ok(std::io::read_to_string(file).unwrap_or_else(|_| "<dir>".into())),
            Err(e) => Err(e.kind()),
        };
        for path in [
            "top",
            "",
            "sub",
            "sub/inside",
            "sub/up",
            "sub/deeper/two-up",
            "sub-link/inside",
            "sub-link/deeper/two-up",
            "absolute-out",
            "sub/escape",
            "loop-a",
            "through-file",
            "missing",
            "sub/missing/x",
            "top/x",
        ] {
            assert_eq!(outcome(&walk, path), outcome(&kernel, path), "{path}");
        }
        assert_eq!(outcome(&walk, "sub-link/deeper/two-up"), Ok("top".into()));
        assert_eq!(
            outcome(&walk, "absolute-out"),
            Err(io::ErrorKind::PermissionDenied)
        );
    }

    proptest::proptest! {
        /// No accepted path has a `..` component, a NUL or a backslash, and none is
        /// absolute.
        #[test]
        fn sanitized_paths_are_plain(target in "/[a-z./%250-9A-F\\\\]{0,40}") {
            crate::fuzzing::request_path(target.as_bytes());
        }
    }
}

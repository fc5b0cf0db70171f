//! The served directory, held open: every lookup is relative to its descriptor, with no
//! way out of it.
//!
//! [`Root::open_file`] opens a relative path of plain components (see
//! [`crate::http::path`]) with `openat2(RESOLVE_BENEATH)`, so the kernel refuses any
//! symlink that would leave the root, race-free. With `--follow-symlinks` symlinks may
//! point anywhere.
//!
//! Where `openat2` is missing (kernels before 5.6: `ENOSYS`) or refused (older container
//! seccomp profiles: `EPERM`), [`Root::open`] notices and every lookup walks the path
//! one component at a time instead ([`Resolver::Walk`]): `openat(O_NOFOLLOW)` per
//! component from the root's descriptor, each symlink read and followed by hand, a
//! `..` from a link never above the root, an absolute link refused: the same answers.
//!
//! Files are opened `O_NONBLOCK` so that a FIFO in the tree cannot stall a worker; the
//! caller serves only regular files and directories.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
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

    /// Whether `other` is the same directory (device and inode), resolved under the
    /// same symlink policy: files opened beneath one are what the other would open.
    pub fn same_tree(&self, other: &Root) -> bool {
        let identity = |root: &Root| rustix::fs::fstat(&root.dir).map(|st| (st.st_dev, st.st_ino));
        self.follow_symlinks == other.follow_symlinks
            && matches!((identity(self), identity(other)), (Ok(a), Ok(b)) if a == b)
    }

    /// How this root resolves paths.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// The canonical path of the root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `relative` (from `http::path::sanitize`) read-only beneath the root.
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
}

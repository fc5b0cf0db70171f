//! The walk of a directory for a tar download: every entry `stat`ed, without following
//! a symlink, before the head is sent. Blocking: run it off the event loop.
//!
//! Hidden names follow the listing's rule; symlinks are stored as links, never
//! followed; FIFOs, sockets and devices are left out. A directory is opened relative to
//! its parent's descriptor with `O_NOFOLLOW`, so the walk never leaves the tree.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use crate::http::path::is_hidden;
use crate::http::tar::plan::{header, Entry, Kind, Member, Plan};

/// A tar download to plan: everything it needs, owned, so that it can run on the
/// blocking pool.
#[derive(Debug)]
pub struct Job {
    /// The open directory.
    pub dir: File,
    /// Its path below the root (empty for the root).
    pub relative: PathBuf,
    /// Its name: the tar's top directory and file name.
    pub name: Vec<u8>,
    /// Whether hidden names are included.
    pub show_hidden: bool,
    /// Most entries the walk takes, counted over the whole tree.
    pub max_entries: usize,
}

/// Why a tar cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The tree has more entries than the bound.
    #[error("the directory holds more than {0} entries (--listing-max-entries)")]
    TooManyEntries(usize),
    /// A directory could not be read.
    #[error("cannot read the directory: {0}")]
    Io(#[from] std::io::Error),
}

/// Walks the directory of `job` into a plan: the top directory, then each directory's
/// entries by name (bytewise), a directory's contents right after it.
pub fn plan(job: &Job) -> Result<Plan, WalkError> {
    let mut plan = Plan::new(job.name.clone());
    let top = rustix::fs::fstat(&job.dir).map_err(std::io::Error::from)?;
    plan.push(Entry {
        header: header(&job.name, Kind::Directory, top.st_mode, top.st_mtime),
        member: None,
    });
    let mut walk = Walk {
        job,
        plan,
        entries: 0,
    };
    walk.directory(job.dir.as_fd(), &job.relative, &job.name)?;
    Ok(walk.plan)
}

/// A walk in progress.
struct Walk<'a> {
    job: &'a Job,
    plan: Plan,
    /// Entries taken so far.
    entries: usize,
}

impl Walk<'_> {
    /// Adds the entries of `dir` (at `relative` below the root, `path` in the tar).
    fn directory(&mut self, dir: impl AsFd, relative: &Path, path: &[u8]) -> Result<(), WalkError> {
        let dir = dir.as_fd();
        let in_root = relative.as_os_str().is_empty();
        let mut names = Vec::new();
        for dirent in rustix::fs::Dir::read_from(dir).map_err(std::io::Error::from)? {
            let dirent = dirent.map_err(std::io::Error::from)?;
            let name = dirent.file_name();
            let bytes = name.to_bytes();
            let hidden = !self.job.show_hidden && is_hidden(bytes, in_root);
            if matches!(bytes, b"." | b"..") || hidden {
                continue;
            }
            names.push(name.to_owned());
        }
        names.sort_unstable();
        for name in names {
            self.entries += 1;
            if self.entries > self.job.max_entries {
                return Err(WalkError::TooManyEntries(self.job.max_entries));
            }
            // Gone since the directory was read: not in the tar.
            let Ok(stat) = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let relative = relative.join(OsStr::from_bytes(name.as_bytes()));
            let mut entry_path = path.to_vec();
            entry_path.push(b'/');
            entry_path.extend_from_slice(name.as_bytes());
            self.entry(dir, &name, &stat, &relative, &entry_path)?;
        }
        Ok(())
    }

    /// Adds one `stat`ed entry of `dir`, and a directory's contents after it.
    fn entry(
        &mut self,
        dir: rustix::fd::BorrowedFd<'_>,
        name: &CString,
        stat: &Stat,
        relative: &Path,
        path: &[u8],
    ) -> Result<(), WalkError> {
        let (mode, mtime) = (stat.st_mode, stat.st_mtime);
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                let flags = OFlags::RDONLY
                    | OFlags::DIRECTORY
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NONBLOCK;
                // Replaced or removed since its stat: left out, as a listing would.
                let Ok(sub): Result<OwnedFd, _> =
                    rustix::fs::openat(dir, name, flags, Mode::empty())
                else {
                    return Ok(());
                };
                self.plan.push(Entry {
                    header: header(path, Kind::Directory, mode, mtime),
                    member: None,
                });
                self.directory(sub, relative, path)
            }
            FileType::RegularFile => {
                let size = stat.st_size as u64;
                self.plan.push(Entry {
                    header: header(path, Kind::File(size), mode, mtime),
                    member: Some(Member {
                        relative: relative.to_owned(),
                        size,
                        mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
                        identity: (stat.st_dev, stat.st_ino),
                    }),
                });
                Ok(())
            }
            FileType::Symlink => {
                let Ok(target) = rustix::fs::readlinkat(dir, name.as_c_str(), Vec::new()) else {
                    return Ok(());
                };
                self.plan.push(Entry {
                    header: header(path, Kind::Symlink(target.as_bytes()), mode, mtime),
                    member: None,
                });
                Ok(())
            }
            // FIFOs, sockets, devices: never served, never in a tar.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn job(dir: &Path, show_hidden: bool, max_entries: usize) -> Job {
        Job {
            dir: File::open(dir).unwrap(),
            relative: PathBuf::from("sub"),
            name: b"sub".to_vec(),
            show_hidden,
            max_entries,
        }
    }

    fn paths(plan: &Plan) -> Vec<String> {
        plan.entries
            .iter()
            .map(|entry| {
                let start = entry.header.len() - 512;
                let header = ::tar::Header::from_byte_slice(&entry.header[start..]);
                let name = &header.as_old().name;
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                String::from_utf8_lossy(&name[..end]).into_owned()
            })
            .collect()
    }

    #[test]
    fn walks_in_order_skipping_hidden_and_storing_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join("b/inner"), b"123").unwrap();
        std::fs::write(dir.path().join("a"), b"").unwrap();
        std::fs::write(dir.path().join(".env"), b"secret").unwrap();
        symlink("/etc", dir.path().join("c")).unwrap();
        let plan = plan(&job(dir.path(), false, 100)).unwrap();
        assert_eq!(
            paths(&plan),
            ["sub", "sub/a", "sub/b", "sub/b/inner", "sub/c"]
        );
        let members: Vec<_> = plan
            .entries
            .iter()
            .filter_map(|e| e.member.as_ref())
            .collect();
        assert_eq!(members[1].relative, Path::new("sub/b/inner"));
        assert_eq!(members[1].size, 3);
        // Five headers, one body of 3 bytes padded to 512, the end blocks.
        assert_eq!(plan.len, 5 * 512 + 512 + 1024);

        let with_hidden = super::plan(&job(dir.path(), true, 100)).unwrap();
        assert_eq!(paths(&with_hidden)[1], "sub/.env");
    }

    #[test]
    fn refuses_a_tree_over_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        for i in 0..3 {
            std::fs::write(dir.path().join(format!("d/{i}")), b"").unwrap();
        }
        assert!(plan(&job(dir.path(), false, 4)).is_ok());
        assert!(matches!(
            plan(&job(dir.path(), false, 3)),
            Err(WalkError::TooManyEntries(3))
        ));
    }
}

//! A read of a served file that failed under a response: EIO from a failing disk, a
//! checksum or corruption error from the file system, a mapped page the kernel could
//! not read in. The strategies give it as the source of their `io::Error`, naming the
//! file and the byte where reading stopped, so that the response ends short (never with
//! bytes that are not the file's), the error log says it once, a metric counts it, and
//! the file leaves the caches (a descriptor cached since the failure would keep its
//! cached state: the next request opens the file anew).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// A read of `path` failed at byte `offset`.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {} at byte {offset}: {error}", path.display())]
pub struct FileReadError {
    /// Where the file is: the kernel's name for the descriptor (`/proc/self/fd`), so
    /// the one a tar member or a renamed file had.
    pub path: PathBuf,
    /// The byte of the file where reading stopped (to the page, as the kernel reports).
    pub offset: u64,
    /// The file's device and inode: what the caches are cleared of.
    pub identity: (u64, u64),
    /// What the kernel said.
    pub error: io::Error,
}

/// The error for `file`'s read at `offset` that failed with `error`.
pub(crate) fn file_read_error(file: &File, offset: u64, error: io::Error) -> io::Error {
    let fd = file.as_raw_fd();
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .unwrap_or_else(|_| PathBuf::from(format!("descriptor {fd}")));
    let identity = file.metadata().map_or((0, 0), |m| (m.dev(), m.ino()));
    io::Error::new(
        error.kind(),
        FileReadError {
            path,
            offset,
            identity,
            error,
        },
    )
}

/// The read error behind `error`, if a read of the file is what failed.
pub fn file_read_error_in(error: &io::Error) -> Option<&FileReadError> {
    error.get_ref()?.downcast_ref()
}

/// Whether `error`, from a call that reads the file and writes the socket in one
/// (sendfile(2)), came from reading the file: a socket's errors are others (EPIPE,
/// ECONNRESET, EAGAIN).
pub(crate) fn is_from_reading(error: &io::Error) -> bool {
    // EBADMSG and EUCLEAN are what ext4, XFS and btrfs report for a bad checksum and
    // for corruption (their EFSBADCRC and EFSCORRUPTED).
    matches!(
        error.raw_os_error(),
        Some(libc::EIO | libc::EBADMSG | libc::EUCLEAN)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_the_file_the_byte_and_the_cause_once() {
        let temp = tempfile::NamedTempFile::new().unwrap();
        let file = File::open(temp.path()).unwrap();
        let error = file_read_error(&file, 8192, io::Error::from_raw_os_error(libc::EIO));
        let failed = file_read_error_in(&error).expect("a read error");
        assert_eq!(failed.path, temp.path().canonicalize().unwrap());
        assert_eq!(failed.offset, 8192);
        let meta = file.metadata().unwrap();
        assert_eq!(failed.identity, (meta.dev(), meta.ino()));
        let text = error.to_string();
        assert!(text.starts_with(&format!(
            "cannot read {} at byte 8192: ",
            temp.path().display()
        )));
        assert_eq!(text.matches("os error 5").count(), 1, "{text}");
        // Other errors carry none.
        assert!(file_read_error_in(&io::Error::from_raw_os_error(libc::EPIPE)).is_none());
    }

    #[test]
    fn only_a_read_side_errno_of_sendfile_is_the_file_s() {
        for errno in [libc::EIO, libc::EBADMSG, libc::EUCLEAN] {
            assert!(is_from_reading(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EPIPE, libc::ECONNRESET, libc::EAGAIN, libc::ETIMEDOUT] {
            assert!(!is_from_reading(&io::Error::from_raw_os_error(errno)));
        }
        assert!(!is_from_reading(&io::ErrorKind::UnexpectedEof.into()));
    }
}

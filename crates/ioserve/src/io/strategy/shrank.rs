//! The error every strategy gives for a file that turned out shorter than its range.

use std::io;

/// The error for a file that ended before the range did.
pub(super) fn file_shrank() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
}

//! Why a body ended before its range did: the file shrank, or a read of it failed.

use std::fs::File;
use std::io;

use crate::io::read_error::file_read_error;

/// The error for a file that ended before the range did.
pub(super) fn file_shrank() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
}

/// The error for a read of `file` that stopped at `at`, short of the range's end
/// without an error (a pread(2) returns the bytes before a page it cannot read, and the
/// error only when asked from that page): the read error a read from `at` gives, else
/// the file shrank.
pub(super) fn ended_early(file: &File, at: u64) -> io::Error {
    let mut byte = [0u8];
    match rustix::io::pread(file, &mut byte, at) {
        Err(error) => file_read_error(file, at, error.into()),
        Ok(_) => file_shrank(),
    }
}

/// The error for bytes `start..end` of `file` that the kernel could not copy from the
/// file's mapping (writev(2) failed with `EFAULT`): the file shrank under the mapping,
/// or a page of it cannot be read, found by reading the span (a failing disk's page
/// gives its error to pread too). Where the span reads back whole, the `EFAULT` itself
/// is the read error, at `start`.
pub(super) fn mapping_unreadable(file: &File, start: u64, end: u64) -> io::Error {
    if file.metadata().is_ok_and(|m| m.len() < end) {
        return file_shrank();
    }
    let mut scratch = vec![0u8; 64 << 10];
    let mut at = start;
    while at < end {
        let want = (end - at).min(scratch.len() as u64) as usize;
        match rustix::io::pread(file, &mut scratch[..want], at) {
            Ok(0) => return file_shrank(),
            Ok(n) => at += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return file_read_error(file, at, error.into()),
        }
    }
    file_read_error(file, start, io::Error::from_raw_os_error(libc::EFAULT))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::io::read_error::file_read_error_in;

    #[test]
    fn a_read_that_stopped_at_the_end_of_the_file_is_a_shrunk_file() {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        temp.write_all(&[7; 100]).unwrap();
        let file = File::open(temp.path()).unwrap();
        let error = ended_early(&file, 100);
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(file_read_error_in(&error).is_none());
        // A mapping span past the end is a shrunk file too.
        let error = mapping_unreadable(&file, 0, 4096);
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_span_that_reads_back_whole_keeps_the_fault_as_its_error() {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        temp.write_all(&[7; 200_000]).unwrap();
        let file = File::open(temp.path()).unwrap();
        let error = mapping_unreadable(&file, 4096, 200_000);
        let failed = file_read_error_in(&error).expect("a read error");
        assert_eq!(failed.offset, 4096);
        assert_eq!(failed.error.raw_os_error(), Some(libc::EFAULT));
    }

    #[test]
    fn a_descriptor_that_cannot_read_gives_its_error_at_the_byte() {
        // A descriptor opened for writing only: pread fails (EBADF) as a bad disk's would.
        let temp = tempfile::NamedTempFile::new().unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(temp.path())
            .unwrap();
        let error = ended_early(&file, 12);
        let failed = file_read_error_in(&error).expect("a read error");
        assert_eq!(
            (failed.offset, failed.error.raw_os_error()),
            (12, Some(libc::EBADF))
        );
    }
}

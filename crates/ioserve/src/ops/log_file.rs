//! A log file that outlives a full disk: a line that cannot be written (ENOSPC, EIO,
//! a quota) is counted as lost, the first loss of a spell is said once in the error
//! log, and writing resumes by itself when the file takes lines again, with a word
//! that says how many were lost. Serving never waits on it: it runs on the access log's
//! background writer thread.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lines that no log file of this process could write, since it started (the
/// `ioserve_access_log_lines_lost_total` counter).
static LINES_LOST: AtomicU64 = AtomicU64::new(0);

/// Lines lost so far by every [`LogFile`] of the process.
pub fn lines_lost() -> u64 {
    LINES_LOST.load(Ordering::Relaxed)
}

/// A file that log lines are appended to, one `write` per line.
#[derive(Debug)]
pub(crate) struct LogFile {
    file: File,
    path: PathBuf,
    /// Lines lost in the current spell of failures; 0 while lines are written.
    losing: u64,
    /// A failed write left part of a line in the file, which could not be taken back:
    /// the next line starts after a newline, so that none is glued to the fragment.
    cut: bool,
}

impl LogFile {
    /// Lines go to `file`, opened from `path` (named in what is logged).
    pub(crate) fn new(file: File, path: PathBuf) -> LogFile {
        LogFile {
            file,
            path,
            losing: 0,
            cut: false,
        }
    }

    /// Appends `line`, or counts it as lost.
    fn append(&mut self, line: &[u8]) {
        let written = match self.cut {
            true => write_counting(&mut self.file, b"\n").and_then(|_| {
                self.cut = false;
                write_counting(&mut self.file, line)
            }),
            false => write_counting(&mut self.file, line),
        };
        match written {
            Ok(_) if self.losing > 0 => {
                tracing::warn!(
                    path = %self.path.display(),
                    lost = self.losing,
                    "access log: writing again; {} lines were lost",
                    self.losing
                );
                self.losing = 0;
            }
            Ok(_) => {}
            Err((partial, error)) => {
                if partial > 0 {
                    self.take_back(partial);
                }
                LINES_LOST.fetch_add(1, Ordering::Relaxed);
                if self.losing == 0 {
                    tracing::error!(
                        path = %self.path.display(),
                        %error,
                        "access log: cannot write; lines are lost (counted in \
                         ioserve_access_log_lines_lost_total) until it can, serving goes on"
                    );
                }
                self.losing += 1;
            }
        }
    }
}

impl LogFile {
    /// Removes the `partial` bytes of a line that a failed write left at the end of the
    /// file (the disk filled in the middle of it), so that no line is ever half in the
    /// log; where that fails, the next line starts after a newline instead.
    fn take_back(&mut self, partial: usize) {
        let cut = self
            .file
            .metadata()
            .and_then(|meta| self.file.set_len(meta.len().saturating_sub(partial as u64)));
        self.cut |= cut.is_err();
    }
}

/// Writes all of `bytes`; on an error, how many went in before it.
fn write_counting(file: &mut File, bytes: &[u8]) -> Result<usize, (usize, io::Error)> {
    let mut done = 0;
    while done < bytes.len() {
        match file.write(&bytes[done..]) {
            Ok(0) => return Err((done, io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err((done, error)),
        }
    }
    Ok(done)
}

impl Write for LogFile {
    /// Takes `buf` whole (the background writer hands over one line per call): a line
    /// that cannot be written is counted, not returned as an error, which the writer
    /// would only print to stderr once per line.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /dev/full fails every write with ENOSPC, as a full disk does.
    #[test]
    fn a_full_disk_loses_lines_and_counts_them() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut log = LogFile::new(full, "/dev/full".into());
        let before = lines_lost();
        for _ in 0..3 {
            log.write_all(b"a line\n").unwrap();
        }
        assert_eq!(log.losing, 3);
        assert!(lines_lost() >= before + 3);
        // Space returns: the next line is written.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        log.file = File::create(&path).unwrap();
        log.cut = true;
        log.write_all(b"next\n").unwrap();
        assert_eq!(log.losing, 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"\nnext\n");
    }
}

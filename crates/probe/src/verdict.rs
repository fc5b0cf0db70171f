//! The file-serving verdict: does a server send files with sendfile/splice (the
//! kernel moves the bytes), or read them into user space and write them out again
//! (seed 000's silent fallback)?

use serde::Serialize;

use crate::syscalls::SyscallSnapshot;
use crate::sysnames::{data_path, DataPath};

/// How file data moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataMovement {
    /// sendfile/splice-style syscalls moved at least 95% of the bytes sent (the rest
    /// is typically response headers written with write/writev).
    ZeroCopy,
    /// write-style syscalls moved at least 95% of the bytes sent.
    Copying,
    /// Both paths moved a real share.
    Mixed,
}

/// The share of the bytes sent that decides "zero-copy" (and, from the other side,
/// "copying").
const ZERO_COPY_SHARE: f64 = 0.95;

/// The verdict with its evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileServingVerdict {
    /// The finding.
    pub movement: DataMovement,
    /// Bytes moved by zero-copy syscalls.
    pub zero_copy_bytes: u64,
    /// Bytes read into user space (read, pread64, readv, ...).
    pub copied_in_bytes: u64,
    /// Bytes written from user space (write, writev, sendto, ...).
    pub copied_out_bytes: u64,
    /// Per syscall: name, calls and bytes, for every data-moving syscall seen.
    pub by_syscall: Vec<(String, u64, u64)>,
}

impl FileServingVerdict {
    /// Judges a snapshot; `None` when no data-moving syscall moved a byte.
    pub fn judge(snapshot: &SyscallSnapshot) -> Option<FileServingVerdict> {
        let mut verdict = FileServingVerdict {
            movement: DataMovement::Copying,
            zero_copy_bytes: 0,
            copied_in_bytes: 0,
            copied_out_bytes: 0,
            by_syscall: Vec::new(),
        };
        for row in &snapshot.rows {
            let Some(path) = data_path(&row.name) else {
                continue;
            };
            match path {
                DataPath::ZeroCopy => verdict.zero_copy_bytes += row.bytes,
                DataPath::CopyIn => verdict.copied_in_bytes += row.bytes,
                DataPath::CopyOut => verdict.copied_out_bytes += row.bytes,
            }
            verdict
                .by_syscall
                .push((row.name.clone(), row.calls, row.bytes));
        }
        let sent = verdict.zero_copy_bytes + verdict.copied_out_bytes;
        if sent == 0 {
            return None;
        }
        let zero_copy_share = verdict.zero_copy_bytes as f64 / sent as f64;
        verdict.movement = if zero_copy_share >= ZERO_COPY_SHARE {
            DataMovement::ZeroCopy
        } else if zero_copy_share <= 1.0 - ZERO_COPY_SHARE {
            DataMovement::Copying
        } else {
            DataMovement::Mixed
        };
        Some(verdict)
    }

    /// One line for people, e.g. "zero-copy: sendfile moved 1.0 GiB".
    pub fn describe(&self) -> String {
        use crate::report::bytes;
        match self.movement {
            DataMovement::ZeroCopy => format!(
                "zero-copy: the kernel moved {} (sendfile/splice); {} written from user \
                 space (headers)",
                bytes(self.zero_copy_bytes),
                bytes(self.copied_out_bytes)
            ),
            DataMovement::Copying => format!(
                "copying through user space: {} written from user buffers ({} read into \
                 them; none when they are mmap'd), {} by sendfile/splice (if this is a file \
                 server, sendfile is not in use: check TLS, compression, or a wrapper that \
                 hides the file descriptor)",
                bytes(self.copied_out_bytes),
                bytes(self.copied_in_bytes),
                bytes(self.zero_copy_bytes)
            ),
            DataMovement::Mixed => format!(
                "mixed: {} zero-copy (sendfile/splice) and {} written from user space",
                bytes(self.zero_copy_bytes),
                bytes(self.copied_out_bytes)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::SyscallRow;

    fn row(name: &str, calls: u64, bytes: u64) -> SyscallRow {
        SyscallRow {
            name: name.into(),
            calls,
            bytes,
            ..Default::default()
        }
    }

    #[test]
    fn judges_the_data_paths() {
        let snap = |rows| SyscallSnapshot {
            rows,
            ..SyscallSnapshot::default()
        };
        let copying = snap(vec![row("read", 10, 40960), row("write", 10, 40960)]);
        let v = FileServingVerdict::judge(&copying).unwrap();
        assert_eq!(v.movement, DataMovement::Copying);
        assert_eq!((v.copied_in_bytes, v.copied_out_bytes), (40960, 40960));
        assert!(v.describe().starts_with("copying through user space"));

        let movement = |rows| FileServingVerdict::judge(&snap(rows)).unwrap().movement;
        // Headers written with write() beside sendfile's body: still zero-copy.
        let headers = vec![row("sendfile", 2, 1 << 20), row("write", 1, 200)];
        assert_eq!(movement(headers), DataMovement::ZeroCopy);
        let reads = vec![row("sendfile", 2, 1 << 20), row("read", 1, 200)];
        assert_eq!(movement(reads), DataMovement::ZeroCopy);
        let both = vec![row("sendfile", 2, 1 << 20), row("writev", 4, 1 << 19)];
        assert_eq!(movement(both), DataMovement::Mixed);
        let mostly_copied = vec![row("sendfile", 1, 100), row("writev", 4, 1 << 20)];
        assert_eq!(movement(mostly_copied), DataMovement::Copying);

        assert!(FileServingVerdict::judge(&snap(vec![row("getppid", 5, 0)])).is_none());
        assert!(FileServingVerdict::judge(&snap(vec![row("read", 5, 0)])).is_none());
    }
}

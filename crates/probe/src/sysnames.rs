//! Syscall numbers and names of the architecture probe was built for, and which
//! syscalls move file data (the input of the file-serving verdict).

use std::borrow::Cow;

use syscalls::Sysno;

/// Syscall numbers the BPF programs track: 0..MAX_SYSCALLS (see syscalls.bpf.c).
pub const MAX_SYSCALLS: usize = 1024;

/// The name of syscall `nr` ("read"), or "syscall_NNN" for a number this build does
/// not know.
pub fn name(nr: u32) -> Cow<'static, str> {
    match Sysno::new(nr as usize) {
        Some(sysno) => Cow::Borrowed(sysno.name()),
        None => Cow::Owned(format!("syscall_{nr}")),
    }
}

/// The number of the syscall called `name`, if this architecture has one.
pub fn number(name: &str) -> Option<u32> {
    name.parse::<Sysno>().ok().map(|sysno| sysno.id() as u32)
}

/// How a syscall takes part in moving file data to a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPath {
    /// The kernel moves the bytes between file descriptors: sendfile, splice,
    /// copy_file_range, tee, vmsplice.
    ZeroCopy,
    /// Bytes are copied from the kernel into a user buffer: read, pread, readv, ...
    CopyIn,
    /// Bytes are copied from a user buffer into the kernel: write, writev, sendto,
    /// sendmsg, ... (Python's sendall uses sendto).
    CopyOut,
}

/// The data path of the syscall called `name`, or `None` for a syscall that moves no
/// file data.
pub fn data_path(name: &str) -> Option<DataPath> {
    match name {
        "sendfile" | "sendfile64" | "splice" | "copy_file_range" | "tee" | "vmsplice" => {
            Some(DataPath::ZeroCopy)
        }
        "read" | "pread64" | "readv" | "preadv" | "preadv2" | "recvfrom" | "recvmsg" => {
            Some(DataPath::CopyIn)
        }
        "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" | "sendto" | "sendmsg"
        | "sendmmsg" => Some(DataPath::CopyOut),
        _ => None,
    }
}

/// For each syscall number below [`MAX_SYSCALLS`], 1 when its positive return value
/// is a byte count worth summing (every syscall with a [`DataPath`]).
pub fn moves_bytes_table() -> [u8; MAX_SYSCALLS] {
    let mut table = [0u8; MAX_SYSCALLS];
    for (nr, slot) in table.iter_mut().enumerate() {
        if data_path(&name(nr as u32)).is_some() {
            *slot = 1;
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_round_trip() {
        let nr = number("clock_gettime").expect("every architecture has clock_gettime");
        assert_eq!(name(nr), "clock_gettime");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(nr, 228);
        #[cfg(target_arch = "aarch64")]
        assert_eq!(nr, 113);
        assert_eq!(name(1000), "syscall_1000");
        assert_eq!(number("no_such_syscall"), None);
    }

    #[test]
    fn the_byte_table_marks_exactly_the_data_paths() {
        let table = moves_bytes_table();
        for name_of in [
            "read", "write", "sendfile", "splice", "writev", "pread64", "sendto",
        ] {
            let nr = number(name_of).unwrap() as usize;
            assert_eq!(table[nr], 1, "{name_of}");
        }
        for name_of in ["getppid", "clock_gettime", "mmap", "close"] {
            let nr = number(name_of).unwrap() as usize;
            assert_eq!(table[nr], 0, "{name_of}");
        }
    }
}

//! A writer for the cpio "newc" format, the one the Linux kernel unpacks as an initramfs
//! (Documentation/driver-api/early-userspace/buffer-format.rst). Written here rather than
//! run through `cpio`, so that the archive can hold a device node without root and
//! without a staging directory.

/// An archive being built in memory.
#[derive(Default)]
pub(crate) struct Archive {
    bytes: Vec<u8>,
    next_inode: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

impl Archive {
    /// A directory (`path` relative, without a leading `/`).
    pub(crate) fn directory(&mut self, path: &str) {
        self.entry(path, S_IFDIR | 0o755, 2, (0, 0), &[]);
    }

    /// A regular file with permission bits `mode`.
    pub(crate) fn file(&mut self, path: &str, mode: u32, contents: &[u8]) {
        self.entry(path, S_IFREG | mode, 1, (0, 0), contents);
    }

    /// A character device node.
    pub(crate) fn char_device(&mut self, path: &str, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | 0o600, 1, (major, minor), &[]);
    }

    /// The archive, closed with the `TRAILER!!!` entry.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.next_inode = 0;
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[]);
        self.bytes
    }

    fn entry(&mut self, path: &str, mode: u32, links: u32, rdev: (u32, u32), data: &[u8]) {
        self.next_inode += 1;
        let name_size = path.len() + 1;
        let fields = [
            self.next_inode,
            mode,
            0, // uid
            0, // gid
            links,
            0, // mtime
            u32::try_from(data.len()).expect("initramfs members are below 4 GiB"),
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            u32::try_from(name_size).expect("short path"),
            0, // check
        ];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(path.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    /// Header + name and the data each end on a 4-byte boundary.
    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_terminated() {
        let mut archive = Archive::default();
        archive.directory("bin");
        archive.file("bin/x", 0o755, b"hello");
        archive.char_device("dev/console", 5, 1);
        let bytes = archive.finish();
        assert!(bytes.len().is_multiple_of(4));
        assert!(bytes.starts_with(b"070701"));
        // The file entry: header (110 bytes) + "bin/x\0" padded to 4, then the data.
        let file_at = bytes
            .windows(6)
            .position(|w| w == b"bin/x\0")
            .expect("file name")
            - 110;
        let size = u32::from_str_radix(
            std::str::from_utf8(&bytes[file_at + 54..file_at + 62]).unwrap(),
            16,
        )
        .unwrap();
        assert_eq!(size, 5);
        let data_at = (file_at + 110 + 6).next_multiple_of(4);
        assert_eq!(&bytes[data_at..data_at + 5], b"hello");
        // The console's rdev major/minor fields.
        let console_at = bytes
            .windows(12)
            .position(|w| w == b"dev/console\0")
            .unwrap()
            - 110;
        assert_eq!(
            &bytes[console_at + 78..console_at + 94],
            b"0000000500000001"
        );
        let trailer = bytes
            .windows(11)
            .position(|w| w == b"TRAILER!!!\0")
            .unwrap();
        assert!(bytes.len() - trailer <= 11 + 3);
    }
}

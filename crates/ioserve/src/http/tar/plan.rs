//! What a tar download sends: header blocks and file members, and the exact length.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use ::tar::{EntryType, Header};

/// The tar block size: headers are one block, bodies are padded to whole blocks.
pub const BLOCK: u64 = 512;

/// The two zero blocks that end a tar.
pub const END: [u8; 2 * BLOCK as usize] = [0; 2 * BLOCK as usize];

/// A tar ready to send: every entry's headers and members, in order.
#[derive(Debug)]
pub struct Plan {
    /// The directory's name, for `Content-Disposition` (`NAME.tar`) and as the first
    /// component of every path in the tar.
    pub name: Vec<u8>,
    /// The entries in the order they are sent.
    pub entries: Vec<Entry>,
    /// Bytes of the whole tar.
    pub len: u64,
}

impl Plan {
    /// An empty tar (only its end blocks) of the directory `name`.
    pub fn new(name: Vec<u8>) -> Plan {
        Plan {
            name,
            entries: Vec::new(),
            len: END.len() as u64,
        }
    }

    /// Appends an entry, counting its bytes.
    pub fn push(&mut self, entry: Entry) {
        self.len += entry.header.len() as u64;
        if let Some(member) = &entry.member {
            self.len += member.size + padding(member.size) as u64;
        }
        self.entries.push(entry);
    }
}

/// One entry of the tar.
#[derive(Debug)]
pub struct Entry {
    /// Its header block, after any GNU long-name or long-link block.
    pub header: Vec<u8>,
    /// For a regular file: the file whose bytes follow the header.
    pub member: Option<Member>,
}

/// A regular file as the walk found it; it must be the same when its turn comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its path below the served root.
    pub relative: PathBuf,
    /// Its size, which the header announces.
    pub size: u64,
    /// Its modification time: seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Its device and inode.
    pub identity: (u64, u64),
}

/// Zero bytes after a body of `size` bytes, up to a whole block.
pub fn padding(size: u64) -> usize {
    ((BLOCK - size % BLOCK) % BLOCK) as usize
}

/// What an entry is, with what its header needs.
#[derive(Debug, Clone, Copy)]
pub enum Kind<'a> {
    /// A directory.
    Directory,
    /// A regular file of this many bytes.
    File(u64),
    /// A symbolic link to this target, stored as a link, never followed.
    Symlink(&'a [u8]),
}

/// The header block(s) of the entry `path` (bytes, `/`-separated, relative to the
/// tar's top): a GNU header, preceded by a GNU long-name (`L`) block for a path over
/// 100 bytes and a long-link (`K`) block for a link target over 100 bytes.
pub fn header(path: &[u8], kind: Kind<'_>, mode: u32, mtime: i64) -> Vec<u8> {
    let mut blocks = Vec::with_capacity(BLOCK as usize);
    let mut header = Header::new_gnu();
    let (entry_type, size) = match kind {
        Kind::Directory => (EntryType::Directory, 0),
        Kind::File(size) => (EntryType::Regular, size),
        Kind::Symlink(_) => (EntryType::Symlink, 0),
    };
    header.set_entry_type(entry_type);
    header.set_size(size);
    header.set_mode(mode & 0o7777);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime.max(0) as u64);
    if header.set_path(Path::new(OsStr::from_bytes(path))).is_err() {
        long_field(&mut blocks, EntryType::GNULongName, path);
        set_truncated(&mut header.as_old_mut().name, path);
    }
    if let Kind::Symlink(target) = kind {
        if header.set_link_name_literal(target).is_err() {
            long_field(&mut blocks, EntryType::GNULongLink, target);
            set_truncated(&mut header.as_old_mut().linkname, target);
        }
    }
    header.set_cksum();
    blocks.extend_from_slice(header.as_bytes());
    blocks
}

/// Appends a GNU long-name or long-link entry carrying `value` (NUL-terminated, padded).
fn long_field(blocks: &mut Vec<u8>, entry_type: EntryType, value: &[u8]) {
    let mut header = Header::new_gnu();
    set_truncated(&mut header.as_old_mut().name, b"././@LongLink");
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    // With its NUL, as GNU tar writes it.
    let len = value.len() as u64 + 1;
    header.set_size(len);
    header.set_entry_type(entry_type);
    header.set_cksum();
    blocks.extend_from_slice(header.as_bytes());
    blocks.extend_from_slice(value);
    blocks.push(0);
    blocks.resize(blocks.len() + padding(len), 0);
}

/// Writes the start of `value` into a fixed header field (the long block has it whole).
fn set_truncated(field: &mut [u8], value: &[u8]) {
    let n = field.len().min(value.len());
    field[..n].copy_from_slice(&value[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// Headers read back by the `tar` crate's reader: names, long names, links, sizes.
    #[test]
    fn headers_read_back_with_long_names_and_links() {
        let long = format!("top/{}", "n".repeat(150));
        let long_target = "t".repeat(120);
        let mut plan = Plan::new(b"top".to_vec());
        let mut tar = Vec::new();
        for (path, kind, body) in [
            ("top", Kind::Directory, &b""[..]),
            ("top/a.txt", Kind::File(5), &b"hello"[..]),
            (long.as_str(), Kind::File(0), &b""[..]),
            ("top/link", Kind::Symlink(long_target.as_bytes()), &b""[..]),
        ] {
            let header = header(path.as_bytes(), kind, 0o640, 1_700_000_000);
            let size = body.len() as u64;
            tar.extend_from_slice(&header);
            tar.extend_from_slice(body);
            tar.resize(tar.len() + padding(size), 0);
            let member = matches!(kind, Kind::File(_)).then(|| Member {
                relative: PathBuf::from(path),
                size,
                mtime: (0, 0),
                identity: (0, 0),
            });
            plan.push(Entry { header, member });
        }
        tar.extend_from_slice(&END);
        assert_eq!(plan.len, tar.len() as u64);
        assert_eq!(tar.len() % BLOCK as usize, 0);

        let mut archive = ::tar::Archive::new(&tar[..]);
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let link = entry
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned());
            assert_eq!(entry.header().mtime().unwrap(), 1_700_000_000);
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            seen.push((path, entry.header().entry_type(), link, body));
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0].0, "top");
        assert!(seen[0].1.is_dir());
        assert_eq!(
            (seen[1].0.as_str(), &seen[1].3[..]),
            ("top/a.txt", &b"hello"[..])
        );
        assert_eq!(seen[2].0, long);
        assert_eq!(seen[3].2.as_deref(), Some(long_target.as_str()));
        assert!(seen[3].1.is_symlink());
    }

    #[test]
    fn padding_fills_to_a_block() {
        assert_eq!(padding(0), 0);
        assert_eq!(padding(1), 511);
        assert_eq!(padding(512), 0);
        assert_eq!(padding(1 << 20), 0);
        assert_eq!(padding(513), 511);
    }
}

//! Shared memory regions with a NUMA policy, as numactl's `--shm` (System V segments
//! named by a key file) and `--file` (files in tmpfs or hugetlbfs) set them up: the
//! policy is stored with the segment or file, so every process that maps it later gets
//! it. `--touch` faults the pages in under the policy; `--dump` and `--dump-nodes` show
//! the policy and the node of each range of pages.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};

use crate::pages;
use crate::policy::{self, MemPolicy, Mode, PolicyError};

/// How to find or create a region (numactl's `--length`, `--offset`, `--shmmode`,
/// `--shmid`, `--huge`, which must come before `--shm`/`--file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of the region (0: the whole existing segment).
    pub length: u64,
    /// Bytes into the segment or file where the region starts.
    pub offset: u64,
    /// Permissions of a segment, key file or file this creates.
    pub mode: u32,
    /// The project id that ftok(3) mixes into the key.
    pub id: i64,
    /// A System V segment of huge pages (SHM_HUGETLB).
    pub huge: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            length: 0,
            offset: 0,
            mode: 0o600,
            id: 0,
            huge: false,
        }
    }
}

impl Settings {
    /// Where the region ends in the segment or file: offset + length.
    fn end(&self) -> Result<u64, ShmError> {
        self.offset
            .checked_add(self.length)
            .ok_or(ShmError::TooLarge {
                offset: self.offset,
                length: self.length,
            })
    }
}

/// What went wrong with a shared memory region.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A call on a named key file, segment or file failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The key file or file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A region that does not exist yet cannot be created without a length.
    #[error("need a --length to create {0}")]
    NeedLength(&'static str),
    /// The region's start or length is not a multiple of the page size.
    #[error("policy region not page aligned (length {length:#x}, page size {page_size:#x})")]
    NotAligned {
        /// The region's length.
        length: u64,
        /// The page size of the segment or file.
        page_size: u64,
    },
    /// `--offset` plus `--length` past what a 64-bit size holds.
    #[error("--offset {offset} plus --length {length} is past the largest possible size")]
    TooLarge {
        /// The offset.
        offset: u64,
        /// The length.
        length: u64,
    },
    /// The region is empty.
    #[error("policy region length not specified before {0}")]
    NoLength(&'static str),
    /// `--offset` at or past the region's length.
    #[error("region offset {offset:#x} beyond its length {length:#x} at {option}")]
    Beyond {
        /// The offset.
        offset: u64,
        /// The length.
        length: u64,
        /// The option that needs the region.
        option: &'static str,
    },
    /// A policy call on the region failed.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// Where the region's memory comes from.
#[derive(Debug)]
enum Backing {
    /// A System V segment attached at `base` (the region starts `offset` into it).
    SysV { base: *mut libc::c_void },
    /// A shared mapping of a file.
    File { _file: File },
}

/// A shared memory region mapped into this process.
#[derive(Debug)]
pub struct Region {
    start: *mut u8,
    length: u64,
    offset: u64,
    page_size: u64,
    backing: Backing,
}

fn io_error<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> ShmError + 'p {
    move |source| ShmError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn c_path(path: &Path) -> Result<CString, ShmError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ShmError::Io {
        what: "path with a NUL byte:",
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })
}

/// numactl's `check_region`: the region starts and ends on page boundaries and is not
/// empty.
fn check_region(
    start: u64,
    length: u64,
    page_size: u64,
    option: &'static str,
) -> Result<(), ShmError> {
    let page = page_size.max(1);
    if !start.is_multiple_of(page) || !length.is_multiple_of(page) {
        return Err(ShmError::NotAligned {
            length,
            page_size: page,
        });
    }
    if length == 0 {
        return Err(ShmError::NoLength(option));
    }
    Ok(())
}

impl Region {
    /// Attaches the System V segment whose key ftok(3) makes of `key_file` and
    /// `settings.id`, creating the key file and the segment if they do not exist (each
    /// creation is reported through `notice`, in numactl's words). `option` names the
    /// option in errors.
    pub fn attach_sysv(
        key_file: &Path,
        settings: &Settings,
        option: &'static str,
        notice: &mut dyn FnMut(String),
    ) -> Result<Region, ShmError> {
        let key = sysv_key(key_file, settings, notice)?;
        let (id, length) = sysv_segment(key, key_file, settings, notice)?;
        // SAFETY: attaching a segment at an address of the kernel's choosing touches no
        // memory of this process.
        let base = unsafe { libc::shmat(id, std::ptr::null(), 0) };
        if base as isize == -1 {
            return Err(io_error("shmat the segment of", key_file)(
                io::Error::last_os_error(),
            ));
        }
        let small = pages::page_size() as u64;
        let page_size = if settings.huge {
            pages::huge_page_size(Path::new("/")).unwrap_or(small)
        } else {
            small
        };
        let region = Region {
            // The offset stays inside the segment, which was made length + offset long
            // (or the kernel refused the attach of a shorter existing one above).
            start: base.cast::<u8>().wrapping_add(settings.offset as usize),
            length,
            offset: settings.offset,
            page_size,
            backing: Backing::SysV { base },
        };
        check_region(region.start as u64, region.length, region.page_size, option)?;
        Ok(region)
    }

    /// Maps `file` shared, creating it (with `settings.mode`) if it does not exist and
    /// growing it to `offset + length` if it is shorter.
    pub fn attach_file(
        file: &Path,
        settings: &Settings,
        option: &'static str,
    ) -> Result<Region, ShmError> {
        let end = settings.end()?;
        let opened = match OpenOptions::new().read(true).write(true).open(file) {
            Ok(opened) => opened,
            Err(_) if settings.length == 0 => {
                return Err(ShmError::NeedLength("a shared file"));
            }
            Err(_) => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(settings.mode)
                .open(file)
                .map_err(io_error("cannot create file", file))?,
        };
        let metadata = opened.metadata().map_err(io_error("cannot stat", file))?;
        if end > metadata.len() {
            opened.set_len(end).map_err(io_error("ftruncate", file))?;
        }
        let page_size = metadata.blksize();
        // The mapping's address is the kernel's choice, page aligned.
        check_region(0, settings.length, page_size, option)?;
        // SAFETY: a new shared mapping of an open file; it aliases no Rust object.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                settings.length as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                opened.as_raw_fd(),
                settings.offset as libc::off_t,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(io_error("mmap", file)(io::Error::last_os_error()));
        }
        Ok(Region {
            start: start.cast(),
            length: settings.length,
            offset: settings.offset,
            page_size,
            backing: Backing::File { _file: opened },
        })
    }

    /// Fails when `--offset` lies at or past the length (numactl's check before it
    /// touches the region).
    pub fn check_beyond(&self, option: &'static str) -> Result<(), ShmError> {
        if self.offset >= self.length {
            return Err(ShmError::Beyond {
                offset: self.offset,
                length: self.length,
                option,
            });
        }
        Ok(())
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether the region has no bytes (never, once attached).
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Sets the policy of the region's pages (mbind(2)); `strict` makes the kernel fail
    /// if pages already lie outside the policy's nodes.
    pub fn apply(&self, policy: &MemPolicy, strict: bool) -> Result<(), ShmError> {
        // SAFETY: the region stays mapped while self lives.
        unsafe { policy::bind_range(self.start, self.length as usize, policy, strict) }?;
        Ok(())
    }

    /// Faults in every page under the region's policy (numactl's `--touch`): each
    /// page's first byte is read and written back.
    pub fn touch(&self) {
        for at in (0..self.length).step_by(self.page_size.max(1) as usize) {
            // SAFETY: at < length, inside the mapping that lives while self does;
            // volatile so that the read and the write both reach memory. Writing back
            // the value read keeps the contents other processes see.
            unsafe {
                let byte = self.start.add(at as usize);
                byte.write_volatile(byte.read_volatile());
            }
        }
    }

    fn pages(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.length).step_by(self.page_size.max(1) as usize)
    }

    /// numactl's `--dump`: one line per run of pages with the same non-default
    /// policy, `START-END: POLICY : NODES `, offsets in hex from the segment's start.
    pub fn dump(&self) -> Result<String, ShmError> {
        let runs = self.runs(policy::policy_at)?;
        let mut out = String::new();
        for (start, end, (policy, raw)) in runs {
            if policy.mode == Mode::Default {
                continue;
            }
            let name = if raw >> 8 != 0 {
                format!("[{raw}]")
            } else {
                policy.mode.name().to_string()
            };
            let nodes: String = policy.nodes.iter().map(|n| format!("{n} ")).collect();
            let _ = writeln!(out, "{start:016x}-{end:016x}: {name} : {nodes}");
        }
        Ok(out)
    }

    /// numactl's `--dump-nodes`: one line per run of pages on the same node,
    /// `START-END: NODE` (looking a page up faults it in, as in numactl).
    pub fn dump_nodes(&self) -> Result<String, ShmError> {
        let runs = self.runs(|addr| policy::query_node(addr, "shm page"))?;
        let mut out = String::new();
        for (start, end, node) in runs {
            let _ = writeln!(out, "{start:016x}-{end:016x}: {node}");
        }
        Ok(out)
    }

    /// The region cut into runs of pages for which `key` answers the same, as
    /// `(start, end, key)` with offsets from the segment's or file's start.
    fn runs<K: PartialEq>(
        &self,
        key: impl Fn(*const u8) -> Result<K, PolicyError>,
    ) -> Result<Vec<(u64, u64, K)>, ShmError> {
        let mut runs: Vec<(u64, u64, K)> = Vec::new();
        for at in self.pages() {
            let value = key(self.start.wrapping_add(at as usize))?;
            let end = self.offset + (at + self.page_size).min(self.length);
            match runs.last_mut() {
                Some(run) if run.2 == value => run.1 = end,
                _ => runs.push((self.offset + at, end, value)),
            }
        }
        Ok(runs)
    }

    /// numactl's `--verify` (undocumented): after touching the region, every page has
    /// `expected`'s mode and nodes and lies on one of them; the lines name the pages
    /// that do not.
    pub fn verify(&self, expected: &MemPolicy) -> Result<Vec<String>, ShmError> {
        let mut problems = Vec::new();
        for at in self.pages() {
            let addr = self.start.wrapping_add(at as usize);
            let (policy, _) = policy::policy_at(addr)?;
            if policy.mode != expected.mode {
                problems.push(format!(
                    "numactl verify {addr:p}({at:x}): wrong policy {}, expected {}",
                    policy.mode.name(),
                    expected.mode.name()
                ));
                break;
            }
            if policy.nodes != expected.nodes {
                problems.push(format!(
                    "numactl verify {addr:p}({at:x}): mismatched node mask (expected {}, real {})",
                    expected.nodes, policy.nodes
                ));
            }
            let node = policy::query_node(addr, "shm page")?;
            let placed =
                matches!(expected.mode, Mode::Default | Mode::Local) || policy.nodes.contains(node);
            if !placed {
                problems.push(format!(
                    "numactl verify {addr:p}({at:x}): unexpected node {node}"
                ));
            }
        }
        Ok(problems)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: base is the address shmat returned; nothing borrows the region
            // past self.
            Backing::SysV { base } => unsafe {
                libc::shmdt(base);
            },
            // SAFETY: start and length are the mapping made in attach_file; nothing
            // borrows it past self.
            Backing::File { .. } => unsafe {
                libc::munmap(self.start.cast(), self.length as usize);
            },
        }
    }
}

/// numactl's sizes: a number (decimal, `0x` hex or `0` octal) with an optional `k`,
/// `m` or `g` (any case, powers of 1024).
pub fn parse_size(text: &str, option: &str) -> Result<u64, String> {
    let bad = || format!("{option} takes a size such as 4096, 0x1000, 64k, 2m or 1g, not '{text}'");
    let (number, scale) = match text.as_bytes().last().map(u8::to_ascii_lowercase) {
        Some(b'k') => (&text[..text.len() - 1], 1u64 << 10),
        Some(b'm') => (&text[..text.len() - 1], 1 << 20),
        Some(b'g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    parse_c_number(number)
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(bad)
}

/// strtoul's base 0: `0x` hex, a leading `0` octal, else decimal; the whole text.
pub fn parse_c_number(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if text.len() > 1 && text.starts_with('0') {
        u64::from_str_radix(&text[1..], 8).ok()
    } else {
        text.parse().ok()
    }
}

/// The SysV IPC key of `key_file` and `settings.id` (ftok), creating the key file
/// (with `settings.mode`) when it does not exist, as numactl does.
fn sysv_key(
    key_file: &Path,
    settings: &Settings,
    notice: &mut dyn FnMut(String),
) -> Result<libc::key_t, ShmError> {
    let path = c_path(key_file)?;
    // SAFETY: path is a NUL-terminated string that outlives the call.
    let key = unsafe { libc::ftok(path.as_ptr(), settings.id as libc::c_int) };
    if key >= 0 {
        return Ok(key);
    }
    notice(format!(
        "Creating shm key file {} mode {:04o}",
        key_file.display(),
        settings.mode
    ));
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(settings.mode)
        .open(key_file)
        .map_err(io_error("cannot create key for shm", key_file))?;
    // SAFETY: as above.
    let key = unsafe { libc::ftok(path.as_ptr(), settings.id as libc::c_int) };
    if key < 0 {
        return Err(io_error("cannot get key for", key_file)(
            io::Error::last_os_error(),
        ));
    }
    Ok(key)
}

/// The segment of `key` and its usable length: created (`offset + length` long, with
/// `settings.mode`) when it does not exist; the length asked for, else the segment's.
fn sysv_segment(
    key: libc::key_t,
    key_file: &Path,
    settings: &Settings,
    notice: &mut dyn FnMut(String),
) -> Result<(libc::c_int, u64), ShmError> {
    let huge = if settings.huge { libc::SHM_HUGETLB } else { 0 };
    // SAFETY: shmget takes plain values.
    let mut id = unsafe { libc::shmget(key, settings.length as usize, huge) };
    if id < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
        if settings.length == 0 {
            return Err(ShmError::NeedLength("a sysv shared memory segment"));
        }
        let size = settings.end()?;
        notice(format!(
            "Creating shared memory segment {} id {} mode {:04o} length {:.0}MB",
            key_file.display(),
            settings.id,
            settings.mode,
            size as f64 / (1024.0 * 1024.0)
        ));
        let flags = libc::IPC_CREAT | settings.mode as libc::c_int | huge;
        // SAFETY: shmget takes plain values.
        id = unsafe { libc::shmget(key, size as usize, flags) };
    }
    if id < 0 {
        return Err(io_error(
            "cannot get the shared memory segment of",
            key_file,
        )(io::Error::last_os_error()));
    }
    if settings.length != 0 {
        return Ok((id, settings.length));
    }
    // SAFETY: an all-zero shmid_ds is a valid value; shmctl fills it in.
    let mut stat: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: stat is valid for writes.
    if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut stat) } < 0 {
        return Err(io_error("shmctl IPC_STAT on the segment of", key_file)(
            io::Error::last_os_error(),
        ));
    }
    Ok((id, stat.shm_segsz as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_numactls_suffixes_and_bases() {
        assert_eq!(parse_size("4096", "--length"), Ok(4096));
        assert_eq!(parse_size("0x1000", "--length"), Ok(4096));
        assert_eq!(parse_size("010", "--length"), Ok(8));
        assert_eq!(parse_size("64k", "--length"), Ok(64 << 10));
        assert_eq!(parse_size("2M", "--length"), Ok(2 << 20));
        assert_eq!(parse_size("1g", "--length"), Ok(1 << 30));
        let error = parse_size("12q", "--length").unwrap_err();
        assert!(
            error.contains("--length") && error.contains("'12q'"),
            "{error}"
        );
        assert!(parse_size("", "--offset").is_err());
    }

    #[test]
    fn a_file_region_takes_and_reports_a_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("region");
        let settings = Settings {
            length: 64 * 1024,
            ..Settings::default()
        };
        let missing = Region::attach_file(&path, &Settings::default(), "--file").unwrap_err();
        assert!(missing.to_string().contains("need a --length"), "{missing}");
        let region = Region::attach_file(&path, &settings, "--file").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024);
        let bind = MemPolicy {
            mode: Mode::Bind,
            nodes: [0].into_iter().collect(),
        };
        region.apply(&bind, false).unwrap();
        region.touch();
        let dump = region.dump().unwrap();
        assert_eq!(dump, "0000000000000000-0000000000010000: bind : 0 \n");
        assert_eq!(
            region.dump_nodes().unwrap(),
            "0000000000000000-0000000000010000: 0\n"
        );
        assert!(region.verify(&bind).unwrap().is_empty());
    }
}

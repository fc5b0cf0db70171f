//! Page sizes: the base page size and the default huge page size.

use std::path::Path;
use std::sync::OnceLock;

/// The base page size (sysconf(_SC_PAGESIZE)), read once.
pub(crate) fn page_size() -> usize {
    static PAGE_SIZE: OnceLock<usize> = OnceLock::new();
    *PAGE_SIZE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).unwrap_or(4096)
    })
}

/// The default huge page size in bytes, from `Hugepagesize:` in `root/proc/meminfo`
/// (None without huge page support or without the file).
pub(crate) fn huge_page_size(root: &Path) -> Option<u64> {
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_page_size_reads_meminfo_under_a_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("proc")).unwrap();
        assert_eq!(huge_page_size(root.path()), None);
        std::fs::write(
            root.path().join("proc/meminfo"),
            "MemTotal:       1000 kB\nHugepagesize:       2048 kB\n",
        )
        .unwrap();
        assert_eq!(huge_page_size(root.path()), Some(2 << 20));
        assert!(page_size().is_power_of_two());
    }
}

//! The memory budget: how many connections fit the memory the process may use, where a
//! cgroup limits it (systemd's `MemoryMax=`: cgroup v2's `memory.max`; v1's
//! `memory.limit_in_bytes`). Past that limit the kernel's OOM killer ends the process
//! and every download with it; a connection refused with 503 and `Retry-After` costs
//! the client one retry. So the connection limit is lowered to what the limit holds, as
//! it is to what the descriptor limit holds (`crate::ops::budget`), and said.
//!
//! What a connection costs is an estimate, measured on this build with 1,000 idle and
//! 1,000 downloading clients that read nothing (the costliest state): its task and
//! buffers in user space, and with TLS rustls's record buffers. The kernel's socket
//! buffers are charged to the process too under cgroup v2 (not under v1): a client
//! that stops reading holds up to `net.ipv4.tcp_wmem`'s maximum there, which
//! `--send-buffer` bounds. The process's own needs come first
//! ([`RESERVE_MIN`], or an eighth of the limit when that is more).

use std::path::{Path, PathBuf};

/// The memory a cgroup allows the process, and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// The file that says it (`/sys/fs/cgroup/system.slice/ioserve.service/memory.max`).
    pub source: PathBuf,
}

/// What every connection is budgeted besides the buffers of its body: its task and
/// read buffer in user space (1.6 KiB idle, 2 KiB sending a file with sendfile,
/// measured on 1,000 clients of the optimized build) and the kernel's socket, with
/// room to spare.
pub const CONNECTION_BYTES: u64 = 16 << 10;

/// What one connection is budgeted: [`CONNECTION_BYTES`], plus one `chunk`
/// (`--chunk-size`) where its body is read into memory (the `read` and `buffered`
/// strategies, and every strategy over TLS in user space), plus another for the
/// encrypted records rustls holds over TLS. A download over TLS to a client that
/// reads nothing measured 210 KiB of anonymous memory per connection with the default
/// 128 KiB chunk (1,000 clients; 21 KiB idle): this budgets 272 KiB.
pub fn connection_bytes(tls: bool, reads_into_memory: bool, chunk: usize) -> u64 {
    let chunk = chunk as u64;
    match (tls, reads_into_memory) {
        (true, _) => CONNECTION_BYTES + 2 * chunk,
        (false, true) => CONNECTION_BYTES + chunk,
        (false, false) => CONNECTION_BYTES,
    }
}

/// Memory kept for the process itself before connections are counted: its runtimes,
/// caches, the blocking pool's stacks.
pub const RESERVE_MIN: u64 = 32 << 20;

/// Values at or above this mean "no limit" (v1 writes 2^63 rounded down to a page).
const UNLIMITED: u64 = 1 << 62;

/// The memory limit of this process's cgroup, if one is set.
pub fn limit() -> Option<MemoryLimit> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    limit_in(&cgroups, unified, |path| std::fs::read_to_string(path).ok())
}

/// The limit that `/proc/self/cgroup`'s `cgroups` leads to, reading files with `read`:
/// under a unified (v2) hierarchy at /sys/fs/cgroup, the lowest `memory.max` of the
/// cgroup and its ancestors; else v1's memory controller's hierarchical limit.
fn limit_in(
    cgroups: &str,
    unified: bool,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<MemoryLimit> {
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if unified && controllers.is_empty() {
            return v2_limit(path, &read);
        }
        if !unified && controllers.split(',').any(|c| c == "memory") {
            return v1_limit(path, &read);
        }
    }
    None
}

/// The lowest `memory.max` from the cgroup at `path` up to the root.
fn v2_limit(path: &str, read: &impl Fn(&Path) -> Option<String>) -> Option<MemoryLimit> {
    let mut lowest: Option<MemoryLimit> = None;
    let mut dir = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    loop {
        let file = dir.join("memory.max");
        if let Some(bytes) = read(&file).and_then(|text| bytes_of(&text)) {
            if lowest.as_ref().is_none_or(|low| bytes < low.bytes) {
                lowest = Some(MemoryLimit {
                    bytes,
                    source: file,
                });
            }
        }
        if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
            return lowest;
        }
    }
}

/// v1: `hierarchical_memory_limit` of the cgroup's memory.stat (the lowest limit of it
/// and its ancestors), else its `memory.limit_in_bytes`.
fn v1_limit(path: &str, read: &impl Fn(&Path) -> Option<String>) -> Option<MemoryLimit> {
    let dir = PathBuf::from("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
    let stat = dir.join("memory.stat");
    let hierarchical = read(&stat).and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("hierarchical_memory_limit "))
            .and_then(bytes_of)
    });
    if let Some(bytes) = hierarchical {
        return Some(MemoryLimit {
            bytes,
            source: stat,
        });
    }
    let file = dir.join("memory.limit_in_bytes");
    let bytes = read(&file).and_then(|text| bytes_of(&text))?;
    Some(MemoryLimit {
        bytes,
        source: file,
    })
}

/// A limit's bytes: `None` for "max" and values that mean no limit.
fn bytes_of(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < UNLIMITED).then_some(bytes)
}

/// The memory kept for the process itself under `limit`.
pub fn reserve(limit: &MemoryLimit) -> u64 {
    RESERVE_MIN.max(limit.bytes / 8)
}

/// The connections `limit` holds, each budgeted `each` bytes, after the process's
/// [`reserve`].
pub fn connections_within(limit: &MemoryLimit, each: u64) -> usize {
    let room = limit.bytes.saturating_sub(reserve(limit));
    usize::try_from(room / each.max(1))
        .unwrap_or(usize::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(pairs: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = pairs
            .iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_string()))
            .collect();
        move |path| map.get(path).cloned()
    }

    #[test]
    fn v2_takes_the_lowest_memory_max_up_the_tree() {
        let read = files(&[
            (
                "/sys/fs/cgroup/system.slice/ioserve.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "1073741824\n"),
        ]);
        let limit = limit_in("0::/system.slice/ioserve.service\n", true, read).unwrap();
        assert_eq!(limit.bytes, 1 << 30);
        assert_eq!(
            limit.source,
            Path::new("/sys/fs/cgroup/system.slice/memory.max")
        );
        let unlimited = files(&[("/sys/fs/cgroup/a/memory.max", "max\n")]);
        assert_eq!(limit_in("0::/a\n", true, unlimited), None);
    }

    #[test]
    fn v1_reads_the_hierarchical_limit_of_the_memory_controller() {
        let cgroups = "9:name=systemd:/\n4:memory:/ioserve\n1:cpu,cpuacct:/\n0::/\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/ioserve/memory.stat",
                "cache 0\nhierarchical_memory_limit 268435456\n",
            ),
            (
                "/sys/fs/cgroup/memory/ioserve/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        let limit = limit_in(cgroups, false, read).unwrap();
        assert_eq!(limit.bytes, 256 << 20);
        let none = files(&[(
            "/sys/fs/cgroup/memory/ioserve/memory.stat",
            "hierarchical_memory_limit 9223372036854771712\n",
        )]);
        assert_eq!(limit_in(cgroups, false, none), None);
    }

    #[test]
    fn connections_fit_after_the_reserve() {
        let limit = |bytes| MemoryLimit {
            bytes,
            source: PathBuf::new(),
        };
        let tls = connection_bytes(true, true, 128 << 10);
        assert_eq!(tls, 272 << 10);
        // 256 MiB: 32 MiB kept, 224 MiB / 272 KiB.
        assert_eq!(connections_within(&limit(256 << 20), tls), 843);
        // 1 GiB: an eighth kept; sendfile holds no chunk.
        let sendfile = connection_bytes(false, false, 128 << 10);
        assert_eq!(connections_within(&limit(1 << 30), sendfile), 57344);
        assert_eq!(connection_bytes(false, true, 64 << 10), 80 << 10);
        // Less than the reserve: one connection still.
        assert_eq!(connections_within(&limit(16 << 20), tls), 1);
    }
}

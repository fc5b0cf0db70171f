//! A slow disk for the cold-disk scenario: the servers' reads are limited to a rate
//! with the cgroup block-IO throttle (v2 `io.max`, or v1
//! `blkio.throttle.read_bps_device`). A VM's disk is often served from the host's
//! memory, so "cold" reads that take microseconds would hide what a real volume (a
//! cloud disk of 125-250 MB/s, a spinning disk) makes a server wait.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// A cgroup whose processes read at most a given rate from one disk; removed (its
/// processes moved back to the root cgroup) when dropped.
pub(super) struct DiskThrottle {
    dir: PathBuf,
    root: PathBuf,
    /// The file that counts the bytes read, and the line prefix to sum.
    stat: (&'static str, String),
}

impl DiskThrottle {
    /// Limits reads of `pids` (one server: each has a disk of its own) from the disk
    /// that holds `path` to `bytes_per_s`.
    pub(super) fn apply(
        name: &str,
        path: &Path,
        pids: &[u32],
        bytes_per_s: u64,
    ) -> Result<DiskThrottle> {
        let disk = disk_of(path)?;
        let (root, limit_file, limit, stat) = if Path::new("/sys/fs/cgroup/cgroup.controllers")
            .exists()
        {
            let root = PathBuf::from("/sys/fs/cgroup");
            fs::write(root.join("cgroup.subtree_control"), "+io")
                .context("cannot enable the io controller in /sys/fs/cgroup")?;
            let stat = ("io.stat", format!("{disk} "));
            (root, "io.max", format!("{disk} rbps={bytes_per_s}"), stat)
        } else if Path::new("/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device").exists() {
            (
                PathBuf::from("/sys/fs/cgroup/blkio"),
                "blkio.throttle.read_bps_device",
                format!("{disk} {bytes_per_s}"),
                ("blkio.throttle.io_service_bytes", format!("{disk} Read ")),
            )
        } else {
            bail!("no cgroup block-IO throttle here (neither cgroup v2 io.max nor v1 blkio); run with --disk-mbps 0");
        };
        let dir = root.join(format!("xtask-cold-{}-{name}", std::process::id()));
        if !dir.exists() {
            fs::create_dir(&dir)
                .with_context(|| format!("cannot create the cgroup {}", dir.display()))?;
        }
        let throttle = DiskThrottle { dir, root, stat };
        fs::write(throttle.dir.join(limit_file), &limit)
            .with_context(|| format!("cannot write {limit:?} to {limit_file}"))?;
        for pid in pids {
            fs::write(throttle.dir.join("cgroup.procs"), pid.to_string())
                .with_context(|| format!("cannot move process {pid} into the throttled cgroup"))?;
        }
        Ok(throttle)
    }
}

impl DiskThrottle {
    /// Waits (at most `limit`) until the processes have read nothing for half a second:
    /// reads the server queued for clients that are gone finish before the next
    /// measurement starts.
    pub(super) fn settle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut last = self.bytes_read();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            let now = self.bytes_read();
            if now == last {
                return;
            }
            last = now;
        }
    }

    /// Bytes the cgroup's processes have read from the disk.
    fn bytes_read(&self) -> u64 {
        let (file, prefix) = &self.stat;
        let text = fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .map(|rest| {
                // v1: "MAJ:MIN Read BYTES"; v2: "MAJ:MIN rbytes=BYTES wbytes=...".
                rest.split_whitespace()
                    .find_map(|field| field.strip_prefix("rbytes=").or(Some(field)))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

impl Drop for DiskThrottle {
    fn drop(&mut self) {
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace() {
                let _ = fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

/// `MAJOR:MINOR` of the whole disk that holds `path` (throttles apply to disks, not to
/// their partitions).
fn disk_of(path: &Path) -> Result<String> {
    let dev = fs::metadata(path)
        .with_context(|| format!("cannot stat {}", path.display()))?
        .dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let sys = fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).with_context(|| {
        format!(
            "{} is not on a block device ({major}:{minor}); run with --disk-mbps 0",
            path.display()
        )
    })?;
    let disk = if sys.join("partition").exists() {
        sys.parent().map(Path::to_path_buf).unwrap_or(sys)
    } else {
        sys
    };
    Ok(fs::read_to_string(disk.join("dev"))?.trim().to_string())
}

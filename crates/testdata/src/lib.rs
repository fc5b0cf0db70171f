//! Where the workspace's shared test data lives, so that every test finds it the same
//! way in any clone of the repository (nothing outside the repository is read).
//!
//! The NUMA snapshots are copies of `/sys/devices/system/{node,cpu}` and a few `/proc`
//! files taken in qemu guests, with `numactl --hardware`'s output beside them:
//!
//! - `sysfs-4node`: four nodes of one CPU pair each;
//! - `sysfs-3node-cpuless`: three nodes, node 2 with memory and no CPU.

use std::path::PathBuf;

/// The root of the NUMA snapshot `name` (a directory under `crates/numa/testdata`).
///
/// # Panics
///
/// When no snapshot of that name exists: a test that names a missing snapshot is wrong,
/// and says so with the path it looked for.
pub fn numa_snapshot(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../numa/testdata")
        .join(name);
    assert!(
        path.is_dir(),
        "no NUMA snapshot {name:?} at {}",
        path.display()
    );
    path
}

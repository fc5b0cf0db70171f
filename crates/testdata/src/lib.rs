//! Where the workspace's shared test data and test tools live, so that every test finds
//! them the same way in any clone of the repository (nothing outside the repository is
//! read; the tools are Debian packages that `cargo xtask ci` installs).
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

/// The path of `program` from the Debian package `package`, searched on `PATH` and in
/// `/usr/sbin` and `/sbin` (where daemons live, and which a non-root `PATH` may lack).
///
/// # Panics
///
/// When it is not installed, naming the package: tests start the real component, never
/// a stand-in, and `cargo xtask ci` installs it.
pub fn require(program: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not installed: `cargo xtask ci` installs it (apt-get install {package})")
        })
}

/// The path of `program`, installed with `cargo install` (`install` says how), searched
/// on `PATH` and in cargo's own bin directory (`$CARGO_HOME/bin`, else
/// `~/.cargo/bin`).
///
/// # Panics
///
/// When it is not installed, naming how to install it: `cargo xtask ci` does.
pub fn require_crate(program: &str, install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    std::env::split_paths(&path)
        .chain(cargo_home.map(|home| home.join("bin")))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not installed: `cargo xtask ci` installs it ({install})")
        })
}

/// Asserts that `promtool check metrics` (Debian's `prometheus` package) finds nothing
/// to say about `text`, a Prometheus exposition; its findings are the panic message.
pub fn assert_promtool_accepts(text: &str) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let promtool = require("promtool", "prometheus");
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    check
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .expect("promtool reads the metrics");
    let output = check.wait_with_output().expect("promtool finishes");
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\n{text}"
    );
}

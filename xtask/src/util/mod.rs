//! What every task shares: running cargo and other programs, finding them and cargo's
//! target directory, installing the Debian packages a task needs; and, in submodules,
//! a self-signed test certificate, test-run totals, statistics and SVG charts.

pub(crate) mod beside;
pub(crate) mod certificate;
pub(crate) mod ioserve_process;
pub(crate) mod stats;
pub(crate) mod svg;
pub(crate) mod test_run;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context as _, Result};

/// The field `name` of /proc/meminfo (`MemTotal`, `MemAvailable`), in KiB.
pub(crate) fn meminfo_kib(name: &str) -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    meminfo_field_kib(&meminfo, name)
        .with_context(|| format!("/proc/meminfo has no {name} line in kB"))
}

/// The field `name` in KiB from the text of /proc/meminfo (`MemAvailable:   123456 kB`).
fn meminfo_field_kib(meminfo: &str, name: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
}

/// Installs the Debian packages that are missing, with apt-get when running as root;
/// otherwise names them. `packages` pairs a package with a command it provides or, for
/// a package without one, an absolute path it installs.
pub(crate) fn ensure_packages(packages: &[(&str, &str)]) -> Result<()> {
    let present = |provided: &str| {
        if provided.starts_with('/') {
            Path::new(provided).exists()
        } else {
            on_path(provided)
        }
    };
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(_, provided)| !present(provided))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing system packages: {} (run as root to install them, or: sudo apt-get install {})",
            missing.join(" "),
            missing.join(" ")
        );
    }
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    step("apt-get update", update)?;
    let mut install = Command::new("apt-get");
    install
        .args(["-q", "install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    step(&format!("apt-get install {}", missing.join(" ")), install)
}

pub(crate) fn ensure_rustup_components(components: &[&str]) -> Result<()> {
    for component in components {
        let probe = match *component {
            "rustfmt" => ["fmt", "--version"],
            _ => ["clippy", "--version"],
        };
        if !succeeds(Command::new("cargo").args(probe)) {
            let mut add = Command::new("rustup");
            add.args(["component", "add", component]);
            step(&format!("rustup component add {component}"), add)?;
        }
    }
    Ok(())
}

pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(project_root()).args(args);
    command
}

/// `command` at the lowest CPU priority (`nice -n 19`, with the same arguments,
/// environment and directory): it then takes only the CPU time that every other process
/// leaves idle, for work CI runs beside stages that do not keep both CPUs busy.
pub(crate) fn at_lowest_priority(command: &Command) -> Command {
    let mut niced = Command::new("nice");
    niced
        .args(["-n", "19"])
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => niced.env(name, value),
            None => niced.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        niced.current_dir(dir);
    }
    niced
}

/// Runs a command with inherited output; an error names the step and its exit status.
pub(crate) fn step(name: &str, mut command: Command) -> Result<()> {
    eprintln!("xtask: {name}");
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("{name}: cannot start {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    eprintln!("xtask: {name} ok ({:.1?})", started.elapsed());
    Ok(())
}

pub(crate) fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// Where `program` is on PATH.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let paths = env::var_os("PATH")?;
    env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

pub(crate) fn is_root() -> bool {
    // Reading the effective uid from /proc keeps xtask free of libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Cargo's target directory for this workspace, as `cargo metadata` reports it:
/// `CARGO_TARGET_DIR`, a `build.target-dir` in a cargo config, or `target/` under the
/// workspace. Asked once per run; every path xtask reads cargo's builds from (or puts
/// its own outputs under) starts here, never at a fixed `target/`.
pub(crate) fn target_dir() -> Result<PathBuf> {
    target_dir_of(workspace_metadata()?)
}

/// `cargo metadata --format-version 1 --no-deps` for this workspace (its packages,
/// targets and target directory), as JSON. Run once per xtask run; what cargo printed
/// on stderr goes to ours.
pub(crate) fn workspace_metadata() -> Result<&'static [u8]> {
    static METADATA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    if let Some(json) = METADATA.get() {
        return Ok(json);
    }
    let output = cargo(&["metadata", "--format-version", "1", "--no-deps"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed ({})", output.status);
    }
    Ok(METADATA.get_or_init(|| output.stdout))
}

/// The `target_directory` of `cargo metadata`'s JSON.
fn target_dir_of(metadata: &[u8]) -> Result<PathBuf> {
    let metadata: serde_json::Value =
        serde_json::from_slice(metadata).context("cargo metadata printed no JSON")?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata gave no target_directory")
}

pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Builds for this CPU (`-C target-cpu=native`, and `-march=native` for C++ such as
/// simdutf), appended to any flags already set, in `native/` under the target
/// directory so that neither build invalidates the other.
pub(crate) fn for_this_cpu(command: &mut Command) -> Result<&mut Command> {
    native_build(command, "", "", "native")
}

/// [`for_this_cpu`] as for a CPU like this one without AVX-512 (`-C
/// target-feature=-avx512f`, `-mno-avx512f`: every AVX-512 subset goes with F), in
/// `native-no-avx512/`: what a native build on an AVX2-only host compiles, for peers
/// that choose their instructions at compile time.
pub(crate) fn for_this_cpu_without_avx512(command: &mut Command) -> Result<&mut Command> {
    native_build(
        command,
        " -C target-feature=-avx512f",
        " -mno-avx512f",
        "native-no-avx512",
    )
}

/// `-C target-cpu=native` and `-march=native`, each followed by the extra flags,
/// appended to RUSTFLAGS and CXXFLAGS as set, with the target directory's `dir`.
fn native_build<'a>(
    command: &'a mut Command,
    rust_extra: &str,
    cxx_extra: &str,
    dir: &str,
) -> Result<&'a mut Command> {
    let append = |name: &str, flag: &str| match env::var(name) {
        Ok(existing) if !existing.trim().is_empty() => format!("{existing} {flag}"),
        _ => flag.to_owned(),
    };
    command
        .env(
            "RUSTFLAGS",
            append("RUSTFLAGS", &format!("-C target-cpu=native{rust_extra}")),
        )
        .env(
            "CXXFLAGS",
            append("CXXFLAGS", &format!("-march=native{cxx_extra}")),
        )
        .env("CARGO_TARGET_DIR", target_dir()?.join(dir));
    Ok(command)
}

/// The go command: on PATH, Go's own /usr/local/go, or Debian's golang-go installed.
pub(crate) fn find_go() -> Result<PathBuf> {
    if on_path("go") {
        return Ok(PathBuf::from("go"));
    }
    let local = PathBuf::from("/usr/local/go/bin/go");
    if local.is_file() {
        return Ok(local);
    }
    ensure_packages(&[("golang-go", "go")])?;
    Ok(PathBuf::from("go"))
}

/// `program`'s path: on PATH, else in Go's bin directory, else installed there from
/// `module` (`path@version`) with `go install`.
pub(crate) fn go_tool(program: &str, module: &str) -> Result<PathBuf> {
    if let Some(path) = which(program) {
        return Ok(path);
    }
    let go =
        find_go().with_context(|| format!("{program} is missing and installing it needs Go"))?;
    let installed = go_bin(&go)?.join(program);
    if installed.is_file() {
        return Ok(installed);
    }
    let mut install = Command::new(&go);
    install.args(["install", module]);
    step(&format!("go install {module}"), install)?;
    if !installed.is_file() {
        bail!(
            "go install {module} succeeded but {} is not there",
            installed.display()
        );
    }
    Ok(installed)
}

/// Where `go install` puts programs: GOBIN, else GOPATH/bin.
fn go_bin(go: &PathBuf) -> Result<PathBuf> {
    let output = Command::new(go)
        .args(["env", "GOBIN", "GOPATH"])
        .output()
        .with_context(|| format!("cannot run {} env", go.display()))?;
    ensure!(
        output.status.success(),
        "{} env failed: {}",
        go.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    let (gobin, gopath) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    go_bin_dir(gobin, gopath).context("go env gives neither GOBIN nor GOPATH")
}

/// GOBIN when set, else the first entry of GOPATH with /bin.
fn go_bin_dir(gobin: &str, gopath: &str) -> Option<PathBuf> {
    if !gobin.trim().is_empty() {
        return Some(PathBuf::from(gobin.trim()));
    }
    gopath
        .split(':')
        .map(str::trim)
        .find(|entry| !entry.is_empty())
        .map(|entry| PathBuf::from(entry).join("bin"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meminfo_field_is_read_in_kib() {
        let meminfo = "MemTotal:       24572028 kB\nMemFree:        21000000 kB\n\
                       MemAvailable:   22528000 kB\nBuffers:           1000 kB\n";
        assert_eq!(meminfo_field_kib(meminfo, "MemAvailable"), Some(22_528_000));
        assert_eq!(meminfo_field_kib(meminfo, "MemTotal"), Some(24_572_028));
        assert_eq!(meminfo_field_kib(meminfo, "Mem"), None);
        assert_eq!(meminfo_field_kib("MemTotal: 1 kB\n", "MemAvailable"), None);
        assert_eq!(
            meminfo_field_kib("MemAvailable: many\n", "MemAvailable"),
            None
        );
    }

    #[test]
    fn the_lowest_priority_keeps_the_command_whole() {
        let mut command = Command::new("cargo");
        command
            .args(["test", "--package", "ioserve-simd"])
            .env("RUSTFLAGS", "-C target-cpu=native")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .current_dir("/tmp");
        let niced = at_lowest_priority(&command);
        assert_eq!(niced.get_program(), "nice");
        let args: Vec<_> = niced.get_args().collect();
        assert_eq!(
            args,
            ["-n", "19", "cargo", "test", "--package", "ioserve-simd"]
        );
        let envs: Vec<_> = niced.get_envs().collect();
        assert_eq!(
            envs,
            [
                ("CARGO_ENCODED_RUSTFLAGS".as_ref(), None),
                ("RUSTFLAGS".as_ref(), Some("-C target-cpu=native".as_ref())),
            ]
        );
        assert_eq!(niced.get_current_dir(), Some(Path::new("/tmp")));
        // nice runs it: the program's own exit status comes back.
        let mut fails = at_lowest_priority(Command::new("false").arg("ignored"));
        assert!(!fails.status().expect("nice runs").success());
        let mut niceness = at_lowest_priority(&Command::new("nice"));
        let out = niceness.output().expect("nice runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "19");
    }

    #[test]
    fn the_target_directory_comes_from_cargo_metadata() {
        let metadata = br#"{"packages":[],"target_directory":"/elsewhere/t","version":1}"#;
        assert_eq!(
            target_dir_of(metadata).unwrap(),
            PathBuf::from("/elsewhere/t")
        );
        assert!(target_dir_of(br#"{"version":1}"#).is_err());
        assert!(target_dir_of(b"warning: not JSON").is_err());
    }

    #[test]
    fn go_installs_into_gobin_else_the_first_gopath() {
        assert_eq!(
            go_bin_dir("/opt/gobin", "/root/go"),
            Some(PathBuf::from("/opt/gobin"))
        );
        assert_eq!(
            go_bin_dir("", "/root/go:/srv/go"),
            Some(PathBuf::from("/root/go/bin"))
        );
        assert_eq!(go_bin_dir(" ", ""), None);
    }
}

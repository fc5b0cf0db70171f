//! The GitHub workflows under .github/workflows, linted with actionlint (and, through
//! it, shellcheck on every `run:` script), since nothing here can run them. actionlint
//! is installed as a Go module when missing, shellcheck from Debian.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, ensure, Context as _, Result};

use crate::util::{ensure_packages, find_go, project_root, step, which};

/// The actionlint release installed when none is on PATH or in Go's bin directory.
const ACTIONLINT: &str = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.7";

/// `actionlint` over the workflows: any finding fails.
pub(crate) fn lint() -> Result<()> {
    let workflows = project_root().join(".github/workflows");
    ensure!(
        workflows.is_dir(),
        "{} is missing: no workflows to lint",
        workflows.display()
    );
    // actionlint checks the `run:` scripts with shellcheck only when it finds one.
    ensure_packages(&[("shellcheck", "shellcheck")])?;
    let actionlint = actionlint()?;
    let mut command = Command::new(&actionlint);
    command
        .current_dir(project_root())
        .args(["-no-color", "-shellcheck"])
        .arg(which("shellcheck").context("shellcheck is not on PATH")?);
    step(&format!("actionlint {}", workflows.display()), command)
}

/// actionlint's path: on PATH, else in Go's bin directory, else installed there with
/// `go install`.
fn actionlint() -> Result<PathBuf> {
    if let Some(path) = which("actionlint") {
        return Ok(path);
    }
    let go = find_go().context("actionlint is missing and installing it needs Go")?;
    let installed = go_bin(&go)?.join("actionlint");
    if installed.is_file() {
        return Ok(installed);
    }
    let mut install = Command::new(&go);
    install.args(["install", ACTIONLINT]);
    step(&format!("go install {ACTIONLINT}"), install)?;
    if !installed.is_file() {
        bail!(
            "go install {ACTIONLINT} succeeded but {} is not there",
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

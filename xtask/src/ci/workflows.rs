//! The GitHub workflows under .github/workflows, linted with actionlint (and, through
//! it, shellcheck on every `run:` script), since nothing here can run them. actionlint
//! is installed as a Go module when missing, shellcheck from Debian.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{ensure, Context as _, Result};

use crate::util::{ensure_packages, go_tool, project_root, step, which};

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
pub(crate) fn actionlint() -> Result<PathBuf> {
    go_tool("actionlint", ACTIONLINT)
}

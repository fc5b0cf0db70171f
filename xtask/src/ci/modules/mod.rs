//! `cargo xtask modules`: no module cycles in any library crate of the workspace,
//! counting a folder as one module at each level (so `strategy/*` -> `output` ->
//! `strategy` is a cycle); each cycle is printed as its chain of modules with one
//! `file:line` per edge, and the task fails.
//!
//! The source is read with `syn`, not with cargo-modules: that tool builds
//! rust-analyzer (many minutes in CI) and its `--acyclic` also flags a type and its own
//! methods, where only module-level "uses" edges matter here.
//!
//! What the analysis counts (see `tree` and `cycles` for the details):
//! - the modules: the tree from the library's root file, following `mod x;` (`x.rs` or
//!   `x/mod.rs`, or a `#[path]`) and inline `mod x { }`, whatever their `#[cfg]`
//!   (test modules and other architectures' modules included);
//! - the edges: a module uses another when its code names it or an item in it: every
//!   leaf of a `use` tree (globs and groups included, in function bodies too), and
//!   every path of two segments or more in expressions, types, patterns and macro
//!   arguments that starts with `crate`, `super`, `self`, a child module or a name
//!   imported by a `use`;
//! - re-exports: a name is followed through the `use` declarations (and glob imports)
//!   of the modules it passes, to the module that declares the item, so `crate::Error`
//!   re-exported by `lib.rs` from `error.rs` is a use of `error`. Items the analysis
//!   cannot see (made by macros) count as declared in the module the path reached;
//! - the levels: see `cycles`: an edge counts where its two ends part, and a module's
//!   own body (`mod.rs`, `lib.rs`) is a node of its level beside its children.

mod cycles;
mod tree;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::util::{project_root, workspace_metadata};
use cycles::Cycle;
use tree::ModuleTree;

/// Packages whose libraries are not checked: automation and measurement, not
/// libraries.
const SKIPPED_PACKAGES: &[&str] = &["xtask", "benches"];

/// Checks every library crate of the workspace; fails naming each cycle.
pub(crate) fn run() -> Result<()> {
    let root = project_root();
    let mut found = 0;
    for (package, lib_root) in library_roots()? {
        let cycles = crate_cycles(&lib_root, &|path| std::fs::read_to_string(path))
            .with_context(|| format!("cannot check the modules of {package}"))?;
        if cycles.is_empty() {
            eprintln!("xtask modules: {package}: no module cycle");
            continue;
        }
        found += cycles.len();
        eprintln!(
            "xtask modules: {package}: {} module cycle(s):",
            cycles.len()
        );
        for cycle in &cycles {
            eprint!("  {}", shown_relative_to(cycle, &root));
        }
    }
    if found > 0 {
        bail!("{found} module cycle(s) (counting a folder as one module at each level)");
    }
    Ok(())
}

/// The cycles of the crate whose root file is `lib_root`.
pub(crate) fn crate_cycles(lib_root: &Path, read: tree::ReadSource<'_>) -> Result<Vec<Cycle>> {
    let tree = ModuleTree::read(lib_root, read)?;
    Ok(cycles::find(&tree.edges()))
}

/// A cycle with its files relative to the workspace root.
fn shown_relative_to(cycle: &Cycle, root: &Path) -> Cycle {
    let mut shown = cycle.clone();
    for (file, _) in &mut shown.examples {
        if let Ok(relative) = file.strip_prefix(root) {
            *file = relative.to_path_buf();
        }
    }
    shown
}

/// Each workspace library's package name and root file, from `cargo metadata`.
fn library_roots() -> Result<Vec<(String, PathBuf)>> {
    library_roots_of(workspace_metadata()?)
}

/// The library targets of `cargo metadata`'s JSON, less the skipped packages.
fn library_roots_of(metadata: &[u8]) -> Result<Vec<(String, PathBuf)>> {
    let metadata: serde_json::Value =
        serde_json::from_slice(metadata).context("cargo metadata printed no JSON")?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata gave no packages")?;
    let mut roots = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        if SKIPPED_PACKAGES.contains(&name) {
            continue;
        }
        let targets = package["targets"].as_array().into_iter().flatten();
        for target in targets {
            let is_lib = target["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|kind| kind.as_str().is_some_and(|kind| kind.ends_with("lib")));
            if let (true, Some(src)) = (is_lib, target["src_path"].as_str()) {
                roots.push((name.to_string(), PathBuf::from(src)));
            }
        }
    }
    roots.sort();
    Ok(roots)
}

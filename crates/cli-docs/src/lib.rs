//! Shell completions (bash, zsh, fish) and man pages of the toolkit's programs, written
//! from the same clap definitions the programs parse with, so they cannot drift:
//! `ioserve`, `numa` (numactl's command line) with `numa stat` (numastat's), `probe`
//! and `probe-calibrate` with one page per command, and `timeserve`. `cargo xtask dist` runs the `cli-docs` binary;
//! the cross tarball carries the result.
//!
//! Layout under the output directory, as distributions install them:
//!
//! ```text
//! man/man1/ioserve.1  numa.1  numa-stat.1  probe.1  probe-syscalls.1 ...  timeserve.1
//! completions/bash/ioserve  completions/zsh/_ioserve  completions/fish/ioserve.fish ...
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};
use clap_complete::Shell;

/// The programs, each as its top-level command.
pub fn programs() -> Vec<Command> {
    vec![
        ioserve::ops::config::Settings::command(),
        ioserve_numa::cli::Cli::command(),
        ioserve_numa::cli::StatCli::command(),
        ioserve_probe::cli::Cli::command(),
        ioserve_probe::cli::calibrate::Cli::command(),
        timeserve::cli::Args::command(),
    ]
}

/// Writes every man page and completion file under `out`; returns the files written.
pub fn write_all(out: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for program in programs() {
        written.extend(write_man_pages(&program, &out.join("man/man1"))?);
        // `numa stat` is a mode of the numa binary chosen by its first word, not a
        // program of its own: it has a man page, and numa's completion covers numa.
        if !program.get_name().contains(' ') {
            written.extend(write_completions(program, &out.join("completions"))?);
        }
    }
    Ok(written)
}

/// The man page of `command` and one per subcommand (`probe-syscalls.1`), as git and
/// cargo name theirs.
fn write_man_pages(command: &Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut command = command.clone();
    command.build();
    let mut written = Vec::new();
    let name = command.get_name().replace(' ', "-");
    // The page's NAME line is what whatis and apropos index: it must be the page's
    // name (numa-stat), while SYNOPSIS keeps the command as typed (numa stat).
    let command = command.display_name(name.clone());
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    fs::write(&path, page)?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let sub = sub.clone().name(format!("{name}-{}", sub.get_name()));
        written.extend(write_man_pages(&sub, dir)?);
    }
    Ok(written)
}

/// bash, zsh and fish completions of `command`, in the file names each shell loads.
fn write_completions(mut command: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let name = command.get_name().to_string();
    let mut written = Vec::new();
    for (shell, file) in [
        (Shell::Bash, name.clone()),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ] {
        let shell_dir = dir.join(shell.to_string());
        fs::create_dir_all(&shell_dir)?;
        let path = shell_dir.join(file);
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut command, &name, &mut text);
        fs::write(&path, text)?;
        written.push(path);
    }
    Ok(written)
}

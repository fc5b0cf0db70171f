//! The generated files: every page and completion is there, the shells accept the
//! completions, man renders the pages, and the options the programs parse are in them.

use std::path::Path;
use std::process::Command;

fn generated() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let written = cli_docs::write_all(dir.path()).unwrap();
    assert_eq!(written.len(), 30, "{written:#?}");
    dir
}

fn text(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn bash_loads_every_completion() {
    let dir = generated();
    for program in ["ioserve", "numa", "probe", "probe-calibrate", "timeserve"] {
        let script = format!(
            "set -e; source {}; complete -p {program}",
            dir.path().join("completions/bash").join(program).display()
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(program));
    }
}

#[test]
fn completions_name_the_options_the_programs_parse() {
    let dir = generated();
    let bash = text(dir.path(), "completions/bash/ioserve");
    for option in [
        "--strategy",
        "--numa-nodes",
        "--precompressed",
        "--access-log-format",
    ] {
        assert!(bash.contains(option), "bash ioserve lacks {option}");
    }
    // Possible values are offered.
    assert!(
        bash.contains("sendfile mmap read buffered"),
        "strategy values"
    );
    let zsh = text(dir.path(), "completions/zsh/_probe");
    assert!(zsh.starts_with("#compdef probe"));
    assert!(zsh.contains("--comm") && zsh.contains("syscalls"));
    let fish = text(dir.path(), "completions/fish/numa.fish");
    assert!(fish.contains("complete -c numa") && fish.contains("membind"));
    let timeserve = text(dir.path(), "completions/bash/timeserve");
    assert!(timeserve.contains("--rate-limit-interval") && timeserve.contains("--stratum"));
}

#[test]
fn every_ioserve_setting_is_in_its_man_page_and_completions() {
    let dir = generated();
    let page = text(dir.path(), "man/man1/ioserve.1");
    let bash = text(dir.path(), "completions/bash/ioserve");
    let zsh = text(dir.path(), "completions/zsh/_ioserve");
    for setting in ioserve::ops::config::SETTINGS {
        let key = setting.key();
        if key == "root" {
            assert!(page.contains("ROOT"), "ioserve.1 lacks ROOT");
            continue;
        }
        let roff = format!("\\-\\-{}", key.replace('-', "\\-"));
        assert!(page.contains(&roff), "ioserve.1 lacks --{key}");
        assert!(
            bash.contains(&format!("--{key}")),
            "bash ioserve lacks --{key}"
        );
        assert!(
            zsh.contains(&format!("--{key}")),
            "zsh _ioserve lacks --{key}"
        );
    }
}

#[test]
fn man_renders_every_page() {
    let dir = generated();
    let pages = dir.path().join("man/man1");
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ioserve.1",
            "numa-stat.1",
            "numa.1",
            "probe-calibrate-copy.1",
            "probe-calibrate-faults.1",
            "probe-calibrate-syscalls.1",
            "probe-calibrate.1",
            "probe-clock.1",
            "probe-daemon.1",
            "probe-doctor.1",
            "probe-faults.1",
            "probe-runq.1",
            "probe-syscalls.1",
            "probe.1",
            "timeserve.1"
        ]
    );
    for name in &names {
        let out = Command::new("man")
            .arg("-l")
            .arg(pages.join(name))
            .env("MANWIDTH", "100")
            .output()
            .expect("man runs (cargo xtask ci installs man-db)");
        let page = plain(&String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success() && page.contains("NAME") && page.contains("OPTIONS"),
            "{name}: {page}"
        );
    }
    let numa = text(dir.path(), "man/man1/numa.1");
    assert!(numa.contains("cpunodebind") && numa.contains("membind"));
    let stat = text(dir.path(), "man/man1/numa-stat.1");
    assert!(
        stat.contains("numastat"),
        "numa stat's page says what it mirrors"
    );
    // whatis indexes the NAME line: it names the page; SYNOPSIS shows the command.
    assert!(stat.contains(".SH NAME\nnuma\\-stat \\-"), "{stat}");
    assert!(stat.contains("\\fBnuma stat\\fR"), "{stat}");
}

/// The page without grotty's overstrikes (`N\x08N` for bold, `_\x08x` for
/// underline), as `col -b` would print it.
fn plain(page: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(page.len());
    for c in page.chars() {
        if c == '\x08' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.into_iter().collect()
}

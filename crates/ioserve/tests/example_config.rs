//! contrib/ioserve.toml, the configuration the Debian package installs as
//! /etc/ioserve/ioserve.toml: it loads as shipped, every commented setting is a key
//! ioserve knows with a value it accepts, and every setting has its line.

use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use ioserve::ops::config::{Config, Settings};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/ioserve.toml")
}

/// The example with every `# key = value` line uncommented.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(setting) if is_setting(setting) => setting,
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_setting(line: &str) -> bool {
    line.split_once(" = ").is_some_and(|(key, _)| {
        key.starts_with(|c: char| c.is_ascii_lowercase())
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    })
}

/// The keys the example sets or shows, commented or not.
fn keys(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.strip_prefix("# ").unwrap_or(line))
        .filter(|line| is_setting(line))
        .filter_map(|line| line.split_once(" = ").map(|(key, _)| key.to_owned()))
        .collect()
}

#[test]
fn the_example_loads_as_shipped() {
    let settings = Settings {
        config: Some(example()),
        ..Settings::default()
    };
    let config = Config::load(settings).unwrap();
    assert_eq!(config.root, PathBuf::from("/srv/downloads"));
    assert_eq!(
        config.access_log_file,
        Some(PathBuf::from("/var/log/ioserve/access.log"))
    );
}

#[test]
fn every_commented_setting_parses() {
    let text = std::fs::read_to_string(example()).unwrap();
    let all = uncommented(&text);
    assert!(keys(&text).len() > 20, "{text}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &all).unwrap();
    let settings = Settings::from_file(file.path()).unwrap_or_else(|e| panic!("{e}\n{all}"));
    assert_eq!(
        settings.strategy.map(|s| format!("{s:?}")),
        Some("Sendfile".into())
    );
    assert_eq!(settings.max_connections, Some(10_000));
}

#[test]
fn every_setting_has_its_line() {
    let text = std::fs::read_to_string(example()).unwrap();
    let shown = keys(&text);
    let command = Settings::command();
    let missing: Vec<&str> = command
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .filter(|long| !["config", "check-config", "help", "version"].contains(long))
        .filter(|long| !shown.iter().any(|key| key == long))
        .collect();
    assert!(missing.is_empty(), "contrib/ioserve.toml lacks {missing:?}");
    // ROOT is positional on the command line and a key in the file.
    assert!(shown.iter().any(|key| key == "root"));
}

#[test]
fn a_misspelt_key_is_refused() {
    // The check above relies on deny_unknown_fields: a key ioserve does not know fails.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "strategie = \"mmap\"\n").unwrap();
    let error = Settings::from_file(file.path()).unwrap_err().to_string();
    assert!(error.contains("strategie"), "{error}");
}

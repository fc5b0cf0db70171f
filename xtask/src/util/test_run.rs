//! Test runs: cargo test (or a test binary) with its output echoed and its `test
//! result:` lines summed, for `cargo xtask ci`'s closing line.

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};

use crate::util::cargo;

/// Test counts summed over the `test result:` lines of a cargo test run.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TestTotals {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
}

impl TestTotals {
    pub(crate) fn add(&mut self, other: &TestTotals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }

    /// Adds the counts of one `test result: ok. 3 passed; 0 failed; 1 ignored; ...` line.
    pub(crate) fn add_line(&mut self, line: &str) {
        let Some(counts) = line.strip_prefix("test result: ") else {
            return;
        };
        for field in counts.split(['.', ';']) {
            let mut words = field.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}

/// Runs cargo test with extra environment variables, echoing its output, and sums
/// its results.
pub(crate) fn cargo_test(args: &[&str], env: &[(&str, &str)]) -> Result<TestTotals> {
    let shown_env: String = env
        .iter()
        .map(|(name, value)| format!("{name}={value} "))
        .collect();
    let mut command = cargo(args);
    command.envs(env.iter().copied());
    run_tests(command, &format!("{shown_env}cargo {}", args.join(" ")))
}

/// Runs a test command (`shown` is how to print it), echoing its output, and sums
/// its results.
pub(crate) fn run_tests(mut command: Command, shown: &str) -> Result<TestTotals> {
    use std::io::BufRead as _;
    eprintln!("xtask: {shown}");
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let mut totals = TestTotals::default();
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "cargo test failed ({status}): {} passed, {} failed",
            totals.passed,
            totals.failed
        );
    }
    if totals.passed == 0 {
        bail!("cargo test ran no test");
    }
    eprintln!("xtask: cargo test ok ({:.1?})", started.elapsed());
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_test_result_lines() {
        let mut totals = TestTotals::default();
        totals.add_line("test result: ok. 37 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.45s");
        totals.add_line(
            "test result: FAILED. 1 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        totals.add_line("running 4 tests");
        assert_eq!(
            totals,
            TestTotals {
                passed: 38,
                failed: 3,
                ignored: 2
            }
        );
    }
}

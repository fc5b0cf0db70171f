//! HTTP/2 conformance: h2spec, in strict mode, against ioserve over TLS (where clients
//! choose `h2` by ALPN). Every case must pass: a failed or skipped one fails the check
//! and is named. h2spec is a Go module, installed with `go install` when missing.

use std::process::Command;

use anyhow::{bail, ensure, Context as _, Result};

use super::https_server;
use crate::util::go_tool;
use crate::util::ioserve_process::IoserveBinary;

/// The h2spec release installed when none is on PATH or in Go's bin directory.
// h2spec has no go.mod: Go knows its v2 releases as +incompatible.
pub(crate) const H2SPEC: &str = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible";

/// Serves a small tree over HTTPS with `binary`'s ioserve and runs h2spec against it.
pub(crate) fn run(binary: &IoserveBinary) -> Result<()> {
    let h2spec = go_tool("h2spec", H2SPEC)?;
    let ioserve = binary.get()?;
    let served = https_server::serve_page(&ioserve, "<p>h2spec</p>\n")?;
    let output = Command::new(&h2spec)
        .args(["-S", "-t", "-k", "-h", "127.0.0.1", "-p"])
        .arg(served.server.addr.port().to_string())
        .output()
        .with_context(|| format!("cannot run {}", h2spec.display()))?;
    drop(served);
    let report = String::from_utf8_lossy(&output.stdout);
    let Some(summary) = summary(&report) else {
        bail!(
            "h2spec printed no summary ({}): {report}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    };
    ensure!(
        output.status.success() && summary.failed == 0 && summary.skipped == 0,
        "h2spec: {} of {} cases failed, {} skipped:\n{}",
        summary.failed,
        summary.tests,
        summary.skipped,
        failures(&report)
    );
    eprintln!("xtask: h2spec -S: all {} cases passed", summary.tests);
    Ok(())
}

/// h2spec's closing line: `145 tests, 145 passed, 0 skipped, 0 failed`.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    tests: u32,
    passed: u32,
    skipped: u32,
    failed: u32,
}

fn summary(report: &str) -> Option<Summary> {
    let line = report
        .lines()
        .rev()
        .find(|line| line.contains(" tests, "))?;
    let mut counts = line.split(", ").map(|part| {
        let (count, word) = part.trim().split_once(' ')?;
        Some((count.parse::<u32>().ok()?, word))
    });
    let mut next = |word: &str| match counts.next()?? {
        (count, found) if found == word => Some(count),
        _ => None,
    };
    Some(Summary {
        tests: next("tests")?,
        passed: next("passed")?,
        skipped: next("skipped")?,
        failed: next("failed")?,
    })
}

/// The report's `Failures:` section (each failed case with what was expected and
/// what came), or the whole report where it has none.
fn failures(report: &str) -> &str {
    report
        .split_once("Failures:")
        .map_or(report, |(_, failures)| failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_and_the_failures_are_read_from_the_report() {
        let report = "Generic tests\n  ✔ 1: Sends a client connection preface\n\n\
            Failures: \n\n  8.1.2.6. Malformed Requests and Responses\n    × 1: content-length\n\n\
            Finished in 2.3959 seconds\n145 tests, 144 passed, 0 skipped, 1 failed\n";
        assert_eq!(
            summary(report),
            Some(Summary {
                tests: 145,
                passed: 144,
                skipped: 0,
                failed: 1
            })
        );
        assert!(failures(report).contains("× 1: content-length"));
        assert!(!failures(report).contains("preface"));
        assert_eq!(summary("no summary here\n"), None);
    }
}

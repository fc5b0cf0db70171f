//! `cargo xtask testssl`: testssl.sh (Debian's `testssl.sh`) scans ioserve over HTTPS
//! with a certificate from a test CA that the scan trusts (`--add-ca`), as a deployment's
//! certificate chains to a public CA in the stores it checks; a finding rated HIGH or
//! CRITICAL fails the check and is printed. The counts by severity are printed.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context as _, Result};
use serde::Deserialize;

use super::https_server::{self, ServedPage};
use crate::util::ensure_packages;
use crate::util::ioserve_process::IoserveBinary;

/// The severities that fail the check.
const FAILING: &[&str] = &["HIGH", "CRITICAL"];

/// How long testssl.sh may wait for a connection, and for each openssl it runs.
const TIMEOUT_SECONDS: &str = "20";

/// One entry of testssl.sh's flat JSON file (`--jsonfile`).
#[derive(Debug, Deserialize)]
struct Finding {
    id: String,
    severity: String,
    finding: String,
}

/// Serves a small tree over HTTPS with `binary`'s ioserve and runs testssl.sh against
/// it.
pub(crate) fn run(binary: &IoserveBinary) -> Result<()> {
    ensure_packages(&[("testssl.sh", "testssl")])?;
    let ioserve = binary.get()?;
    let ServedPage { server, ca, work } =
        https_server::serve_page(&ioserve, "<p>testssl.sh</p>\n")?;
    let json = work.path().join("testssl.json");
    let started = Instant::now();
    // Every check (testssl.sh's default run). The name is localhost, which the
    // certificate holds, and the address the one ioserve listens on: `--ip one` could
    // pick ::1 where localhost resolves to both.
    let output = Command::new("testssl")
        .arg("--jsonfile")
        .arg(&json)
        .args(["--quiet", "--warnings", "off", "--color", "0"])
        .args(["--connect-timeout", TIMEOUT_SECONDS])
        .args(["--openssl-timeout", TIMEOUT_SECONDS])
        .args(["--ip", &server.addr.ip().to_string()])
        // The test CA is trusted as a public CA is in the stores testssl.sh checks.
        .arg("--add-ca")
        .arg(&ca)
        .arg(format!("localhost:{}", server.addr.port()))
        .output()
        .context("cannot run testssl")?;
    let elapsed = started.elapsed();
    drop(server);
    let text = std::fs::read_to_string(&json).with_context(|| {
        format!(
            "testssl.sh wrote no {} ({}): {}{}",
            json.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    let findings: Vec<Finding> =
        serde_json::from_str(&text).with_context(|| format!("testssl.sh's {}", json.display()))?;
    eprintln!(
        "xtask: testssl.sh ran in {elapsed:.0?}: {}",
        counts(&findings)
    );
    judge(&findings)
}

/// The number of findings of each severity, as `CRITICAL 1, HIGH 0, ...`.
fn counts(findings: &[Finding]) -> String {
    let mut by_severity = BTreeMap::<&str, usize>::new();
    for finding in findings {
        *by_severity.entry(&finding.severity).or_default() += 1;
    }
    by_severity
        .iter()
        .map(|(severity, count)| format!("{severity} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fails on a finding rated HIGH or CRITICAL, or on a scan that did not complete (a
/// FATAL entry, or no protocol checked).
fn judge(findings: &[Finding]) -> Result<()> {
    let fatal: Vec<&Finding> = findings
        .iter()
        .filter(|finding| finding.severity == "FATAL")
        .collect();
    ensure!(
        fatal.is_empty(),
        "testssl.sh could not complete its scan:\n{}",
        lines(&fatal)
    );
    ensure!(
        findings.iter().any(|finding| finding.id == "TLS1_3"),
        "testssl.sh checked no protocol: {findings:?}"
    );
    let failing: Vec<&Finding> = findings
        .iter()
        .filter(|finding| FAILING.contains(&finding.severity.as_str()))
        .collect();
    if !failing.is_empty() {
        bail!(
            "testssl.sh rates {} finding(s) HIGH or CRITICAL:\n{}",
            failing.len(),
            lines(&failing)
        );
    }
    eprintln!("xtask: testssl.sh: no finding rated HIGH or CRITICAL");
    Ok(())
}

/// One line per finding: `SEVERITY id: finding`.
fn lines(findings: &[&Finding]) -> String {
    findings
        .iter()
        .map(|finding| format!("  {} {}: {}", finding.severity, finding.id, finding.finding))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings(json: &str) -> Vec<Finding> {
        serde_json::from_str(json).unwrap()
    }

    /// An excerpt of a real report's shape: the ids, severities and findings.
    const SCAN: &str = r#"[
        {"id": "TLS1_1", "ip": "localhost/127.0.0.1", "port": "443", "severity": "INFO", "finding": "not offered"},
        {"id": "TLS1_3", "ip": "localhost/127.0.0.1", "port": "443", "severity": "OK", "finding": "offered with final"},
        {"id": "cert_chain_of_trust", "ip": "localhost/127.0.0.1", "port": "443", "severity": "OK", "finding": "passed."},
        {"id": "cert_crlDistributionPoints", "ip": "localhost/127.0.0.1", "port": "443", "severity": "INFO", "finding": "http://127.0.0.1/ioserve-test-ca.crl"},
        {"id": "BREACH", "ip": "localhost/127.0.0.1", "port": "443", "severity": "OK", "finding": "not vulnerable"}
    ]"#;

    #[test]
    fn a_scan_without_high_or_critical_findings_passes() {
        let scan = findings(SCAN);
        judge(&scan).unwrap();
        assert_eq!(counts(&scan), "INFO 2, OK 3");
    }

    #[test]
    fn an_untrusted_chain_fails_too() {
        // What a self-signed certificate, or a CA the scan was not told of, gives.
        let json = SCAN.replace(
            r#""severity": "OK", "finding": "passed.""#,
            r#""severity": "CRITICAL", "finding": "failed (self signed).""#,
        );
        let error = judge(&findings(&json)).unwrap_err().to_string();
        assert!(error.contains("CRITICAL cert_chain_of_trust"), "{error}");
    }

    #[test]
    fn a_high_or_critical_finding_of_the_server_fails_and_is_named() {
        for severity in ["HIGH", "CRITICAL"] {
            let json = SCAN.replace(
                r#""severity": "OK", "finding": "not vulnerable""#,
                &format!(r#""severity": "{severity}", "finding": "potentially VULNERABLE""#),
            );
            let error = judge(&findings(&json)).unwrap_err().to_string();
            assert!(error.contains("1 finding(s)"), "{error}");
            assert!(
                error.contains(&format!("{severity} BREACH: potentially VULNERABLE")),
                "{error}"
            );
        }
    }

    #[test]
    fn an_incomplete_scan_fails() {
        let fatal = r#"[{"id": "scanProblem", "ip": "localhost/127.0.0.1", "port": "443",
            "severity": "FATAL", "finding": "Can't connect to 127.0.0.1:443"}]"#;
        let error = judge(&findings(fatal)).unwrap_err().to_string();
        assert!(error.contains("FATAL scanProblem"), "{error}");
        let empty = judge(&[]).unwrap_err().to_string();
        assert!(empty.contains("checked no protocol"), "{empty}");
    }
}

//! `probe doctor`: its findings, one block each and a count of warnings, or JSON.

use serde_json::json;

use crate::doctor::{Finding, Severity};

/// The doctor's report over `findings`, as text or pretty JSON.
pub fn render(findings: &[Finding], json: bool) -> Result<String, serde_json::Error> {
    if json {
        return Ok(serde_json::to_string_pretty(&json!({ "findings": findings }))? + "\n");
    }
    let mut text: String = findings.iter().map(Finding::render).collect();
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warn)
        .count();
    text += &format!("\n{warnings} warning(s) in {} checks\n", findings.len());
    Ok(text)
}

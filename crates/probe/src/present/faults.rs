//! `probe faults`: minor and major page faults per process, with their rates.

use serde_json::json;

use crate::faults::ProcessFaults;
use crate::report::Table;
use crate::session::Ending;

/// What `probe faults` counted.
#[derive(Clone, Debug)]
pub struct FaultReport {
    /// What was traced.
    pub target: String,
    /// Why the trace ended.
    pub ending: Ending,
    /// How long it ran, in seconds.
    pub seconds: f64,
    /// The processes to show, most faults first.
    pub rows: Vec<ProcessFaults>,
}

impl FaultReport {
    /// The report as a table, or as pretty JSON.
    pub fn render(&self, json: bool) -> Result<String, serde_json::Error> {
        let (target, seconds) = (&self.target, self.seconds);
        if json {
            let out = json!({"target": target, "seconds": seconds, "ending": self.ending,
                             "processes": self.rows});
            return Ok(serde_json::to_string_pretty(&out)? + "\n");
        }
        let mut table = Table::new(&["pid", "comm", "minor", "major", "minor/s", "major/s"]);
        for row in &self.rows {
            table.row(vec![
                row.pid.to_string(),
                row.comm.clone(),
                row.minor.to_string(),
                row.major.to_string(),
                format!("{:.0}", row.minor as f64 / seconds),
                format!("{:.0}", row.major as f64 / seconds),
            ]);
        }
        Ok(format!(
            "Page faults of {target} over {seconds:.3} s ({}):\n{}",
            self.ending.describe(),
            table.render()
        ))
    }
}

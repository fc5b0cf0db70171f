//! `probe runq`: the run-queue delay's count, mean, p99 bound and histogram.

use serde_json::json;

use crate::runq::RunqSnapshot;
use crate::session::Ending;

/// What `probe runq` measured.
#[derive(Clone, Debug)]
pub struct RunqReport {
    /// What was traced.
    pub target: String,
    /// Why the trace ended.
    pub ending: Ending,
    /// How long it ran, in seconds.
    pub seconds: f64,
    /// The delays.
    pub snapshot: RunqSnapshot,
}

impl RunqReport {
    /// The report as text, or as pretty JSON.
    pub fn render(&self, json: bool) -> Result<String, serde_json::Error> {
        let (target, seconds, snapshot) = (&self.target, self.seconds, &self.snapshot);
        let p99 = snapshot.histogram.quantile_upper_bound(0.99);
        if json {
            let out = json!({"target": target, "seconds": seconds, "ending": self.ending,
                             "runq": snapshot, "mean_us": snapshot.mean_us(),
                             "p99_us_upper_bound": p99});
            return Ok(serde_json::to_string_pretty(&out)? + "\n");
        }
        Ok(format!(
            "Run-queue latency of {target} over {seconds:.3} s ({}): {} samples, mean {:.1} us, p99 < {} us\n{}",
            self.ending.describe(),
            snapshot.samples,
            snapshot.mean_us(),
            p99.map_or("-".into(), |v| v.to_string()),
            snapshot.histogram.render()
        ))
    }
}

//! `probe clock`: the clocksource, the vDSO mapping, each clock's cost through libc
//! and as a raw syscall, the verdict and its fix, and with `--pid` that process's
//! clock_gettime syscalls; or all of it as JSON.

use serde_json::json;

use crate::clock::{ClockMeasurement, ClockVerdict, Clocksources, VdsoMapping, WatchedClock};
use crate::report::Table;

/// Everything `probe clock` measured.
#[derive(Clone, Debug)]
pub struct ClockReport {
    /// The kernel's clocksources, when sysfs has them.
    pub sources: Option<Clocksources>,
    /// This process's vDSO mapping.
    pub vdso: VdsoMapping,
    /// Each clock, measured in this process.
    pub measurements: Vec<ClockMeasurement>,
    /// How many calls each measurement made.
    pub calls: u32,
    /// The verdict on the measurements.
    pub verdict: ClockVerdict,
    /// The process watched with `--pid`.
    pub watched: Option<WatchedClock>,
}

impl ClockReport {
    /// The report as text, or as pretty JSON.
    pub fn render(&self, json: bool) -> Result<String, serde_json::Error> {
        if json {
            let out = json!({
                "clocksources": self.sources,
                "vdso": self.vdso,
                "measurements": self.measurements,
                "verdict": self.verdict,
                "pid": self.watched,
            });
            return Ok(serde_json::to_string_pretty(&out)? + "\n");
        }
        let mut text = setup(self.sources.as_ref(), &self.vdso, &self.measurements);
        text += &format!(
            "\nPer call, measured in this process ({} calls each):\n",
            self.calls
        );
        text += &cost_table(&self.measurements);
        text += &format!("\nVerdict: {}\n", self.verdict.summary);
        if let Some(fix) = &self.verdict.fix {
            text += &format!("Fix: {fix}\n");
        }
        if let Some(watched) = &self.watched {
            text += &format!("\n{}\n", watched.describe());
        }
        Ok(text)
    }
}

/// The first lines: the clocksource, the vDSO mapping and the clocks the vDSO served.
fn setup(
    sources: Option<&Clocksources>,
    vdso: &VdsoMapping,
    measurements: &[ClockMeasurement],
) -> String {
    let mut text = match sources {
        Some(s) => format!(
            "Clocksource: {} (available: {})\n",
            s.current,
            s.available.join(" ")
        ),
        None => "Clocksource: unknown (no /sys/devices/system/clocksource)\n".into(),
    };
    text += &format!(
        "vDSO: {}{}\n",
        if vdso.vdso { "mapped" } else { "NOT mapped" },
        if vdso.vvar.is_empty() {
            String::new()
        } else {
            format!(" ({})", vdso.vvar.join(" "))
        }
    );
    let served: Vec<&str> = measurements
        .iter()
        .filter(|m| m.served_by_vdso())
        .map(|m| m.clock.as_str())
        .collect();
    text += &format!(
        "Served by the vDSO here: {}\n",
        if served.is_empty() {
            "none".into()
        } else {
            served.join(", ")
        }
    );
    text
}

/// Each clock's cost and syscalls per call, through libc and as a raw syscall.
fn cost_table(measurements: &[ClockMeasurement]) -> String {
    let mut table = Table::new(&[
        "clock",
        "libc ns",
        "syscalls/call",
        "raw syscall ns",
        "syscalls/call",
    ]);
    for m in measurements {
        table.row(vec![
            m.clock.clone(),
            format!("{:.1}", m.libc_ns_per_call),
            format!("{:.3}", m.libc_syscalls_per_call),
            format!("{:.1}", m.syscall_ns_per_call),
            format!("{:.3}", m.raw_syscalls_per_call),
        ]);
    }
    table.render()
}

//! `probe syscalls`: the per-syscall table (probe's layout or strace -c's), latency
//! histograms, per-task tables, the file-serving verdict, and the same as JSON;
//! one report per interval with `-i`.

use std::time::Duration;

use serde_json::json;

use crate::histogram::Log2Histogram;
use crate::report::{self, Table};
use crate::session::Ending;
use crate::strace_format::{strace_summary, SortKey};
use crate::syscalls::{SyscallRow, SyscallSnapshot, TaskBreakdown, TASK_PAIRS};
use crate::sysnames;
use crate::verdict::FileServingVerdict;

/// How `probe syscalls` prints its table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// probe's table: calls, errors, bytes (and latency with --latency).
    #[default]
    Table,
    /// strace -c's summary, column for column.
    Strace,
}

/// How a report is laid out, from the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// JSON instead of tables.
    pub json: bool,
    /// The table's layout.
    pub format: Format,
    /// Time columns and latency histograms (probe's layout).
    pub latency: bool,
    /// The row order of strace's layout.
    pub sort_by: SortKey,
    /// A table per process or thread as well.
    pub per_task: Option<TaskBreakdown>,
}

/// What `probe syscalls` found, ready to present.
#[derive(Clone, Debug)]
pub struct TracedSyscalls {
    /// What was traced ("pid 42", "`dd ...` (pid 42)").
    pub target: String,
    /// Why the trace ended.
    pub ending: Ending,
    /// How long it ran.
    pub elapsed: Duration,
    /// The rows to show (filtered).
    pub snapshot: SyscallSnapshot,
    /// Judged on every row, whatever the filter shows.
    pub verdict: Option<FileServingVerdict>,
}

impl TracedSyscalls {
    /// The final report. With `-i` (`one_line`) a JSON report is one line, as each
    /// interval's is.
    pub fn render(&self, layout: &Layout, one_line: bool) -> Result<String, serde_json::Error> {
        if layout.json {
            self.json(layout, one_line)
        } else {
            Ok(self.text(layout))
        }
    }

    fn json(&self, layout: &Layout, one_line: bool) -> Result<String, serde_json::Error> {
        let mut out = json!({
            "target": self.target,
            "seconds": self.elapsed.as_secs_f64(),
            "ending": self.ending,
            "syscalls": self.snapshot.rows,
            "verdict": self.verdict.as_ref().map(|v| json!({
                "movement": v.movement, "summary": v.describe(),
                "zero_copy_bytes": v.zero_copy_bytes,
                "copied_in_bytes": v.copied_in_bytes,
                "copied_out_bytes": v.copied_out_bytes,
            })),
        });
        add_tasks_json(layout, &self.snapshot, &mut out)?;
        let text = if one_line {
            serde_json::to_string(&out)?
        } else {
            serde_json::to_string_pretty(&out)?
        };
        Ok(text + "\n")
    }

    fn text(&self, layout: &Layout) -> String {
        let snapshot = &self.snapshot;
        if layout.format == Format::Strace {
            // As strace -c prints it: the table alone (then each task's).
            return strace_summary(&snapshot.rows, layout.sort_by) + &task_tables(layout, snapshot);
        }
        let mut text = format!(
            "Syscalls of {} over {:.3} s ({}):\n",
            self.target,
            self.elapsed.as_secs_f64(),
            self.ending.describe()
        );
        text += &syscall_table(&snapshot.rows, layout.latency);
        if layout.latency {
            for row in &snapshot.rows {
                if let Some(hist) = row.latency.as_ref().filter(|h| h.total() > 0) {
                    text += &format!("\n{} latency:\n", row.name);
                    text += &hist.render();
                }
            }
        }
        text += &task_tables(layout, snapshot);
        if let Some(verdict) = &self.verdict {
            text += &format!("\nFile serving: {}\n", verdict.describe());
        }
        text
    }
}

/// One interval's report (`-i`): the change between `from` and `to` seconds into the
/// trace; as JSON, one object on one line.
pub fn interval(
    layout: &Layout,
    change: &SyscallSnapshot,
    from: Duration,
    to: Duration,
) -> Result<String, serde_json::Error> {
    let (from, to) = (from.as_secs_f64(), to.as_secs_f64());
    if layout.json {
        let mut line = json!({ "from_seconds": from, "to_seconds": to, "syscalls": change.rows });
        add_tasks_json(layout, change, &mut line)?;
        return Ok(serde_json::to_string(&line)? + "\n");
    }
    let table = match layout.format {
        Format::Strace => strace_summary(&change.rows, layout.sort_by),
        Format::Table => syscall_table(&change.rows, layout.latency),
    };
    Ok(format!(
        "{from:.3}-{to:.3} s:\n{table}{}\n",
        task_tables(layout, change)
    ))
}

/// With a breakdown by task: a heading and a table for each task, in the layout
/// asked for, and a line for calls no task's table holds.
fn task_tables(layout: &Layout, snapshot: &SyscallSnapshot) -> String {
    let Some(breakdown) = layout.per_task else {
        return String::new();
    };
    let mut text = String::new();
    for task in &snapshot.tasks {
        text += &format!(
            "\n{} ({} {}): {} calls, {} errors\n",
            task.comm,
            breakdown.id_name(),
            task.id,
            task.calls,
            task.errors
        );
        text += &match layout.format {
            Format::Strace => strace_summary(&task.rows, layout.sort_by),
            Format::Table => syscall_table(&task.rows, layout.latency),
        };
    }
    if snapshot.untasked_calls > 0 {
        text += &format!(
            "\n{} calls are in the totals only: all {TASK_PAIRS} (task, syscall) pairs \
             probe counts were taken.\n",
            snapshot.untasked_calls
        );
    }
    text
}

/// With a breakdown by task, adds the tasks to a JSON object: "per_task" ("process"
/// or "thread"), "tasks" and "untasked_calls".
fn add_tasks_json(
    layout: &Layout,
    snapshot: &SyscallSnapshot,
    object: &mut serde_json::Value,
) -> Result<(), serde_json::Error> {
    if let Some(breakdown) = layout.per_task {
        object["per_task"] = serde_json::to_value(breakdown)?;
        object["tasks"] = serde_json::to_value(&snapshot.tasks)?;
        object["untasked_calls"] = snapshot.untasked_calls.into();
    }
    Ok(())
}

/// The per-syscall table: calls, errors, bytes, and with latency the time columns (a
/// task's rows have no histogram: their average is over all calls, no p99).
pub fn syscall_table(rows: &[SyscallRow], latency: bool) -> String {
    let mut headers = vec!["syscall", "calls", "errors", "bytes"];
    if latency {
        headers.extend(["total", "avg", "p99 <"]);
    }
    let mut table = Table::new(&headers);
    for row in rows {
        let moves_bytes = sysnames::data_path(&row.name).is_some();
        let mut cells = vec![
            row.name.clone(),
            row.calls.to_string(),
            row.errors.to_string(),
            if moves_bytes {
                report::bytes(row.bytes)
            } else {
                "-".into()
            },
        ];
        if latency {
            let total = row.total_ns.unwrap_or(0);
            let timed = row.latency.as_ref().map_or(row.calls, Log2Histogram::total);
            cells.push(report::nanos(total));
            cells.push(total.checked_div(timed).map_or("-".into(), report::nanos));
            cells.push(
                row.latency
                    .as_ref()
                    .and_then(|h| h.quantile_upper_bound(0.99))
                    .map_or("-".into(), report::nanos),
            );
        }
        table.row(cells);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Ending;

    fn traced() -> TracedSyscalls {
        TracedSyscalls {
            target: "pid 42".into(),
            ending: Ending::Duration,
            elapsed: Duration::from_millis(1500),
            snapshot: SyscallSnapshot {
                rows: vec![
                    SyscallRow {
                        name: "read".into(),
                        calls: 10,
                        errors: 1,
                        bytes: 4096,
                        ..Default::default()
                    },
                    SyscallRow {
                        name: "getppid".into(),
                        calls: 3,
                        ..Default::default()
                    },
                ],
                ..SyscallSnapshot::default()
            },
            verdict: None,
        }
    }

    #[test]
    fn the_text_report_has_a_heading_and_a_row_per_syscall() {
        let text = traced().render(&Layout::default(), false).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("Syscalls of pid 42 over 1.500 s ("),
            "{text}"
        );
        assert!(lines[1].starts_with("syscall"), "{text}");
        assert!(
            lines[2].starts_with("read") && lines[2].contains("4.0 KiB"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("getppid") && lines[3].ends_with('-'),
            "{text}"
        );
    }

    #[test]
    fn json_reports_are_pretty_or_one_line() {
        let layout = Layout {
            json: true,
            ..Layout::default()
        };
        let pretty = traced().render(&layout, false).unwrap();
        let line = traced().render(&layout, true).unwrap();
        assert_eq!(line.lines().count(), 1);
        assert!(pretty.lines().count() > 1);
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            parsed,
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap()
        );
        assert_eq!(parsed["syscalls"][0]["name"], "read");
    }

    #[test]
    fn an_interval_is_headed_by_its_seconds() {
        let text = interval(
            &Layout::default(),
            &traced().snapshot,
            Duration::from_millis(200),
            Duration::from_millis(400),
        )
        .unwrap();
        assert!(text.starts_with("0.200-0.400 s:\nsyscall"), "{text}");
    }
}

//! The Prometheus text exposition (format 0.0.4) of probe's snapshots.

use std::fmt::Write as _;

use crate::faults::ProcessFaults;
use crate::histogram::Log2Histogram;
use crate::runq::RunqSnapshot;
use crate::syscalls::{SyscallRow, SyscallSnapshot};
use crate::sysnames::{data_path, DataPath};
use crate::{clock, syscalls};

/// Everything one scrape reports.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Syscalls of the traced processes.
    pub syscalls: SyscallSnapshot,
    /// Page faults per traced process.
    pub faults: Vec<ProcessFaults>,
    /// Whether per-process fault series are wanted (false system-wide, where pids
    /// would explode the series count).
    pub per_process_faults: bool,
    /// Run-queue delay.
    pub runq: RunqSnapshot,
    /// Traced processes still running (None when tracing the whole system).
    pub targets_up: Option<usize>,
}

/// Renders `scrape` as Prometheus text.
pub fn render(scrape: &Scrape) -> String {
    let mut out = String::new();
    syscall_families(&mut out, &scrape.syscalls);
    fault_families(&mut out, scrape);
    runq_histogram(&mut out, &scrape.runq);
    if let Some(up) = scrape.targets_up {
        header(
            &mut out,
            "probe_targets_up",
            "gauge",
            "Traced processes that are running.",
        );
        let _ = writeln!(out, "probe_targets_up {up}");
    }
    out
}

/// Syscalls by name (calls, errors, bytes), bytes by data path, clock_gettime
/// syscalls by clock.
fn syscall_families(out: &mut String, snapshot: &SyscallSnapshot) {
    let rows = &snapshot.rows;
    per_syscall_counter(
        out,
        ("probe_syscalls_total", "Syscalls entered, by name."),
        rows.iter().map(|row| (row, row.calls)),
    );
    per_syscall_counter(
        out,
        (
            "probe_syscall_errors_total",
            "Syscalls that returned an error, by name.",
        ),
        rows.iter()
            .filter(|row| row.errors > 0)
            .map(|row| (row, row.errors)),
    );
    per_syscall_counter(
        out,
        (
            "probe_syscall_bytes_total",
            "Bytes moved by data syscalls (read, write, sendfile, ...), by name.",
        ),
        rows.iter()
            .filter(|row| data_path(&row.name).is_some())
            .map(|row| (row, row.bytes)),
    );
    data_path_family(out, snapshot);
    clock_id_family(out, snapshot);
}

/// A counter family (name, help) with a sample per syscall: the rows and their values.
fn per_syscall_counter<'a>(
    out: &mut String,
    (name, help): (&str, &str),
    samples: impl Iterator<Item = (&'a SyscallRow, u64)>,
) {
    header(out, name, "counter", help);
    for (row, value) in samples {
        let _ = writeln!(out, "{name}{{syscall=\"{}\"}} {value}", row.name);
    }
}

/// Bytes by data path (zero-copy, copied in, copied out).
fn data_path_family(out: &mut String, snapshot: &SyscallSnapshot) {
    header(
        out,
        "probe_file_bytes_total",
        "counter",
        "Bytes by data path: zero_copy (sendfile/splice), copied_in (read-like), copied_out (write-like).",
    );
    let mut paths = [0u64; 3];
    for row in &snapshot.rows {
        match data_path(&row.name) {
            Some(DataPath::ZeroCopy) => paths[0] += row.bytes,
            Some(DataPath::CopyIn) => paths[1] += row.bytes,
            Some(DataPath::CopyOut) => paths[2] += row.bytes,
            None => {}
        }
    }
    for (path, bytes) in ["zero_copy", "copied_in", "copied_out"].iter().zip(paths) {
        let _ = writeln!(out, "probe_file_bytes_total{{path=\"{path}\"}} {bytes}");
    }
}

/// Real clock_gettime syscalls by clock id.
fn clock_id_family(out: &mut String, snapshot: &SyscallSnapshot) {
    header(
        out,
        "probe_clock_gettime_syscalls_total",
        "counter",
        "Real clock_gettime syscalls (calls the vDSO did not serve), by clock id.",
    );
    for (id, &count) in snapshot.clock_ids.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let clock = if id + 1 == syscalls::CLOCK_SLOTS {
            "other".into()
        } else {
            clock::clock_name(id)
        };
        let _ = writeln!(
            out,
            "probe_clock_gettime_syscalls_total{{clock=\"{clock}\"}} {count}"
        );
    }
}

/// Page faults by kind, and per process where wanted.
fn fault_families(out: &mut String, scrape: &Scrape) {
    header(
        out,
        "probe_page_faults_total",
        "counter",
        "Page faults of the traced processes, by kind.",
    );
    let minor: u64 = scrape.faults.iter().map(|f| f.minor).sum();
    let major: u64 = scrape.faults.iter().map(|f| f.major).sum();
    let _ = writeln!(out, "probe_page_faults_total{{kind=\"minor\"}} {minor}");
    let _ = writeln!(out, "probe_page_faults_total{{kind=\"major\"}} {major}");
    if scrape.per_process_faults {
        header(
            out,
            "probe_process_page_faults_total",
            "counter",
            "Page faults per traced process, by kind.",
        );
        for f in &scrape.faults {
            let comm = escape_label(&f.comm);
            for (kind, n) in [("minor", f.minor), ("major", f.major)] {
                let _ = writeln!(
                    out,
                    "probe_process_page_faults_total{{pid=\"{}\",comm=\"{comm}\",kind=\"{kind}\"}} {n}",
                    f.pid
                );
            }
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The run-queue histogram with cumulative `le` buckets in seconds (the log2
/// microsecond slots' upper bounds).
fn runq_histogram(out: &mut String, runq: &RunqSnapshot) {
    let name = "probe_runq_latency_seconds";
    header(
        out,
        name,
        "histogram",
        "Time runnable tasks waited for a CPU.",
    );
    let mut cumulative = 0;
    for (slot, count) in runq.histogram.slots.iter().enumerate() {
        let (_, high_us) = Log2Histogram::bounds(slot);
        if high_us == u64::MAX {
            break;
        }
        cumulative += count;
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{}\"}} {cumulative}",
            high_us as f64 / 1e6
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{le=\"+Inf\"}} {}",
        runq.histogram.total()
    );
    let _ = writeln!(out, "{name}_sum {}", runq.total_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count {}", runq.samples);
}

/// A label value with backslash, quote and newline escaped.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The value of the sample `series` (e.g. `probe_syscalls_total{syscall="read"}`) in a
/// Prometheus text, if present.
pub fn sample_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::SLOTS;
    use crate::syscalls::SyscallRow;

    #[test]
    fn renders_every_family_with_help_and_type() {
        let mut slots = vec![0; SLOTS];
        slots[0] = 2;
        slots[4] = 3;
        let mut clock_ids = vec![0; syscalls::CLOCK_SLOTS];
        clock_ids[1] = 7;
        let scrape = Scrape {
            syscalls: SyscallSnapshot {
                rows: vec![
                    SyscallRow {
                        name: "read".into(),
                        calls: 10,
                        errors: 1,
                        bytes: 4096,
                        ..Default::default()
                    },
                    SyscallRow {
                        name: "sendfile".into(),
                        calls: 2,
                        bytes: 1 << 20,
                        ..Default::default()
                    },
                    SyscallRow {
                        name: "getppid".into(),
                        calls: 3,
                        ..Default::default()
                    },
                ],
                clock_ids,
                ..SyscallSnapshot::default()
            },
            faults: vec![ProcessFaults {
                pid: 42,
                comm: "io\"serve".into(),
                minor: 5,
                major: 1,
            }],
            per_process_faults: true,
            runq: RunqSnapshot {
                histogram: Log2Histogram::new("usecs", slots),
                samples: 5,
                total_ns: 80_000,
            },
            targets_up: Some(1),
        };
        let text = render(&scrape);
        let value = |series: &str| sample_value(&text, series);
        assert_eq!(value("probe_syscalls_total{syscall=\"read\"}"), Some(10.0));
        assert_eq!(
            value("probe_syscall_errors_total{syscall=\"read\"}"),
            Some(1.0)
        );
        assert_eq!(
            value("probe_syscall_errors_total{syscall=\"getppid\"}"),
            None
        );
        assert_eq!(
            value("probe_syscall_bytes_total{syscall=\"sendfile\"}"),
            Some(1048576.0)
        );
        assert_eq!(
            value("probe_syscall_bytes_total{syscall=\"getppid\"}"),
            None
        );
        assert_eq!(
            value("probe_file_bytes_total{path=\"zero_copy\"}"),
            Some(1048576.0)
        );
        assert_eq!(
            value("probe_clock_gettime_syscalls_total{clock=\"CLOCK_MONOTONIC\"}"),
            Some(7.0)
        );
        assert_eq!(value("probe_page_faults_total{kind=\"minor\"}"), Some(5.0));
        assert_eq!(
            value(
                "probe_process_page_faults_total{pid=\"42\",comm=\"io\\\"serve\",kind=\"major\"}"
            ),
            Some(1.0)
        );
        // Cumulative buckets: slot 0 (< 2 us) holds 2, slot 4 (16..32 us) 3 more.
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"0.000002\"}"),
            Some(2.0)
        );
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"0.000016\"}"),
            Some(2.0)
        );
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"0.000032\"}"),
            Some(5.0)
        );
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"+Inf\"}"),
            Some(5.0)
        );
        assert_eq!(value("probe_runq_latency_seconds_count"), Some(5.0));
        assert_eq!(value("probe_targets_up"), Some(1.0));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let family = line.split(['{', ' ']).next().unwrap();
            let family = family
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "no TYPE for {line}"
            );
        }
    }
}

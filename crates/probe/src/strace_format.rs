//! `probe syscalls --format strace`: the summary table of `strace -c`, column for
//! column (strace 6.1's layout: `% time`, `seconds`, `usecs/call`, `calls`, `errors`,
//! `syscall`, a total row, errors left blank when 0), so that scripts and eyes that
//! read strace's summary read probe's. The times are probe's: the time from sys_enter
//! to sys_exit of each call (strace -c -w's wall-clock time, without strace's own
//! ptrace stops in it).

use std::cmp::Reverse;
use std::fmt::Write as _;

use crate::syscalls::SyscallRow;

/// The order of the rows: strace's `-S` keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum SortKey {
    /// Most time first (strace's default).
    #[default]
    Time,
    /// Most calls first.
    Calls,
    /// Most errors first.
    Errors,
    /// By name.
    Name,
    /// By syscall number (strace's "nothing": its table order).
    Nothing,
}

const HEADER: &str = "% time     seconds  usecs/call     calls    errors syscall\n";
const RULE: &str = "------ ----------- ----------- --------- --------- ----------------\n";

/// The table of `rows` sorted by `sort`; equal keys keep syscall-number order, as
/// strace's stable sort over its syscall table does. Rows without measured time
/// count as 0 s.
pub fn strace_summary(rows: &[SyscallRow], sort: SortKey) -> String {
    let mut rows: Vec<&SyscallRow> = rows.iter().collect();
    rows.sort_by_key(|row| row.nr);
    let time = |row: &SyscallRow| row.total_ns.unwrap_or(0);
    match sort {
        SortKey::Time => rows.sort_by_key(|row| Reverse(time(row))),
        SortKey::Calls => rows.sort_by_key(|row| Reverse(row.calls)),
        SortKey::Errors => rows.sort_by_key(|row| Reverse(row.errors)),
        SortKey::Name => rows.sort_by(|a, b| a.name.cmp(&b.name)),
        SortKey::Nothing => {}
    }
    let total_ns: u64 = rows.iter().map(|row| time(row)).sum();
    let total_calls: u64 = rows.iter().map(|row| row.calls).sum();
    let total_errors: u64 = rows.iter().map(|row| row.errors).sum();
    let mut table = String::from(HEADER);
    table.push_str(RULE);
    for row in &rows {
        let share = if total_ns == 0 {
            0.0
        } else {
            100.0 * time(row) as f64 / total_ns as f64
        };
        line(
            &mut table,
            share,
            time(row),
            row.calls,
            row.errors,
            &row.name,
        );
    }
    table.push_str(RULE);
    line(
        &mut table,
        100.0,
        total_ns,
        total_calls,
        total_errors,
        "total",
    );
    table
}

/// One row: `%6.2f %11.6f %11lu %9u %9.u %s`, the errors column blank for 0.
fn line(table: &mut String, share: f64, ns: u64, calls: u64, errors: u64, name: &str) {
    let usecs_per_call = (ns / 1000).checked_div(calls).unwrap_or(0);
    let errors = if errors == 0 {
        String::new()
    } else {
        errors.to_string()
    };
    let _ = writeln!(
        table,
        "{share:>6.2} {:>11.6} {usecs_per_call:>11} {calls:>9} {errors:>9} {name}",
        ns as f64 / 1e9
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(nr: u32, name: &str, calls: u64, errors: u64, ns: u64) -> SyscallRow {
        SyscallRow {
            nr,
            name: name.into(),
            calls,
            errors,
            bytes: 0,
            total_ns: Some(ns),
            latency: None,
        }
    }

    #[test]
    fn the_layout_is_strace_c_s() {
        // What strace 6.1 printed for `dd bs=4k count=1000` (a few rows of it).
        let want = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 50.36    0.009896           9      1003           read
 49.48    0.009724           9      1003           write
  0.10    0.000020           0        35        16 openat
  0.06    0.000012           0        22           close
  0.00    0.000000           0         1           lseek
------ ----------- ----------- --------- --------- ----------------
100.00    0.019652           9      2064        16 total
";
        let rows = [
            row(8, "lseek", 1, 0, 0),
            row(257, "openat", 35, 16, 20_000),
            row(1, "write", 1003, 0, 9_724_000),
            row(3, "close", 22, 0, 12_000),
            row(0, "read", 1003, 0, 9_896_000),
        ];
        assert_eq!(strace_summary(&rows, SortKey::Time), want);
    }

    #[test]
    fn sort_keys_and_ties_follow_strace() {
        let rows = [
            row(257, "openat", 2, 1, 5),
            row(3, "close", 2, 0, 5),
            row(10, "mprotect", 3, 0, 0),
        ];
        let names = |sort| -> Vec<String> {
            strace_summary(&rows, sort)
                .lines()
                .skip(2)
                .take(3)
                .map(|l| l.rsplit(' ').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(SortKey::Calls), ["mprotect", "close", "openat"]);
        assert_eq!(names(SortKey::Time), ["close", "openat", "mprotect"]);
        assert_eq!(names(SortKey::Errors), ["openat", "close", "mprotect"]);
        assert_eq!(names(SortKey::Name), ["close", "mprotect", "openat"]);
        assert_eq!(names(SortKey::Nothing), ["close", "mprotect", "openat"]);
        // No time measured at all: every share is 0.00 and the total still 100.00.
        let idle = strace_summary(&[row(39, "getpid", 1, 0, 0)], SortKey::Time);
        assert!(idle.contains("  0.00    0.000000           0         1           getpid\n"));
        assert!(idle.ends_with("100.00    0.000000           0         1           total\n"));
    }
}

//! strace's `-e` expressions as row filters for `probe syscalls`: `trace=` selects
//! syscalls by name (`-e trace=read,write`, `-e '!futex'`, a bare list means
//! `trace=`), `status=` selects them by outcome (`failed`: rows with errors,
//! `successful`: rows with calls that succeeded). Several expressions all apply.
//!
//! probe counts every syscall in the kernel and filters the table it prints, so the
//! filtered-out syscalls still feed the file-serving verdict.

use std::collections::BTreeSet;

use crate::syscalls::{SyscallRow, SyscallSnapshot};
use crate::sysnames;

/// Which rows a table keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowFilter {
    /// `trace=`: the names, and whether they are the ones to leave out.
    names: Option<(BTreeSet<String>, bool)>,
    /// `status=`.
    status: Option<Status>,
}

/// `status=`'s outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Syscalls with at least one error.
    Failed,
    /// Syscalls with at least one call that succeeded.
    Successful,
}

/// An `-e` expression probe cannot take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// A qualifier other than trace and status.
    #[error("-e '{expression}': unknown qualifier '{qualifier}'; use trace=NAME,... or status=failed|successful")]
    Qualifier {
        /// The whole expression.
        expression: String,
        /// The qualifier.
        qualifier: String,
    },
    /// A syscall name this architecture does not have.
    #[error("-e '{expression}': invalid system call '{name}'")]
    Syscall {
        /// The whole expression.
        expression: String,
        /// The name.
        name: String,
    },
    /// A `status=` value other than failed and successful.
    #[error("-e '{expression}': status takes failed or successful, not '{value}'")]
    Status {
        /// The whole expression.
        expression: String,
        /// The value.
        value: String,
    },
    /// Two `trace=` (or two `status=`) expressions.
    #[error("-e '{expression}': {qualifier}= given twice; list the values in one expression")]
    Twice {
        /// The whole expression.
        expression: String,
        /// The qualifier.
        qualifier: &'static str,
    },
}

impl RowFilter {
    /// Parses the `-e` expressions given (none: every row).
    pub fn parse(expressions: &[String]) -> Result<RowFilter, FilterError> {
        let mut filter = RowFilter::default();
        for expression in expressions {
            let (qualifier, value) = expression
                .split_once('=')
                .unwrap_or(("trace", expression.as_str()));
            let (negated, list) = match value.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, value),
            };
            let values = list.split(',').map(str::trim).filter(|v| !v.is_empty());
            match qualifier {
                "trace" | "t" => {
                    if filter.names.is_some() {
                        return Err(FilterError::Twice {
                            expression: expression.clone(),
                            qualifier: "trace",
                        });
                    }
                    let mut names = BTreeSet::new();
                    let mut everything = false;
                    for name in values {
                        if name == "all" {
                            everything = true;
                        } else if sysnames::number(name).is_none() {
                            return Err(FilterError::Syscall {
                                expression: expression.clone(),
                                name: name.to_string(),
                            });
                        } else {
                            names.insert(name.to_string());
                        }
                    }
                    // "all" keeps every row: no name, negated; "!all" (strace's none)
                    // keeps none.
                    filter.names = Some(if everything {
                        (BTreeSet::new(), !negated)
                    } else {
                        (names, negated)
                    });
                }
                "status" => {
                    if filter.status.is_some() {
                        return Err(FilterError::Twice {
                            expression: expression.clone(),
                            qualifier: "status",
                        });
                    }
                    let mut status = None;
                    for value in values {
                        status = Some(match (value, negated) {
                            ("failed", false) | ("successful", true) => Status::Failed,
                            ("successful", false) | ("failed", true) => Status::Successful,
                            _ => {
                                return Err(FilterError::Status {
                                    expression: expression.clone(),
                                    value: value.to_string(),
                                })
                            }
                        });
                    }
                    filter.status = status;
                }
                other => {
                    return Err(FilterError::Qualifier {
                        expression: expression.clone(),
                        qualifier: other.to_string(),
                    })
                }
            }
        }
        Ok(filter)
    }

    /// Keeps the rows a table shows: those this filter selects, at most `top` of
    /// them; the same in each task's table, and a task left without a row is left
    /// out.
    pub fn keep_shown_rows(&self, snapshot: &mut SyscallSnapshot, top: Option<usize>) {
        let keep = |rows: &mut Vec<SyscallRow>| {
            rows.retain(|row| self.keeps(row));
            if let Some(top) = top {
                rows.truncate(top);
            }
        };
        keep(&mut snapshot.rows);
        snapshot
            .tasks
            .iter_mut()
            .for_each(|task| keep(&mut task.rows));
        snapshot.tasks.retain(|task| !task.rows.is_empty());
    }

    /// Whether the table keeps `row`.
    pub fn keeps(&self, row: &SyscallRow) -> bool {
        let by_name = match &self.names {
            Some((names, negated)) => names.contains(&row.name) != *negated,
            None => true,
        };
        let by_status = match self.status {
            Some(Status::Failed) => row.errors > 0,
            Some(Status::Successful) => row.calls > row.errors,
            None => true,
        };
        by_name && by_status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, calls: u64, errors: u64) -> SyscallRow {
        SyscallRow {
            name: name.into(),
            calls,
            errors,
            ..SyscallRow::default()
        }
    }

    fn kept(expressions: &[&str]) -> Vec<String> {
        let expressions: Vec<String> = expressions.iter().map(|e| e.to_string()).collect();
        let filter = RowFilter::parse(&expressions).unwrap();
        [row("read", 10, 0), row("openat", 5, 2), row("futex", 3, 3)]
            .iter()
            .filter(|r| filter.keeps(r))
            .map(|r| r.name.clone())
            .collect()
    }

    #[test]
    fn names_and_outcomes_select_rows() {
        assert_eq!(kept(&[]), ["read", "openat", "futex"]);
        assert_eq!(kept(&["trace=read,futex"]), ["read", "futex"]);
        assert_eq!(kept(&["read"]), ["read"]);
        assert_eq!(kept(&["trace=!futex"]), ["read", "openat"]);
        assert_eq!(kept(&["status=failed"]), ["openat", "futex"]);
        assert_eq!(kept(&["status=successful"]), ["read", "openat"]);
        assert_eq!(kept(&["status=!failed"]), ["read", "openat"]);
        assert_eq!(kept(&["t=openat,futex", "status=successful"]), ["openat"]);
        assert_eq!(kept(&["trace=all"]), ["read", "openat", "futex"]);
        assert!(kept(&["trace=!all"]).is_empty());
    }

    #[test]
    fn bad_expressions_name_what_is_wrong() {
        let parse = |e: &str| RowFilter::parse(&[e.to_string()]).unwrap_err().to_string();
        assert_eq!(
            parse("trace=reed"),
            "-e 'trace=reed': invalid system call 'reed'"
        );
        assert!(parse("signal=SIGINT").contains("unknown qualifier 'signal'"));
        assert!(parse("status=detached").contains("failed or successful, not 'detached'"));
        let twice = RowFilter::parse(&["read".into(), "trace=write".into()]).unwrap_err();
        assert!(twice.to_string().contains("trace= given twice"), "{twice}");
    }
}

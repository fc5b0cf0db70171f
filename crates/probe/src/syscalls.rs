//! Per-syscall counts, errors, bytes and latency of chosen processes, from the raw
//! tracepoints sys_enter and sys_exit: what syscount and `strace -c` report, without
//! ptrace's cost.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use serde::Serialize;

use crate::bpf::{self, attach_raw_tracepoint, skel::syscalls::*, Scope};
use crate::error::{ProbeError, Result};
use crate::histogram::{counts_since, Log2Histogram, SLOTS};
use crate::sysnames::{self, MAX_SYSCALLS};

/// Clock-id slots counted for clock_gettime (CLOCK_SLOTS in syscalls.bpf.c).
pub const CLOCK_SLOTS: usize = 16;

/// What a [`SyscallTracer`] measures.
#[derive(Clone, Debug, Default)]
pub struct SyscallOptions {
    /// The processes to trace.
    pub scope: Scope,
    /// Also time each syscall (total time and a log2 histogram per syscall). Costs
    /// several hundred ns per syscall, so it is opt-in.
    pub latency: bool,
    /// With a process scope, trace the processes they fork too (strace's `-f`).
    pub follow_forks: bool,
    /// Also count by process or by thread ([`SyscallSnapshot::tasks`]).
    pub per_task: Option<TaskBreakdown>,
}

/// What [`SyscallSnapshot::tasks`] breaks the counts down by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskBreakdown {
    /// By process (tgid): the calls of all its threads together.
    Process,
    /// By thread (tid).
    Thread,
}

impl TaskBreakdown {
    /// The value of `per_task` in syscalls.bpf.c (PER_PROCESS, PER_THREAD).
    fn bpf_value(self) -> u8 {
        match self {
            TaskBreakdown::Process => 1,
            TaskBreakdown::Thread => 2,
        }
    }

    /// What a task is called in headings: "pid" or "tid".
    pub fn id_name(self) -> &'static str {
        match self {
            TaskBreakdown::Process => "pid",
            TaskBreakdown::Thread => "tid",
        }
    }
}

/// (task, syscall) pairs the BPF side keeps counts for (task_stats in syscalls.bpf.c);
/// calls beyond them are in the totals only ([`SyscallSnapshot::untasked_calls`]).
pub const TASK_PAIRS: u32 = 32768;

/// Totals of one syscall.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyscallRow {
    /// The syscall number.
    pub nr: u32,
    /// Its name.
    pub name: String,
    /// Calls (counted at entry).
    pub calls: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Bytes moved, for syscalls whose return value is a byte count (else 0).
    pub bytes: u64,
    /// Total time inside the syscall, with latency measurement on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
    /// Latency histogram in ns, with latency measurement on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Log2Histogram>,
}

/// Every syscall seen so far, plus clock_gettime's calls by clock id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyscallSnapshot {
    /// One row per syscall with at least one call, most calls first.
    pub rows: Vec<SyscallRow>,
    /// clock_gettime syscalls by clock id (the last slot: other ids).
    pub clock_ids: Vec<u64>,
    /// With a breakdown by task: one entry per task that made a call, most calls
    /// first (latency is total time only: no histograms per task).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskSyscalls>,
    /// Calls left out of `tasks` because the BPF map of (task, syscall) pairs was full.
    #[serde(skip_serializing_if = "is_zero")]
    pub untasked_calls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The syscalls of one process or thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TaskSyscalls {
    /// Its pid (by process) or tid (by thread).
    pub id: u32,
    /// Its name as it last ran traced (at its first call, renewed by each exec).
    pub comm: String,
    /// All its calls (whatever rows a filter leaves in `rows`).
    pub calls: u64,
    /// All its calls that failed.
    pub errors: u64,
    /// Its rows, in a snapshot's order ("syscalls" in JSON, as in probe's output).
    #[serde(rename = "syscalls")]
    pub rows: Vec<SyscallRow>,
}

impl TaskSyscalls {
    /// Task `id`'s totals over `rows`, which it keeps in a snapshot's order.
    fn new(id: u32, comm: String, mut rows: Vec<SyscallRow>) -> TaskSyscalls {
        sort_rows(&mut rows);
        TaskSyscalls {
            id,
            comm,
            calls: rows.iter().map(|row| row.calls).sum(),
            errors: rows.iter().map(|row| row.errors).sum(),
            rows,
        }
    }
}

impl SyscallSnapshot {
    /// The row of the syscall called `name`, if it was seen.
    pub fn row(&self, name: &str) -> Option<&SyscallRow> {
        self.rows.iter().find(|row| row.name == name)
    }

    /// Calls of the syscall called `name` (0 when unseen).
    pub fn calls(&self, name: &str) -> u64 {
        self.row(name).map_or(0, |row| row.calls)
    }

    /// What happened since `earlier`, an earlier snapshot of the same tracer: every
    /// count, byte total, time and histogram minus the earlier one; syscalls (and
    /// tasks) without a call in between are left out, and rows are ordered as in a
    /// snapshot.
    pub fn since(&self, earlier: &SyscallSnapshot) -> SyscallSnapshot {
        let tasks = self
            .tasks
            .iter()
            .filter_map(|task| {
                let before = earlier.tasks.iter().find(|t| t.id == task.id);
                let rows = rows_since(&task.rows, before.map_or(&[], |t| &t.rows));
                (!rows.is_empty()).then(|| TaskSyscalls::new(task.id, task.comm.clone(), rows))
            })
            .collect();
        SyscallSnapshot {
            rows: rows_since(&self.rows, &earlier.rows),
            clock_ids: counts_since(&self.clock_ids, &earlier.clock_ids),
            tasks: sorted_tasks(tasks),
            untasked_calls: self.untasked_calls.saturating_sub(earlier.untasked_calls),
        }
    }
}

/// `now` minus `earlier` row by row (matched by syscall number); rows without a call
/// or error in between are left out.
fn rows_since(now: &[SyscallRow], earlier: &[SyscallRow]) -> Vec<SyscallRow> {
    let mut rows: Vec<SyscallRow> = now
        .iter()
        .filter_map(|row| {
            let before = earlier.iter().find(|r| r.nr == row.nr);
            let minus = |f: fn(&SyscallRow) -> u64| f(row).saturating_sub(before.map_or(0, f));
            let calls = minus(|r| r.calls);
            let errors = minus(|r| r.errors);
            (calls > 0 || errors > 0).then(|| SyscallRow {
                nr: row.nr,
                name: row.name.clone(),
                calls,
                errors,
                bytes: minus(|r| r.bytes),
                total_ns: row.total_ns.map(|_| minus(|r| r.total_ns.unwrap_or(0))),
                latency: row.latency.as_ref().map(|now| {
                    match before.and_then(|b| b.latency.as_ref()) {
                        Some(then) => now.since(then),
                        None => now.clone(),
                    }
                }),
            })
        })
        .collect();
    sort_rows(&mut rows);
    rows
}

/// A snapshot's task order: most calls first, ties by id.
fn sorted_tasks(mut tasks: Vec<TaskSyscalls>) -> Vec<TaskSyscalls> {
    tasks.sort_by_key(|task| (std::cmp::Reverse(task.calls), task.id));
    tasks
}

/// A snapshot's row order: most calls first, ties in syscall-number order.
fn sort_rows(rows: &mut [SyscallRow]) {
    rows.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.nr.cmp(&b.nr)));
}

fn load_error(cause: libbpf_rs::Error) -> ProbeError {
    ProbeError::Load {
        object: "syscalls",
        cause,
    }
}

/// Sets what the programs do (the `const volatile` flags and tables) and the map
/// sizes: maps a run never touches are kept to one entry.
fn configure(open: &mut OpenSyscallsSkel<'_>, options: &SyscallOptions) -> Result<()> {
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("syscalls.bpf.c has rodata");
    rodata.filter_tgids = options.scope.filters();
    if let Some(comm) = options.scope.comm() {
        rodata.filter_comm = true;
        rodata.target_comm = comm;
    }
    rodata.measure_latency = options.latency;
    rodata.follow_forks = options.follow_forks;
    rodata.clock_gettime_nr = sysnames::number("clock_gettime").unwrap_or(u32::MAX);
    rodata.moves_bytes = sysnames::moves_bytes_table();
    if let Some(breakdown) = options.per_task {
        rodata.per_task = breakdown.bpf_value();
        rodata.execve_nr = sysnames::number("execve").unwrap_or(u32::MAX);
        rodata.execveat_nr = sysnames::number("execveat").unwrap_or(u32::MAX);
    }
    let maps = &mut open.maps;
    if !options.latency {
        maps.latency.set_max_entries(1).map_err(load_error)?;
        maps.starts.set_max_entries(1).map_err(load_error)?;
    }
    if options.per_task.is_some() {
        maps.task_stats
            .set_max_entries(TASK_PAIRS)
            .map_err(load_error)?;
    } else {
        maps.task_stats.set_max_entries(1).map_err(load_error)?;
        maps.task_names.set_max_entries(1).map_err(load_error)?;
    }
    Ok(())
}

/// Attaches sys_enter and sys_exit, and with `follow_forks` sched_process_fork.
fn attach(skel: &mut SyscallsSkel<'_>, follow_forks: bool) -> Result<()> {
    const STILL: &str = "`probe faults`, `probe runq` and `probe doctor`'s system checks \
                         do not need it";
    let progs = &skel.progs;
    skel.links.on_sys_enter = Some(attach_raw_tracepoint(
        &progs.on_sys_enter,
        "sys_enter",
        STILL,
    )?);
    skel.links.on_sys_exit = Some(attach_raw_tracepoint(
        &progs.on_sys_exit,
        "sys_exit",
        STILL,
    )?);
    if follow_forks {
        skel.links.on_fork = Some(attach_raw_tracepoint(
            &progs.on_fork,
            "sched_process_fork",
            "`probe syscalls` without --follow-forks does not need it",
        )?);
    }
    Ok(())
}

/// Attached sys_enter/sys_exit programs; detached when dropped.
pub struct SyscallTracer<'obj> {
    skel: SyscallsSkel<'obj>,
    latency: bool,
    per_task: bool,
}

impl<'obj> SyscallTracer<'obj> {
    /// Loads and attaches the programs. `storage` holds the BPF object for as long
    /// as the tracer lives.
    pub fn start(
        storage: &'obj mut MaybeUninit<OpenObject>,
        options: &SyscallOptions,
    ) -> Result<Self> {
        bpf::quiet_libbpf();
        let mut open = SyscallsSkelBuilder::default()
            .open(storage)
            .map_err(load_error)?;
        configure(&mut open, options)?;
        let mut skel = open.load().map_err(load_error)?;
        if let Scope::Processes(tgids) = &options.scope {
            for &tgid in tgids {
                bpf::add_target(&skel.maps.targets, tgid)?;
            }
        }
        attach(&mut skel, options.follow_forks)?;
        Ok(SyscallTracer {
            skel,
            latency: options.latency,
            per_task: options.per_task.is_some(),
        })
    }

    /// Starts tracing the process `tgid` too (only meaningful with a process scope).
    pub fn add_process(&self, tgid: u32) -> Result<()> {
        bpf::add_target(&self.skel.maps.targets, tgid)
    }

    /// Stops tracing the process `tgid` (its counts stay).
    pub fn remove_process(&self, tgid: u32) {
        bpf::remove_target(&self.skel.maps.targets, tgid)
    }

    /// Detaches the programs (the counts stay readable), so that a final snapshot is
    /// consistent.
    pub fn stop(&mut self) {
        self.skel.links = Default::default();
    }

    /// Calls of syscall `nr` so far (cheaper than a full snapshot).
    pub fn calls_of(&self, nr: u32) -> Result<u64> {
        let mut fields = [0u64; 4];
        bpf::sum_percpu_u64(&self.skel.maps.stats, "stats", nr, &mut fields)?;
        Ok(fields[0])
    }

    /// The totals so far.
    pub fn snapshot(&self) -> Result<SyscallSnapshot> {
        let maps = &self.skel.maps;
        let mut rows = Vec::new();
        let mut fields = [0u64; 4];
        for nr in 0..MAX_SYSCALLS as u32 {
            bpf::sum_percpu_u64(&maps.stats, "stats", nr, &mut fields)?;
            if fields[0] == 0 && fields[1] == 0 {
                continue; // no call and no error
            }
            let latency = if self.latency {
                let mut slots = vec![0u64; SLOTS];
                for (slot, count) in slots.iter_mut().enumerate() {
                    let mut one = [0u64];
                    let key = nr * SLOTS as u32 + slot as u32;
                    bpf::sum_percpu_u64(&maps.latency, "latency", key, &mut one)?;
                    *count = one[0];
                }
                Some(Log2Histogram::new("ns", slots))
            } else {
                None
            };
            rows.push(self.row(nr, fields, latency));
        }
        sort_rows(&mut rows);
        let mut clock_ids = vec![0u64; CLOCK_SLOTS];
        for (id, count) in clock_ids.iter_mut().enumerate() {
            let mut one = [0u64];
            bpf::sum_percpu_u64(&maps.clock_ids, "clock_ids", id as u32, &mut one)?;
            *count = one[0];
        }
        let (tasks, untasked_calls) = if self.per_task {
            let mut lost = [0u64];
            bpf::sum_percpu_u64(&maps.task_overflow, "task_overflow", 0, &mut lost)?;
            (self.tasks()?, lost[0])
        } else {
            (Vec::new(), 0)
        };
        Ok(SyscallSnapshot {
            rows,
            clock_ids,
            tasks,
            untasked_calls,
        })
    }

    /// The row of syscall `nr` from the fields of a `struct syscall_stats` (calls,
    /// errors, bytes, total ns; the time only with latency on).
    fn row(&self, nr: u32, fields: [u64; 4], latency: Option<Log2Histogram>) -> SyscallRow {
        let [calls, errors, bytes, total_ns] = fields;
        SyscallRow {
            nr,
            name: sysnames::name(nr).into_owned(),
            calls,
            errors,
            bytes,
            total_ns: self.latency.then_some(total_ns),
            latency,
        }
    }

    /// The rows of each task in the (task, syscall) map.
    fn tasks(&self) -> Result<Vec<TaskSyscalls>> {
        let map_error = |map| move |cause| ProbeError::Map { map, cause };
        let maps = &self.skel.maps;
        let mut tasks: BTreeMap<u32, Vec<SyscallRow>> = BTreeMap::new();
        for key in maps.task_stats.keys() {
            let Some(value) = maps
                .task_stats
                .lookup(&key, MapFlags::ANY)
                .map_err(map_error("task_stats"))?
            else {
                continue; // gone between keys() and lookup()
            };
            let [id, nr] = [0, 4].map(|at| u32::from_ne_bytes(key[at..at + 4].try_into().unwrap()));
            let fields =
                [0, 8, 16, 24].map(|at| u64::from_ne_bytes(value[at..at + 8].try_into().unwrap()));
            tasks
                .entry(id)
                .or_default()
                .push(self.row(nr, fields, None));
        }
        let mut out = Vec::with_capacity(tasks.len());
        for (id, rows) in tasks {
            let comm = match maps
                .task_names
                .lookup(&id.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_error("task_names"))?
            {
                Some(name) => bpf::comm_text(&name),
                // The name map was full: the name it has now, if it still runs.
                None => std::fs::read_to_string(format!("/proc/{id}/comm"))
                    .map_or_else(|_| "?".into(), |name| name.trim_end().to_owned()),
            };
            out.push(TaskSyscalls::new(id, comm, rows));
        }
        Ok(sorted_tasks(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(nr: u32, calls: u64, errors: u64, latency: Option<Vec<u64>>) -> SyscallRow {
        SyscallRow {
            nr,
            name: sysnames::name(nr).into_owned(),
            calls,
            errors,
            bytes: calls * 10,
            total_ns: latency.as_ref().map(|_| calls * 100),
            latency: latency.map(|slots| Log2Histogram::new("ns", slots)),
        }
    }

    #[test]
    fn since_subtracts_and_drops_quiet_syscalls() {
        let earlier = SyscallSnapshot {
            rows: vec![
                row(0, 10, 1, Some(vec![4, 6])),
                row(1, 5, 0, Some(vec![5, 0])),
            ],
            clock_ids: vec![3, 0],
            ..SyscallSnapshot::default()
        };
        let later = SyscallSnapshot {
            rows: vec![
                row(0, 12, 1, Some(vec![5, 7])),
                row(1, 5, 0, Some(vec![5, 0])),
                row(2, 40, 2, Some(vec![0, 40])),
            ],
            clock_ids: vec![7, 1],
            ..SyscallSnapshot::default()
        };
        let delta = later.since(&earlier);
        assert_eq!(delta.rows.len(), 2);
        assert_eq!(
            (delta.rows[0].nr, delta.rows[0].calls, delta.rows[0].errors),
            (2, 40, 2)
        );
        let read = &delta.rows[1];
        assert_eq!(
            (read.nr, read.calls, read.errors, read.bytes),
            (0, 2, 0, 20)
        );
        assert_eq!(read.total_ns, Some(200));
        assert_eq!(read.latency.as_ref().unwrap().slots, vec![1, 1]);
        assert_eq!(delta.clock_ids, vec![4, 1]);
    }

    #[test]
    fn since_subtracts_task_by_task_and_drops_quiet_tasks() {
        let task = |id, rows| TaskSyscalls::new(id, format!("t{id}"), rows);
        let earlier = SyscallSnapshot {
            tasks: vec![
                task(7, vec![row(0, 10, 1, None)]),
                task(8, vec![row(1, 3, 0, None)]),
            ],
            untasked_calls: 2,
            ..SyscallSnapshot::default()
        };
        let later = SyscallSnapshot {
            tasks: vec![
                task(7, vec![row(0, 11, 1, None)]),
                task(8, vec![row(1, 3, 0, None)]),
                task(9, vec![row(0, 4, 0, None), row(1, 1, 1, None)]),
            ],
            untasked_calls: 5,
            ..SyscallSnapshot::default()
        };
        let delta = later.since(&earlier);
        let summary: Vec<(u32, u64, u64)> = delta
            .tasks
            .iter()
            .map(|t| (t.id, t.calls, t.errors))
            .collect();
        assert_eq!(
            summary,
            [(9, 5, 1), (7, 1, 0)],
            "most calls first, quiet 8 gone"
        );
        assert_eq!(delta.tasks[0].rows[0].nr, 0, "rows in a snapshot's order");
        assert_eq!(delta.untasked_calls, 3);
    }
}

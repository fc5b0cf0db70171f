//! The Prometheus metrics of probe's snapshots, written by the toolkit's metrics
//! stack (`ioserve-exporter`, text format 0.0.4): a [`Scrape`] is a `prometheus-client`
//! collector, and [`LiveScrape`] takes a fresh one at each scrape for `probe daemon`.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

use ioserve_exporter::exposition;
use ioserve_exporter::prometheus_client::collector::Collector;
use ioserve_exporter::prometheus_client::encoding::DescriptorEncoder;
use ioserve_exporter::prometheus_client::registry::Registry;

use crate::bpf::Scope;
use crate::error::Result as ProbeResult;
use crate::faults::{FaultTracer, ProcessFaults};
use crate::histogram::Log2Histogram;
use crate::runq::{RunqSnapshot, RunqTracer};
use crate::syscalls::{SyscallOptions, SyscallRow, SyscallSnapshot, SyscallTracer};
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

/// The syscall, fault and run-queue probes `probe daemon` keeps attached, as one:
/// processes join and leave all three, and a scrape reads all three. Dropping it
/// detaches the programs.
pub struct DaemonProbes<'obj> {
    syscalls: SyscallTracer<'obj>,
    faults: FaultTracer<'obj>,
    runq: RunqTracer<'obj>,
    /// Whether only some processes are traced (then per-process series and
    /// `probe_targets_up` are reported).
    filtered: bool,
    targets_up: AtomicUsize,
}

impl<'obj> DaemonProbes<'obj> {
    /// Attaches the three probes over `scope`, each in its own object `storage`;
    /// `targets_up` traced processes are running now.
    pub fn start(
        storage: [&'obj mut MaybeUninit<libbpf_rs::OpenObject>; 3],
        scope: &Scope,
        targets_up: usize,
    ) -> ProbeResult<DaemonProbes<'obj>> {
        let [syscalls, faults, runq] = storage;
        Ok(DaemonProbes {
            syscalls: SyscallTracer::start(
                syscalls,
                &SyscallOptions {
                    scope: scope.clone(),
                    ..SyscallOptions::default()
                },
            )?,
            faults: FaultTracer::start(faults, scope)?,
            runq: RunqTracer::start(runq, scope)?,
            filtered: matches!(scope, Scope::Processes(_)),
            targets_up: AtomicUsize::new(targets_up),
        })
    }

    /// Traces process `pid` from now on.
    pub fn add(&self, pid: u32) -> ProbeResult<()> {
        self.syscalls.add_process(pid)?;
        self.faults.add_process(pid)?;
        self.runq.add_process(pid)
    }

    /// Stops tracing process `pid` (its counts stay).
    pub fn remove(&self, pid: u32) {
        self.syscalls.remove_process(pid);
        self.faults.remove_process(pid);
        self.runq.remove_process(pid);
    }

    /// Says how many traced processes are running.
    pub fn set_targets_up(&self, running: usize) {
        self.targets_up.store(running, Ordering::Relaxed);
    }

    /// Everything the probes counted so far.
    pub fn scrape(&self) -> ProbeResult<Scrape> {
        Ok(Scrape {
            syscalls: self.syscalls.snapshot()?,
            faults: self.faults.snapshot()?,
            per_process_faults: self.filtered,
            runq: self.runq.snapshot()?,
            targets_up: self
                .filtered
                .then(|| self.targets_up.load(Ordering::Relaxed)),
        })
    }
}

/// Renders `scrape` as Prometheus text (format 0.0.4), through the toolkit's metrics
/// stack.
pub fn render(scrape: &Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape.clone()));
    // A scrape never fails to write itself and a String takes every write.
    exposition::render(&registry).expect("the exposition is written to a String")
}

/// A scrape is its own collector: the families of one moment.
impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        syscall_families(&mut encoder, &self.syscalls)?;
        fault_families(&mut encoder, self)?;
        runq_histogram(&mut encoder, &self.runq)?;
        if let Some(up) = self.targets_up {
            exposition::gauge(
                &mut encoder,
                "probe_targets_up",
                "Traced processes that are running.",
                up,
            )?;
        }
        Ok(())
    }
}

/// A collector that takes a fresh [`Scrape`] from `source` at each scrape, for a
/// daemon's registry; when `source` fails the scrape fails (the server answers 500).
pub struct LiveScrape<F> {
    source: F,
}

impl<F> LiveScrape<F>
where
    F: Fn() -> Option<Scrape> + Send + Sync + 'static,
{
    /// A collector reading `source` (None: the snapshot failed, and `source` has
    /// said why where the daemon logs).
    pub fn new(source: F) -> LiveScrape<F> {
        LiveScrape { source }
    }
}

impl<F> std::fmt::Debug for LiveScrape<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveScrape").finish_non_exhaustive()
    }
}

impl<F> Collector for LiveScrape<F>
where
    F: Fn() -> Option<Scrape> + Send + Sync + 'static,
{
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        (self.source)().ok_or(std::fmt::Error)?.encode(encoder)
    }
}

/// Syscalls by name (calls, errors, bytes), bytes by data path, clock_gettime
/// syscalls by clock.
fn syscall_families(out: &mut DescriptorEncoder<'_>, snapshot: &SyscallSnapshot) -> Result {
    let rows = &snapshot.rows;
    per_syscall_counter(
        out,
        ("probe_syscalls", "Syscalls entered, by name."),
        rows.iter().map(|row| (row, row.calls)),
    )?;
    per_syscall_counter(
        out,
        (
            "probe_syscall_errors",
            "Syscalls that returned an error, by name.",
        ),
        rows.iter()
            .filter(|row| row.errors > 0)
            .map(|row| (row, row.errors)),
    )?;
    per_syscall_counter(
        out,
        (
            "probe_syscall_bytes",
            "Bytes moved by data syscalls (read, write, sendfile, ...), by name.",
        ),
        rows.iter()
            .filter(|row| data_path(&row.name).is_some())
            .map(|row| (row, row.bytes)),
    )?;
    data_path_family(out, snapshot)?;
    clock_id_family(out, snapshot)
}

/// The result of writing a family.
type Result = std::fmt::Result;

/// A counter family (name without `_total`, help) with a sample per syscall: the rows
/// and their values.
fn per_syscall_counter<'a>(
    out: &mut DescriptorEncoder<'_>,
    (name, help): (&str, &str),
    samples: impl Iterator<Item = (&'a SyscallRow, u64)>,
) -> Result {
    exposition::counter_family(
        out,
        name,
        help,
        samples.map(|(row, value)| ([("syscall", row.name.as_str())], value)),
    )
}

/// Bytes by data path (zero-copy, copied in, copied out).
fn data_path_family(out: &mut DescriptorEncoder<'_>, snapshot: &SyscallSnapshot) -> Result {
    let mut paths = [0u64; 3];
    for row in &snapshot.rows {
        match data_path(&row.name) {
            Some(DataPath::ZeroCopy) => paths[0] += row.bytes,
            Some(DataPath::CopyIn) => paths[1] += row.bytes,
            Some(DataPath::CopyOut) => paths[2] += row.bytes,
            None => {}
        }
    }
    exposition::counter_family(
        out,
        "probe_file_bytes",
        "Bytes by data path: zero_copy (sendfile/splice), copied_in (read-like), copied_out (write-like).",
        ["zero_copy", "copied_in", "copied_out"]
            .into_iter()
            .zip(paths)
            .map(|(path, bytes)| ([("path", path)], bytes)),
    )
}

/// Real clock_gettime syscalls by clock id.
fn clock_id_family(out: &mut DescriptorEncoder<'_>, snapshot: &SyscallSnapshot) -> Result {
    exposition::counter_family(
        out,
        "probe_clock_gettime_syscalls",
        "Real clock_gettime syscalls (calls the vDSO did not serve), by clock id.",
        snapshot
            .clock_ids
            .iter()
            .enumerate()
            .filter(|&(_, &count)| count > 0)
            .map(|(id, &count)| {
                let clock = if id + 1 == syscalls::CLOCK_SLOTS {
                    "other".into()
                } else {
                    clock::clock_name(id)
                };
                ([("clock", clock)], count)
            }),
    )
}

/// Page faults by kind, and per process where wanted.
fn fault_families(out: &mut DescriptorEncoder<'_>, scrape: &Scrape) -> Result {
    let minor: u64 = scrape.faults.iter().map(|f| f.minor).sum();
    let major: u64 = scrape.faults.iter().map(|f| f.major).sum();
    exposition::counter_family(
        out,
        "probe_page_faults",
        "Page faults of the traced processes, by kind.",
        [([("kind", "minor")], minor), ([("kind", "major")], major)],
    )?;
    if !scrape.per_process_faults {
        return Ok(());
    }
    exposition::counter_family(
        out,
        "probe_process_page_faults",
        "Page faults per traced process, by kind.",
        scrape.faults.iter().flat_map(|f| {
            [("minor", f.minor), ("major", f.major)].map(|(kind, n)| {
                let labels = [
                    ("pid", f.pid.to_string()),
                    ("comm", f.comm.clone()),
                    ("kind", kind.to_string()),
                ];
                (labels, n)
            })
        }),
    )
}

/// The run-queue histogram in seconds: the log2 microsecond slots' upper bounds,
/// the last (unbounded) slot in `+Inf`.
fn runq_histogram(out: &mut DescriptorEncoder<'_>, runq: &RunqSnapshot) -> Result {
    let buckets: Vec<(f64, u64)> = runq
        .histogram
        .slots
        .iter()
        .enumerate()
        .map(|(slot, &count)| (Log2Histogram::bounds(slot).1, count))
        .take_while(|&(high_us, _)| high_us != u64::MAX)
        .map(|(high_us, count)| (high_us as f64 / 1e6, count))
        .collect();
    exposition::histogram(
        out,
        "probe_runq_latency_seconds",
        "Time runnable tasks waited for a CPU.",
        &buckets,
        (runq.total_ns as f64 / 1e9, runq.histogram.total()),
    )
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
            value("probe_runq_latency_seconds_bucket{le=\"2e-06\"}"),
            Some(2.0)
        );
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"1.6e-05\"}"),
            Some(2.0)
        );
        assert_eq!(
            value("probe_runq_latency_seconds_bucket{le=\"3.2e-05\"}"),
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

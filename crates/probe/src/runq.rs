//! Run-queue latency: how long runnable tasks wait for a CPU (sched_wakeup or
//! preemption to sched_switch), like libbpf-tools' runqlat.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;
use serde::Serialize;

use crate::bpf::{self, attach_raw_tracepoint, skel::runq::*, Scope};
use crate::error::{ProbeError, Result};
use crate::histogram::{Log2Histogram, SLOTS};

/// Run-queue delay so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunqSnapshot {
    /// Delays in microseconds.
    pub histogram: Log2Histogram,
    /// Number of delays measured (the histogram's total).
    pub samples: u64,
    /// Their sum in nanoseconds.
    pub total_ns: u64,
}

impl RunqSnapshot {
    /// The mean delay in microseconds (0 without samples).
    pub fn mean_us(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.samples as f64 / 1000.0
        }
    }
}

/// Attached scheduler tracepoint programs; detached when dropped.
pub struct RunqTracer<'obj> {
    skel: RunqSkel<'obj>,
}

impl<'obj> RunqTracer<'obj> {
    /// Loads and attaches to sched_wakeup, sched_wakeup_new and sched_switch.
    pub fn start(storage: &'obj mut MaybeUninit<OpenObject>, scope: &Scope) -> Result<Self> {
        bpf::quiet_libbpf();
        let load_error = |source| ProbeError::Load {
            object: "runq",
            cause: source,
        };
        let mut open = RunqSkelBuilder::default()
            .open(storage)
            .map_err(load_error)?;
        open.maps
            .rodata_data
            .as_deref_mut()
            .expect("runq.bpf.c has rodata")
            .filter_tgids = scope.filters();
        let mut skel = open.load().map_err(load_error)?;
        if let Scope::Processes(tgids) = scope {
            for &tgid in tgids {
                bpf::add_target(&skel.maps.targets, tgid)?;
            }
        }
        const STILL: &str = "`probe syscalls`, `probe faults` and `probe clock` do not need it";
        let progs = &skel.progs;
        skel.links.on_wakeup = Some(attach_raw_tracepoint(
            &progs.on_wakeup,
            "sched_wakeup",
            STILL,
        )?);
        skel.links.on_wakeup_new = Some(attach_raw_tracepoint(
            &progs.on_wakeup_new,
            "sched_wakeup_new",
            STILL,
        )?);
        skel.links.on_switch = Some(attach_raw_tracepoint(
            &progs.on_switch,
            "sched_switch",
            STILL,
        )?);
        Ok(RunqTracer { skel })
    }

    /// Starts measuring the tasks of process `tgid` too.
    pub fn add_process(&self, tgid: u32) -> Result<()> {
        bpf::add_target(&self.skel.maps.targets, tgid)
    }

    /// Stops measuring the tasks of process `tgid`.
    pub fn remove_process(&self, tgid: u32) {
        bpf::remove_target(&self.skel.maps.targets, tgid)
    }

    /// Detaches the programs (the counts stay readable), so that a final snapshot is
    /// consistent.
    pub fn stop(&mut self) {
        self.skel.links = Default::default();
    }

    /// The histogram so far.
    pub fn snapshot(&self) -> Result<RunqSnapshot> {
        let maps = &self.skel.maps;
        let mut slots = vec![0u64; SLOTS];
        for (slot, count) in slots.iter_mut().enumerate() {
            let mut one = [0u64];
            bpf::sum_percpu_u64(&maps.hist, "hist", slot as u32, &mut one)?;
            *count = one[0];
        }
        let mut total = [0u64];
        bpf::sum_percpu_u64(&maps.totals, "totals", 0, &mut total)?;
        let histogram = Log2Histogram::new("usecs", slots);
        Ok(RunqSnapshot {
            samples: histogram.total(),
            histogram,
            total_ns: total[0],
        })
    }
}

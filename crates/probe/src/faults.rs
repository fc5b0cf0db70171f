//! Minor and major page faults per process: the software perf events
//! page-faults-min/-maj on every CPU, each occurrence counted by a BPF program
//! against the faulting process. Works for processes that come and go, and on
//! arm64, which has no page_fault_user tracepoint.

use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, IntoRawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use serde::Serialize;

use crate::bpf::{self, skel::faults::*, Scope};
use crate::error::{ProbeError, Result};
use crate::perf::{self, SoftwareEvent};

/// Page faults of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessFaults {
    /// Its pid (tgid).
    pub pid: u32,
    /// Its command name (after the process exited: the name of its thread that
    /// faulted first).
    pub comm: String,
    /// Faults served from memory.
    pub minor: u64,
    /// Faults that waited for IO.
    pub major: u64,
}

/// Attached fault counters; detached when dropped (each link owns its perf event).
pub struct FaultTracer<'obj> {
    links: Vec<Link>,
    skel: FaultsSkel<'obj>,
}

impl<'obj> FaultTracer<'obj> {
    /// Loads the programs and attaches them to both fault events on every online CPU.
    pub fn start(storage: &'obj mut MaybeUninit<OpenObject>, scope: &Scope) -> Result<Self> {
        bpf::quiet_libbpf();
        let load_error = |source| ProbeError::Load {
            object: "faults",
            cause: source,
        };
        let mut open = FaultsSkelBuilder::default()
            .open(storage)
            .map_err(load_error)?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("faults.bpf.c has rodata");
        rodata.filter_tgids = scope.filters();
        if let Some(comm) = scope.comm() {
            rodata.filter_comm = true;
            rodata.target_comm = comm;
        }
        let skel = open.load().map_err(load_error)?;
        if let Scope::Processes(tgids) = scope {
            for &tgid in tgids {
                bpf::add_target(&skel.maps.targets, tgid)?;
            }
        }
        let mut links = Vec::new();
        for cpu in perf::online_cpus()? {
            for event in [SoftwareEvent::MinorFaults, SoftwareEvent::MajorFaults] {
                let fd = perf::open_every_occurrence(event, cpu)?;
                let program = match event {
                    SoftwareEvent::MinorFaults => &skel.progs.on_minor_fault,
                    SoftwareEvent::MajorFaults => &skel.progs.on_major_fault,
                };
                let point = format!("perf event {} on cpu {cpu}", event.name());
                let link = program
                    .attach_perf_event(fd.as_raw_fd())
                    .map_err(bpf::attach_error(
                        &point,
                        "`probe syscalls` and `probe runq` do not need it",
                    ))?;
                // libbpf's perf-event link owns the descriptor and closes it on detach.
                let _ = fd.into_raw_fd();
                links.push(link);
            }
        }
        Ok(FaultTracer { links, skel })
    }

    /// Starts counting the faults of process `tgid` too.
    pub fn add_process(&self, tgid: u32) -> Result<()> {
        bpf::add_target(&self.skel.maps.targets, tgid)
    }

    /// Stops counting the faults of process `tgid` (its counts stay).
    pub fn remove_process(&self, tgid: u32) {
        bpf::remove_target(&self.skel.maps.targets, tgid)
    }

    /// Faults so far, per process, most faults first.
    pub fn snapshot(&self) -> Result<Vec<ProcessFaults>> {
        let map = &self.skel.maps.faults;
        let mut out = Vec::new();
        for key in map.keys() {
            let Some(value) =
                map.lookup(&key, MapFlags::ANY)
                    .map_err(|source| ProbeError::Map {
                        map: "faults",
                        cause: source,
                    })?
            else {
                continue; // removed between keys() and lookup()
            };
            let pid = u32::from_ne_bytes(key[..4].try_into().expect("u32 key"));
            let minor = u64::from_ne_bytes(value[0..8].try_into().expect("u64"));
            let major = u64::from_ne_bytes(value[8..16].try_into().expect("u64"));
            // The process's name (its main thread's) while it runs; else the name of
            // the thread that faulted first, as the BPF program saw it.
            let comm = match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                Ok(name) => name.trim_end().to_string(),
                Err(_) => bpf::comm_text(&value[16..32]),
            };
            out.push(ProcessFaults {
                pid,
                comm,
                minor,
                major,
            });
        }
        out.sort_by(|a, b| {
            (b.minor + b.major)
                .cmp(&(a.minor + a.major))
                .then(a.pid.cmp(&b.pid))
        });
        Ok(out)
    }

    /// Detaches the programs (the counts stay readable), so that a final snapshot is
    /// consistent.
    pub fn stop(&mut self) {
        self.links.clear();
    }
}

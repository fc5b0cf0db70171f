//! perf_event_open for the software page-fault events.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use crate::error::{ProbeError, Result};

/// PERF_FLAG_FD_CLOEXEC from linux/perf_event.h (not in the libc crate).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// A software perf event probe uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftwareEvent {
    /// Page faults served without IO (page-faults-min).
    MinorFaults,
    /// Page faults that waited for IO (page-faults-maj).
    MajorFaults,
}

impl SoftwareEvent {
    /// perf's name for the event.
    pub fn name(self) -> &'static str {
        match self {
            SoftwareEvent::MinorFaults => "minor-faults",
            SoftwareEvent::MajorFaults => "major-faults",
        }
    }

    fn config(self) -> u64 {
        match self {
            SoftwareEvent::MinorFaults => libbpf_sys::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64,
            SoftwareEvent::MajorFaults => libbpf_sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64,
        }
    }
}

/// Opens `event` for every task on `cpu`, overflowing on every occurrence so that an
/// attached BPF program sees each one.
pub fn open_every_occurrence(event: SoftwareEvent, cpu: u32) -> Result<OwnedFd> {
    let mut attr = libbpf_sys::perf_event_attr {
        type_: libbpf_sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: event.config(),
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    // SAFETY: perf_event_open reads `attr` (a fully initialised perf_event_attr whose
    // size field is its size) and returns a new file descriptor or -1; no pointer is
    // kept after the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(ProbeError::PerfEvent {
            event: event.name(),
            cpu,
            cause: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` is a descriptor perf_event_open just returned; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// The CPUs online now (from /sys/devices/system/cpu/online).
pub fn online_cpus() -> Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path).map_err(|source| ProbeError::Read {
        path: path.into(),
        cause: source,
    })?;
    let set = ioserve_numa::IdSet::parse_list(text.trim()).map_err(|err| ProbeError::Read {
        path: path.into(),
        cause: io::Error::new(io::ErrorKind::InvalidData, err.to_string()),
    })?;
    Ok(set.iter().collect())
}

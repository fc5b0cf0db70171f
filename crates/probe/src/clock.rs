//! Does clock_gettime stay in the vDSO? The clocksource, the vDSO mapping, and for
//! each clock id the cost per call and the real syscalls per call, counted by the
//! sys_enter program while this process calls the clock.

use std::fs;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::syscalls::SyscallTracer;
use crate::sysnames;

/// The clock ids probe measures, with their names.
pub const CLOCKS: &[(libc::clockid_t, &str)] = &[
    (libc::CLOCK_REALTIME, "CLOCK_REALTIME"),
    (libc::CLOCK_MONOTONIC, "CLOCK_MONOTONIC"),
    (libc::CLOCK_MONOTONIC_RAW, "CLOCK_MONOTONIC_RAW"),
    (libc::CLOCK_BOOTTIME, "CLOCK_BOOTTIME"),
    (libc::CLOCK_TAI, "CLOCK_TAI"),
    (libc::CLOCK_REALTIME_COARSE, "CLOCK_REALTIME_COARSE"),
    (libc::CLOCK_MONOTONIC_COARSE, "CLOCK_MONOTONIC_COARSE"),
    (libc::CLOCK_PROCESS_CPUTIME_ID, "CLOCK_PROCESS_CPUTIME_ID"),
    (libc::CLOCK_THREAD_CPUTIME_ID, "CLOCK_THREAD_CPUTIME_ID"),
];

/// The name of clock id `id` ("CLOCK_MONOTONIC"), or "clock N".
pub fn clock_name(id: usize) -> String {
    CLOCKS
        .iter()
        .find(|(clock, _)| *clock as usize == id)
        .map_or_else(|| format!("clock {id}"), |(_, name)| (*name).to_string())
}

/// The kernel's clocksources (under `root`, normally "/").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Clocksources {
    /// The one in use ("tsc", "kvm-clock", "arch_sys_counter").
    pub current: String,
    /// All the kernel offers.
    pub available: Vec<String>,
}

impl Clocksources {
    /// Reads them from `root`/sys/devices/system/clocksource/clocksource0.
    pub fn read(root: &Path) -> Option<Clocksources> {
        let dir = root.join("sys/devices/system/clocksource/clocksource0");
        let current = fs::read_to_string(dir.join("current_clocksource")).ok()?;
        let available = fs::read_to_string(dir.join("available_clocksource")).unwrap_or_default();
        Some(Clocksources {
            current: current.trim().to_string(),
            available: available.split_whitespace().map(str::to_string).collect(),
        })
    }

    /// Whether the current clocksource has a vDSO clock mode on Linux (the vDSO can
    /// read it from user space): tsc, kvm-clock and hyperv_clocksource_tsc_page on
    /// x86 (the latter two only with a stable host TSC), arch_sys_counter on arm64.
    pub fn current_has_vdso_mode(&self) -> bool {
        matches!(
            self.current.as_str(),
            "tsc" | "kvm-clock" | "hyperv_clocksource_tsc_page" | "arch_sys_counter"
        )
    }
}

/// The vDSO mappings of a process, from /proc/PID/maps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VdsoMapping {
    /// A [vdso] mapping exists.
    pub vdso: bool,
    /// [vvar]-style data pages exist ([vvar], [vvar_vclock]).
    pub vvar: Vec<String>,
}

impl VdsoMapping {
    /// Parses the text of a /proc/PID/maps file.
    pub fn parse(maps: &str) -> VdsoMapping {
        let mut mapping = VdsoMapping::default();
        for name in maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
        {
            if name == "[vdso]" {
                mapping.vdso = true;
            } else if name.starts_with("[vvar") && !mapping.vvar.iter().any(|v| v == name) {
                mapping.vvar.push(name.to_string());
            }
        }
        mapping
    }

    /// The mappings of process `pid` ("self" for this one).
    pub fn of(pid: &str) -> Option<VdsoMapping> {
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .ok()
            .map(|maps| Self::parse(&maps))
    }
}

/// The cost of one clock id, called through libc and as a raw syscall.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockMeasurement {
    /// The clock id.
    pub clock: String,
    /// Nanoseconds per libc clock_gettime call.
    pub libc_ns_per_call: f64,
    /// Real clock_gettime syscalls per libc call (0: served by the vDSO).
    pub libc_syscalls_per_call: f64,
    /// Nanoseconds per syscall(SYS_clock_gettime) call.
    pub syscall_ns_per_call: f64,
    /// Real clock_gettime syscalls per syscall(SYS_clock_gettime) call (1).
    pub raw_syscalls_per_call: f64,
}

impl ClockMeasurement {
    /// Whether the vDSO served the libc calls (fewer than one syscall per 100 calls).
    pub fn served_by_vdso(&self) -> bool {
        self.libc_syscalls_per_call < 0.01
    }
}

/// Calls each of [`CLOCKS`] `calls` times through libc and through syscall(2) and
/// counts the real clock_gettime syscalls `tracer` saw. `tracer` must trace this
/// process, and no other thread of it may call clock_gettime meanwhile.
pub fn measure_clocks(tracer: &SyscallTracer<'_>, calls: u32) -> Result<Vec<ClockMeasurement>> {
    let nr = sysnames::number("clock_gettime").expect("every architecture has clock_gettime");
    let mut out = Vec::new();
    for &(clock, name) in CLOCKS {
        let (libc_ns, libc_syscalls) = timed(tracer, nr, calls, || libc_clock_gettime(clock))?;
        let (raw_ns, raw_syscalls) = timed(tracer, nr, calls, || raw_clock_gettime(clock))?;
        out.push(ClockMeasurement {
            clock: name.to_string(),
            libc_ns_per_call: libc_ns,
            libc_syscalls_per_call: libc_syscalls,
            syscall_ns_per_call: raw_ns,
            raw_syscalls_per_call: raw_syscalls,
        });
    }
    Ok(out)
}

/// Runs `call` `calls` times while `tracer` counts, then `calls` times under a timer;
/// ns per call and clock_gettime syscalls per call. Two loops, because the timer's own
/// reads are clock_gettime calls too (real syscalls where the vDSO falls back): inside
/// the counted loop they added 2 to every count, and the tracer's map reads inside the
/// timed one would add their cost to every call's.
fn timed(
    tracer: &SyscallTracer<'_>,
    nr: u32,
    calls: u32,
    mut call: impl FnMut() -> libc::c_long,
) -> Result<(f64, f64)> {
    // Warm up (first-call page faults, lazy binding) outside the measurement.
    for _ in 0..100 {
        std::hint::black_box(call());
    }
    let before = tracer.calls_of(nr)?;
    for _ in 0..calls {
        std::hint::black_box(call());
    }
    let after = tracer.calls_of(nr)?;
    let start = Instant::now();
    for _ in 0..calls {
        std::hint::black_box(call());
    }
    let elapsed = start.elapsed();
    let calls = f64::from(calls.max(1));
    Ok((
        elapsed.as_nanos() as f64 / calls,
        (after - before) as f64 / calls,
    ))
}

/// clock_gettime through libc (the vDSO when it serves the clock); returns the ns
/// field so the call cannot be optimised away.
pub fn libc_clock_gettime(clock: libc::clockid_t) -> libc::c_long {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_nsec
}

/// clock_gettime as a real syscall, bypassing the vDSO.
pub fn raw_clock_gettime(clock: libc::clockid_t) -> libc::c_long {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the clock_gettime syscall writes one timespec into `ts`.
    unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            clock,
            &mut ts as *mut libc::timespec,
        )
    };
    ts.tv_nsec
}

/// The verdict on a host's clocks: what is wrong, if anything, and the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClockVerdict {
    /// True when the clocks that should be in the vDSO are.
    pub ok: bool,
    /// One sentence.
    pub summary: String,
    /// What to do, when something is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Judges `measurements` on a host with `sources` and vDSO mapping `vdso`.
pub fn verdict(
    sources: Option<&Clocksources>,
    vdso: &VdsoMapping,
    measurements: &[ClockMeasurement],
) -> ClockVerdict {
    let current = sources.map_or("unknown", |s| s.current.as_str());
    let cpu_clock = |name: &str| name.contains("CPUTIME");
    let fallen_back: Vec<&str> = measurements
        .iter()
        .filter(|m| !cpu_clock(&m.clock) && !m.served_by_vdso())
        .map(|m| m.clock.as_str())
        .collect();
    if !vdso.vdso {
        return ClockVerdict {
            ok: false,
            summary: "no [vdso] mapping: every clock_gettime is a syscall".into(),
            fix: Some(
                "remove vdso=0 from the kernel command line (or the seccomp/loader setting \
                 that hides AT_SYSINFO_EHDR)"
                    .into(),
            ),
        };
    }
    if fallen_back.is_empty() {
        let cpu = measurements
            .iter()
            .any(|m| cpu_clock(&m.clock) && !m.served_by_vdso());
        return ClockVerdict {
            ok: true,
            summary: format!(
                "clocksource {current}: the vDSO serves every wall and monotonic clock{}",
                if cpu {
                    "; the CPU-time clocks are syscalls on every Linux (expected)"
                } else {
                    ""
                }
            ),
            fix: None,
        };
    }
    ClockVerdict {
        ok: false,
        summary: format!(
            "clocksource {current}: clock_gettime is a syscall for {}",
            fallen_back.join(", ")
        ),
        fix: Some(fallback_fix(sources)),
    }
}

/// What to do when wall or monotonic clocks fall back to the syscall under `sources`:
/// switch to tsc where the kernel offers it, else what the clocksource allows.
fn fallback_fix(sources: Option<&Clocksources>) -> String {
    let current = sources.map_or("unknown", |s| s.current.as_str());
    let tsc_offered = sources.is_some_and(|s| s.available.iter().any(|a| a == "tsc"));
    if tsc_offered && current != "tsc" {
        "switch to tsc if it is reliable on this host: echo tsc > \
         /sys/devices/system/clocksource/clocksource0/current_clocksource (persist with \
         clocksource=tsc tsc=reliable on the kernel command line)"
            .to_string()
    } else if current == "kvm-clock" {
        "kvm-clock without the stable bit: give the guest a stable TSC (host invariant \
         TSC, -cpu host,+invtsc) or use CLOCK_*_COARSE / a cached clock where ms precision \
         is enough"
            .to_string()
    } else if sources.is_some_and(Clocksources::current_has_vdso_mode) {
        format!(
            "{current} can be read from user space, yet the vDSO declined it: the kernel \
             marked it unstable at run time (dmesg | grep -i clocksource); fix the host's \
             clock, or cache the time (CLOCK_*_COARSE, ioserve_clock::CachedClock)"
        )
    } else if cfg!(target_arch = "x86_64") {
        // The kernel did not offer tsc: it found the TSC unstable or untrusted (a VM
        // without invariant TSC, TCG), which only the operator can overrule.
        format!(
            "clocksource {current} has no vDSO mode and the kernel offers no tsc: where the \
             TSC is known to be stable (invariant TSC, synchronised sockets, a hypervisor \
             exposing invtsc) boot with clocksource=tsc tsc=reliable; use kvm-clock in KVM \
             guests; otherwise cache the time (CLOCK_*_COARSE, ioserve_clock::CachedClock)"
        )
    } else {
        format!(
            "clocksource {current} has no vDSO mode: use one that has (arch_sys_counter on \
             arm64), or cache the time (CLOCK_*_COARSE, ioserve_clock::CachedClock)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(clock: &str, syscalls: f64) -> ClockMeasurement {
        ClockMeasurement {
            clock: clock.into(),
            libc_ns_per_call: 25.0,
            libc_syscalls_per_call: syscalls,
            syscall_ns_per_call: 250.0,
            raw_syscalls_per_call: 1.0,
        }
    }

    #[test]
    fn parses_vdso_mappings() {
        let maps = "7ffd1000-7ffd5000 r--p 00000000 00:00 0 [vvar]\n\
                    7ffd5000-7ffd6000 r--p 00000000 00:00 0 [vvar_vclock]\n\
                    7ffd6000-7ffd8000 r-xp 00000000 00:00 0 [vdso]\n\
                    55d0-55d1 r--p 00000000 08:01 123 /usr/bin/cat\n";
        let mapping = VdsoMapping::parse(maps);
        assert!(mapping.vdso);
        assert_eq!(mapping.vvar, ["[vvar]", "[vvar_vclock]"]);
        assert!(!VdsoMapping::parse("55d0-55d1 r--p 0 08:01 1 /bin/x\n").vdso);
        assert!(
            VdsoMapping::of("self").unwrap().vdso,
            "this process has a vDSO"
        );
    }

    #[test]
    fn verdicts() {
        let sources = Clocksources {
            current: "kvm-clock".into(),
            available: vec!["kvm-clock".into(), "tsc".into()],
        };
        let vdso = VdsoMapping {
            vdso: true,
            vvar: vec![],
        };
        let good = [
            measured("CLOCK_MONOTONIC", 0.0),
            measured("CLOCK_PROCESS_CPUTIME_ID", 1.0),
        ];
        let v = verdict(Some(&sources), &vdso, &good);
        assert!(v.ok && v.summary.contains("CPU-time"), "{v:?}");

        let bad = [
            measured("CLOCK_MONOTONIC", 1.0),
            measured("CLOCK_REALTIME", 1.0),
        ];
        let v = verdict(Some(&sources), &vdso, &bad);
        assert!(!v.ok);
        assert!(
            v.summary.contains("CLOCK_MONOTONIC, CLOCK_REALTIME"),
            "{v:?}"
        );
        assert!(v.fix.unwrap().contains("echo tsc"));

        let no_tsc = Clocksources {
            current: "kvm-clock".into(),
            available: vec![],
        };
        let v = verdict(Some(&no_tsc), &vdso, &bad);
        assert!(v.fix.unwrap().contains("stable"), "names the stable bit");

        let tsc = Clocksources {
            current: "tsc".into(),
            available: vec!["tsc".into()],
        };
        let v = verdict(Some(&tsc), &vdso, &bad);
        assert!(
            v.fix.unwrap().contains("marked it unstable"),
            "tsc that falls back"
        );
        let hpet = Clocksources {
            current: "hpet".into(),
            available: vec!["hpet".into()],
        };
        let v = verdict(Some(&hpet), &vdso, &bad);
        let fix = v.fix.unwrap();
        assert!(fix.contains("hpet has no vDSO mode"), "{fix}");
        assert_eq!(
            fix.contains("clocksource=tsc tsc=reliable"),
            cfg!(target_arch = "x86_64"),
            "{fix}"
        );

        let v = verdict(Some(&sources), &VdsoMapping::default(), &good);
        assert!(!v.ok && v.fix.unwrap().contains("vdso=0"));
    }

    #[test]
    fn reads_clocksources_from_a_root() {
        let root = tempfile::tempdir().unwrap();
        let dir = root
            .path()
            .join("sys/devices/system/clocksource/clocksource0");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("current_clocksource"), "hpet\n").unwrap();
        fs::write(dir.join("available_clocksource"), "tsc hpet acpi_pm \n").unwrap();
        let sources = Clocksources::read(root.path()).unwrap();
        assert_eq!(sources.current, "hpet");
        assert_eq!(sources.available, ["tsc", "hpet", "acpi_pm"]);
        assert!(!sources.current_has_vdso_mode());
        assert!(Clocksources::read(&root.path().join("nowhere")).is_none());
    }
}

/// Wall and monotonic `clock_gettime` syscalls per second above which a process is
/// taken to read its clocks through the kernel instead of the vDSO (the fallback
/// signature): a process that stays in the vDSO makes next to none.
pub const FALLBACK_SYSCALLS_PER_SECOND: f64 = 100.0;

/// The `clock_gettime` syscalls, counted per clock-id slot (the last slot counts every
/// other id, CPU clocks of other tasks), that should have stayed in the vDSO: those on
/// wall and monotonic clocks. CPU-time clocks have no vDSO path anywhere.
pub fn vdso_clock_syscalls(by_clock_id: &[u64]) -> u64 {
    let named = by_clock_id.len().saturating_sub(1);
    by_clock_id[..named]
        .iter()
        .enumerate()
        .filter(|(id, _)| !clock_name(*id).contains("CPUTIME"))
        .map(|(_, n)| n)
        .sum()
}

/// Whether `syscalls` wall/monotonic clock syscalls in `seconds` are the fallback
/// signature.
pub fn is_fallback(syscalls: u64, seconds: f64) -> bool {
    seconds > 0.0 && syscalls as f64 / seconds > FALLBACK_SYSCALLS_PER_SECOND
}

/// One process's `clock_gettime` syscalls over a while (`probe clock --pid`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WatchedClock {
    /// The process.
    pub pid: u32,
    /// How long it was watched.
    pub seconds: f64,
    /// Its clock_gettime syscalls.
    pub syscalls: u64,
    /// The same per second.
    pub per_second: f64,
    /// Syscalls per clock, by name, for the clocks it used.
    pub by_clock: Vec<(String, u64)>,
    /// Wall and monotonic clock syscalls (see [`vdso_clock_syscalls`]).
    pub vdso_clock_syscalls: u64,
    /// Whether the process has a vDSO mapped.
    pub vdso_mapped: bool,
}

impl WatchedClock {
    /// The figures of a watch: `by_clock_id` counted per clock-id slot.
    pub fn new(
        pid: u32,
        seconds: f64,
        syscalls: u64,
        by_clock_id: &[u64],
        vdso_mapped: bool,
    ) -> Self {
        let last = by_clock_id.len().saturating_sub(1);
        let by_clock = by_clock_id
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| {
                let name = if id == last {
                    "other/CPU clocks of other tasks".into()
                } else {
                    clock_name(id)
                };
                (name, *n)
            })
            .collect();
        WatchedClock {
            pid,
            seconds,
            syscalls,
            per_second: if seconds > 0.0 {
                syscalls as f64 / seconds
            } else {
                0.0
            },
            by_clock,
            vdso_clock_syscalls: vdso_clock_syscalls(by_clock_id),
            vdso_mapped,
        }
    }

    /// Whether this process shows the fallback signature.
    pub fn is_fallback(&self) -> bool {
        is_fallback(self.vdso_clock_syscalls, self.seconds)
    }

    /// A line (two with the fallback signature) for people.
    pub fn describe(&self) -> String {
        let by: Vec<String> = self
            .by_clock
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        let mut text = format!(
            "pid {}: {} clock_gettime syscalls in {:.1} s ({:.0}/s){}; vDSO {}",
            self.pid,
            self.syscalls,
            self.seconds,
            self.per_second,
            if by.is_empty() {
                String::new()
            } else {
                format!(" [{}]", by.join(", "))
            },
            if self.vdso_mapped {
                "mapped"
            } else {
                "NOT mapped"
            }
        );
        if self.is_fallback() {
            text.push_str(
                "\n  fallback signature: this process reads wall/monotonic clocks through the \
                 syscall, not the vDSO (a runtime that bypasses the vDSO, a seccomp/ptrace \
                 sandbox, or a clocksource without vDSO mode)",
            );
        }
        text
    }
}

#[cfg(test)]
mod watched_tests {
    use super::*;

    #[test]
    fn the_fallback_rule_counts_wall_and_monotonic_clocks_only() {
        let mut slots = vec![0u64; 16];
        slots[libc::CLOCK_MONOTONIC as usize] = 150;
        slots[libc::CLOCK_PROCESS_CPUTIME_ID as usize] = 10_000;
        slots[15] = 10_000; // CPU clocks of other tasks
        let watched = WatchedClock::new(7, 1.0, 20_150, &slots, true);
        assert_eq!(watched.vdso_clock_syscalls, 150);
        assert!(watched.is_fallback());
        assert!(watched.describe().contains("fallback signature"));
        assert!(watched.describe().contains("CLOCK_MONOTONIC 150"));
        slots[libc::CLOCK_MONOTONIC as usize] = 50;
        let quiet = WatchedClock::new(7, 1.0, 20_050, &slots, true);
        assert!(!quiet.is_fallback(), "CPU clocks never count");
        assert!(!is_fallback(1000, 0.0));
    }
}

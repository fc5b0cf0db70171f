//! The checks the seeds made by hand, as findings with evidence and a fix. This
//! module holds the system checks, which read only /proc and /sys files (under a
//! root directory, so that they run on snapshots too); `probe doctor` adds the
//! measured ones (clock syscalls, sendfile verdict, faults, run-queue delay).

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::clock;
use crate::runq::RunqSnapshot;
use crate::verdict::{DataMovement, FileServingVerdict};

/// How serious a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing to do.
    Ok,
    /// Worth knowing, no action needed.
    Info,
    /// Likely to cost latency or throughput; the fix says what to do.
    Warn,
}

impl Severity {
    /// The tag printed before the finding.
    pub fn tag(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Info => "info",
            Severity::Warn => "WARN",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was checked ("clock", "cpufreq", "numa", "thp", "sendfile", ...).
    pub area: &'static str,
    /// How serious it is.
    pub severity: Severity,
    /// One sentence.
    pub summary: String,
    /// What it is based on.
    pub evidence: String,
    /// What to do (for warnings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    /// The finding as indented text.
    pub fn render(&self) -> String {
        let mut text = format!(
            "[{:<4}] {}: {}\n",
            self.severity.tag(),
            self.area,
            self.summary
        );
        text.push_str(&format!("       evidence: {}\n", self.evidence));
        if let Some(fix) = &self.fix {
            text.push_str(&format!("       fix: {fix}\n"));
        }
        text
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The CPU frequency governors (cpufreq) of the CPUs under `root`.
pub fn cpufreq(root: &Path) -> Finding {
    let cpus = root.join("sys/devices/system/cpu");
    let mut governors: Vec<(String, String)> = fs::read_dir(&cpus)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("cpu")?.parse::<u32>().ok()?;
            let governor = read_trimmed(&cpus.join(&name).join("cpufreq/scaling_governor"))?;
            Some((name, governor))
        })
        .collect();
    governors.sort();
    if governors.is_empty() {
        return Finding {
            area: "cpufreq",
            severity: Severity::Info,
            summary: "no cpufreq driver: the firmware or hypervisor sets the CPU frequency".into(),
            evidence: format!("no {}/cpu*/cpufreq/scaling_governor", cpus.display()),
            fix: None,
        };
    }
    let mut distinct: Vec<&str> = governors.iter().map(|(_, g)| g.as_str()).collect();
    distinct.sort();
    distinct.dedup();
    let evidence = format!(
        "{} CPUs, scaling_governor: {}",
        governors.len(),
        distinct.join(", ")
    );
    if distinct == ["performance"] {
        return Finding {
            area: "cpufreq",
            severity: Severity::Ok,
            summary: "every CPU runs the performance governor".into(),
            evidence,
            fix: None,
        };
    }
    Finding {
        area: "cpufreq",
        severity: Severity::Warn,
        summary: "CPUs may clock down between requests: wake-up and first-request latency \
                  grows, and benchmarks drift"
            .into(),
        evidence,
        fix: Some(
            "for latency-sensitive hosts: cpupower frequency-set -g performance (or write \
             performance to /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)"
                .into(),
        ),
    }
}

/// NUMA nodes and automatic NUMA balancing under `root`.
pub fn numa(root: &Path) -> Finding {
    let balancing_path = root.join("proc/sys/kernel/numa_balancing");
    let balancing = read_trimmed(&balancing_path);
    let nodes = match ioserve_numa::Topology::read(root) {
        Ok(topology) => topology.online.len(),
        Err(_) => 1, // no node directory: a kernel without NUMA, one node
    };
    let balancing_text = match balancing.as_deref() {
        Some("0") => "off",
        Some(_) => "on",
        None => "not available",
    };
    let evidence = format!("{nodes} online node(s); kernel.numa_balancing {balancing_text}");
    if nodes <= 1 {
        return Finding {
            area: "numa",
            severity: Severity::Ok,
            summary: "one NUMA node: all memory is local".into(),
            evidence,
            fix: None,
        };
    }
    if balancing_text == "on" {
        return Finding {
            area: "numa",
            severity: Severity::Warn,
            summary: format!(
                "{nodes} NUMA nodes with automatic balancing: hinting faults and page \
                 migrations add latency spikes"
            ),
            evidence,
            fix: Some(
                "bind each worker to a node (numactl --cpunodebind=N --membind=N, or \
                 `ioserve --numa`'s per-node worker groups) and turn balancing off: sysctl \
                 kernel.numa_balancing=0"
                    .into(),
            ),
        };
    }
    Finding {
        area: "numa",
        severity: Severity::Info,
        summary: format!("{nodes} NUMA nodes, balancing off: placement is up to the service"),
        evidence,
        fix: Some("bind workers and their memory to one node each (numactl, numa crate)".into()),
    }
}

/// The selected value of a sysfs multiple-choice file ("always [madvise] never").
fn selected(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
}

/// Transparent huge pages under `root`.
pub fn transparent_huge_pages(root: &Path) -> Finding {
    let dir = root.join("sys/kernel/mm/transparent_hugepage");
    let enabled = read_trimmed(&dir.join("enabled"));
    let defrag = read_trimmed(&dir.join("defrag"));
    let (Some(enabled), Some(defrag)) = (enabled, defrag) else {
        return Finding {
            area: "thp",
            severity: Severity::Info,
            summary: "transparent huge pages are not available".into(),
            evidence: format!("no {}", dir.display()),
            fix: None,
        };
    };
    let (enabled, defrag) = (
        selected(&enabled).unwrap_or("?"),
        selected(&defrag).unwrap_or("?"),
    );
    let evidence = format!("enabled [{enabled}], defrag [{defrag}]");
    if enabled != "never" && defrag == "always" {
        return Finding {
            area: "thp",
            severity: Severity::Warn,
            summary: "huge-page faults compact memory synchronously: multi-millisecond stalls \
                      in the faulting thread"
                .into(),
            evidence,
            fix: Some(
                "echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag (compaction in \
                 the background, synchronous only where madvise asked for it)"
                    .into(),
            ),
        };
    }
    if enabled == "always" {
        return Finding {
            area: "thp",
            severity: Severity::Info,
            summary: "every large anonymous mapping gets huge pages: fewer TLB misses, but \
                      sparse mappings use more memory"
                .into(),
            evidence,
            fix: Some("madvise mode lets each service opt in (MADV_HUGEPAGE)".into()),
        };
    }
    Finding {
        area: "thp",
        severity: Severity::Ok,
        summary: "huge pages only where asked for, no synchronous compaction".into(),
        evidence,
        fix: None,
    }
}

/// The kernel's UDP receive-buffer error counters (datagrams dropped because a
/// socket's receive queue was full), IPv4 and IPv6, from `/proc/net/snmp{,6}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// `Udp: RcvbufErrors`.
    pub v4: u64,
    /// `Udp6RcvbufErrors`.
    pub v6: u64,
}

impl UdpCounters {
    /// Reads the counters under `root` (`/` for this host); a missing file or field
    /// counts as 0 (IPv6 may be disabled).
    pub fn read(root: &Path) -> UdpCounters {
        let snmp = fs::read_to_string(root.join("proc/net/snmp")).unwrap_or_default();
        let snmp6 = fs::read_to_string(root.join("proc/net/snmp6")).unwrap_or_default();
        UdpCounters {
            v4: snmp_field(&snmp, "Udp:", "RcvbufErrors").unwrap_or(0),
            v6: snmp6
                .lines()
                .find_map(|l| l.strip_prefix("Udp6RcvbufErrors")?.trim().parse().ok())
                .unwrap_or(0),
        }
    }

    /// Both families together.
    pub fn total(&self) -> u64 {
        self.v4 + self.v6
    }
}

/// A field of `/proc/net/snmp`, where each protocol has a line of names followed by a
/// line of values, both starting with `prefix`.
fn snmp_field(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let index = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(index)?.parse().ok()
}

/// The fix for UDP receive queues that overflow (seed 002).
const UDP_RCVBUF_FIX: &str = "drain each queue faster or make it larger: more sockets on the \
     port with SO_REUSEPORT, one per core (timeserve --workers; Go: net.ListenConfig with \
     a Control func), and a larger receive buffer (SO_RCVBUF, capped by sysctl \
     net.core.rmem_max; timeserve --receive-buffer)";

/// The UDP receive-buffer finding: errors that grew between `before` and `after`,
/// `elapsed` apart, are datagrams lost at this moment.
pub fn udp_receive_buffers(
    before: &UdpCounters,
    after: &UdpCounters,
    elapsed: std::time::Duration,
) -> Finding {
    let grown = after.total().saturating_sub(before.total());
    let evidence = format!(
        "RcvbufErrors +{grown} in {:.1} s (IPv4 +{}, IPv6 +{}); {} since boot (/proc/net/snmp, snmp6)",
        elapsed.as_secs_f64(),
        after.v4.saturating_sub(before.v4),
        after.v6.saturating_sub(before.v6),
        after.total(),
    );
    if grown > 0 {
        return Finding {
            area: "udp",
            severity: Severity::Warn,
            summary: "UDP datagrams are being dropped because receive queues are full: some \
                      UDP service reads more slowly than its clients send"
                .into(),
            evidence,
            fix: Some(UDP_RCVBUF_FIX.into()),
        };
    }
    if after.total() > 0 {
        return Finding {
            area: "udp",
            severity: Severity::Info,
            summary: "UDP receive queues overflowed earlier, not while watched".into(),
            evidence,
            fix: Some(UDP_RCVBUF_FIX.into()),
        };
    }
    Finding {
        area: "udp",
        severity: Severity::Ok,
        summary: "no UDP datagram dropped for a full receive queue".into(),
        evidence,
        fix: None,
    }
}

/// Major faults per second above which a process is waiting on disk in page faults.
pub const MAJOR_FAULT_STORM_PER_SECOND: f64 = 50.0;
/// Minor faults per second above which mapping pages in is a cost worth fixing.
pub const MINOR_FAULT_STORM_PER_SECOND: f64 = 100_000.0;
/// A run-queue delay p99 above this (microseconds) means the CPUs are oversubscribed.
pub const SLOW_RUN_QUEUE_P99_US: u64 = 10_000;

/// How a watched process moved file data (`window` says which process and how long).
pub fn data_movement(window: &str, verdict: Option<&FileServingVerdict>) -> Finding {
    let Some(verdict) = verdict else {
        return Finding {
            area: "sendfile",
            severity: Severity::Info,
            summary: "no file data moved while watched".into(),
            evidence: window.to_owned(),
            fix: None,
        };
    };
    let per_syscall: Vec<String> = verdict
        .by_syscall
        .iter()
        .map(|(name, calls, bytes)| {
            format!("{name} {calls} calls {}", crate::report::bytes(*bytes))
        })
        .collect();
    Finding {
        area: "sendfile",
        severity: match verdict.movement {
            DataMovement::ZeroCopy => Severity::Ok,
            DataMovement::Mixed => Severity::Info,
            DataMovement::Copying => Severity::Warn,
        },
        summary: verdict.describe(),
        evidence: format!("{window}: {}", per_syscall.join(", ")),
        fix: (verdict.movement == DataMovement::Copying).then(|| {
            "serve files with sendfile (nginx `sendfile on`, ioserve --strategy \
             sendfile); TLS, gzip and user-space filters force the copy"
                .into()
        }),
    }
}

/// A watched process's page faults: `minor` and `major` over `seconds`.
pub fn page_faults(window: &str, minor: u64, major: u64, seconds: f64) -> Finding {
    let seconds = seconds.max(f64::MIN_POSITIVE);
    let (minor_rate, major_rate) = (minor as f64 / seconds, major as f64 / seconds);
    let evidence =
        format!("{window}: {minor} minor ({minor_rate:.0}/s), {major} major ({major_rate:.0}/s)");
    if major_rate > MAJOR_FAULT_STORM_PER_SECOND {
        Finding {
            area: "faults",
            severity: Severity::Warn,
            summary: "major-fault storm: the process waits on disk inside page faults \
                      (mmap'd file reads)"
                .into(),
            evidence,
            fix: Some(
                "read files with read()/sendfile, or prefetch mappings (MADV_SEQUENTIAL, \
                 MADV_WILLNEED, MAP_POPULATE); compare strategies with ioserve --strategy"
                    .into(),
            ),
        }
    } else if minor_rate > MINOR_FAULT_STORM_PER_SECOND {
        Finding {
            area: "faults",
            severity: Severity::Warn,
            summary: "minor-fault storm: mapping pages in costs CPU on every first touch".into(),
            evidence,
            fix: Some("populate mappings up front (MAP_POPULATE) or use huge pages".into()),
        }
    } else {
        Finding {
            area: "faults",
            severity: Severity::Ok,
            summary: "page faults are rare".into(),
            evidence,
            fix: None,
        }
    }
}

/// A watched process's `clock_gettime` syscalls per clock-id slot over `seconds`: the
/// vDSO-fallback rule of [`clock::is_fallback`].
pub fn clock_syscalls(window: &str, by_clock_id: &[u64], seconds: f64) -> Finding {
    let calls = clock::vdso_clock_syscalls(by_clock_id);
    let fallback = clock::is_fallback(calls, seconds);
    Finding {
        area: "clock-syscalls",
        severity: if fallback {
            Severity::Warn
        } else {
            Severity::Ok
        },
        summary: if fallback {
            "the process reads wall/monotonic clocks through real syscalls (vDSO fallback \
             signature)"
                .into()
        } else {
            "the process's clock reads stay in the vDSO".into()
        },
        evidence: format!(
            "{window}: {calls} clock_gettime syscalls on wall/monotonic clocks ({:.0}/s)",
            calls as f64 / seconds.max(f64::MIN_POSITIVE)
        ),
        fix: fallback.then(|| {
            "see `probe clock`: fix the clocksource, or the runtime/sandbox that bypasses the vDSO"
                .into()
        }),
    }
}

/// A watched process's run-queue delays.
pub fn run_queue(window: &str, delays: &RunqSnapshot) -> Finding {
    let p99 = delays.histogram.quantile_upper_bound(0.99);
    let slow = p99.is_some_and(|us| us > SLOW_RUN_QUEUE_P99_US);
    Finding {
        area: "runq",
        severity: if slow { Severity::Warn } else { Severity::Ok },
        summary: if slow {
            "threads wait over 10 ms for a CPU: the CPUs are oversubscribed".into()
        } else {
            "threads get a CPU promptly".into()
        },
        evidence: format!(
            "{window}: {} wakeups, mean {:.1} us, p99 < {} us",
            delays.samples,
            delays.mean_us(),
            p99.map_or("-".into(), |v| v.to_string())
        ),
        fix: slow.then(|| {
            "fewer runnable threads than CPUs (worker count, GOMAXPROCS, thread pools), or \
             pin the service away from noisy neighbours"
                .into()
        }),
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    #[test]
    fn fault_storms_by_rate() {
        let w = "pid 1, 2.0 s";
        assert_eq!(page_faults(w, 10, 0, 2.0).severity, Severity::Ok);
        let major = page_faults(w, 0, 101, 2.0);
        assert!(major.severity == Severity::Warn && major.summary.starts_with("major-fault storm"));
        let minor = page_faults(w, 200_001, 0, 2.0);
        assert!(
            minor.summary.starts_with("minor-fault storm"),
            "{}",
            minor.summary
        );
        assert!(
            page_faults(w, 5, 5, 0.0).evidence.contains("5 minor"),
            "no division by zero"
        );
    }

    #[test]
    fn clock_syscalls_follow_the_one_fallback_rule() {
        let mut slots = vec![0u64; 16];
        slots[libc::CLOCK_REALTIME as usize] = 300;
        let finding = clock_syscalls("pid 1, 2.0 s", &slots, 2.0);
        assert_eq!(finding.severity, Severity::Warn);
        assert!(
            finding.evidence.contains("300 clock_gettime syscalls"),
            "{}",
            finding.evidence
        );
        slots[libc::CLOCK_REALTIME as usize] = 0;
        slots[libc::CLOCK_THREAD_CPUTIME_ID as usize] = 1_000_000;
        assert_eq!(clock_syscalls("w", &slots, 2.0).severity, Severity::Ok);
    }

    #[test]
    fn nothing_moved_is_information() {
        let finding = data_movement("pid 1", None);
        assert_eq!(
            (finding.area, finding.severity),
            ("sendfile", Severity::Info)
        );
        assert_eq!(
            run_queue("w", &RunqSnapshot::default()).severity,
            Severity::Ok
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_receive_buffer_errors() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "proc/net/snmp",
            "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
             Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
             Udp: 179 1 994 1175 994 0\n\
             UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
             UdpLite: 0 0 0 0 7 0\n",
        );
        write(
            root.path(),
            "proc/net/snmp6",
            "Udp6InDatagrams 5\nUdp6RcvbufErrors                \t6\n",
        );
        let counters = UdpCounters::read(root.path());
        assert_eq!(counters, UdpCounters { v4: 994, v6: 6 });
        let second = std::time::Duration::from_secs(1);

        let growing = udp_receive_buffers(&UdpCounters { v4: 990, v6: 6 }, &counters, second);
        assert_eq!(growing.severity, Severity::Warn);
        assert!(
            growing
                .evidence
                .starts_with("RcvbufErrors +4 in 1.0 s (IPv4 +4, IPv6 +0)"),
            "{growing:?}"
        );
        assert!(growing.fix.unwrap().contains("SO_REUSEPORT"));

        let past = udp_receive_buffers(&counters, &counters, second);
        assert_eq!(past.severity, Severity::Info);
        let clean = udp_receive_buffers(&UdpCounters::default(), &UdpCounters::default(), second);
        assert_eq!(clean.severity, Severity::Ok);
        // No files (a snapshot without /proc/net): zeros, not an error.
        assert_eq!(
            UdpCounters::read(&root.path().join("absent")),
            UdpCounters::default()
        );
    }

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn governors() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(cpufreq(root.path()).severity, Severity::Info);
        write(
            root.path(),
            "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            "performance\n",
        );
        assert_eq!(cpufreq(root.path()).severity, Severity::Ok);
        write(
            root.path(),
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "powersave\n",
        );
        let finding = cpufreq(root.path());
        assert_eq!(finding.severity, Severity::Warn);
        assert!(finding.evidence.contains("2 CPUs") && finding.evidence.contains("powersave"));
        assert!(finding.fix.unwrap().contains("cpupower"));
    }

    #[test]
    fn numa_on_the_fixtures() {
        let fixture = testdata::numa_snapshot("sysfs-4node");
        let root = tempfile::tempdir().unwrap();
        // No numa_balancing file in the fixture: balancing "not available".
        let finding = numa(&fixture);
        assert!(
            finding.evidence.starts_with("4 online node(s)"),
            "{finding:?}"
        );
        assert_eq!(finding.severity, Severity::Info);

        // The fixture's nodes plus balancing on.
        copy_dir(
            &fixture.join("sys/devices/system/node"),
            &root.path().join("sys/devices/system/node"),
        );
        write(root.path(), "proc/sys/kernel/numa_balancing", "1\n");
        let finding = numa(root.path());
        assert_eq!(finding.severity, Severity::Warn, "{finding:?}");
        assert!(finding.fix.unwrap().contains("numa_balancing=0"));

        // A single node is fine whatever the setting.
        let single = tempfile::tempdir().unwrap();
        write(single.path(), "sys/devices/system/node/online", "0\n");
        write(single.path(), "sys/devices/system/node/possible", "0\n");
        write(single.path(), "proc/sys/kernel/numa_balancing", "1\n");
        assert_eq!(numa(single.path()).severity, Severity::Ok);
    }

    fn copy_dir(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    #[test]
    fn huge_pages() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(transparent_huge_pages(root.path()).severity, Severity::Info);
        let dir = "sys/kernel/mm/transparent_hugepage";
        write(
            root.path(),
            &format!("{dir}/enabled"),
            "always [madvise] never\n",
        );
        write(
            root.path(),
            &format!("{dir}/defrag"),
            "always defer defer+madvise [madvise] never\n",
        );
        let finding = transparent_huge_pages(root.path());
        assert_eq!(finding.severity, Severity::Ok);
        assert_eq!(finding.evidence, "enabled [madvise], defrag [madvise]");
        write(
            root.path(),
            &format!("{dir}/defrag"),
            "[always] defer defer+madvise madvise never\n",
        );
        assert_eq!(transparent_huge_pages(root.path()).severity, Severity::Warn);
        write(
            root.path(),
            &format!("{dir}/enabled"),
            "always madvise [never]\n",
        );
        assert_eq!(transparent_huge_pages(root.path()).severity, Severity::Ok);
    }
}

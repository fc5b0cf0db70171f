//! The checks the seeds made by hand, as findings with evidence and a fix. This
//! module holds the system checks, which read only /proc and /sys files (under a
//! root directory, so that they run on snapshots too); `probe doctor` adds the
//! measured ones (clock syscalls, sendfile verdict, faults, run-queue delay).

use std::fs;
use std::path::Path;

use serde::Serialize;

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
    let nodes = match numa::Topology::read(root) {
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
                "bind each worker to a node (numactl --cpunodebind=N --membind=N, or ioserve's \
                 per-node workers) and turn balancing off: sysctl kernel.numa_balancing=0"
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

#[cfg(test)]
mod tests {
    use super::*;

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

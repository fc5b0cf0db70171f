//! The standard process metrics of Prometheus clients (`process_cpu_seconds_total`,
//! memory, descriptors, start time), read from `/proc/self` at each scrape. A metric
//! whose source cannot be read is left out of that scrape rather than reported as 0.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::exposition;

/// Clock ticks per second of `/proc/PID/stat`'s times (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// Register it once per registry: `registry.register_collector(Box::new(ProcessCollector))`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessCollector;

/// One reading of this process.
#[derive(Clone, Debug, Default, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
    start_time_seconds: Option<f64>,
}

impl Reading {
    /// This process, now.
    fn now() -> Reading {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let system = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let mut reading = Reading::parse(&status, &stat, &system);
        // The directory's own descriptor is open while it is read.
        reading.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|dir| dir.count().saturating_sub(1) as u64);
        reading.max_fds = max_fds();
        reading
    }

    /// From the texts of `/proc/self/status`, `/proc/self/stat` and `/proc/stat`.
    fn parse(status: &str, stat: &str, system: &str) -> Reading {
        let kib = |key: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        };
        // After the ")" that ends the command name: utime and stime are the 12th and
        // 13th fields, starttime the 20th, in clock ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        let boot_time = system
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok());
        Reading {
            cpu_seconds: ticks(11).zip(ticks(12)).map(|(u, s)| (u + s) / USER_HZ),
            resident_bytes: kib("VmRSS:").map(|k| k * 1024),
            virtual_bytes: kib("VmSize:").map(|k| k * 1024),
            open_fds: None,
            max_fds: None,
            start_time_seconds: ticks(19).zip(boot_time).map(|(t, boot)| boot + t / USER_HZ),
        }
    }
}

/// The soft limit on open descriptors (RLIMIT_NOFILE), None when unlimited.
fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed struct.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let reading = Reading::now();
        let out = &mut encoder;
        if let Some(seconds) = reading.cpu_seconds {
            exposition::counter(
                out,
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                seconds,
            )?;
        }
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                reading.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                reading.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                reading.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                reading.max_fds,
            ),
        ] {
            if let Some(value) = value {
                exposition::gauge(out, name, help, value)?;
            }
        }
        if let Some(seconds) = reading.start_time_seconds {
            exposition::gauge(
                out,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                seconds,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn fields_are_read_from_proc_texts() {
        let status = "Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        let stat = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 1000 0 0";
        let reading = Reading::parse(status, stat, "cpu 1 2\nbtime 1700000000\n");
        assert_eq!(reading.cpu_seconds, Some(3.0));
        assert_eq!(reading.resident_bytes, Some(1024 * 1024));
        assert_eq!(reading.virtual_bytes, Some(2048 * 1024));
        assert_eq!(reading.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(Reading::parse("", "", ""), Reading::default());
    }

    #[test]
    fn this_process_is_exposed_and_promtool_accepts_it() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let text = exposition::render(&registry).unwrap();
        for family in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(family), "{family} missing:\n{text}");
        }
        testdata::assert_promtool_accepts(&text);
    }
}

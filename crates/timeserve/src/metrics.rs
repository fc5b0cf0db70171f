//! Counters kept per worker (each on its own cache lines, so workers never contend)
//! and rendered in the Prometheus text format when scraped.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::packet::DropReason;

/// One worker's counters.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    requests: [AtomicU64; 4],
    responses: AtomicU64,
    dropped: [AtomicU64; DropReason::ALL.len()],
    rate_limited: AtomicU64,
    kisses: AtomicU64,
    send_errors: AtomicU64,
    kernel_drops: AtomicU64,
}

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    shards: Box<[Shard]>,
}

/// A worker's handle on its own counters.
#[derive(Clone, Copy, Debug)]
pub struct WorkerMetrics<'a> {
    shard: &'a Shard,
}

impl WorkerMetrics<'_> {
    /// Counts a client request of `version` (1-4).
    pub fn request(&self, version: u8) {
        if let Some(counter) = self
            .shard
            .requests
            .get(usize::from(version).wrapping_sub(1))
        {
            counter.fetch_add(1, Relaxed);
        }
    }

    /// Counts replies handed to the kernel.
    pub fn responses(&self, count: usize) {
        self.shard.responses.fetch_add(count as u64, Relaxed);
    }

    /// Counts a datagram dropped unanswered.
    pub fn dropped(&self, reason: DropReason) {
        self.shard.dropped[reason.index()].fetch_add(1, Relaxed);
    }

    /// Counts a request over its client's rate; `kissed` when a KoD answered it.
    pub fn rate_limited(&self, kissed: bool) {
        self.shard.rate_limited.fetch_add(1, Relaxed);
        if kissed {
            self.shard.kisses.fetch_add(1, Relaxed);
        }
    }

    /// Counts replies the kernel refused.
    pub fn send_errors(&self, count: usize) {
        self.shard.send_errors.fetch_add(count as u64, Relaxed);
    }

    /// Records the socket's SO_RXQ_OVFL counter (datagrams the kernel dropped because
    /// the receive buffer was full).
    pub fn kernel_drops(&self, total: u32) {
        self.shard.kernel_drops.store(u64::from(total), Relaxed);
    }
}

/// A snapshot of the sums over every worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Requests by version (index 0 is version 1).
    pub requests: [u64; 4],
    /// Replies sent (KoD included).
    pub responses: u64,
    /// Dropped datagrams by reason (in [`DropReason::ALL`]'s order).
    pub dropped: [u64; DropReason::ALL.len()],
    /// Requests over their client's rate.
    pub rate_limited: u64,
    /// Kiss-o'-Death RATE replies.
    pub kisses: u64,
    /// Replies the kernel refused.
    pub send_errors: u64,
    /// Datagrams the kernel dropped for full receive buffers, per worker socket.
    pub kernel_drops: Vec<u64>,
}

impl Metrics {
    /// Counters for `workers` workers.
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
        }
    }

    /// Worker `index`'s counters.
    pub fn worker(&self, index: usize) -> WorkerMetrics<'_> {
        WorkerMetrics {
            shard: &self.shards[index % self.shards.len()],
        }
    }

    /// The sums over every worker now.
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for shard in self.shards.iter() {
            for (sum, counter) in totals.requests.iter_mut().zip(&shard.requests) {
                *sum += counter.load(Relaxed);
            }
            for (sum, counter) in totals.dropped.iter_mut().zip(&shard.dropped) {
                *sum += counter.load(Relaxed);
            }
            totals.responses += shard.responses.load(Relaxed);
            totals.rate_limited += shard.rate_limited.load(Relaxed);
            totals.kisses += shard.kisses.load(Relaxed);
            totals.send_errors += shard.send_errors.load(Relaxed);
            totals.kernel_drops.push(shard.kernel_drops.load(Relaxed));
        }
        totals
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4).
    /// `synchronised` is what the replies currently say about the clock.
    pub fn render(&self, synchronised: bool) -> String {
        let totals = self.totals();
        let mut out = String::with_capacity(2048);
        labelled(
            &mut out,
            ("timeserve_requests_total", "counter"),
            "Client requests received, by NTP version.",
            "version",
            totals
                .requests
                .iter()
                .enumerate()
                .map(|(i, count)| (i + 1, *count)),
        );
        single(
            &mut out,
            ("timeserve_responses_total", "counter"),
            "Replies sent, Kiss-o'-Death included.",
            totals.responses,
        );
        labelled(
            &mut out,
            ("timeserve_dropped_total", "counter"),
            "Datagrams dropped unanswered, by reason.",
            "reason",
            DropReason::ALL.iter().zip(totals.dropped),
        );
        single(
            &mut out,
            ("timeserve_rate_limited_total", "counter"),
            "Requests over their client's rate limit.",
            totals.rate_limited,
        );
        single(
            &mut out,
            ("timeserve_kiss_of_death_total", "counter"),
            "Kiss-o'-Death RATE replies sent.",
            totals.kisses,
        );
        single(
            &mut out,
            ("timeserve_send_errors_total", "counter"),
            "Replies the kernel refused to send.",
            totals.send_errors,
        );
        labelled(
            &mut out,
            ("timeserve_socket_receive_drops_total", "counter"),
            "Datagrams the kernel dropped because a socket's receive buffer was full (SO_RXQ_OVFL), by worker socket.",
            "worker",
            totals.kernel_drops.iter().copied().enumerate(),
        );
        single(
            &mut out,
            ("timeserve_clock_synchronized", "gauge"),
            "1 when replies say the clock is synchronised (LI != 3).",
            u64::from(synchronised),
        );
        out
    }
}

/// A family (name and type) with one unlabelled sample.
fn single(out: &mut String, (name, kind): (&str, &str), help: &str, value: u64) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// A family (name and type) with a sample per value of `label`.
fn labelled<L: std::fmt::Display>(
    out: &mut String,
    (name, kind): (&str, &str),
    help: &str,
    label: &str,
    samples: impl Iterator<Item = (L, u64)>,
) {
    family(out, name, kind, help);
    for (value, count) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_add_up() {
        let metrics = Metrics::new(2);
        metrics.worker(0).request(4);
        metrics.worker(1).request(4);
        metrics.worker(1).request(1);
        metrics.worker(1).request(9); // not a version: not counted
        metrics.worker(0).dropped(DropReason::Mode);
        metrics.worker(0).rate_limited(true);
        metrics.worker(1).rate_limited(false);
        metrics.worker(1).kernel_drops(7);
        metrics.worker(0).responses(3);
        let totals = metrics.totals();
        assert_eq!(totals.requests, [1, 0, 0, 2]);
        assert_eq!(totals.dropped[DropReason::Mode.index()], 1);
        assert_eq!(
            (totals.rate_limited, totals.kisses, totals.responses),
            (2, 1, 3)
        );
        assert_eq!(totals.kernel_drops, vec![0, 7]);
        let text = metrics.render(false);
        assert!(
            text.contains("timeserve_requests_total{version=\"4\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("timeserve_dropped_total{reason=\"mode\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("timeserve_socket_receive_drops_total{worker=\"1\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("timeserve_clock_synchronized 0\n"), "{text}");
    }
}

//! Counters kept per worker (each on its own cache lines, so workers never contend),
//! summed when scraped by a [`Collector`] of the toolkit's metrics stack
//! (`ioserve-exporter`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use ioserve_exporter::exposition;
use ioserve_exporter::prometheus_client;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::packet::DropReason;
use crate::sync::KernelState;

/// How an NTS key exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeOutcome {
    /// Keys agreed and cookies handed out.
    Served,
    /// The client offered no protocol or algorithm this server has: told so.
    Unsupported,
    /// Answered with the Error record Bad Request.
    BadRequest,
    /// Answered with the Error record Unrecognized Critical Record.
    UnrecognizedCriticalRecord,
    /// Answered with the Error record Internal Server Error.
    InternalServerError,
    /// The TLS handshake failed (or the client did not offer ALPN `ntske/1`).
    Handshake,
    /// The connection ended or failed (reading the request, or writing the answer)
    /// before the exchange did.
    Truncated,
    /// The exchange took longer than the timeout.
    Timeout,
    /// Closed unanswered: every slot was taken.
    Busy,
}

impl KeOutcome {
    /// Every outcome, in the order metrics list them.
    pub const ALL: [KeOutcome; 9] = [
        KeOutcome::Served,
        KeOutcome::Unsupported,
        KeOutcome::BadRequest,
        KeOutcome::UnrecognizedCriticalRecord,
        KeOutcome::InternalServerError,
        KeOutcome::Handshake,
        KeOutcome::Truncated,
        KeOutcome::Timeout,
        KeOutcome::Busy,
    ];

    /// The outcome's name in metrics.
    pub fn name(self) -> &'static str {
        match self {
            KeOutcome::Served => "served",
            KeOutcome::Unsupported => "unsupported",
            KeOutcome::BadRequest => "bad_request",
            KeOutcome::UnrecognizedCriticalRecord => "unrecognized_critical_record",
            KeOutcome::InternalServerError => "internal_server_error",
            KeOutcome::Handshake => "handshake_failed",
            KeOutcome::Truncated => "truncated",
            KeOutcome::Timeout => "timeout",
            KeOutcome::Busy => "busy",
        }
    }

    fn index(self) -> usize {
        KeOutcome::ALL
            .iter()
            .position(|&o| o == self)
            .expect("every outcome is listed")
    }
}

/// Why an NTS request got a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NtsNak {
    /// Its cookie did not open (another server's, expired, altered).
    Cookie = 0,
    /// Its authenticator did not verify.
    Authenticator = 1,
}

impl NtsNak {
    const ALL: [NtsNak; 2] = [NtsNak::Cookie, NtsNak::Authenticator];

    fn name(self) -> &'static str {
        match self {
            NtsNak::Cookie => "cookie",
            NtsNak::Authenticator => "authenticator",
        }
    }
}

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
    nts_authenticated: AtomicU64,
    nts_naks: [AtomicU64; 2],
}

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    shards: Box<[Shard]>,
    key_exchanges: [AtomicU64; KeOutcome::ALL.len()],
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

    /// Counts an NTS request answered with an authenticated reply.
    pub fn nts_authenticated(&self) {
        self.shard.nts_authenticated.fetch_add(1, Relaxed);
    }

    /// Counts an NTS request answered with a NAK.
    pub fn nts_nak(&self, reason: NtsNak) {
        self.shard.nts_naks[reason as usize].fetch_add(1, Relaxed);
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
    /// NTS requests answered with an authenticated reply.
    pub nts_authenticated: u64,
    /// NTS NAKs by reason (cookie, authenticator).
    pub nts_naks: [u64; 2],
    /// Key exchanges by outcome (in [`KeOutcome::ALL`]'s order).
    pub key_exchanges: [u64; KeOutcome::ALL.len()],
}

impl Metrics {
    /// Counters for `workers` workers.
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
            key_exchanges: Default::default(),
        }
    }

    /// Counts a key exchange that ended with `outcome`.
    pub fn key_exchange(&self, outcome: KeOutcome) {
        self.key_exchanges[outcome.index()].fetch_add(1, Relaxed);
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
            totals.nts_authenticated += shard.nts_authenticated.load(Relaxed);
            for (sum, counter) in totals.nts_naks.iter_mut().zip(&shard.nts_naks) {
                *sum += counter.load(Relaxed);
            }
        }
        for (sum, counter) in totals.key_exchanges.iter_mut().zip(&self.key_exchanges) {
            *sum = counter.load(Relaxed);
        }
        totals
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4).
    /// `synchronised` is what the replies currently say about the clock.
    pub fn render(&self, synchronised: bool) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Snapshot {
            totals: self.totals(),
            synchronised,
        }));
        // The collector below never fails and a String takes every write.
        exposition::render(&registry).expect("the exposition is written to a String")
    }
}

/// The collector a scrape reads: sums the workers' counters and asks the kernel
/// whether the clock is synchronised, when the exporter writes the registry.
#[derive(Debug)]
pub struct Collector {
    metrics: Arc<Metrics>,
    declared_synchronised: bool,
}

impl Collector {
    /// Reads `metrics`; `declared_synchronised` is true when the operator declared a
    /// stratum (the replies then say synchronised whatever the kernel says).
    pub fn new(metrics: Arc<Metrics>, declared_synchronised: bool) -> Collector {
        Collector {
            metrics,
            declared_synchronised,
        }
    }
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let synchronised =
            self.declared_synchronised || KernelState::read().is_ok_and(|k| k.synchronised);
        Snapshot {
            totals: self.metrics.totals(),
            synchronised,
        }
        .encode(encoder)
    }
}

/// The sums at one moment and the clock state the replies carry.
#[derive(Debug)]
struct Snapshot {
    totals: Totals,
    synchronised: bool,
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let totals = &self.totals;
        let out = &mut encoder;
        exposition::counter_family(
            out,
            "timeserve_requests",
            "Client requests received, by NTP version.",
            (1u8..)
                .zip(totals.requests)
                .map(|(v, n)| ([("version", v)], n)),
        )?;
        exposition::counter(
            out,
            "timeserve_responses",
            "Replies sent, Kiss-o'-Death included.",
            totals.responses,
        )?;
        exposition::counter_family(
            out,
            "timeserve_dropped",
            "Datagrams dropped unanswered, by reason.",
            DropReason::ALL
                .iter()
                .zip(totals.dropped)
                .map(|(reason, n)| ([("reason", reason.name())], n)),
        )?;
        exposition::counter(
            out,
            "timeserve_rate_limited",
            "Requests over their client's rate limit.",
            totals.rate_limited,
        )?;
        exposition::counter(
            out,
            "timeserve_kiss_of_death",
            "Kiss-o'-Death RATE replies sent.",
            totals.kisses,
        )?;
        exposition::counter(
            out,
            "timeserve_send_errors",
            "Replies the kernel refused to send.",
            totals.send_errors,
        )?;
        exposition::counter_family(
            out,
            "timeserve_socket_receive_drops",
            "Datagrams the kernel dropped because a socket's receive buffer was full (SO_RXQ_OVFL), by worker socket.",
            totals
                .kernel_drops
                .iter()
                .enumerate()
                .map(|(worker, &n)| ([("worker", worker)], n)),
        )?;
        exposition::counter(
            out,
            "timeserve_nts_authenticated",
            "NTS requests answered with an authenticated reply and fresh cookies.",
            totals.nts_authenticated,
        )?;
        exposition::counter_family(
            out,
            "timeserve_nts_naks",
            "NTS requests answered with an NTS NAK (Kiss-o'-Death NTSN), by reason.",
            NtsNak::ALL
                .iter()
                .zip(totals.nts_naks)
                .map(|(reason, n)| ([("reason", reason.name())], n)),
        )?;
        exposition::counter_family(
            out,
            "timeserve_nts_key_exchanges",
            "NTS key exchanges (NTS-KE over TLS) by outcome.",
            KeOutcome::ALL
                .iter()
                .zip(totals.key_exchanges)
                .map(|(outcome, n)| ([("outcome", outcome.name())], n)),
        )?;
        exposition::gauge(
            out,
            "timeserve_clock_synchronized",
            "1 when replies say the clock is synchronised (LI != 3).",
            i64::from(self.synchronised),
        )
    }
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

    #[test]
    fn promtool_accepts_the_exposition() {
        let metrics = Metrics::new(3);
        metrics.worker(2).request(3);
        metrics.worker(1).dropped(DropReason::BadLength);
        testdata::assert_promtool_accepts(&metrics.render(true));
    }
}

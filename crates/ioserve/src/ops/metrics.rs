//! Prometheus metrics: counters kept per worker (no shared cache line on the hot path),
//! summed when scraped by a [`Collector`] of the toolkit's metrics stack
//! (`ioserve-exporter`), which serves them on `--metrics-listen`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use ioserve_exporter::exposition;
use ioserve_exporter::process::ProcessCollector;
use ioserve_exporter::prometheus_client::collector::Collector;
use ioserve_exporter::prometheus_client::encoding::DescriptorEncoder;
use ioserve_exporter::prometheus_client::registry::Registry;

use crate::acme::status::AcmeStatus;
use crate::http::auth::Failure;
use crate::http::request::Version;
use crate::ops::tls_outcome::{HandshakeFailure, TlsCipher, TlsMode, TlsVersion};

/// Upper bounds of the request-duration histogram, in seconds: from a cached small
/// file to a slow client's large download.
const DURATION_BOUNDS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The statuses counted by code; any other lands in `other`.
const STATUSES: [u16; 16] = [
    200, 206, 301, 304, 400, 403, 404, 405, 408, 412, 416, 431, 500, 503, 505, 401,
];

/// The protocols requests are counted by, as the access log names them.
const PROTOCOLS: [Version; 4] = [
    Version::Http10,
    Version::Http11,
    Version::Http2,
    Version::Http3,
];

/// One worker's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    requests: [AtomicU64; STATUSES.len() + 1],
    sent_bytes: AtomicU64,
    connections_total: AtomicU64,
    connections_open: AtomicI64,
    connections_parked: AtomicI64,
    downloads_in_flight: AtomicI64,
    panics: AtomicU64,
    idle_closed: AtomicU64,
    refused: AtomicU64,
    offloaded_opens: AtomicU64,
    cold_windows: AtomicU64,
    kept_bodies: AtomicU64,
    file_read_errors: AtomicU64,
    /// Requests refused with 401, by [`Failure::ALL`] order.
    auth_failures: [AtomicU64; Failure::ALL.len()],
    /// Completed TLS handshakes, by [`TlsMode::ALL`], [`TlsVersion::ALL`] and
    /// [`TlsCipher::slot`] order.
    tls_connections: [[[AtomicU64; TlsCipher::COUNT]; TlsVersion::ALL.len()]; TlsMode::ALL.len()],
    /// Failed TLS handshakes, by [`HandshakeFailure::ALL`] order.
    tls_handshake_failures: [AtomicU64; HandshakeFailure::ALL.len()],
    refused_per_ip: AtomicU64,
    /// Requests decided, by [`PROTOCOLS`] order.
    protocols: [AtomicU64; PROTOCOLS.len()],
    /// QUIC connection attempts answered with a Retry (address validation).
    quic_retries: AtomicU64,
    paced_responses: AtomicU64,
    paced_micros: AtomicU64,
    /// Requests per duration bucket (the last one is +Inf), not cumulative.
    durations: [AtomicU64; DURATION_BOUNDS.len() + 1],
    duration_micros: AtomicU64,
}

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    strategy: &'static str,
    shards: Box<[Shard]>,
    /// Whether the server hands TLS connections to the kernel (`--ktls`): the `ktls`
    /// mode's samples are listed at zero then, else only once counted.
    ktls: bool,
    /// The certificate's expiry and the orders, with `--acme-domain`.
    acme: Option<Arc<AcmeStatus>>,
}

impl Metrics {
    /// Metrics for `workers` workers of a server using `strategy`.
    pub fn new(workers: usize, strategy: &'static str) -> Metrics {
        Metrics {
            strategy,
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
            ktls: false,
            acme: None,
        }
    }

    /// The same, for a server that hands TLS connections to the kernel when `ktls`.
    pub fn with_ktls(self, ktls: bool) -> Metrics {
        Metrics { ktls, ..self }
    }

    /// The same, reporting ACME's certificate and orders from `acme`.
    pub fn with_acme(self, acme: Option<Arc<AcmeStatus>>) -> Metrics {
        Metrics { acme, ..self }
    }

    fn shard(&self, worker: usize) -> &Shard {
        &self.shards[worker % self.shards.len()]
    }

    /// Counts one answered request and the bytes written for it.
    pub fn request(&self, worker: usize, status: u16, bytes: u64) {
        let shard = self.shard(worker);
        let slot = STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(STATUSES.len());
        shard.requests[slot].fetch_add(1, Relaxed);
        shard.sent_bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts a connection opening (`+1`) or closing (`-1`).
    pub fn connection(&self, worker: usize, delta: i64) {
        let shard = self.shard(worker);
        if delta > 0 {
            shard.connections_total.fetch_add(1, Relaxed);
        }
        shard.connections_open.fetch_add(delta, Relaxed);
    }

    /// Counts an idle connection parked without a task (`+1`) or leaving the lot
    /// (`-1`).
    pub fn parked(&self, worker: usize, delta: i64) {
        self.shard(worker)
            .connections_parked
            .fetch_add(delta, Relaxed);
    }

    /// Counts a file body starting (`+1`) or ending (`-1`).
    pub fn download(&self, worker: usize, delta: i64) {
        self.shard(worker)
            .downloads_in_flight
            .fetch_add(delta, Relaxed);
    }

    /// Counts a connection task that panicked (and was ended alone).
    pub fn panic(&self, worker: usize) {
        self.shard(worker).panics.fetch_add(1, Relaxed);
    }

    /// Counts a connection refused with 503 at the connection limit.
    pub fn refused(&self, worker: usize) {
        self.shard(worker).refused.fetch_add(1, Relaxed);
    }

    /// Counts a request whose files were opened on the blocking pool (a path the
    /// open-file cache did not hold).
    pub fn offloaded_open(&self, worker: usize) {
        self.shard(worker).offloaded_opens.fetch_add(1, Relaxed);
    }

    /// Counts windows of file data that were not in the page cache and were read on
    /// the blocking pool.
    pub fn cold_windows(&self, worker: usize, windows: u32) {
        if windows > 0 {
            self.shard(worker)
                .cold_windows
                .fetch_add(u64::from(windows), Relaxed);
        }
    }

    /// Counts bodies (and multipart parts) written from small files' bytes kept in
    /// memory (`--small-file-cache`).
    pub fn kept_bodies(&self, worker: usize, bodies: u32) {
        if bodies > 0 {
            self.shard(worker)
                .kept_bodies
                .fetch_add(u64::from(bodies), Relaxed);
        }
    }

    /// Counts a response ended short by a failed read of its file.
    pub fn file_read_error(&self, worker: usize) {
        self.shard(worker).file_read_errors.fetch_add(1, Relaxed);
    }

    /// Records how long a request took, from its complete head to its last byte.
    pub fn duration(&self, worker: usize, took: std::time::Duration) {
        let shard = self.shard(worker);
        let seconds = took.as_secs_f64();
        let bucket = DURATION_BOUNDS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(DURATION_BOUNDS.len());
        shard.durations[bucket].fetch_add(1, Relaxed);
        shard
            .duration_micros
            .fetch_add(took.as_micros() as u64, Relaxed);
    }

    /// Counts a connection refused with 503 at `--max-conns-per-ip`.
    pub fn refused_per_ip(&self, worker: usize) {
        self.shard(worker).refused_per_ip.fetch_add(1, Relaxed);
    }

    /// Counts a response that waited `waited` for `--limit-rate` (none if it did not).
    pub fn paced(&self, worker: usize, waited: std::time::Duration) {
        if !waited.is_zero() {
            let shard = self.shard(worker);
            shard.paced_responses.fetch_add(1, Relaxed);
            shard
                .paced_micros
                .fetch_add(waited.as_micros() as u64, Relaxed);
        }
    }

    /// Counts an idle keep-alive connection closed to admit a new client.
    pub fn idle_closed(&self, worker: usize) {
        self.shard(worker).idle_closed.fetch_add(1, Relaxed);
    }

    /// Counts a request decided over `version`.
    pub fn protocol_request(&self, worker: usize, version: Version) {
        let slot = PROTOCOLS.iter().position(|&v| v == version).unwrap_or(0);
        self.shard(worker).protocols[slot].fetch_add(1, Relaxed);
    }

    /// Counts a QUIC connection attempt answered with a Retry.
    pub fn quic_retry(&self, worker: usize) {
        self.shard(worker).quic_retries.fetch_add(1, Relaxed);
    }

    /// Counts a request refused by Basic authentication, by reason.
    pub fn auth_failure(&self, worker: usize, failure: Failure) {
        let slot = Failure::ALL
            .iter()
            .position(|&f| f == failure)
            .unwrap_or_default();
        self.shard(worker).auth_failures[slot].fetch_add(1, Relaxed);
    }

    /// Counts a completed TLS handshake.
    pub fn tls_connection(
        &self,
        worker: usize,
        mode: TlsMode,
        version: TlsVersion,
        cipher: TlsCipher,
    ) {
        let mode = TlsMode::ALL
            .iter()
            .position(|&m| m == mode)
            .unwrap_or_default();
        let version = TlsVersion::ALL
            .iter()
            .position(|&v| v == version)
            .unwrap_or_default();
        self.shard(worker).tls_connections[mode][version][cipher.slot()].fetch_add(1, Relaxed);
    }

    /// Counts a failed TLS handshake.
    pub fn tls_handshake_failure(&self, worker: usize, failure: HandshakeFailure) {
        let slot = HandshakeFailure::ALL
            .iter()
            .position(|&f| f == failure)
            .unwrap_or_default();
        self.shard(worker).tls_handshake_failures[slot].fetch_add(1, Relaxed);
    }

    /// A counter summed over the worker shards.
    fn sum(&self, field: fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| field(s).load(Relaxed)).sum()
    }

    /// A gauge summed over the worker shards (each may be negative alone).
    fn sum_signed(&self, field: fn(&Shard) -> &AtomicI64) -> i64 {
        self.shards.iter().map(|s| field(s).load(Relaxed)).sum()
    }
}

/// A registry of these metrics and the standard process metrics, for the exporter's
/// [`MetricsServer`](ioserve_exporter::server::MetricsServer).
pub fn registry(metrics: &Arc<Metrics>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(MetricsCollector(Arc::clone(metrics))));
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// Reads the per-worker counters at scrape time and sums them.
#[derive(Debug)]
struct MetricsCollector(Arc<Metrics>);

impl Collector for MetricsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let metrics = &*self.0;
        let out = &mut encoder;
        exposition::counter_family(
            out,
            "ioserve_requests",
            "Requests answered, by status code.",
            (0..=STATUSES.len()).map(|slot| {
                let count: u64 = metrics
                    .shards
                    .iter()
                    .map(|s| s.requests[slot].load(Relaxed))
                    .sum();
                let label = STATUSES
                    .get(slot)
                    .map_or_else(|| "other".to_string(), u16::to_string);
                ([("status", label)], count)
            }),
        )?;
        exposition::counter_family(
            out,
            "ioserve_sent_bytes",
            "Bytes written to clients (heads and bodies), by IO strategy.",
            [(
                [("strategy", metrics.strategy)],
                metrics.sum(|s| &s.sent_bytes),
            )],
        )?;
        exposition::counter(
            out,
            "ioserve_access_log_lines_lost",
            "Access log lines its file could not take (a full disk).",
            crate::ops::log_file::lines_lost(),
        )?;
        exposition::counter(
            out,
            "ioserve_connections",
            "Connections accepted.",
            metrics.sum(|s| &s.connections_total),
        )?;
        exposition::gauge(
            out,
            "ioserve_connections_open",
            "Connections open now.",
            metrics.sum_signed(|s| &s.connections_open),
        )?;
        exposition::gauge(
            out,
            "ioserve_connections_parked",
            "Idle keep-alive connections held without a task (in epoll) now.",
            metrics.sum_signed(|s| &s.connections_parked),
        )?;
        exposition::gauge(
            out,
            "ioserve_downloads_in_flight",
            "File bodies being sent now.",
            metrics.sum_signed(|s| &s.downloads_in_flight),
        )?;
        for (name, help, value) in [
            (
                "ioserve_connection_panics",
                "Connection tasks ended by a panic (a bug: the log has it).",
                metrics.sum(|s| &s.panics),
            ),
            (
                "ioserve_idle_connections_closed",
                "Idle keep-alive connections closed to admit a new client at --max-connections.",
                metrics.sum(|s| &s.idle_closed),
            ),
            (
                "ioserve_connections_refused",
                "Connections answered 503 at --max-connections.",
                metrics.sum(|s| &s.refused),
            ),
            (
                "ioserve_offloaded_opens",
                "Requests whose files were opened on the blocking pool (paths not in the open-file cache).",
                metrics.sum(|s| &s.offloaded_opens),
            ),
            (
                "ioserve_cold_windows",
                "Windows of file data (up to 2 MiB) not in the page cache, read on the blocking pool before sending.",
                metrics.sum(|s| &s.cold_windows),
            ),
            (
                "ioserve_small_file_cache_hits",
                "File bodies (and multipart parts) of small files sent from their bytes kept in memory (--small-file-cache).",
                metrics.sum(|s| &s.kept_bodies),
            ),
            (
                "ioserve_file_read_errors",
                "Responses ended short because their file could not be read (EIO from the disk): the error log names the file and the byte.",
                metrics.sum(|s| &s.file_read_errors),
            ),
            (
                "ioserve_connections_refused_per_ip",
                "Connections answered 503 at --max-conns-per-ip.",
                metrics.sum(|s| &s.refused_per_ip),
            ),
            (
                "ioserve_paced_responses",
                "Responses that waited for --limit-rate.",
                metrics.sum(|s| &s.paced_responses),
            ),
        ] {
            exposition::counter(out, name, help, value)?;
        }
        exposition::counter_family(
            out,
            "ioserve_protocol_requests",
            "Requests decided (parsed and answered by the server's rules), by protocol: HTTP/1.0, HTTP/1.1, HTTP/2.0, HTTP/3.0.",
            PROTOCOLS.iter().enumerate().map(|(slot, &version)| {
                let count: u64 = metrics
                    .shards
                    .iter()
                    .map(|s| s.protocols[slot].load(Relaxed))
                    .sum();
                ([("protocol", version.name())], count)
            }),
        )?;
        exposition::counter(
            out,
            "ioserve_quic_retries",
            "HTTP/3 connection attempts answered with a Retry (address validation while many handshakes are under way).",
            metrics.sum(|s| &s.quic_retries),
        )?;
        exposition::counter_family(
            out,
            "ioserve_auth_failures",
            "Requests refused by Basic authentication (401), by reason: missing or wrong credentials.",
            Failure::ALL.iter().enumerate().map(|(slot, failure)| {
                let count: u64 = metrics
                    .shards
                    .iter()
                    .map(|s| s.auth_failures[slot].load(Relaxed))
                    .sum();
                ([("reason", failure.name())], count)
            }),
        )?;
        exposition::counter_family(
            out,
            "ioserve_tls_connections",
            "Completed TLS handshakes, by mode (where records are encrypted), version and cipher suite.",
            tls_connection_samples(metrics),
        )?;
        exposition::counter_family(
            out,
            "ioserve_tls_handshake_failures",
            "Failed TLS handshakes, by reason.",
            HandshakeFailure::ALL
                .iter()
                .enumerate()
                .map(|(slot, failure)| {
                    let count: u64 = metrics
                        .shards
                        .iter()
                        .map(|s| s.tls_handshake_failures[slot].load(Relaxed))
                        .sum();
                    ([("reason", failure.name())], count)
                }),
        )?;
        let per_bucket: Vec<u64> = (0..=DURATION_BOUNDS.len())
            .map(|i| {
                metrics
                    .shards
                    .iter()
                    .map(|s| s.durations[i].load(Relaxed))
                    .sum()
            })
            .collect();
        let buckets: Vec<(f64, u64)> = DURATION_BOUNDS
            .iter()
            .copied()
            .zip(per_bucket.iter().copied())
            .collect();
        exposition::histogram(
            out,
            "ioserve_request_duration_seconds",
            "Time from a complete request head to the last byte sent.",
            &buckets,
            (
                metrics.sum(|s| &s.duration_micros) as f64 / 1e6,
                per_bucket.iter().sum(),
            ),
        )?;
        exposition::counter(
            out,
            "ioserve_paced_seconds",
            "Time responses waited for --limit-rate.",
            metrics.sum(|s| &s.paced_micros) as f64 / 1e6,
        )?;
        if let Some(acme) = &metrics.acme {
            exposition::gauge_family(
                out,
                "ioserve_tls_certificate_expiry_timestamp_seconds",
                "When the served certificate expires (seconds since the Unix epoch), by name.",
                acme.expiry()
                    .into_iter()
                    .map(|(name, expiry)| ([("name", name)], expiry)),
            )?;
            exposition::counter_family(
                out,
                "ioserve_acme_orders",
                "ACME orders placed, by result (issued, or failed: the log has the CA's problem).",
                acme.orders()
                    .map(|(result, count)| ([("result", result.label())], count)),
            )?;
        }
        exposition::gauge_family(
            out,
            "ioserve_build_info",
            "The running ioserve's version.",
            [([("version", env!("CARGO_PKG_VERSION"))], 1i64)],
        )
    }
}

/// The samples of `ioserve_tls_connections`: each suite under its own version, zero or
/// not, for user space and (where the server offers it) for kTLS, and any other
/// combination once it has been seen.
fn tls_connection_samples(
    metrics: &Metrics,
) -> impl Iterator<Item = ([(&'static str, &'static str); 3], u64)> + '_ {
    TlsMode::ALL.iter().enumerate().flat_map(move |(m, &mode)| {
        let listed = mode == TlsMode::Userspace || metrics.ktls;
        TlsVersion::ALL
            .iter()
            .enumerate()
            .flat_map(move |(v, &version)| {
                (0..TlsCipher::COUNT).filter_map(move |slot| {
                    let cipher = TlsCipher::at(slot);
                    let count: u64 = metrics
                        .shards
                        .iter()
                        .map(|s| s.tls_connections[m][v][slot].load(Relaxed))
                        .sum();
                    let labels = [
                        ("mode", mode.name()),
                        ("version", version.name()),
                        ("cipher", cipher.name()),
                    ];
                    let listed = listed && cipher.version() == Some(version);
                    (count > 0 || listed).then_some((labels, count))
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text a scrape of `metrics` gets.
    fn render(metrics: Metrics) -> String {
        exposition::render(&registry(&Arc::new(metrics))).unwrap()
    }

    #[test]
    fn render_sums_shards() {
        let metrics = Metrics::new(2, "sendfile");
        metrics.request(0, 200, 100);
        metrics.request(1, 200, 50);
        metrics.request(1, 299, 1);
        metrics.connection(0, 1);
        metrics.connection(1, 1);
        metrics.connection(1, -1);
        metrics.download(0, 1);
        metrics.auth_failure(0, Failure::Wrong);
        metrics.auth_failure(1, Failure::Wrong);
        metrics.auth_failure(1, Failure::Missing);
        metrics.protocol_request(0, Version::Http3);
        metrics.protocol_request(1, Version::Http3);
        metrics.protocol_request(1, Version::Http11);
        metrics.quic_retry(1);
        let text = render(metrics);
        assert!(text.contains("ioserve_requests_total{status=\"200\"} 2\n"));
        assert!(text.contains("ioserve_requests_total{status=\"other\"} 1\n"));
        assert!(text.contains("ioserve_sent_bytes_total{strategy=\"sendfile\"} 151\n"));
        assert!(text.contains("ioserve_connections_total 2\n"));
        assert!(text.contains("ioserve_connections_open 1\n"));
        assert!(text.contains("ioserve_downloads_in_flight 1\n"));
        assert!(text.contains("ioserve_auth_failures_total{reason=\"missing\"} 1\n"));
        assert!(text.contains("ioserve_auth_failures_total{reason=\"wrong\"} 2\n"));
        assert!(text.contains("ioserve_protocol_requests_total{protocol=\"HTTP/3.0\"} 2\n"));
        assert!(text.contains("ioserve_protocol_requests_total{protocol=\"HTTP/1.1\"} 1\n"));
        assert!(text.contains("ioserve_protocol_requests_total{protocol=\"HTTP/2.0\"} 0\n"));
        assert!(text.contains("ioserve_quic_retries_total 1\n"));
    }

    #[test]
    fn tls_handshakes_are_counted_by_version_cipher_and_failure() {
        use rustls::CipherSuite;
        let metrics = Metrics::new(2, "sendfile");
        let aes128 = TlsCipher::of(Some(CipherSuite::TLS13_AES_128_GCM_SHA256));
        let ecdhe = TlsCipher::of(Some(CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
        metrics.tls_connection(0, TlsMode::Userspace, TlsVersion::Tls13, aes128);
        metrics.tls_connection(1, TlsMode::Userspace, TlsVersion::Tls13, aes128);
        metrics.tls_connection(1, TlsMode::Userspace, TlsVersion::Tls12, ecdhe);
        metrics.tls_connection(1, TlsMode::Userspace, TlsVersion::Other, TlsCipher::Other);
        metrics.tls_handshake_failure(0, HandshakeFailure::NotTls);
        metrics.tls_handshake_failure(1, HandshakeFailure::NotTls);
        metrics.tls_handshake_failure(1, HandshakeFailure::Timeout);
        let text = render(metrics);
        for line in [
            "ioserve_tls_connections_total{mode=\"userspace\",version=\"TLSv1_3\",cipher=\"TLS13_AES_128_GCM_SHA256\"} 2\n",
            "ioserve_tls_connections_total{mode=\"userspace\",version=\"TLSv1_2\",cipher=\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"} 1\n",
            "ioserve_tls_connections_total{mode=\"userspace\",version=\"TLSv1_3\",cipher=\"TLS13_CHACHA20_POLY1305_SHA256\"} 0\n",
            "ioserve_tls_connections_total{mode=\"userspace\",version=\"other\",cipher=\"other\"} 1\n",
            "ioserve_tls_handshake_failures_total{reason=\"not_tls\"} 2\n",
            "ioserve_tls_handshake_failures_total{reason=\"timeout\"} 1\n",
            "ioserve_tls_handshake_failures_total{reason=\"bad_certificate\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing in\n{text}");
        }
        // A suite appears under its own version only, until another is seen.
        assert!(
            !text.contains("version=\"TLSv1_2\",cipher=\"TLS13_"),
            "{text}"
        );
        assert!(
            !text.contains("version=\"TLSv1_3\",cipher=\"other\""),
            "{text}"
        );
        assert!(!text.contains("ktls"), "{text}");
    }

    #[test]
    fn ktls_samples_are_listed_where_the_server_offers_ktls() {
        use rustls::CipherSuite;
        let chacha = TlsCipher::of(Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256));
        let offered = Metrics::new(1, "sendfile").with_ktls(true);
        offered.tls_connection(0, TlsMode::Ktls, TlsVersion::Tls13, chacha);
        let text = render(offered);
        for line in [
            "ioserve_tls_connections_total{mode=\"ktls\",version=\"TLSv1_3\",cipher=\"TLS13_CHACHA20_POLY1305_SHA256\"} 1\n",
            "ioserve_tls_connections_total{mode=\"ktls\",version=\"TLSv1_2\",cipher=\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"} 0\n",
            "ioserve_tls_connections_total{mode=\"userspace\",version=\"TLSv1_3\",cipher=\"TLS13_CHACHA20_POLY1305_SHA256\"} 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing in\n{text}");
        }
        // Without kTLS, its samples appear only once one is counted.
        let fallback = Metrics::new(1, "sendfile");
        fallback.tls_connection(0, TlsMode::Ktls, TlsVersion::Tls13, chacha);
        let text = render(fallback);
        assert_eq!(text.matches("mode=\"ktls\"").count(), 1, "{text}");
    }

    #[test]
    fn durations_are_a_cumulative_histogram() {
        let metrics = Metrics::new(2, "sendfile");
        metrics.duration(0, std::time::Duration::from_micros(500));
        metrics.duration(1, std::time::Duration::from_millis(30));
        metrics.duration(1, std::time::Duration::from_secs(1000));
        let text = render(metrics);
        for line in [
            "ioserve_request_duration_seconds_bucket{le=\"0.001\"} 1\n",
            "ioserve_request_duration_seconds_bucket{le=\"0.01\"} 1\n",
            "ioserve_request_duration_seconds_bucket{le=\"0.05\"} 2\n",
            "ioserve_request_duration_seconds_bucket{le=\"300\"} 2\n",
            "ioserve_request_duration_seconds_bucket{le=\"+Inf\"} 3\n",
            "ioserve_request_duration_seconds_count 3\n",
            "ioserve_request_duration_seconds_sum 1000.0305\n",
            "ioserve_build_info{version=\"",
            "process_open_fds ",
            "process_resident_memory_bytes ",
        ] {
            assert!(text.contains(line), "{line:?} missing in\n{text}");
        }
    }
}

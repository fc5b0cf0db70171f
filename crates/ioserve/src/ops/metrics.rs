//! Prometheus metrics: counters kept per worker (no shared cache line on the hot path),
//! summed when scraped, and served over HTTP by hyper on `--metrics-listen`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Upper bounds of the request-duration histogram, in seconds: from a cached small
/// file to a slow client's large download.
const DURATION_BOUNDS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The statuses counted by code; any other lands in `other`.
const STATUSES: [u16; 15] = [
    200, 206, 301, 304, 400, 403, 404, 405, 408, 412, 416, 431, 500, 503, 505,
];

/// One worker's counters, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    requests: [AtomicU64; STATUSES.len() + 1],
    sent_bytes: AtomicU64,
    connections_total: AtomicU64,
    connections_open: AtomicI64,
    downloads_in_flight: AtomicI64,
    panics: AtomicU64,
    idle_closed: AtomicU64,
    refused: AtomicU64,
    offloaded_opens: AtomicU64,
    cold_windows: AtomicU64,
    /// Requests per duration bucket (the last one is +Inf), not cumulative.
    durations: [AtomicU64; DURATION_BOUNDS.len() + 1],
    duration_micros: AtomicU64,
}

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    strategy: &'static str,
    shards: Box<[Shard]>,
}

impl Metrics {
    /// Metrics for `workers` workers of a server using `strategy`.
    pub fn new(workers: usize, strategy: &'static str) -> Metrics {
        Metrics {
            strategy,
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
        }
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

    /// Counts an idle keep-alive connection closed to admit a new client.
    pub fn idle_closed(&self, worker: usize) {
        self.shard(worker).idle_closed.fetch_add(1, Relaxed);
    }

    /// The metrics in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(2048);
        self.render_requests(&mut out);
        self.render_totals(&mut out);
        self.render_durations(&mut out);
        help_and_type(
            &mut out,
            "ioserve_build_info",
            "gauge",
            "The running ioserve's version.",
        );
        let _ = writeln!(
            out,
            "ioserve_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        out.push_str(&process_metrics());
        out
    }

    /// A counter summed over the worker shards.
    fn sum(&self, field: fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| field(s).load(Relaxed)).sum()
    }

    /// A gauge summed over the worker shards (each may be negative alone).
    fn sum_signed(&self, field: fn(&Shard) -> &AtomicI64) -> i64 {
        self.shards.iter().map(|s| field(s).load(Relaxed)).sum()
    }

    fn render_requests(&self, out: &mut String) {
        help_and_type(
            out,
            "ioserve_requests_total",
            "counter",
            "Requests answered, by status code.",
        );
        for slot in 0..=STATUSES.len() {
            let count: u64 = self
                .shards
                .iter()
                .map(|s| s.requests[slot].load(Relaxed))
                .sum();
            let label = STATUSES
                .get(slot)
                .map_or_else(|| "other".to_string(), u16::to_string);
            let _ = writeln!(out, "ioserve_requests_total{{status=\"{label}\"}} {count}");
        }
    }

    /// The single-valued counters and gauges, in exposition order.
    fn render_totals(&self, out: &mut String) {
        let strategy = format!("{{strategy=\"{}\"}}", self.strategy);
        let totals: [(&str, &str, &str, &str, i128); 9] = [
            ("ioserve_sent_bytes_total", "counter",
             "Bytes written to clients (heads and bodies), by IO strategy.",
             &strategy, self.sum(|s| &s.sent_bytes).into()),
            ("ioserve_connections_total", "counter", "Connections accepted.",
             "", self.sum(|s| &s.connections_total).into()),
            ("ioserve_connections_open", "gauge", "Connections open now.",
             "", self.sum_signed(|s| &s.connections_open).into()),
            ("ioserve_downloads_in_flight", "gauge", "File bodies being sent now.",
             "", self.sum_signed(|s| &s.downloads_in_flight).into()),
            ("ioserve_connection_panics_total", "counter",
             "Connection tasks ended by a panic (a bug: the log has it).",
             "", self.sum(|s| &s.panics).into()),
            ("ioserve_idle_connections_closed_total", "counter",
             "Idle keep-alive connections closed to admit a new client at --max-connections.",
             "", self.sum(|s| &s.idle_closed).into()),
            ("ioserve_connections_refused_total", "counter",
             "Connections answered 503 at --max-connections.",
             "", self.sum(|s| &s.refused).into()),
            ("ioserve_offloaded_opens_total", "counter",
             "Requests whose files were opened on the blocking pool (paths not in the open-file cache).",
             "", self.sum(|s| &s.offloaded_opens).into()),
            ("ioserve_cold_windows_total", "counter",
             "Windows of file data (up to 2 MiB) not in the page cache, read on the blocking pool before sending.",
             "", self.sum(|s| &s.cold_windows).into()),
        ];
        for (name, kind, help, labels, value) in totals {
            help_and_type(out, name, kind, help);
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    }

    fn render_durations(&self, out: &mut String) {
        help_and_type(
            out,
            "ioserve_request_duration_seconds",
            "histogram",
            "Time from a complete request head to the last byte sent.",
        );
        let mut cumulative = 0u64;
        for (i, bound) in DURATION_BOUNDS.iter().map(Some).chain([None]).enumerate() {
            cumulative += self
                .shards
                .iter()
                .map(|s| s.durations[i].load(Relaxed))
                .sum::<u64>();
            let le = bound.map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "ioserve_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "ioserve_request_duration_seconds_sum {}\nioserve_request_duration_seconds_count {cumulative}",
            self.sum(|s| &s.duration_micros) as f64 / 1e6,
        );
    }
}

/// A metric's `# HELP` and `# TYPE` lines.
fn help_and_type(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// The standard process metrics of Prometheus clients, from /proc/self.
fn process_metrics() -> String {
    let mut out = String::new();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the ")" that ends the command name: utime and stime are the 12th and 13th
    // fields, starttime the 20th, in clock ticks (USER_HZ, 100 on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    let boot_time = std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok());
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let mut gauge = |name: &str, kind: &str, help: &str, value: Option<f64>| {
        if let Some(value) = value {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            );
        }
    };
    gauge(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        ticks(11).zip(ticks(12)).map(|(u, s)| (u + s) / 100.0),
    );
    gauge(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        kib("VmRSS:").map(|k| k as f64 * 1024.0),
    );
    gauge(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        kib("VmSize:").map(|k| k as f64 * 1024.0),
    );
    gauge(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        Some(open_fds.saturating_sub(1) as f64), // the directory being read
    );
    gauge(
        "process_max_fds",
        "gauge",
        "Maximum number of open file descriptors.",
        max_fds.map(|m| m as f64),
    );
    gauge(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        ticks(19).zip(boot_time).map(|(t, boot)| boot + t / 100.0),
    );
    out
}

/// Serves `GET /metrics` on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let (stream, _peer): (_, SocketAddr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics listener cannot accept");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let metrics = Arc::clone(&metrics);
                    async move { Ok::<_, std::convert::Infallible>(answer(&request, &metrics)) }
                });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "metrics connection ended with an error");
            }
        });
    }
}

fn answer(request: &Request<hyper::body::Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&hyper::Method::GET, "/healthz") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ok\n"),
        ),
        (&hyper::Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            Bytes::from(metrics.render()),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"405 Method Not Allowed\n"),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"404 Not Found: metrics are at /metrics, health at /healthz\n"),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = metrics.render();
        assert!(text.contains("ioserve_requests_total{status=\"200\"} 2\n"));
        assert!(text.contains("ioserve_requests_total{status=\"other\"} 1\n"));
        assert!(text.contains("ioserve_sent_bytes_total{strategy=\"sendfile\"} 151\n"));
        assert!(text.contains("ioserve_connections_total 2\n"));
        assert!(text.contains("ioserve_connections_open 1\n"));
        assert!(text.contains("ioserve_downloads_in_flight 1\n"));
    }

    #[test]
    fn durations_are_a_cumulative_histogram() {
        let metrics = Metrics::new(2, "sendfile");
        metrics.duration(0, std::time::Duration::from_micros(500));
        metrics.duration(1, std::time::Duration::from_millis(30));
        metrics.duration(1, std::time::Duration::from_secs(1000));
        let text = metrics.render();
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

//! The metrics server answered by a real HTTP client on 127.0.0.1.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ioserve_exporter::exposition;
use ioserve_exporter::prometheus_client::metrics::counter::Counter;
use ioserve_exporter::prometheus_client::registry::Registry;
use ioserve_exporter::server::{self, MetricsServer};

/// A registry with one counter, and that counter.
fn registry() -> (Arc<Registry>, Counter) {
    let mut registry = Registry::default();
    let scrapes = Counter::default();
    registry.register("demo_events", "Events counted", scrapes.clone());
    (Arc::new(registry), scrapes)
}

/// Status, content type and body of `GET url` (4xx and 5xx included).
fn get(url: &str) -> (u16, String, String) {
    let response = match ureq::get(url).timeout(Duration::from_secs(5)).call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(error) => panic!("GET {url}: {error}"),
    };
    let status = response.status();
    let content_type = response.header("content-type").unwrap_or("").to_string();
    (status, content_type, response.into_string().unwrap())
}

#[test]
fn serves_metrics_and_health_and_404_elsewhere() {
    let (registry, events) = registry();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let running = MetricsServer::new(registry).spawn(listener).unwrap();
    let base = format!("http://{}", running.local_addr());

    events.inc_by(7);
    let (status, content_type, body) = get(&format!("{base}/metrics"));
    assert_eq!(status, 200);
    assert_eq!(content_type, exposition::CONTENT_TYPE);
    assert_eq!(
        body,
        "# HELP demo_events_total Events counted.\n\
         # TYPE demo_events_total counter\n\
         demo_events_total 7\n"
    );
    events.inc();
    assert!(get(&format!("{base}/metrics"))
        .2
        .contains("demo_events_total 8\n"));

    assert_eq!(
        get(&format!("{base}/healthz")),
        (200, "text/plain; charset=utf-8".into(), "ok\n".into())
    );
    let (status, _, body) = get(&format!("{base}/nope"));
    assert_eq!(status, 404);
    assert!(body.contains("/metrics"), "{body}");
    let response = match ureq::post(&format!("{base}/metrics")).call() {
        Err(ureq::Error::Status(405, response)) => response,
        other => panic!("POST /metrics: {other:?}"),
    };
    assert_eq!(response.header("allow"), Some("GET"));
    running.shutdown();
}

#[test]
fn without_keep_alive_the_connection_closes_after_the_answer() {
    let (registry, _) = registry();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let running = MetricsServer::new(registry)
        .keep_alive(false)
        .spawn(listener)
        .unwrap();
    let mut stream = TcpStream::connect(running.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // HTTP/1.1 without `Connection: close`: only the server can end it.
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nok\n"), "{response}");
}

#[test]
fn shutdown_stops_accepting_and_ends_the_thread() {
    let (registry, _) = registry();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let running = MetricsServer::new(registry)
        .grace(Duration::from_millis(200))
        .spawn(listener)
        .unwrap();
    let address = running.local_addr();
    // A client that connected and never sent anything does not hold shutdown up
    // past the grace period.
    let _silent = TcpStream::connect(address).unwrap();
    assert_eq!(get(&format!("http://{address}/healthz")).0, 200);
    let started = Instant::now();
    running.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(TcpStream::connect(address).is_err(), "still accepting");
}

#[test]
fn serve_returns_when_the_shutdown_future_completes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (registry, _) = registry();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(MetricsServer::new(registry).serve(listener, async {
            let _ = stopped.await;
        }));
        let (status, _, body) =
            tokio::task::spawn_blocking(move || get(&format!("http://{address}/metrics")))
                .await
                .unwrap();
        assert_eq!(
            (status, body.contains("demo_events_total 0\n")),
            (200, true)
        );
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("serve returns after shutdown")
            .unwrap();
    });
}

#[test]
fn a_taken_port_is_a_bind_error_naming_the_address() {
    let taken = server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = taken.local_addr().unwrap();
    let error = server::bind(address).unwrap_err();
    assert!(error.to_string().contains(&address.to_string()), "{error}");
}

//! The polite client: one keep-alive HTTP/1.1 connection asking for the small file at
//! a steady pace while the other connections are held, timing each request.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{timeout, MissedTickBehavior};

use super::http1::get_small_file;
use super::outcome::io_outcome;
use crate::util::stats::quantile;

/// The polite client's pace: a request every 10 ms.
pub(crate) const POLITE_EVERY: Duration = Duration::from_millis(10);

/// How long one of the polite client's requests may take.
const POLITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the polite client measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct PoliteTimes {
    /// Each answered request's time from sending to the end of the body, in ms.
    pub latencies_ms: Vec<f64>,
    /// Requests that failed (the connection is then opened again).
    pub failed: usize,
}

/// The polite client's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Polite {
    /// Requests answered.
    pub requests: usize,
    /// Requests that failed.
    pub failed: usize,
    /// Median time per request, in ms.
    pub p50_ms: f64,
    /// 99th percentile, in ms.
    pub p99_ms: f64,
}

impl Polite {
    /// The figures of `times` (NaN quantiles when none was answered).
    pub(crate) fn of(times: &PoliteTimes) -> Polite {
        let mut sorted = times.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        Polite {
            requests: sorted.len(),
            failed: times.failed,
            p50_ms: quantile(&sorted, 0.5).unwrap_or(f64::NAN),
            p99_ms: quantile(&sorted, 0.99).unwrap_or(f64::NAN),
        }
    }
}

/// The polite client: one keep-alive HTTP/1.1 connection to `server` asking for the
/// small file every `every` until `stop` turns true, timing each request.
pub(crate) async fn polite(
    server: SocketAddr,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> PoliteTimes {
    let mut times = PoliteTimes::default();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut connection: Option<TcpStream> = None;
    let stopped = stop.wait_for(|stop| *stop);
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return times,
            _ = ticks.tick() => {}
        }
        let started = Instant::now();
        let asked = timeout(POLITE_TIMEOUT, async {
            let stream = match connection.as_mut() {
                Some(stream) => stream,
                None => {
                    let stream = TcpStream::connect(server)
                        .await
                        .map_err(|e| io_outcome(&e, "connect"))?;
                    let _ = stream.set_nodelay(true);
                    connection.insert(stream)
                }
            };
            get_small_file(stream).await
        })
        .await;
        match asked {
            Ok(Ok(())) => times
                .latencies_ms
                .push(started.elapsed().as_secs_f64() * 1e3),
            Ok(Err(_)) | Err(_) => {
                times.failed += 1;
                connection = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_polite_figures_are_quantiles_of_the_answered_requests() {
        let times = PoliteTimes {
            latencies_ms: (1..=200).rev().map(|ms| ms as f64 / 100.0).collect(),
            failed: 2,
        };
        let polite = Polite::of(&times);
        assert_eq!((polite.requests, polite.failed), (200, 2));
        // Index round(199 * 0.5) = 100 and round(199 * 0.99) = 197 of 0.01..2.00.
        assert_eq!((polite.p50_ms, polite.p99_ms), (1.01, 1.98));
        let none = Polite::of(&PoliteTimes::default());
        assert!(none.p99_ms.is_nan());
    }
}

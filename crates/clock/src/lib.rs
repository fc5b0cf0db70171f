//! A cached clock for hot paths that read the time far more often than it needs to
//! change (access-log timestamps, rate limiters, idle timers): a ticker thread stores
//! the wall and monotonic time into atomics every `period`, and a read is one atomic
//! load. Seed 004's `cachedNow()`, with the bound on staleness stated and tested.
//!
//! A read costs about a nanosecond whatever the clocksource; `clock_gettime` costs
//! ~20 ns through the vDSO and several hundred when the kernel's clocksource forces the
//! real syscall (kvm-clock without the stable bit, Xen; `cargo bench -p benches --bench
//! clocks` measures both here, and the `clock_cost` example times them where cargo
//! does not run, as `cargo xtask clock-vm` does under each clocksource).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ioserve_clock::CachedClock;
//!
//! let clock = CachedClock::start(Duration::from_millis(1))?;
//! let before = clock.now();
//! // The ticker moves it on within a period or so when it is scheduled; a busy host
//! // may take much longer, so wait for it (with a deadline) instead of for 5 ms.
//! let deadline = Instant::now() + Duration::from_secs(30);
//! while clock.now() <= before && Instant::now() < deadline {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! assert!(clock.now() > before, "the ticker did not run within 30 s");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! **Staleness.** A reading lags the true time by at most `period` plus however late
//! the ticker thread wakes: on an idle machine a millisecond or so, but unbounded if
//! the thread is not scheduled (CPU starvation, a stopped process). Readings never go
//! backwards: [`CachedClock::now`] is monotonic, and [`CachedClock::now_system`]
//! follows the wall clock including its steps (NTP, `date -s`), as
//! `SystemTime::now` does. [`CachedClock::worst_tick_delay`] reports the largest
//! extra delay seen, so an operator can check the bound on their machine.
//!
//! The crate has no dependencies: a service embeds it without the rest of the toolkit.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A clock refreshed by a background thread; see the crate docs for its staleness.
/// Dropping it stops the thread.
#[derive(Debug)]
pub struct CachedClock {
    shared: Arc<Shared>,
    ticker: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// The instant the clock started; monotonic readings are offsets from it.
    origin: Instant,
    period: Duration,
    /// Nanoseconds from `origin` at the last tick.
    monotonic_nanos: AtomicU64,
    /// Nanoseconds since the Unix epoch at the last tick (0 before it, if the wall
    /// clock is set before 1970).
    unix_nanos: AtomicU64,
    /// The largest lateness of a tick beyond `period`, in nanoseconds.
    worst_delay_nanos: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn tick(&self) {
        let monotonic = saturating_nanos(self.origin.elapsed());
        self.monotonic_nanos.fetch_max(monotonic, Ordering::Relaxed);
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(saturating_nanos)
            .unwrap_or(0);
        self.unix_nanos.store(unix, Ordering::Relaxed);
    }
}

fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl CachedClock {
    /// Starts the ticker thread, refreshing every `period`.
    ///
    /// # Errors
    /// `InvalidInput` if `period` is zero or above one second (a cached clock that
    /// coarse is better served by reading the real one), or the error of spawning the
    /// thread.
    pub fn start(period: Duration) -> io::Result<CachedClock> {
        if period.is_zero() || period > Duration::from_secs(1) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cached clock period {period:?}: must be above zero and at most 1 s"),
            ));
        }
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            period,
            monotonic_nanos: AtomicU64::new(0),
            unix_nanos: AtomicU64::new(0),
            worst_delay_nanos: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        shared.tick();
        let ticker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("cached-clock".into())
                .spawn(move || run_ticker(&shared))?
        };
        Ok(CachedClock {
            shared,
            ticker: Some(ticker),
        })
    }

    /// The monotonic time at the last tick (never decreasing).
    #[inline]
    pub fn now(&self) -> Instant {
        self.shared.origin
            + Duration::from_nanos(self.shared.monotonic_nanos.load(Ordering::Relaxed))
    }

    /// The wall-clock time at the last tick.
    #[inline]
    pub fn now_system(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.shared.unix_nanos.load(Ordering::Relaxed))
    }

    /// The refresh period.
    pub fn period(&self) -> Duration {
        self.shared.period
    }

    /// The largest delay of a tick beyond its period seen so far: the staleness bound
    /// is `period() + worst_tick_delay()` over the clock's life.
    pub fn worst_tick_delay(&self) -> Duration {
        Duration::from_nanos(self.shared.worst_delay_nanos.load(Ordering::Relaxed))
    }
}

fn run_ticker(shared: &Shared) {
    // Due one period after the first tick (taken at `origin` by `start`), not after
    // this thread happened to start: a late start is a late tick.
    let mut due = shared.origin + shared.period;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < due {
            std::thread::park_timeout(due - now);
            continue;
        }
        shared.tick();
        // Late until the new value is stored, not until it was read: a stall in
        // between keeps readers on the old value as long.
        let late = saturating_nanos(Instant::now().saturating_duration_since(due));
        shared.worst_delay_nanos.fetch_max(late, Ordering::Relaxed);
        // After a long stall, resume from now rather than ticking to catch up.
        due = (due + shared.period).max(now);
    }
}

impl Drop for CachedClock {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            ticker.thread().unpark();
            // The ticker only parks and stores; it cannot panic in a way worth
            // propagating from a destructor.
            let _ = ticker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_periods_are_rejected_with_the_rule() {
        for period in [Duration::ZERO, Duration::from_secs(2)] {
            let error = CachedClock::start(period).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
            assert!(error.to_string().contains("at most 1 s"), "{error}");
        }
    }

    #[test]
    fn readings_lag_by_at_most_the_period_plus_the_observed_tick_delay() {
        let clock = CachedClock::start(Duration::from_millis(1)).unwrap();
        let started = Instant::now();
        let mut previous = clock.now();
        let mut worst_lag = Duration::ZERO;
        let mut worst_wall_lag = Duration::ZERO;
        while started.elapsed() < Duration::from_millis(300) {
            // The true times are read before the cached ones: a reading is compared
            // with a moment it cannot precede, so a stall of this thread between the
            // two reads (a loaded host) does not count as the clock's lag.
            let truth = Instant::now();
            let wall_truth = SystemTime::now();
            let cached = clock.now();
            let cached_wall = clock.now_system();
            assert!(cached >= previous, "the cached clock went backwards");
            previous = cached;
            worst_lag = worst_lag.max(truth.saturating_duration_since(cached));
            let wall_lag = wall_truth.duration_since(cached_wall).unwrap_or_default();
            worst_wall_lag = worst_wall_lag.max(wall_lag);
            std::thread::sleep(Duration::from_micros(200));
        }
        // Wait for a tick after the last reading, so that the lateness of the tick
        // ending each interval we read in is recorded.
        let last_read = Instant::now();
        while clock.now() < last_read {
            // Generous for a slow and loaded CI host.
            assert!(
                last_read.elapsed() < Duration::from_secs(30),
                "no tick in 30 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The bound the docs state: a reading is at most one period plus the worst
        // tick delay behind.
        let bound = clock.period() + clock.worst_tick_delay();
        assert!(worst_lag <= bound, "lag {worst_lag:?} exceeds {bound:?}");
        // The wall-clock reading is stored with the monotonic one: the same bound, not
        // a constant tuned on a fast host.
        assert!(
            worst_wall_lag <= bound,
            "wall clock {worst_wall_lag:?} behind, beyond {bound:?}"
        );
        // And the clock moved: 300 ms of ticks are not one stale value.
        assert!(clock.now() - clock.shared.origin >= Duration::from_millis(250));
    }

    #[test]
    fn dropping_stops_the_ticker_promptly() {
        // A ticker left to its park_timeout ends at its first due time at the
        // earliest; one woken by the drop ends before it. A drop that returns before
        // the due time shows the wake; one a loaded host delays past it shows nothing,
        // so it is tried again.
        let period = Duration::from_secs(1);
        for _ in 0..10 {
            let clock = CachedClock::start(period).unwrap();
            let first_due = clock.shared.origin + period;
            drop(clock);
            if Instant::now() < first_due {
                return;
            }
        }
        panic!("in 10 attempts no drop returned before the ticker's first due time");
    }
}

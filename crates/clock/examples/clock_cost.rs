//! What a clock read costs here: `Instant::now()` and `SystemTime::now()` (the vDSO,
//! or a real syscall when the clocksource has no vDSO mode) against
//! `CachedClock` (one atomic load).
//!
//! ```text
//! cargo run --release -p ioserve-clock --example clock_cost -- [READS]
//! ```
//!
//! Prints one `name ns-per-read` line per clock; `cargo xtask clock-vm` runs it under
//! each clocksource. For criterion's statistics use `cargo bench -p benches --bench
//! clocks`; this is the small program a guest without cargo can run.

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use ioserve_clock::CachedClock;

const DEFAULT_READS: u64 = 200_000;

fn main() -> std::process::ExitCode {
    let reads = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => DEFAULT_READS,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("clock_cost: READS must be a positive whole number of reads");
            return std::process::ExitCode::from(2);
        }
    };
    let cached = match CachedClock::start(Duration::from_millis(1)) {
        Ok(clock) => clock,
        Err(err) => {
            eprintln!("clock_cost: cannot start the cached clock: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("reads {reads}");
    report("Instant::now", reads, || {
        black_box(Instant::now());
    });
    report("SystemTime::now", reads, || {
        black_box(SystemTime::now());
    });
    report("CachedClock::now", reads, || {
        black_box(cached.now());
    });
    report("CachedClock::now_system", reads, || {
        black_box(cached.now_system());
    });
    std::process::ExitCode::SUCCESS
}

/// Times `reads` calls of `read` and prints the nanoseconds per call.
fn report(name: &str, reads: u64, mut read: impl FnMut()) {
    let started = Instant::now();
    for _ in 0..reads {
        read();
    }
    let per_read = started.elapsed().as_nanos() as f64 / reads as f64;
    println!("{name} {per_read:.1}");
}

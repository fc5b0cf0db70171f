//! Seeds 004 and 002: what reading the time costs. `clock_gettime` through libc (the
//! vDSO, no kernel entry when the clocksource allows it) for each clock id, the same
//! through raw `syscall(2)` (what every call costs when the vDSO falls back: kvm-clock
//! without the stable bit, Xen), the COARSE clocks (tick resolution, no TSC read),
//! std's `Instant::now`/`SystemTime::now`, `quanta` (TSC, and its own cached
//! `recent()`), and ioserve-clock's `CachedClock` (a ticker thread refreshing atomics every
//! 1 ms). One read per iteration.

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ioserve_clock::CachedClock;

/// The clock ids the seeds discuss, with their names.
const CLOCK_IDS: [(&str, libc::clockid_t); 7] = [
    ("REALTIME", libc::CLOCK_REALTIME),
    ("MONOTONIC", libc::CLOCK_MONOTONIC),
    ("MONOTONIC_RAW", libc::CLOCK_MONOTONIC_RAW),
    ("BOOTTIME", libc::CLOCK_BOOTTIME),
    ("TAI", libc::CLOCK_TAI),
    ("REALTIME_COARSE", libc::CLOCK_REALTIME_COARSE),
    ("MONOTONIC_COARSE", libc::CLOCK_MONOTONIC_COARSE),
];

fn timespec() -> libc::timespec {
    libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    }
}

/// `clock_gettime` through libc, which uses the vDSO where it can.
fn libc_clock(id: libc::clockid_t) -> libc::timespec {
    let mut ts = timespec();
    // SAFETY: ts is a valid, writable timespec.
    let result = unsafe { libc::clock_gettime(id, &mut ts) };
    assert_eq!(result, 0, "clock_gettime({id})");
    ts
}

/// `clock_gettime` as a real system call, bypassing the vDSO.
fn syscall_clock(id: libc::clockid_t) -> libc::timespec {
    let mut ts = timespec();
    // SAFETY: SYS_clock_gettime takes a clock id and a writable timespec pointer.
    let result =
        unsafe { libc::syscall(libc::SYS_clock_gettime, id, &mut ts as *mut libc::timespec) };
    assert_eq!(result, 0, "syscall(SYS_clock_gettime, {id})");
    ts
}

fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock_read");
    group.throughput(Throughput::Elements(1));
    group.bench_function("std/Instant::now", |b| b.iter(Instant::now));
    group.bench_function("std/SystemTime::now", |b| b.iter(SystemTime::now));
    for (name, id) in CLOCK_IDS {
        group.bench_function(format!("vdso/{name}"), |b| {
            b.iter(|| libc_clock(black_box(id)))
        });
        group.bench_function(format!("syscall/{name}"), |b| {
            b.iter(|| syscall_clock(black_box(id)))
        });
    }
    let quanta_clock = quanta::Clock::new();
    group.bench_function("quanta/Clock::now", |b| b.iter(|| quanta_clock.now()));
    let upkeep = quanta::Upkeep::new(Duration::from_millis(1))
        .start()
        .expect("start quanta's upkeep thread");
    group.bench_function("quanta/Clock::recent", |b| b.iter(|| quanta_clock.recent()));
    drop(upkeep);
    let cached = CachedClock::start(Duration::from_millis(1)).expect("start the cached clock");
    group.bench_function("ioserve/CachedClock::now", |b| b.iter(|| cached.now()));
    group.bench_function("ioserve/CachedClock::now_system", |b| {
        b.iter(|| cached.now_system())
    });
    group.finish();
}

criterion_group! {
    name = clock_reads;
    config = benches::kernel_config();
    targets = clocks
}
criterion_main!(clock_reads);

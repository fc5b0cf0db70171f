//! Seed 001: two threads each incrementing a counter. Adjacent counters share one cache
//! line (false sharing); padded ones do not; one shared atomic is true sharing; the
//! striped counter is one logical counter without the sharing. "alone" is one thread
//! on one counter, the uncontended limit. Throughput is increments over both threads.

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::sync::atomic::{AtomicU64, Ordering};

use benches::time_threads;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ioserve_numa::counter::{CachePadded, StripedCounter};

/// Two counters on one cache line.
#[repr(C, align(64))]
struct Adjacent([AtomicU64; 2]);

fn increments(counter: &AtomicU64, iters: u64) {
    for _ in 0..iters {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn false_sharing(c: &mut Criterion) {
    let mut group = c.benchmark_group("false_sharing");
    group.throughput(Throughput::Elements(2));
    let adjacent = Adjacent([AtomicU64::new(0), AtomicU64::new(0)]);
    group.bench_function("adjacent", |b| {
        b.iter_custom(|iters| time_threads(2, |t| increments(&adjacent.0[t], iters)))
    });
    let padded = [
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ];
    group.bench_function("padded", |b| {
        b.iter_custom(|iters| time_threads(2, |t| increments(&padded[t], iters)))
    });
    let shared = AtomicU64::new(0);
    group.bench_function("shared", |b| {
        b.iter_custom(|iters| time_threads(2, |_| increments(&shared, iters)))
    });
    let striped = StripedCounter::new();
    group.bench_function("striped", |b| {
        b.iter_custom(|iters| {
            time_threads(2, |_| {
                for _ in 0..iters {
                    striped.increment();
                }
            })
        })
    });
    group.throughput(Throughput::Elements(1));
    let alone = AtomicU64::new(0);
    group.bench_function("alone", |b| {
        b.iter_custom(|iters| time_threads(1, |_| increments(&alone, iters)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = benches::criterion_config();
    targets = false_sharing
}
criterion_main!(benches);

//! Seed 001: a concurrent map for a read-heavy (90 % get, 10 % insert) and a
//! write-heavy (50/50) workload on 1 and 2 threads, over 10 000 prefilled u64 keys:
//! numa's ShardedMap against the peers a user would pick instead (dashmap,
//! `RwLock<HashMap>`; Go's sync.Map runs from `peers/go-syncmap`). Every map uses
//! std's `RandomState`, each crate's default. Throughput is operations over all threads.
//!
//! 10 000 keys keep the tables in L2: with 100 000, the 1-thread rows moved by 3x
//! between runs on this shared host (other tenants' use of the L3).

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::RwLock;
use std::time::Duration;

use benches::{time_threads, KeyStream};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dashmap::DashMap;
use ioserve_numa::sharded::ShardedMap;

const KEYS: u64 = 10_000;

/// The two operations the workloads mix.
trait ConcurrentMap: Sync {
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64);
}

impl ConcurrentMap for ShardedMap<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        ShardedMap::get(self, &key)
    }
    fn insert(&self, key: u64, value: u64) {
        ShardedMap::insert(self, key, value);
    }
}

impl ConcurrentMap for DashMap<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        DashMap::get(self, &key).map(|v| *v)
    }
    fn insert(&self, key: u64, value: u64) {
        DashMap::insert(self, key, value);
    }
}

impl ConcurrentMap for RwLock<HashMap<u64, u64>> {
    fn get(&self, key: u64) -> Option<u64> {
        self.read().unwrap().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.write().unwrap().insert(key, value);
    }
}

fn prefilled<M: ConcurrentMap>(map: M) -> M {
    for key in 0..KEYS {
        map.insert(key, key);
    }
    map
}

/// `iters` operations per thread; `write_percent` of them inserts (updates).
fn run<M: ConcurrentMap>(map: &M, threads: usize, iters: u64, write_percent: u64) -> Duration {
    time_threads(threads, |thread| {
        let mut keys = KeyStream::new(thread as u64 + 1);
        for _ in 0..iters {
            let r = keys.next_u64();
            let key = r % KEYS;
            if (r >> 40) % 100 < write_percent {
                map.insert(key, r);
            } else {
                black_box(map.get(key));
            }
        }
    })
}

fn maps(c: &mut Criterion) {
    for (mix, write_percent) in [("read90", 10), ("write50", 50)] {
        let mut group = c.benchmark_group(format!("maps/{mix}"));
        for threads in [1usize, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            let id = |name: &str| BenchmarkId::new(name, format!("{threads}t"));
            let sharded = prefilled(ShardedMap::<u64, u64>::new());
            group.bench_function(id("ShardedMap"), |b| {
                b.iter_custom(|iters| run(&sharded, threads, iters, write_percent))
            });
            let dash = prefilled(DashMap::<u64, u64, RandomState>::default());
            group.bench_function(id("dashmap"), |b| {
                b.iter_custom(|iters| run(&dash, threads, iters, write_percent))
            });
            let locked = prefilled(RwLock::new(HashMap::<u64, u64>::new()));
            group.bench_function(id("RwLock<HashMap>"), |b| {
                b.iter_custom(|iters| run(&locked, threads, iters, write_percent))
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = benches::criterion_config();
    targets = maps
}
criterion_main!(benches);

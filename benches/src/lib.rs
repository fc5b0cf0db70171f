//! Criterion benches that reproduce the source documents' tables against peers, and the
//! small pieces they share.
//!
//! - `maps`: [`ioserve_numa::sharded::ShardedMap`] against `dashmap`, `RwLock<HashMap>` (and
//!   Go's `sync.Map`, in `peers/go-syncmap`), read-heavy and write-heavy, 1 and 2
//!   threads (seed 001).
//! - `false_sharing`: adjacent vs cache-padded counters, and the striped counter
//!   (seed 001).
//! - `simd`: the simd crate's kernels against their peers (seeds 002 and 003), under
//!   criterion or, for `cargo xtask bench --simd-table`, in interleaved rounds
//!   (`SIMD_BENCH_ROUNDS`); `hash_paired`: its hash at small key sizes in interleaved
//!   rounds.

use std::hash::{BuildHasher, Hasher};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::Criterion;

/// The criterion settings of the multi-threaded benches: 20 samples of 3 s after 1 s
/// of warm-up, enough for stable medians of nanosecond operations on a noisy host.
pub fn criterion_config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

/// The criterion settings of the single-threaded kernel benches (simd, clocks): 20
/// samples of 1 s after 0.5 s of warm-up, so that a whole group of five sizes and five
/// peers takes about three minutes.
pub fn kernel_config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1))
}

/// A hash of `bytes` by one `write` and `finish` on a hasher from `builder` (made
/// once by the caller): how a crate without a direct (bytes, seed) call hashes bytes.
#[inline]
pub fn hash_with(builder: &impl BuildHasher, bytes: &[u8]) -> u64 {
    let mut hasher = builder.build_hasher();
    hasher.write(bytes);
    hasher.finish()
}

/// Runs `work(thread_index)` on `threads` threads started together and returns the
/// wall time from the common start until the last one finished.
pub fn time_threads<F>(threads: usize, work: F) -> Duration
where
    F: Fn(usize) + Sync,
{
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    work(index);
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        for handle in handles {
            handle.join().expect("a bench thread panicked");
        }
        started.elapsed()
    })
}

/// Cheap, deterministic key streams for the workloads: fastrand's generator (wyrand),
/// seeded, so that every run and every thread with the same seed sees the same keys.
#[derive(Clone, Debug)]
pub struct KeyStream(fastrand::Rng);

impl KeyStream {
    /// A stream seeded by `seed` (any value).
    pub fn new(seed: u64) -> KeyStream {
        KeyStream(fastrand::Rng::with_seed(seed))
    }

    /// The next 64-bit value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_thread_runs_once() {
        let ran = AtomicUsize::new(0);
        time_threads(3, |i| {
            ran.fetch_add(i + 1, Ordering::Relaxed);
        });
        assert_eq!(ran.into_inner(), 6);
    }

    #[test]
    fn key_streams_repeat_by_seed() {
        let (mut a, mut b) = (KeyStream::new(7), KeyStream::new(7));
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(first, second);
        assert_ne!(first[0], first[1]);
    }

    #[test]
    fn key_streams_differ_by_seed() {
        let (mut a, mut b) = (KeyStream::new(0), KeyStream::new(1));
        assert_ne!(a.next_u64(), b.next_u64());
    }
}

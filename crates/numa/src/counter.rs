//! Counters that many threads update without sharing a cache line.
//!
//! Two atomics in one 64-byte line make every increment on one core invalidate the
//! line in the other core's cache (false sharing): the seed measured a contended
//! counter next to a mutex losing most of its throughput to that. [`CachePadded`]
//! (crossbeam's, re-exported) gives a value a line of its own (128 bytes on x86_64
//! and aarch64, where the prefetcher pulls lines in pairs); [`StripedCounter`] spreads
//! one logical counter over several padded stripes so that threads do not contend at
//! all, and sums them when read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crossbeam_utils::CachePadded;

/// A counter for many writers and occasional readers: each thread adds to its own
/// cache-padded stripe; [`StripedCounter::sum`] adds the stripes up.
///
/// `sum` is not a snapshot: additions racing with it may or may not be included, but
/// every addition that happened before the call is (the usual contract of a
/// statistics counter, as in Java's `LongAdder`).
#[derive(Debug)]
pub struct StripedCounter {
    stripes: Box<[CachePadded<AtomicU64>]>,
}

impl StripedCounter {
    /// A counter with one stripe per CPU this process may use (a power of two).
    pub fn new() -> StripedCounter {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        StripedCounter::with_stripes(cpus)
    }

    /// A counter with `stripes` stripes, rounded up to a power of two (at least 1).
    pub fn with_stripes(stripes: usize) -> StripedCounter {
        let count = stripes.max(1).next_power_of_two();
        StripedCounter {
            stripes: (0..count)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Adds `n` (wrapping on overflow, like `AtomicU64::fetch_add`).
    #[inline]
    pub fn add(&self, n: u64) {
        let stripe = thread_slot() & (self.stripes.len() - 1);
        self.stripes[stripe].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn increment(&self) {
        self.add(1);
    }

    /// The total of every addition made before this call (and perhaps some made
    /// during it).
    pub fn sum(&self) -> u64 {
        self.stripes.iter().fold(0u64, |total, s| {
            total.wrapping_add(s.load(Ordering::Relaxed))
        })
    }

    /// The number of stripes.
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }
}

impl Default for StripedCounter {
    fn default() -> StripedCounter {
        StripedCounter::new()
    }
}

/// A small number fixed per thread, handed out round-robin, so that threads started
/// together land on different stripes.
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_sum_to_every_addition_from_every_thread() {
        let counter = StripedCounter::with_stripes(3);
        assert_eq!(counter.stripes(), 4);
        std::thread::scope(|scope| {
            for t in 0..8u64 {
                let counter = &counter;
                scope.spawn(move || {
                    for _ in 0..10_000 {
                        counter.add(t + 1);
                    }
                });
            }
        });
        assert_eq!(counter.sum(), 10_000 * (1..=8).sum::<u64>());
    }

    #[test]
    fn padded_values_do_not_share_a_line() {
        let pair = [
            CachePadded::new(AtomicU64::new(0)),
            CachePadded::new(AtomicU64::new(0)),
        ];
        let a = &*pair[0] as *const AtomicU64 as usize;
        let b = &*pair[1] as *const AtomicU64 as usize;
        assert!(b - a >= 64, "{} bytes apart", b - a);
        assert_eq!(a % 64, 0);
    }
}

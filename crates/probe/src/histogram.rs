//! Power-of-two histograms as the BPF programs fill them, and their rendering in the
//! style of bpftrace's `hist()` and libbpf-tools' runqlat.

use std::fmt::Write as _;

use serde::Serialize;

/// Number of slots; must match HIST_SLOTS in src/bpf/common.h.
pub const SLOTS: usize = 32;

/// A log2 histogram: slot 0 counts values 0 and 1, slot k (k >= 1) counts values in
/// [2^k, 2^(k+1)), and the last slot everything from 2^31 up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Log2Histogram {
    /// The unit of the values ("ns", "us").
    pub unit: &'static str,
    /// Counts per slot.
    pub slots: Vec<u64>,
}

/// Running counters minus an earlier reading of them, index by index (a counter that
/// went down, after a reset, counts from zero; one the earlier reading lacks, from zero).
pub fn counts_since(now: &[u64], earlier: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, &count)| count.saturating_sub(earlier.get(i).copied().unwrap_or(0)))
        .collect()
}

impl Log2Histogram {
    /// A histogram from per-slot counts (at most [`SLOTS`]).
    pub fn new(unit: &'static str, slots: Vec<u64>) -> Self {
        debug_assert!(slots.len() <= SLOTS);
        Log2Histogram { unit, slots }
    }

    /// What was recorded since `earlier`, an earlier reading of the same counters.
    pub fn since(&self, earlier: &Log2Histogram) -> Log2Histogram {
        Log2Histogram::new(self.unit, counts_since(&self.slots, &earlier.slots))
    }

    /// The number of values recorded.
    pub fn total(&self) -> u64 {
        self.slots.iter().sum()
    }

    /// The half-open value range `[low, high)` of `slot`.
    pub fn bounds(slot: usize) -> (u64, u64) {
        match slot {
            0 => (0, 2),
            s if s + 1 >= SLOTS => (1 << s, u64::MAX),
            s => (1 << s, 1 << (s + 1)),
        }
    }

    /// The upper bound of the slot holding the `q`-quantile (0 < q <= 1), an upper
    /// estimate of that quantile; `None` when empty.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (slot, &count) in self.slots.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Self::bounds(slot).1);
            }
        }
        None
    }

    /// The histogram as text, one line per slot from the first to the last non-empty
    /// one, with a bar scaled to the largest count:
    ///
    /// ```text
    ///      us                  : count    distribution
    ///       0 -> 1             : 3        |****                                    |
    /// ```
    pub fn render(&self) -> String {
        let mut out = String::new();
        let first = self.slots.iter().position(|&c| c > 0);
        let last = self.slots.iter().rposition(|&c| c > 0);
        let (Some(first), Some(last)) = (first, last) else {
            let _ = writeln!(out, "    (no samples)");
            return out;
        };
        let max = self.slots[first..=last]
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let _ = writeln!(out, "{:>22} : {:<10} distribution", self.unit, "count");
        for slot in first..=last {
            let (low, high) = Self::bounds(slot);
            let range = if high == u64::MAX {
                format!("{low} -> ...")
            } else {
                format!("{low} -> {}", high - 1)
            };
            let count = self.slots[slot];
            let stars = (count * 40).div_ceil(max) as usize;
            let _ = writeln!(out, "{range:>22} : {count:<10} |{:<40}|", "*".repeat(stars));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_cover_every_value_once() {
        assert_eq!(Log2Histogram::bounds(0), (0, 2));
        assert_eq!(Log2Histogram::bounds(1), (2, 4));
        assert_eq!(Log2Histogram::bounds(10), (1024, 2048));
        assert_eq!(Log2Histogram::bounds(SLOTS - 1).1, u64::MAX);
        for slot in 1..SLOTS - 1 {
            assert_eq!(
                Log2Histogram::bounds(slot).1,
                Log2Histogram::bounds(slot + 1).0
            );
        }
    }

    #[test]
    fn quantiles_and_rendering() {
        let mut slots = vec![0; SLOTS];
        slots[3] = 90; // 8..16
        slots[10] = 10; // 1024..2048
        let hist = Log2Histogram::new("us", slots);
        assert_eq!(hist.total(), 100);
        assert_eq!(hist.quantile_upper_bound(0.5), Some(16));
        assert_eq!(hist.quantile_upper_bound(0.9), Some(16));
        assert_eq!(hist.quantile_upper_bound(0.91), Some(2048));
        let text = hist.render();
        assert!(text.contains("8 -> 15"), "{text}");
        assert!(text.contains("1024 -> 2047"), "{text}");
        // The largest slot gets the full bar, the empty ones in between are shown.
        assert!(text.contains(&format!("|{}|", "*".repeat(40))), "{text}");
        assert_eq!(text.lines().count(), 1 + 8, "{text}");
        assert!(Log2Histogram::new("us", vec![0; SLOTS])
            .render()
            .contains("no samples"));
    }
}

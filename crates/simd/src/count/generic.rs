//! The count written once over [`Bytes`], for every vector width: compare each vector
//! with the needle (0xFF where equal) and subtract that from byte counters, four
//! vectors per step in four independent counters. After at most 63 steps the four
//! counters are added into one (each byte at most 4 × 63 = 252, so nothing overflows)
//! and its bytes summed: one horizontal sum per batch. The loop is a plain counted
//! loop over an offset: an iterator of chunks cost a bounds check and a counter per
//! vector, which halved the throughput.

use crate::vector::Bytes;

/// Steps of four vectors per batch: four counters of at most 63 add up to at most
/// 252, within a byte.
const BATCH: usize = 63;

/// Counts `needle` in the whole vectors at the start of `haystack`: returns the count
/// and how many bytes it covered (the rest, fewer than `V::BYTES`, is the caller's).
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn count<V: Bytes>(haystack: &[u8], needle: u8) -> (usize, usize) {
    if haystack.len() < V::BYTES {
        return (0, 0);
    }
    let start = haystack.as_ptr();
    // SAFETY: the caller guarantees V's instructions (for every V operation below,
    // too).
    let needle = unsafe { V::splat(needle) };
    let matches = |at: usize| {
        // SAFETY: every caller passes `at` with at + V::BYTES <= haystack.len().
        unsafe { V::load(start.add(at)).eq_u8(needle) }
    };
    let mut offset = 0;
    let mut total = 0;
    while haystack.len() - offset >= 4 * V::BYTES {
        let steps = ((haystack.len() - offset) / (4 * V::BYTES)).min(BATCH);
        // SAFETY: as above.
        let mut counters = unsafe { [V::zero(); 4] };
        for _ in 0..steps {
            // offset + 4 * V::BYTES <= haystack.len() for each of the `steps` steps.
            for (i, counter) in counters.iter_mut().enumerate() {
                // SAFETY: as above.
                *counter = unsafe { counter.sub_u8(matches(offset + i * V::BYTES)) };
            }
            offset += 4 * V::BYTES;
        }
        // SAFETY: as above.
        total += unsafe {
            let [a, b, c, d] = counters;
            a.add_u8(b).add_u8(c.add_u8(d)).sum_u8()
        };
    }
    if haystack.len() - offset >= V::BYTES {
        // One to three vectors are left: one counter holds them.
        // SAFETY: as above.
        let mut counter = unsafe { V::zero() };
        while haystack.len() - offset >= V::BYTES {
            // SAFETY: as above; offset + V::BYTES <= haystack.len().
            counter = unsafe { counter.sub_u8(matches(offset)) };
            offset += V::BYTES;
        }
        // SAFETY: as above.
        total += unsafe { counter.sum_u8() };
    }
    (total, offset)
}

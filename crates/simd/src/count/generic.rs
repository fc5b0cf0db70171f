//! The count written once over [`Bytes`], for every vector width: compare each vector
//! with the needle (0xFF where equal) and subtract that from byte counters. A
//! haystack of at most 255 vectors (8160 bytes at AVX2's 32) has two counters, two
//! vectors each per step of four, added at the end: no byte of their sum can pass
//! 255, so there is no batch to close and one horizontal sum. (One counter, as
//! bytecount has, is a chain of one dependent subtraction per vector, one vector per
//! cycle: with two, AVX2 on Zen 3 went from 0.99x bytecount to 1.29-1.31x at 4 KiB
//! and from 1.16x to 1.32-1.56x at 1 KiB, in the bench's interleaved rounds,
//! 2026-11-30.) Longer ones go in batches of at most 63 steps of four vectors into
//! four independent counters, which are then added into one (each byte at most 4 × 63
//! = 252, so nothing overflows) and its bytes summed: one horizontal sum per batch.
//! Below 256 vectors these batches of four counters measured slower
//! (5.8 against 4.7 ns at 256 bytes, AVX2, on an AVX-512 Xeon): their zeroing,
//! merging and the batch loop's bookkeeping cost more than the longer dependency
//! chain, which the next call's work overlaps. The loops are plain counted loops over
//! an offset: an iterator of chunks cost a bounds check and a counter per vector,
//! which halved the throughput. The bytes after the last whole vector are counted by
//! one more vector ending at the haystack's end, with the bytes already counted
//! masked off (as bytecount does), rather than by a scalar loop.

use crate::vector::{keep_last, Bytes};

/// Steps of four vectors per batch: four counters of at most 63 add up to at most
/// 252, within a byte.
const BATCH: usize = 63;

/// Haystacks of at most this many vectors (the last one partial or not) have one
/// counter: at most 255 per byte.
const SHORT: usize = 255;

/// How many bytes of `haystack` equal `needle`; `haystack` has at least `V::BYTES`
/// bytes.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn count<V: Bytes>(haystack: &[u8], needle: u8) -> usize {
    assert!(
        haystack.len() >= V::BYTES,
        "the caller counts shorter haystacks"
    );
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
    if haystack.len() <= SHORT * V::BYTES {
        // Two counters, each two vectors per step: together at most SHORT per byte.
        // SAFETY: as above.
        let (mut even, mut odd) = unsafe { (V::zero(), V::zero()) };
        while haystack.len() - offset >= 4 * V::BYTES {
            // SAFETY: as above; offset + 4 * V::BYTES <= haystack.len().
            unsafe {
                even = even
                    .sub_u8(matches(offset))
                    .sub_u8(matches(offset + 2 * V::BYTES));
                odd = odd
                    .sub_u8(matches(offset + V::BYTES))
                    .sub_u8(matches(offset + 3 * V::BYTES));
            }
            offset += 4 * V::BYTES;
        }
        // SAFETY: as above; the two counters add up to at most SHORT - (the vectors
        // left) per byte.
        return unsafe { rest(haystack, offset, even.add_u8(odd), matches) };
    }
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
    if offset == haystack.len() {
        return total;
    }
    // Up to three whole vectors and a partial one are left: one counter holds them
    // (at most 4 per byte).
    // SAFETY: as above.
    total + unsafe { rest(haystack, offset, V::zero(), matches) }
}

/// The vectors of `haystack` from `offset` on (at most three whole ones and a partial
/// one, beyond what `counter` may already hold up to 255 per byte), subtracted from
/// `counter`, and its bytes summed.
///
/// # Safety
/// The CPU must support `V`'s instructions; `haystack` has at least `V::BYTES` bytes,
/// and `matches(at)` compares the vector at `at` with the needle.
#[inline(always)]
unsafe fn rest<V: Bytes>(
    haystack: &[u8],
    mut offset: usize,
    mut counter: V,
    matches: impl Fn(usize) -> V,
) -> usize {
    while haystack.len() - offset >= V::BYTES {
        // SAFETY: the caller guarantees V's instructions; offset + V::BYTES <=
        // haystack.len().
        counter = unsafe { counter.sub_u8(matches(offset)) };
        offset += V::BYTES;
    }
    let rest = haystack.len() - offset;
    if rest > 0 {
        // SAFETY: as above; the vector ends at haystack.len() >= V::BYTES.
        counter = unsafe { counter.sub_u8(keep_last(matches(haystack.len() - V::BYTES), rest)) };
    }
    // SAFETY: as above.
    unsafe { counter.sum_u8() }
}

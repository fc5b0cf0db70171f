//! x86_64 kernels. Each compares a vector of bytes with the needle (0xFF where equal)
//! and subtracts the result from byte counters, up to 255 vectors at a time, then adds
//! the counters up with `psadbw` against zero.

use core::arch::x86_64::*;

/// Vectors per batch: a byte counter holds at most 255.
const BATCH: usize = 255;

/// SSE2, 16 bytes per step.
///
/// # Safety
/// None beyond x86_64 (SSE2 is part of the baseline).
#[target_feature(enable = "sse2")]
pub(super) unsafe fn count_sse2(haystack: &[u8], needle: u8) -> usize {
    let needle_v = _mm_set1_epi8(needle as i8);
    let mut chunks = haystack.chunks_exact(16);
    let mut total = 0usize;
    loop {
        let mut counters = _mm_setzero_si128();
        let mut taken = 0;
        for chunk in chunks.by_ref().take(BATCH) {
            // SAFETY: chunk is 16 readable bytes; loadu has no alignment requirement.
            let bytes = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
            counters = _mm_sub_epi8(counters, _mm_cmpeq_epi8(bytes, needle_v));
            taken += 1;
        }
        let sums = _mm_sad_epu8(counters, _mm_setzero_si128());
        total += (_mm_cvtsi128_si64(sums) + _mm_extract_epi16::<4>(sums) as i64) as usize;
        if taken < BATCH {
            break;
        }
    }
    total + super::scalar::count(chunks.remainder(), needle)
}

/// AVX2, 32 bytes per step.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn count_avx2(haystack: &[u8], needle: u8) -> usize {
    let needle_v = _mm256_set1_epi8(needle as i8);
    let mut chunks = haystack.chunks_exact(32);
    let mut total = 0usize;
    loop {
        let mut counters = _mm256_setzero_si256();
        let mut taken = 0;
        for chunk in chunks.by_ref().take(BATCH) {
            // SAFETY: chunk is 32 readable bytes; loadu has no alignment requirement.
            let bytes = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
            counters = _mm256_sub_epi8(counters, _mm256_cmpeq_epi8(bytes, needle_v));
            taken += 1;
        }
        let sums = _mm256_sad_epu8(counters, _mm256_setzero_si256());
        total += (_mm256_extract_epi64::<0>(sums)
            + _mm256_extract_epi64::<1>(sums)
            + _mm256_extract_epi64::<2>(sums)
            + _mm256_extract_epi64::<3>(sums)) as usize;
        if taken < BATCH {
            break;
        }
    }
    // The tail in 16-byte steps, then bytes.
    // SAFETY: AVX2 implies SSE2.
    total + unsafe { count_sse2(chunks.remainder(), needle) }
}

/// AVX-512 BW, 64 bytes per step: the comparison gives a 64-bit mask whose population
/// count is the number of matches.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn count_avx512bw(haystack: &[u8], needle: u8) -> usize {
    let needle_v = _mm512_set1_epi8(needle as i8);
    let mut chunks = haystack.chunks_exact(256);
    let mut total = 0usize;
    for block in chunks.by_ref() {
        // Four independent compares per step keep the popcounts off the critical path.
        let mut matches = 0u32;
        for quarter in block.chunks_exact(64) {
            // SAFETY: quarter is 64 readable bytes; loadu has no alignment requirement.
            let bytes = unsafe { _mm512_loadu_si512(quarter.as_ptr().cast()) };
            matches += _mm512_cmpeq_epi8_mask(bytes, needle_v).count_ones();
        }
        total += matches as usize;
    }
    let rest = chunks.remainder();
    let mut tail = rest.chunks_exact(64);
    for quarter in tail.by_ref() {
        // SAFETY: as above.
        let bytes = unsafe { _mm512_loadu_si512(quarter.as_ptr().cast()) };
        total += _mm512_cmpeq_epi8_mask(bytes, needle_v).count_ones() as usize;
    }
    let last = tail.remainder();
    if !last.is_empty() {
        // A masked load reads only the bytes that exist.
        let mask: __mmask64 = (1u64 << last.len()) - 1;
        // SAFETY: the mask covers exactly last.len() readable bytes; masked-off lanes
        // are not accessed.
        let bytes = unsafe { _mm512_maskz_loadu_epi8(mask, last.as_ptr().cast()) };
        total += (_mm512_cmpeq_epi8_mask(bytes, needle_v) & mask).count_ones() as usize;
    }
    total
}

//! x86_64 kernels. For each block of W-byte chunks they keep, per vector lane:
//! `s1` (bytes summed with `psadbw`), `prefix` (the running sum of `s1` before each
//! chunk, so `W·prefix` is what earlier chunks add to `b`) and `s2` (each chunk's bytes
//! weighted W..1 with `pmaddubsw` + `pmaddwd`). Then
//! `a' = a + Σs1` and `b' = b + n·a + W·Σprefix + Σs2` (see `fold_block`), exactly
//! the scalar recurrence unrolled over the block.
//!
//! Lane bounds for blocks of at most 5552 bytes: `s1` ≤ 347·2040 and `prefix` ≤
//! 347·708 000 < 2^31 with 16-byte chunks (wider chunks give smaller bounds).

use core::arch::x86_64::*;

use super::fold_block;

/// Bytes per block before folding, as in zlib (NMAX).
const BLOCK: usize = 5552;

/// Chunk weights W..1 for `pmaddubsw`, for the largest W (64); narrower kernels use
/// the last W entries.
const WEIGHTS: [i8; 64] = {
    let mut weights = [0i8; 64];
    let mut i = 0;
    while i < 64 {
        weights[i] = (64 - i) as i8;
        i += 1;
    }
    weights
};

/// SSSE3, 16-byte chunks.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn update_ssse3(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32) {
    const W: usize = 16;
    // SAFETY: WEIGHTS[48..] is 16 readable bytes.
    let weights = unsafe { _mm_loadu_si128(WEIGHTS[64 - W..].as_ptr().cast()) };
    let ones = _mm_set1_epi16(1);
    let zero = _mm_setzero_si128();
    let whole = bytes.len() / W * W;
    for block in bytes[..whole].chunks(BLOCK / W * W) {
        let (mut s1, mut prefix, mut s2) = (zero, zero, zero);
        for chunk in block.chunks_exact(W) {
            // SAFETY: chunk is W readable bytes; loadu has no alignment requirement.
            let v = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
            prefix = _mm_add_epi32(prefix, s1);
            s1 = _mm_add_epi32(s1, _mm_sad_epu8(v, zero));
            s2 = _mm_add_epi32(s2, _mm_madd_epi16(_mm_maddubs_epi16(v, weights), ones));
        }
        let s2_total = W as u64 * sum128(prefix) + sum128(s2);
        (a, b) = fold_block(a, b, block.len(), sum128(s1), s2_total);
    }
    super::scalar::update(a, b, &bytes[whole..])
}

/// The sum of the four 32-bit lanes.
#[inline]
#[target_feature(enable = "ssse3")]
fn sum128(v: __m128i) -> u64 {
    let pairs = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
    let total = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
    u64::from(_mm_cvtsi128_si32(total) as u32)
}

/// AVX2, 32-byte chunks.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn update_avx2(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32) {
    const W: usize = 32;
    // SAFETY: WEIGHTS[32..] is 32 readable bytes.
    let weights = unsafe { _mm256_loadu_si256(WEIGHTS[64 - W..].as_ptr().cast()) };
    let ones = _mm256_set1_epi16(1);
    let zero = _mm256_setzero_si256();
    let whole = bytes.len() / W * W;
    for block in bytes[..whole].chunks(BLOCK / W * W) {
        let (mut s1, mut prefix, mut s2) = (zero, zero, zero);
        for chunk in block.chunks_exact(W) {
            // SAFETY: chunk is W readable bytes; loadu has no alignment requirement.
            let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
            prefix = _mm256_add_epi32(prefix, s1);
            s1 = _mm256_add_epi32(s1, _mm256_sad_epu8(v, zero));
            s2 = _mm256_add_epi32(
                s2,
                _mm256_madd_epi16(_mm256_maddubs_epi16(v, weights), ones),
            );
        }
        let s2_total = W as u64 * sum256(prefix) + sum256(s2);
        (a, b) = fold_block(a, b, block.len(), sum256(s1), s2_total);
    }
    // SAFETY: AVX2 implies SSSE3.
    unsafe { update_ssse3(a, b, &bytes[whole..]) }
}

/// The sum of the eight 32-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn sum256(v: __m256i) -> u64 {
    let halves = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    sum128(halves)
}

/// AVX-512 BW, 64-byte chunks.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn update_avx512bw(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32) {
    const W: usize = 64;
    // SAFETY: WEIGHTS is 64 readable bytes.
    let weights = unsafe { _mm512_loadu_si512(WEIGHTS.as_ptr().cast()) };
    let ones = _mm512_set1_epi16(1);
    let zero = _mm512_setzero_si512();
    let whole = bytes.len() / W * W;
    for block in bytes[..whole].chunks(BLOCK / W * W) {
        let (mut s1, mut prefix, mut s2) = (zero, zero, zero);
        for chunk in block.chunks_exact(W) {
            // SAFETY: chunk is W readable bytes; loadu has no alignment requirement.
            let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
            prefix = _mm512_add_epi32(prefix, s1);
            s1 = _mm512_add_epi32(s1, _mm512_sad_epu8(v, zero));
            s2 = _mm512_add_epi32(
                s2,
                _mm512_madd_epi16(_mm512_maddubs_epi16(v, weights), ones),
            );
        }
        let sum = |v: __m512i| u64::from(_mm512_reduce_add_epi32(v) as u32);
        let s2_total = W as u64 * sum(prefix) + sum(s2);
        (a, b) = fold_block(a, b, block.len(), sum(s1), s2_total);
    }
    // SAFETY: AVX-512 BW implies AVX2.
    unsafe { update_avx2(a, b, &bytes[whole..]) }
}

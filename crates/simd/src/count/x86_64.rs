//! x86_64 instances of the count (`generic.rs`): AVX2 (32 bytes per vector) and SSE2
//! (16); the scalar loop for haystacks shorter than a vector.
//!
//! There is no AVX-512 kernel: one (compare into a mask, masked add into byte
//! counters, 64 bytes per step) ran at 0.6-0.8x of AVX2 on an AVX-512 Xeon at 1 KiB to
//! 1 MiB, as 512-bit operations have two vector ports where 256-bit ones have three.

use super::generic;
use crate::vector::x86_64::{V128, V256};

/// SSE2, 16 bytes per vector; the scalar loop for haystacks shorter than one.
///
/// # Safety
/// None beyond x86_64 (SSE2 is part of the baseline).
#[inline]
#[target_feature(enable = "sse2")]
pub(super) unsafe fn count_sse2(haystack: &[u8], needle: u8) -> usize {
    if haystack.len() < 16 {
        return super::scalar::count(haystack, needle);
    }
    // SAFETY: this function's target features are V128's.
    unsafe { generic::count::<V128>(haystack, needle) }
}

/// AVX2, 32 bytes per vector; SSE2's 16 for haystacks shorter than one, and the
/// scalar loop for those shorter than that.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn count_avx2(haystack: &[u8], needle: u8) -> usize {
    match haystack.len() {
        0..16 => super::scalar::count(haystack, needle),
        // SAFETY: AVX2 implies V128's SSE2.
        16..32 => unsafe { generic::count::<V128>(haystack, needle) },
        // SAFETY: this function's target features are V256's.
        _ => unsafe { generic::count::<V256>(haystack, needle) },
    }
}

//! x86_64 instances of the count (`generic.rs`): AVX2 (32 bytes per vector) and SSE2
//! (16); the scalar loop for haystacks shorter than a vector. AVX-512 BW is a
//! different algorithm, written here directly: each 64 bytes compared into a mask
//! whose bits `popcnt` counts; on Zen 4, from 512 bytes, AVX2's
//! ([`count_avx512bw_split`]).
//!
//! An earlier AVX-512 kernel (compare into a mask, masked add into byte counters, 64
//! bytes per step) ran at 0.6-0.8x of AVX2 on an AVX-512 Xeon at 1 KiB to 1 MiB, as
//! 512-bit operations have two vector ports where 256-bit ones have three; counting
//! the masks' bits moves half the work to the scalar ports (`kmov`, `popcnt`, `add`)
//! and needs no horizontal sum. On Zen 4, which compares into masks at half the rate
//! of AVX2's compares into vectors, it takes AVX2's kernel from 512 bytes.

use core::arch::x86_64::*;

use super::generic;
use crate::vector::x86_64::{V128, V256};

/// SSE2, 16 bytes per vector; the scalar loop for haystacks shorter than one. In
/// builds that enable POPCNT, 16 to 32 bytes are `count_two_masks`' (not a link: the
/// function exists only in those builds).
///
/// # Safety
/// None beyond x86_64 (SSE2 is part of the baseline).
#[inline]
#[target_feature(enable = "sse2")]
pub(super) unsafe fn count_sse2(haystack: &[u8], needle: u8) -> usize {
    if haystack.len() < 16 {
        return super::scalar::count(haystack, needle);
    }
    #[cfg(target_feature = "popcnt")]
    if haystack.len() <= 32 {
        // SAFETY: the build enables SSE2 and POPCNT; 16 <= len <= 32.
        return unsafe { count_two_masks(haystack, needle) };
    }
    // SAFETY: this function's target features are V128's.
    unsafe { generic::count::<V128>(haystack, needle) }
}

/// 16 to 32 bytes: the first 16 and the last 16 compared into two 16-bit masks,
/// whose bits `popcnt` counts, those of the last shifted to drop the bytes the first
/// holds. Three dependent instructions per mask, where subtracting into a byte counter
/// and summing it (`psadbw`, two extracts, an add) is a longer chain: at 16 bytes in a
/// native build the counter's way took 2.78 ns against bytecount's 2.47 (0.89x), the
/// masks 1.85 ns (1.33x), the other sizes unchanged (Zen 3, the bench's interleaved
/// rounds, 2026-11-30). Taken where `count` takes SSE2 in line, not ahead of it: a
/// test of the length before the others slowed 64 and 256 bytes by 10-20 %.
///
/// # Safety
/// The CPU must support SSE2 and POPCNT (the build enables the latter);
/// `haystack` has 16 to 32 bytes.
#[cfg(target_feature = "popcnt")]
#[inline]
#[target_feature(enable = "sse2,popcnt")]
unsafe fn count_two_masks(haystack: &[u8], needle: u8) -> usize {
    let len = haystack.len();
    debug_assert!((16..=32).contains(&len), "{len} bytes");
    let start = haystack.as_ptr();
    let needle = _mm_set1_epi8(needle as i8);
    // SAFETY: 16 <= len: both 16-byte loads are inside the haystack (unaligned loads).
    let (first, last) = unsafe {
        (
            _mm_loadu_si128(start.cast()),
            _mm_loadu_si128(start.add(len - 16).cast()),
        )
    };
    let first = _mm_movemask_epi8(_mm_cmpeq_epi8(first, needle)) as u32;
    let last = _mm_movemask_epi8(_mm_cmpeq_epi8(last, needle)) as u32;
    // Bit i of `last` is byte len - 16 + i: its first 32 - len bits are bytes `first`
    // has counted.
    (first.count_ones() + (last >> (32 - len)).count_ones()) as usize
}

/// AVX2, 32 bytes per vector; SSE2's 16 for haystacks shorter than one, and the
/// scalar loop for those shorter than that.
///
/// # Safety
/// The CPU must support AVX2.
#[inline]
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

/// From this many bytes, CPUs that split 512-bit operations (Zen 4) count with the
/// AVX2 kernel ([`count_avx512bw_split`]): there the masks ran at 118 GB/s from 1 to
/// 16 KiB, where AVX2 ran at 171-215 (Zen 4 compares into mask registers at half the
/// rate of 256-bit compares into vectors), but shorter haystacks were faster with the
/// masks (256 bytes: 3.25 against 3.79 ns).
const AVX2_FROM_WHERE_SPLIT: usize = 512;

/// AVX-512 BW: 64 bytes per step compared into a 64-bit mask, whose set bits
/// `popcnt` counts ([`count_masks`]); AVX2's kernel for haystacks shorter than 64
/// bytes.
///
/// # Safety
/// The CPU must support AVX-512 F and BW, AVX2 and POPCNT.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,popcnt")]
pub(super) unsafe fn count_avx512bw(haystack: &[u8], needle: u8) -> usize {
    if haystack.len() < 64 {
        // SAFETY: this function's target features include AVX2.
        return unsafe { count_avx2(haystack, needle) };
    }
    // SAFETY: 64 bytes or more; this function's target features are count_masks'.
    unsafe { count_masks(haystack, needle) }
}

/// [`count_avx512bw`] for CPUs that split 512-bit operations
/// (`crate::dispatch::x86_splits_512_bit`, Zen 4), chosen as such by the dispatcher:
/// the masks from 64 bytes up to [`AVX2_FROM_WHERE_SPLIT`], AVX2's kernel elsewhere.
/// Until issue 57 one function asked at each call whether the CPU splits them, and
/// with the question's cold path in it every call saved and restored three registers
/// and jumped on to AVX2's function: 1 KiB took 7.86 ns there against 7.04 through
/// AVX2's own entry (the simd table's portable build on Zen 4, one run). Here, with
/// the longest haystacks tested first: 1 KiB 7.85 -> 6.50 ns, 2000 bytes 12.0 -> 11.3,
/// 300 bytes 4.06 -> 3.79 (a plain loop, portable build, Zen 4; AVX2's own entry 6.77
/// at 1 KiB, bytecount 7.31-7.85 as the build places it).
///
/// # Safety
/// As for [`count_avx512bw`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,popcnt")]
pub(super) unsafe fn count_avx512bw_split(haystack: &[u8], needle: u8) -> usize {
    let len = haystack.len();
    if len >= AVX2_FROM_WHERE_SPLIT {
        // SAFETY: this function's target features include V256's AVX2.
        unsafe { generic::count::<V256>(haystack, needle) }
    } else if len >= 64 {
        // SAFETY: 64 <= len; this function's target features are count_masks'.
        unsafe { count_masks(haystack, needle) }
    } else {
        // SAFETY: this function's target features include AVX2.
        unsafe { count_avx2(haystack, needle) }
    }
}

/// Each 64 bytes compared into a 64-bit mask, whose set bits `popcnt` counts, two
/// masks per step into two totals; the bytes after the last whole step are one more
/// compare ending at the haystack's end, shifted to drop the bytes already counted.
///
/// # Safety
/// The CPU must support AVX-512 F and BW and POPCNT; `haystack` has 64 bytes or more.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,popcnt")]
unsafe fn count_masks(haystack: &[u8], needle: u8) -> usize {
    let len = haystack.len();
    debug_assert!(len >= 64, "{len} bytes");
    let start = haystack.as_ptr();
    let needles = _mm512_set1_epi8(needle as i8);
    let matches = |at: usize| {
        // SAFETY: every caller passes `at` with at + 64 <= len; loadu has no alignment
        // requirement.
        let bytes = unsafe { _mm512_loadu_si512(start.add(at).cast()) };
        _mm512_cmpeq_epi8_mask(bytes, needles)
    };
    let (mut offset, mut first, mut second) = (0, 0, 0);
    while len - offset >= 128 {
        first += matches(offset).count_ones() as usize;
        second += matches(offset + 64).count_ones() as usize;
        offset += 128;
    }
    if len - offset >= 64 {
        first += matches(offset).count_ones() as usize;
        offset += 64;
    }
    let rest = len - offset;
    if rest > 0 {
        // The last 64 bytes (len >= 64); their first 64 - rest were counted above
        // (rest is 1 to 63).
        second += (matches(len - 64) >> (64 - rest)).count_ones() as usize;
    }
    first + second
}

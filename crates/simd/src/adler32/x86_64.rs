//! x86_64 kernels, written once over [`Sums`] and instantiated for SSSE3 (16-byte
//! chunks), AVX2 (32) and AVX-512 BW (64). For each block of W-byte chunks they keep,
//! per vector lane: `s1` (bytes summed with `psadbw`), `prefix` (the running sum of
//! `s1` before each chunk, so `W·prefix` is what earlier chunks add to `b`) and `s2`
//! (each chunk's bytes weighted W..1 with `pmaddubsw`; the 16-bit results of up to
//! 4 chunks, as many as cannot overflow, are added before one `pmaddwd` widens them).
//! Then `a' = a + Σs1` and `b' = b + n·a + W·Σprefix + Σs2` (see `fold_block`),
//! exactly the scalar recurrence unrolled over the block. The bytes after the last whole chunk
//! (fewer than W) are one more chunk ending at the input's end, its bytes already
//! taken zeroed: weighted W..1, its last `r` bytes get r..1, as a chunk of `r` bytes
//! would. Inputs of one or two AVX2 chunks (32-64 bytes; 16-31 in SSSE3 chunks too
//! where AVX2 is taken in line) take no loop and one fold (`update_short`: the first
//! chunk weighted as if followed by the rest, the rest as one masked chunk); inputs
//! shorter than a chunk take a narrower width (AVX2 runs SSSE3 chunks in line), and
//! those shorter than 16 bytes the scalar loop.
//!
//! Lane bounds for blocks of at most NMAX (5552) bytes: `s1` ≤ 347·2040 and `prefix` ≤
//! 347·708 000 < 2^31 with 16-byte chunks (wider chunks give smaller bounds).

use super::block::{fold_block, NMAX};
use crate::vector::x86_64::{V128, V256, V512};
use crate::vector::{keep_last, Bytes, Sums};

/// Chunk weights W..1 for `pmaddubsw`, for the largest W (64); narrower kernels use
/// the last W entries.
const WEIGHTS: [u8; 64] = {
    let mut weights = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        weights[i] = (64 - i) as u8;
        i += 1;
    }
    weights
};

/// Chunks whose weighted pair sums (`pmaddubsw`) can be added in 16 bits before they
/// are widened to 32 (`pmaddwd`, the second multiply): a 16-bit lane of one chunk is at
/// most (W + W-1)·255, and the sum of `n` must stay below 2^15. 4 for SSSE3's 16-byte
/// chunks, 2 for AVX2's 32, 1 for AVX-512's 64.
const fn chunks_per_widening(width: usize) -> usize {
    let most = 32767 / ((2 * width - 1) * 255);
    if most == 0 {
        1
    } else {
        most
    }
}

/// Adds the whole chunks at the start of `bytes` to (a, b): returns the new (a, b)
/// and how many bytes that was (the rest, less than `V::BYTES`, is the caller's).
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
unsafe fn update<V: Sums>(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32, usize) {
    let width = V::BYTES;
    let group = chunks_per_widening(width) * width;
    // SAFETY: the caller guarantees V's instructions (for every V operation below,
    // too); WEIGHTS[64 - width..] is `width` readable bytes.
    let weights = unsafe { V::load(WEIGHTS[64 - width..].as_ptr()) };
    let whole = bytes.len() / width * width;
    for block in bytes[..whole].chunks(NMAX / group * group) {
        // SAFETY: as above.
        let (mut s1, mut prefix, mut s2) = unsafe { (V::zero(), V::zero(), V::zero()) };
        let mut add_chunk = |chunk: &[u8]| {
            // SAFETY: as above; chunk is `width` readable bytes.
            unsafe {
                let v = V::load(chunk.as_ptr());
                prefix = prefix.add_u32(s1);
                s1 = s1.add_u32(v.sum_bytes_u64());
                v.dot_u8_i8_pairs(weights)
            }
        };
        let mut groups = block.chunks_exact(group);
        for chunks in &mut groups {
            // SAFETY: as above.
            let mut pairs = unsafe { V::zero() };
            for chunk in chunks.chunks_exact(width) {
                // SAFETY: as above; below 2^15 per lane by `chunks_per_widening`.
                pairs = unsafe { pairs.add_u16(add_chunk(chunk)) };
            }
            // SAFETY: as above.
            s2 = unsafe { s2.add_u32(pairs.widen_i16_pairs()) };
        }
        for chunk in groups.remainder().chunks_exact(width) {
            // SAFETY: as above.
            s2 = unsafe { s2.add_u32(add_chunk(chunk).widen_i16_pairs()) };
        }
        // W·prefix + s2, what the block adds to b besides n·a, is below 2^32 in
        // every lane and in their sum, as NMAX is chosen for: one horizontal
        // sum for it.
        // SAFETY: as above.
        let (s1, s2) = unsafe {
            let scaled = prefix.shl_u32(width.trailing_zeros()).add_u32(s2);
            (s1.sum_u32(), scaled.sum_u32())
        };
        (a, b) = fold_block(a, b, block.len(), s1, s2);
    }
    (a, b, whole)
}

/// Adds all of `bytes`, at least `V::BYTES` of them, to (a, b): the whole chunks,
/// then the rest as one masked chunk.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
unsafe fn update_all<V: Sums + Bytes>(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() >= V::BYTES, "the caller takes shorter inputs");
    // SAFETY: the caller guarantees V's instructions.
    let (a, b, whole) = unsafe { update::<V>(a, b, bytes) };
    let rest = bytes.len() - whole;
    if rest == 0 {
        return (a, b);
    }
    // SAFETY: as above; V::BYTES readable bytes end at bytes.len() >= V::BYTES, and
    // WEIGHTS[64 - V::BYTES..] is V::BYTES readable bytes.
    let (s1, s2) = unsafe {
        let last = V::load(bytes.as_ptr().add(bytes.len() - V::BYTES));
        let chunk = keep_last(last, rest);
        let weights = V::load(WEIGHTS[64 - V::BYTES..].as_ptr());
        (
            chunk.sum_bytes_u64().sum_u32(),
            chunk.dot_u8_i8(weights).sum_u32(),
        )
    };
    fold_block(a, b, rest, s1, s2)
}

/// Adds `bytes`, `V::BYTES` to `2·V::BYTES` of them, to (a, b) with no loop and one
/// fold: the first chunk, and the `r` bytes after it as one more chunk ending at the
/// input's end, masked. The first chunk's bytes are followed by `r` more, so its
/// weights are W+r..1+r (at most 2W = 64 for AVX2, whose adjacent pairs stay below
/// 128, so `pmaddubsw` never saturates); each chunk is widened on its own, as the two
/// together may pass 2^15 in a 16-bit lane.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
unsafe fn update_short<V: Sums + Bytes>(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    let width = V::BYTES;
    const {
        assert!(
            V::BYTES <= 32,
            "weights W+r..1+r fit pmaddubsw up to W = 32"
        )
    };
    assert!(
        (width..=2 * width).contains(&bytes.len()),
        "one or two chunks"
    );
    let rest = bytes.len() - width;
    // SAFETY: the caller guarantees V's instructions; `width` readable bytes start at
    // bytes[0] and at bytes[rest] (rest + width = bytes.len()), and
    // WEIGHTS[64 - width..] is `width` readable bytes.
    let (s1, s2) = unsafe {
        let weights = V::load(WEIGHTS[64 - width..].as_ptr());
        let first = V::load(bytes.as_ptr());
        if rest == 0 {
            // Exactly one chunk: no masked second one (half the work).
            let (s1, s2) = (first.sum_bytes_u64(), first.dot_u8_i8(weights));
            return fold_block(a, b, width, s1.sum_u32(), s2.sum_u32());
        }
        let last = keep_last(V::load(bytes.as_ptr().add(rest)), rest);
        // rest ≤ width ≤ 32.
        let first_weights = weights.add_u8(V::splat(rest as u8));
        let s1 = first.sum_bytes_u64().add_u32(last.sum_bytes_u64());
        let s2 = first
            .dot_u8_i8(first_weights)
            .add_u32(last.dot_u8_i8(weights));
        (s1.sum_u32(), s2.sum_u32())
    };
    fold_block(a, b, bytes.len(), s1, s2)
}

/// SSSE3, 16-byte chunks; the scalar loop for inputs shorter than one.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn update_ssse3(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    if bytes.len() < 16 {
        return super::scalar::update(a, b, bytes);
    }
    // SAFETY: this function's target features are V128's.
    unsafe { update_all::<V128>(a, b, bytes) }
}

/// The longest input taken without a loop: two AVX2 chunks.
const SHORT_MAX: usize = 64;

/// AVX2 up to [`SHORT_MAX`] bytes, in line, for builds that enable AVX2 at compile
/// time (see `Adler32::update`): the scalar loop below 16 bytes, one or two SSSE3
/// chunks below 32, one or two AVX2 chunks up to 64, none of them a loop. (Behind the
/// dispatch, [`update_avx2`] keeps SSSE3's loop for 16-31 bytes: the loop-free SSSE3
/// chunks measured 0.66-0.90x of it at 16 B there, in five interleaved runs.)
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_feature = "avx2")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn update_avx2_short(a: u32, b: u32, bytes: &[u8]) -> Option<(u32, u32)> {
    match bytes.len() {
        0..16 => Some(super::scalar::update(a, b, bytes)),
        // SAFETY: AVX2 implies V128's SSSE3.
        16..32 => Some(unsafe { update_short::<V128>(a, b, bytes) }),
        // SAFETY: this function's target features are V256's.
        32..=SHORT_MAX => Some(unsafe { update_short::<V256>(a, b, bytes) }),
        _ => None,
    }
}

/// [`update_avx2`] in line, for builds that enable AVX2 at compile time (see
/// `Adler32::update`): [`update_avx2_short`] up to [`SHORT_MAX`] bytes, the loop of
/// 32-byte chunks beyond.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_feature = "avx2")]
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn update_avx2_in_line(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    // SAFETY: this function's target features are V256's and update_avx2_short's.
    unsafe { update_avx2_short(a, b, bytes).unwrap_or_else(|| update_all::<V256>(a, b, bytes)) }
}

/// AVX2, 32-byte chunks: one or two of them without a loop up to [`SHORT_MAX`]
/// bytes; SSSE3's 16 for inputs shorter than one, and the scalar loop for those
/// shorter than that.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn update_avx2(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    match bytes.len() {
        0..16 => super::scalar::update(a, b, bytes),
        // SAFETY: AVX2 implies V128's SSSE3.
        16..32 => unsafe { update_all::<V128>(a, b, bytes) },
        // SAFETY: this function's target features are V256's.
        32..=SHORT_MAX => unsafe { update_short::<V256>(a, b, bytes) },
        // SAFETY: as above.
        _ => unsafe { update_all::<V256>(a, b, bytes) },
    }
}

/// Below this many bytes the AVX-512 kernel takes AVX2's 32-byte chunks: on Zen 4,
/// which runs 512-bit operations as two 256-bit halves, 64-byte chunks are no faster
/// from 1 KiB up and 15-20 % slower at 64 and 256 B (one 512-bit chunk costs what two
/// 256-bit ones do, and its horizontal sums take longer).
pub(super) const AVX512_FROM: usize = 1024;

/// AVX-512 BW, 64-byte chunks from [`AVX512_FROM`] bytes; AVX2 below.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn update_avx512bw(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    if bytes.len() < AVX512_FROM {
        // SAFETY: AVX-512 BW implies AVX2.
        return unsafe { update_avx2(a, b, bytes) };
    }
    // SAFETY: this function's target features are V512's.
    let (a, b, done) = unsafe { update::<V512>(a, b, bytes) };
    // SAFETY: AVX-512 BW implies AVX2.
    unsafe { update_avx2(a, b, &bytes[done..]) }
}

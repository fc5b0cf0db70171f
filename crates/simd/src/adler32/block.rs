//! Folding a block's vector sums into the checksum, shared by the SIMD kernels.

use super::scalar::MOD;

/// zlib's NMAX: the most bytes a block may have for [`fold_block`] to stay in 32 bits.
pub(super) const NMAX: usize = 5552;

/// Folds the sums of one block of `n` bytes into (a, b): `a' = a + s1` and
/// `b' = b + n·a + s2`, reduced modulo MOD, where `s1` is the block's byte sum and `s2`
/// what its bytes add to `b` besides `n·a` (each byte weighted by the positions from
/// it to the block's end, at most 255·n(n+1)/2). With `n` ≤ NMAX and `a`, `b` ≤
/// 0xFFFF (a checksum's halves, reduced or not), `b + n·a + s2` ≤ (n+1)·0xFFFF +
/// 255·n(n+1)/2 < 2^32, which is how zlib chose NMAX: 32-bit arithmetic, two
/// reductions.
#[inline]
pub(super) fn fold_block(a: u32, b: u32, n: usize, s1: u32, s2: u32) -> (u32, u32) {
    debug_assert!(n <= NMAX && a <= 0xFFFF && b <= 0xFFFF, "see NMAX");
    // n ≤ NMAX, asserted above.
    let n = n as u32;
    ((a + s1) % MOD, (b + n * a + s2) % MOD)
}

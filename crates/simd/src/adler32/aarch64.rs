//! aarch64 NEON kernel. Per 32-byte chunk it adds the bytes into `s1` (pairwise
//! widening adds), the running `s1` into `prefix`, and each byte position into its own
//! 16-bit column sum; at the end of a block the columns are weighted 32..1 with
//! widening multiply-adds. As on x86_64, `fold_block` turns the sums into (a, b).
//!
//! Bounds for 4096-byte blocks (128 chunks): a column ≤ 128·255 < 2^16, `s1` lane ≤
//! 128·8·255 and `prefix` ≤ 128 times that, far below 2^32.

use core::arch::aarch64::*;

use super::block::fold_block;

const W: usize = 32;
const BLOCK: usize = 4096;

/// Column weights 32..1, in four vectors of eight.
const WEIGHTS: [u16; 32] = {
    let mut weights = [0u16; 32];
    let mut i = 0;
    while i < 32 {
        weights[i] = (32 - i) as u16;
        i += 1;
    }
    weights
};

/// NEON, 32-byte chunks.
///
/// # Safety
/// The CPU must support NEON (every aarch64 Linux CPU does).
#[target_feature(enable = "neon")]
pub(super) unsafe fn update_neon(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32) {
    // SAFETY: WEIGHTS is 32 u16s; each load reads 8 of them.
    let weights = unsafe {
        [
            vld1q_u16(WEIGHTS.as_ptr()),
            vld1q_u16(WEIGHTS.as_ptr().add(8)),
            vld1q_u16(WEIGHTS.as_ptr().add(16)),
            vld1q_u16(WEIGHTS.as_ptr().add(24)),
        ]
    };
    let whole = bytes.len() / W * W;
    for block in bytes[..whole].chunks(BLOCK) {
        let mut s1 = vdupq_n_u32(0);
        let mut prefix = vdupq_n_u32(0);
        let mut columns = [vdupq_n_u16(0); 4];
        for chunk in block.chunks_exact(W) {
            // SAFETY: chunk is 32 readable bytes; each load reads 16 of them.
            let (low, high) =
                unsafe { (vld1q_u8(chunk.as_ptr()), vld1q_u8(chunk.as_ptr().add(16))) };
            prefix = vaddq_u32(prefix, s1);
            s1 = vpadalq_u16(s1, vpadalq_u8(vpaddlq_u8(low), high));
            columns[0] = vaddw_u8(columns[0], vget_low_u8(low));
            columns[1] = vaddw_high_u8(columns[1], low);
            columns[2] = vaddw_u8(columns[2], vget_low_u8(high));
            columns[3] = vaddw_high_u8(columns[3], high);
        }
        let mut s2 = vdupq_n_u32(0);
        for (column, weight) in columns.iter().zip(&weights) {
            s2 = vmlal_u16(s2, vget_low_u16(*column), vget_low_u16(*weight));
            s2 = vmlal_high_u16(s2, *column, *weight);
        }
        // W·prefix + s2 is what the block adds to b besides n·a: below 2^32 (see
        // `fold_block`).
        let s2_total = W as u32 * vaddvq_u32(prefix) + vaddvq_u32(s2);
        (a, b) = fold_block(a, b, block.len(), vaddvq_u32(s1), s2_total);
    }
    super::scalar::update(a, b, &bytes[whole..])
}

//! aarch64 NEON kernel: compare 16 bytes with the needle (0xFF where equal), subtract
//! from byte counters up to 255 times, then add the counters across (`uaddlv`).

use core::arch::aarch64::*;

/// Vectors per batch: a byte counter holds at most 255.
const BATCH: usize = 255;

/// NEON, 64 bytes per step in four independent counters.
///
/// # Safety
/// The CPU must support NEON (every aarch64 Linux CPU does).
#[target_feature(enable = "neon")]
pub(super) unsafe fn count_neon(haystack: &[u8], needle: u8) -> usize {
    let needle_v = vdupq_n_u8(needle);
    let mut blocks = haystack.chunks_exact(64);
    let mut total = 0usize;
    loop {
        let mut counters = [vdupq_n_u8(0); 4];
        let mut taken = 0;
        for block in blocks.by_ref().take(BATCH) {
            // SAFETY: block is 64 readable bytes; vld1q_u8_x4 reads exactly those.
            let bytes = unsafe { vld1q_u8_x4(block.as_ptr()) };
            counters[0] = vsubq_u8(counters[0], vceqq_u8(bytes.0, needle_v));
            counters[1] = vsubq_u8(counters[1], vceqq_u8(bytes.1, needle_v));
            counters[2] = vsubq_u8(counters[2], vceqq_u8(bytes.2, needle_v));
            counters[3] = vsubq_u8(counters[3], vceqq_u8(bytes.3, needle_v));
            taken += 1;
        }
        for counter in counters {
            total += vaddlvq_u8(counter) as usize;
        }
        if taken < BATCH {
            break;
        }
    }
    let mut chunks = blocks.remainder().chunks_exact(16);
    let mut counter = vdupq_n_u8(0);
    for chunk in chunks.by_ref() {
        // SAFETY: chunk is 16 readable bytes.
        let bytes = unsafe { vld1q_u8(chunk.as_ptr()) };
        counter = vsubq_u8(counter, vceqq_u8(bytes, needle_v));
    }
    total += vaddlvq_u8(counter) as usize;
    total + super::scalar::count(chunks.remainder(), needle)
}

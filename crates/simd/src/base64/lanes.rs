//! The SSSE3 and AVX2 base64, written once over [`Lanes`] (after Wojciech Muła and
//! Daniel Lemire, "Faster Base64 Encoding and Decoding Using AVX2 Instructions",
//! 2018). Everything happens within 128-bit lanes; the AVX2 instance runs two lanes at
//! once, each on its own 12 bytes or 16 characters.
//!
//! Encode: spread each 3-byte group over a 32-bit lane with `pshufb`, cut out the four
//! 6-bit values with two multiplies, and map them to characters with a class offset
//! table (`pshufb`).
//!
//! Decode: check every character against nibble-indexed bit tables, add a per-row
//! offset to get the 6-bit values, then merge pairs with `pmaddubsw`/`pmaddwd` and pack
//! the 3 bytes of each lane.

use super::Tables;
use crate::vector::Lanes;

/// Byte `i` of each 32-bit lane after the encoder's shuffle: the group's bytes as
/// `[b1, b0, b2, b1]`, so that the 16-bit halves hold `b0:b1` and `b1:b2`.
const SPREAD_GROUPS: [u8; 16] = [1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10];

/// The 3 output bytes of each 32-bit lane after the decode merge (big-endian order),
/// then 4 unused bytes (0x80: zero).
const PACK_LANES: [u8; 16] = [
    2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, 0x80, 0x80, 0x80, 0x80,
];

/// Encodes whole steps (3/4 of `V::BYTES` bytes to `V::BYTES` characters) from the
/// start of `input` into `output`, while both have room for a step; returns the bytes
/// read and the characters written.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn encode<V: Lanes>(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    // SAFETY: the caller guarantees V's instructions (for every V operation in this
    // function, too); the loads and stores are checked where they happen.
    let (offsets, spread) = unsafe {
        (
            V::broadcast(&tables.encode_offsets),
            V::broadcast(&SPREAD_GROUPS),
        )
    };
    // The multipliers are powers of two per 16-bit half, which LLVM rewrites as
    // shifts: two and a blend for the low multiply, and for the high one a dozen
    // instructions (SSSE3) or 32-bit variable shifts (AVX2), at up to half the speed.
    // Hiding them behind `black_box` (once, before the loop) keeps `pmullw` and
    // SSSE3's `pmulhuw`; AVX2's `vpmulhuw` also needs `V256::mul_high_u16`'s assembly.
    // SAFETY: as above.
    let [high_multiplier, low_multiplier] =
        core::hint::black_box(unsafe { [V::splat_u32(0x0400_0040), V::splat_u32(0x0100_0010)] });
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= V::GROUPS_READ && output.len() - written >= V::BYTES {
        // SAFETY: as above; GROUPS_READ readable bytes at `read` and `V::BYTES`
        // writable bytes at `written`, checked above.
        unsafe {
            let lanes = V::load_groups(input.as_ptr().add(read)).shuffle(spread);
            // Values 0 and 2 of each lane: the top 6 bits of each 16-bit half, moved
            // down by a high multiply. Values 1 and 3: the middle bits, moved up by a
            // low multiply into the odd bytes.
            let high = lanes
                .and(V::splat_u32(0x0FC0_FC00))
                .mul_high_u16(high_multiplier);
            let low = lanes
                .and(V::splat_u32(0x003F_03F0))
                .mul_low_u16(low_multiplier);
            let chars = ascii(high.or(low), offsets);
            chars.store(output.as_mut_ptr().add(written));
        }
        read += V::BYTES / 4 * 3;
        written += V::BYTES;
    }
    (read, written)
}

/// Characters for 6-bit values: each value's class (see `Tables::encode_offsets`)
/// picks the offset to add.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
unsafe fn ascii<V: Lanes>(sextets: V, offsets: V) -> V {
    // SAFETY: the caller guarantees V's instructions.
    unsafe {
        let above_51 = sextets.saturating_sub_u8(V::splat(51));
        let below_26 = V::splat(26).gt_i8(sextets);
        let classes = above_51.or(below_26.and(V::splat(13)));
        sextets.add_u8(offsets.shuffle(classes))
    }
}

/// Decodes whole steps (`V::BYTES` characters to 3/4 as many bytes) from the start of
/// `input` into `output`, while both have room for a step and up to the first step
/// with a character outside the alphabet (left for the scalar code to report);
/// returns the characters read and the bytes written.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn decode<V: Lanes>(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    // SAFETY: the caller guarantees V's instructions (for every V operation in this
    // function, too); the loads and stores are checked where they happen.
    let (invalid_by_low_nibble, row_bit_by_high_nibble, offsets, char_63, pack) = unsafe {
        (
            V::broadcast(&tables.invalid_by_low_nibble),
            V::broadcast(&tables.row_bit_by_high_nibble),
            V::broadcast(&tables.decode_offsets),
            V::splat(tables.char_63),
            V::broadcast(&PACK_LANES),
        )
    };
    let (mut read, mut written) = (0, 0);
    // Each step stores V::BYTES bytes and keeps 3/4 of them.
    while input.len() - read >= V::BYTES && output.len() - written >= V::BYTES {
        // SAFETY: as above; V::BYTES readable bytes at `read` and writable bytes at
        // `written`, checked above.
        unsafe {
            let chars = V::load(input.as_ptr().add(read));
            let nibble = V::splat(0x0F);
            let low = chars.and(nibble);
            let high = chars.shr4_u32().and(nibble);
            let invalid = invalid_by_low_nibble
                .shuffle(low)
                .and(row_bit_by_high_nibble.shuffle(high));
            if !invalid.is_zero() {
                break;
            }
            let is_63 = chars.eq_u8(char_63);
            let row = high.xor(is_63.and(V::splat(8)));
            let sextets = chars.add_u8(offsets.shuffle(row));
            // a * 64 + b and c * 64 + d in each 16-bit half, then (ab << 12) + cd.
            let merged = sextets
                .mul_add_pairs_u8(V::splat_u32(0x0140_0140))
                .mul_add_pairs_i16(V::splat_u32(0x0001_1000));
            let bytes = merged.shuffle(pack).join_groups();
            bytes.store(output.as_mut_ptr().add(written));
        }
        read += V::BYTES;
        written += V::BYTES / 4 * 3;
    }
    (read, written)
}

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
pub(super) const SPREAD_GROUPS: [u8; 16] = [1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10];

/// The 3 output bytes of each 32-bit lane after the decode merge (big-endian order),
/// then 4 unused bytes (0x80: zero).
const PACK_LANES: [u8; 16] = [
    2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, 0x80, 0x80, 0x80, 0x80,
];

/// Encodes every whole 3-byte group of `input` into `output` (exactly the encoded
/// length) and returns the bytes read and the characters written: the rest, 0 to 2
/// bytes and the padding, is the scalar code's. Inputs shorter than
/// [`Lanes::GROUPS_READ`] are left to the caller whole.
///
/// Whole steps run from the start (after the first, each loads its groups from
/// [`Lanes::BEHIND`] bytes before them, one load for AVX2's two lanes); the groups
/// they leave (up to one step and one
/// group) come from one more load of the input's last `GROUPS_READ` bytes, shuffled so
/// that a step ends at the last whole group, rewriting characters already written
/// with the same values (and, when a step and a group are left, a second step from
/// the same load starting where the steps stopped).
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn encode<V: Lanes>(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let step = V::BYTES / 4 * 3;
    let groups_end = input.len() / 3 * 3;
    let Some(output) = output.get_mut(..groups_end / 3 * 4) else {
        return (0, 0);
    };
    if input.len() < V::GROUPS_READ {
        return (0, 0);
    }
    // SAFETY: the caller guarantees V's instructions (for every V operation in this
    // function, too).
    let encoder = unsafe { Encoder::<V>::new(tables) };
    // The first step loads its groups as they are; the later ones load from
    // V::BEHIND bytes before them, which the first step has read (AVX2: one 32-byte
    // load where `load_groups` takes two 16-byte ones and an insert).
    const {
        assert!(
            V::BEHIND <= V::BYTES / 4 * 3,
            "the first step reads the bytes behind the second"
        )
    };
    // SAFETY: as for the single steps below (input.len() >= GROUPS_READ, checked
    // above).
    unsafe { encoder.step(input, output, 0, 0) };
    let (mut read, mut written) = (step, V::BYTES);
    // Four steps at a time while they fit (a quarter of the loop's own instructions),
    // then one.
    while input.len() - read >= 3 * step + V::GROUPS_READ {
        // SAFETY: as for the single steps below, for each of the four.
        unsafe {
            encoder.step_behind(input, output, read, written);
            encoder.step_behind(input, output, read + step, written + V::BYTES);
            encoder.step_behind(input, output, read + 2 * step, written + 2 * V::BYTES);
            encoder.step_behind(input, output, read + 3 * step, written + 3 * V::BYTES);
        }
        read += 4 * step;
        written += 4 * V::BYTES;
    }
    while input.len() - read >= V::GROUPS_READ {
        // SAFETY: GROUPS_READ readable bytes at `read`, checked above, and the
        // V::BEHIND before it (read >= step >= V::BEHIND); the step's V::BYTES
        // characters at `written` end at (read + step) / 3 * 4 <= output.len(), as
        // read + step < input.len() - 4 and output holds every whole group.
        unsafe { encoder.step_behind(input, output, read, written) };
        read += step;
        written += V::BYTES;
    }
    if read < groups_end {
        // The last GROUPS_READ bytes start at `base`; a step from `start` takes its
        // groups `start - base` bytes into each lane: 1 to 4 (the steps stopped with
        // fewer than GROUPS_READ bytes left, and the last step starts at
        // groups_end - step >= input.len() - 2 - step = base + 2).
        let base = input.len() - V::GROUPS_READ;
        let last = groups_end - step;
        // SAFETY: GROUPS_READ readable bytes at `base`; the steps' characters end at
        // or before output.len() = groups_end / 3 * 4.
        unsafe {
            let lanes = V::load_groups(input.as_ptr().add(base));
            if read < last {
                let chars = encoder.chars(lanes, (read - base) as u8);
                chars.store(output.as_mut_ptr().add(written));
            }
            let chars = encoder.chars(lanes, (last - base) as u8);
            chars.store(output.as_mut_ptr().add(output.len() - V::BYTES));
        }
    }
    (groups_end, output.len())
}

/// The characters of the groups that the shuffle indices `spread` gather from
/// `lanes`: each 32-bit lane `[b1, b0, b2, b1]` of a group `b0 b1 b2` (as
/// [`SPREAD_GROUPS`] places a lane's first four groups), an index with its top bit
/// set giving a zero byte (an input's end: a partial group's characters come out as
/// its first one or two bytes encode).
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn chars_spread_by<V: Lanes>(lanes: V, spread: V, tables: &Tables) -> V {
    // SAFETY: the caller guarantees V's instructions.
    unsafe { Encoder::<V>::new(tables).spread_chars(lanes, spread) }
}

/// The encoder's constants at one width.
struct Encoder<V> {
    offsets: V,
    spread: V,
    /// `spread` for [`Lanes::load_groups_behind`]'s lanes.
    spread_behind: V,
    high_multiplier: V,
    low_multiplier: V,
}

impl<V: Lanes> Encoder<V> {
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn new(tables: &Tables) -> Encoder<V> {
        // The multipliers are powers of two per 16-bit half, which LLVM rewrites as
        // shifts: two and a blend for the low multiply, and for the high one a dozen
        // instructions (SSSE3) or 32-bit variable shifts (AVX2), at up to half the
        // speed. Hiding their values (`opaque`) keeps `pmullw` and SSSE3's
        // `pmulhuw`; AVX2's `vpmulhuw` also needs `V256::mul_high_u16`'s assembly.
        // (`black_box` hid them too, through a store and a load on the way to the
        // first multiply.)
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            let spread = V::broadcast(&SPREAD_GROUPS);
            Encoder {
                offsets: V::broadcast(&tables.encode_offsets),
                spread,
                spread_behind: spread.add_u8(V::behind_skips()),
                high_multiplier: V::splat_u32(0x0400_0040).opaque(),
                low_multiplier: V::splat_u32(0x0100_0010).opaque(),
            }
        }
    }

    /// One step: the groups at `read` to the characters at `written`.
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions; `input` must have `V::GROUPS_READ`
    /// bytes at `read` and `output` `V::BYTES` at `written`.
    #[inline(always)]
    unsafe fn step(&self, input: &[u8], output: &mut [u8], read: usize, written: usize) {
        debug_assert!(read + V::GROUPS_READ <= input.len() && written + V::BYTES <= output.len());
        // SAFETY: the caller guarantees V's instructions and the room.
        unsafe {
            let chars = self.chars(V::load_groups(input.as_ptr().add(read)), 0);
            chars.store(output.as_mut_ptr().add(written));
        }
    }

    /// One step from [`Lanes::load_groups_behind`]: the groups at `read` to the
    /// characters at `written`.
    ///
    /// # Safety
    /// As for [`Encoder::step`], and `input` must have `V::BEHIND` bytes before
    /// `read`.
    #[inline(always)]
    unsafe fn step_behind(&self, input: &[u8], output: &mut [u8], read: usize, written: usize) {
        debug_assert!(read >= V::BEHIND && read + V::GROUPS_READ <= input.len());
        debug_assert!(written + V::BYTES <= output.len());
        // SAFETY: the caller guarantees V's instructions and the room.
        unsafe {
            let lanes = V::load_groups_behind(input.as_ptr().add(read));
            let chars = self.spread_chars(lanes, self.spread_behind);
            chars.store(output.as_mut_ptr().add(written));
        }
    }

    /// The characters of the four 3-byte groups starting `skip` bytes into each lane
    /// of `lanes` (`skip` at most 4).
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn chars(&self, lanes: V, skip: u8) -> V {
        debug_assert!(skip <= 4, "a lane has 16 bytes");
        // SAFETY: the caller guarantees V's instructions.
        unsafe { self.spread_chars(lanes, self.spread.add_u8(V::splat(skip))) }
    }

    /// The characters of the four 3-byte groups of each lane of `lanes`, spread over
    /// 32-bit lanes by the shuffle indices `spread`.
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn spread_chars(&self, lanes: V, spread: V) -> V {
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            let lanes = lanes.shuffle(spread);
            // Values 0 and 2 of each lane: the top 6 bits of each 16-bit half, moved
            // down by a high multiply. Values 1 and 3: the middle bits, moved up by a
            // low multiply into the odd bytes.
            let high = lanes
                .and(V::splat_u32(0x0FC0_FC00))
                .mul_high_u16(self.high_multiplier);
            let low = lanes
                .and(V::splat_u32(0x003F_03F0))
                .mul_low_u16(self.low_multiplier);
            ascii(high.or(low), self.offsets)
        }
    }
}

/// Characters for 6-bit values: each value's class (see `Tables::encode_offsets`)
/// picks the offset to add. The class is `value - 51` saturated at 0, plus one above
/// 25 (subtracting the comparison's 0xFF): 0 for 0..=25, 1 for 26..=51, 2..=13 for
/// 52..=63; five operations with the lookup and the add (after Lemire's fastbase64),
/// where an AND with 13 for 0..=25 took six.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
unsafe fn ascii<V: Lanes>(sextets: V, offsets: V) -> V {
    // SAFETY: the caller guarantees V's instructions.
    unsafe {
        let above_51 = sextets.saturating_sub_u8(V::splat(51));
        let above_25 = sextets.gt_i8(V::splat(25));
        let classes = above_51.sub_u8(above_25);
        sextets.add_u8(offsets.shuffle(classes))
    }
}

/// Decodes every whole 4-character group of `input` (padding removed) into `output`
/// (exactly the decoded length) and returns the characters read and the bytes
/// written, up to the first step with a character outside the alphabet (left for the
/// scalar code to report, with the 2 or 3 characters of a partial group). Inputs
/// shorter than `V::BYTES` are left to the caller whole.
///
/// Whole steps run from the start while the output has room for their
/// [`Lanes::store_groups`] (`GROUPS_READ` bytes); the groups they leave (at most
/// `V::BYTES + 4` characters) come from a step at the start of what is left, if
/// needed, and one ending at the last whole group, each stored by
/// [`Lanes::store_groups_ending`], which writes only its bytes.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn decode<V: Lanes>(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let step = V::BYTES / 4 * 3;
    let groups_end = input.len() / 4 * 4;
    let Some(output) = output.get_mut(..groups_end / 4 * 3) else {
        return (0, 0);
    };
    if input.len() < V::BYTES {
        return (0, 0);
    }
    // SAFETY: the caller guarantees V's instructions (for every V operation in this
    // function, too).
    let decoder = unsafe { Decoder::<V>::new(tables) };
    let (mut read, mut written) = (0, 0);
    // Two steps at a time while they fit, with one test for invalid characters; a
    // pair with one goes to the single steps, which stop at its step. (Four at a
    // time ran out of registers: constants reloaded in the loop.)
    while groups_end - read >= 2 * V::BYTES && output.len() - written >= step + V::GROUPS_READ {
        // SAFETY: 2 * V::BYTES readable bytes at `read`, and step + GROUPS_READ
        // writable bytes at `written` (the second step's store), checked above.
        unsafe {
            let from = input.as_ptr().add(read);
            let chars_0 = V::load(from);
            let chars_1 = V::load(from.add(V::BYTES));
            let (invalid_0, high_0) = decoder.classify(chars_0);
            let (invalid_1, high_1) = decoder.classify(chars_1);
            if !invalid_0.or(invalid_1).is_zero() {
                break;
            }
            let to = output.as_mut_ptr().add(written);
            decoder.convert(chars_0, high_0).store_groups(to);
            decoder.convert(chars_1, high_1).store_groups(to.add(step));
        }
        read += 2 * V::BYTES;
        written += 2 * step;
    }
    while groups_end - read >= V::BYTES && output.len() - written >= V::GROUPS_READ {
        // SAFETY: V::BYTES readable bytes at `read` and GROUPS_READ writable bytes at
        // `written`, checked above.
        unsafe {
            let Some(bytes) = decoder.bytes(V::load(input.as_ptr().add(read))) else {
                return (read, written);
            };
            bytes.store_groups(output.as_mut_ptr().add(written));
        }
        read += V::BYTES;
        written += step;
    }
    if read < groups_end {
        // Fewer than GROUPS_READ bytes of output are left, so at most V::BYTES + 4
        // characters: a step from `read` and one ending at groups_end cover them.
        let last = groups_end - V::BYTES;
        // SAFETY: V::BYTES readable bytes at `read` (when read < last) and at `last`;
        // a step's bytes before written + step (which is below output.len(), as read
        // < last) and before the output's end are writable.
        unsafe {
            if read < last {
                let Some(bytes) = decoder.bytes(V::load(input.as_ptr().add(read))) else {
                    return (read, written);
                };
                bytes.store_groups_ending(output.as_mut_ptr().add(written + step));
            }
            let Some(bytes) = decoder.bytes(V::load(input.as_ptr().add(last))) else {
                return (read, written);
            };
            bytes.store_groups_ending(output.as_mut_ptr_range().end);
        }
    }
    (groups_end, output.len())
}

/// The bytes of `chars` (the first 12 bytes of each lane), or `None` if any
/// character is outside the alphabet: one step of [`decode`], for kernels that load
/// their lanes themselves.
///
/// # Safety
/// The CPU must support `V`'s instructions.
#[inline(always)]
pub(super) unsafe fn decode_lanes<V: Lanes>(chars: V, tables: &Tables) -> Option<V> {
    // SAFETY: the caller guarantees V's instructions.
    unsafe { Decoder::<V>::new(tables).bytes(chars) }
}

/// The decoder's constants at one width.
struct Decoder<V> {
    invalid_by_low_nibble: V,
    row_bit_by_high_nibble: V,
    offsets: V,
    char_63: V,
    pack: V,
}

impl<V: Lanes> Decoder<V> {
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn new(tables: &Tables) -> Decoder<V> {
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            Decoder {
                invalid_by_low_nibble: V::broadcast(&tables.invalid_by_low_nibble),
                row_bit_by_high_nibble: V::broadcast(&tables.row_bit_by_high_nibble),
                offsets: V::broadcast(&tables.decode_offsets),
                char_63: V::splat(tables.char_63),
                pack: V::broadcast(&PACK_LANES),
            }
        }
    }

    /// The bytes of `chars` (the first 12 bytes of each lane), or `None` if any is
    /// outside the alphabet.
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn bytes(&self, chars: V) -> Option<V> {
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            let (invalid, high) = self.classify(chars);
            if !invalid.is_zero() {
                return None;
            }
            Some(self.convert(chars, high))
        }
    }

    /// Nonzero bytes where `chars` has a character outside the alphabet, and each
    /// character's high nibble.
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn classify(&self, chars: V) -> (V, V) {
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            let nibble = V::splat(0x0F);
            let low = chars.and(nibble);
            let high = chars.shr4_u32().and(nibble);
            let invalid = self
                .invalid_by_low_nibble
                .shuffle(low)
                .and(self.row_bit_by_high_nibble.shuffle(high));
            (invalid, high)
        }
    }

    /// The bytes of `chars`, all in the alphabet, whose high nibbles are `high`: the
    /// first 12 bytes of each lane (for [`Lanes::store_groups`]).
    ///
    /// # Safety
    /// The CPU must support `V`'s instructions.
    #[inline(always)]
    unsafe fn convert(&self, chars: V, high: V) -> V {
        // SAFETY: the caller guarantees V's instructions.
        unsafe {
            let is_63 = chars.eq_u8(self.char_63);
            let row = high.xor(is_63.and(V::splat(8)));
            let sextets = chars.add_u8(self.offsets.shuffle(row));
            // a * 64 + b and c * 64 + d in each 16-bit half, then (ab << 12) + cd.
            let merged = sextets
                .mul_add_pairs_u8(V::splat_u32(0x0140_0140))
                .mul_add_pairs_i16(V::splat_u32(0x0001_1000));
            merged.shuffle(self.pack)
        }
    }
}

//! Lookup tables for one alphabet, computed at compile time from its 64 characters (so
//! the SIMD tables cannot disagree with the scalar ones).

/// Marks a byte outside the alphabet in [`Tables::decode`]; bit 7 is set, which the
/// SIMD decoders test.
pub(crate) const INVALID: u8 = 0xFF;

/// Every table the kernels use for one alphabet.
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2")),
    allow(
        dead_code,
        reason = "the nibble tables serve the SSSE3/AVX2 kernels only"
    )
)]
pub(crate) struct Tables {
    /// Six-bit value to character.
    pub(crate) encode: [u8; 64],
    /// Character to six-bit value, or [`INVALID`].
    pub(crate) decode: [u8; 256],
    /// SSSE3/AVX2 encode: value class to the offset (mod 256) from value to character.
    /// Class 0 is 0..=25, 1 is 26..=51, 2..=11 are 52..=61 one each, 12 is 62, 13 is
    /// 63 (see `lanes::ascii`).
    pub(crate) encode_offsets: [u8; 16],
    /// SSSE3/AVX2 decode validity: a character `c` is invalid exactly when
    /// `invalid_by_low_nibble[c & 15] & row_bit_by_high_nibble[c >> 4] != 0`. Rows 2..=7
    /// (0x20..=0x7F, where every alphabet character lies) have one bit each; every
    /// other row has bit 7, which every low-nibble entry also has.
    pub(crate) invalid_by_low_nibble: [u8; 16],
    /// See `invalid_by_low_nibble`.
    pub(crate) row_bit_by_high_nibble: [u8; 16],
    /// SSSE3/AVX2 decode: the offset (mod 256) from character to value for each high
    /// nibble, except for the character of value 63, whose offset is at its high nibble
    /// plus 8 (a row with no valid characters).
    pub(crate) decode_offsets: [u8; 16],
    /// The character of value 63.
    pub(crate) char_63: u8,
}

pub(crate) static STANDARD: Tables =
    Tables::new(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
pub(crate) static URL_SAFE: Tables =
    Tables::new(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");

impl Tables {
    /// The tables of `alphabet`. Fails to compile for an alphabet the SIMD tables
    /// cannot express: characters outside 0x20..=0x7F, '=', or runs other than
    /// `A-Z a-z 0-9` at values 0..=61.
    const fn new(alphabet: &[u8; 64]) -> Tables {
        let mut decode = [INVALID; 256];
        let mut value = 0;
        while value < 64 {
            let c = alphabet[value];
            assert!(
                c >= 0x20 && c < 0x80 && c != b'=',
                "alphabet characters must be ASCII, not '='"
            );
            assert!(
                decode[c as usize] == INVALID,
                "alphabet characters must be distinct"
            );
            decode[c as usize] = value as u8;
            value += 1;
        }

        // Encode offsets: one per class, the same for every value in the class.
        let mut encode_offsets = [0u8; 16];
        let mut value = 0;
        while value < 64 {
            let class = match value {
                0..=25 => 0,
                26..=51 => 1,
                _ => value - 50,
            };
            let offset = alphabet[value].wrapping_sub(value as u8);
            if value == 0 || value == 26 || value >= 52 {
                encode_offsets[class] = offset;
            }
            assert!(
                encode_offsets[class] == offset,
                "values 0..=61 must be the runs A-Z, a-z, 0-9"
            );
            value += 1;
        }

        // Decode validity by nibbles.
        let mut row_bit_by_high_nibble = [0x80u8; 16];
        let mut high = 2;
        while high < 8 {
            row_bit_by_high_nibble[high] = 1 << (high - 2);
            high += 1;
        }
        let mut invalid_by_low_nibble = [0x80u8; 16];
        let mut low = 0;
        while low < 16 {
            let mut high = 2;
            while high < 8 {
                if decode[high << 4 | low] == INVALID {
                    invalid_by_low_nibble[low] |= 1 << (high - 2);
                }
                high += 1;
            }
            low += 1;
        }

        // Decode offsets: one per high nibble; the character of value 63 moves to row
        // high + 8 so that it may share a row with characters of another offset.
        let char_63 = alphabet[63];
        let mut decode_offsets = [0u8; 16];
        let mut offset_set = [false; 16];
        let mut c = 0x20;
        while c < 0x80 {
            if decode[c] != INVALID {
                let row = if c as u8 == char_63 {
                    (c >> 4) + 8
                } else {
                    c >> 4
                };
                let offset = decode[c].wrapping_sub(c as u8);
                if !offset_set[row] {
                    decode_offsets[row] = offset;
                    offset_set[row] = true;
                }
                assert!(
                    decode_offsets[row] == offset,
                    "each 16-character row needs one offset"
                );
            }
            c += 1;
        }

        Tables {
            encode: *alphabet,
            decode,
            encode_offsets,
            invalid_by_low_nibble,
            row_bit_by_high_nibble,
            decode_offsets,
            char_63,
        }
    }
}

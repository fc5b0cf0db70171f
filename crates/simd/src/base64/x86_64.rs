//! x86_64 kernels, after Wojciech Muła and Daniel Lemire's "Faster Base64 Encoding and
//! Decoding Using AVX2 Instructions" (2018) and "Base64 encoding and decoding at almost
//! the speed of a memory copy" (AVX-512 VBMI, 2019).
//!
//! Encode: spread each 3-byte group over a 32-bit lane (`pshufb`/`vpermb`), cut out the
//! four 6-bit values (multiplies, or `vpmultishiftqb`), and map them to characters (a
//! class offset table with `pshufb`, or the whole alphabet with `vpermb`).
//!
//! Decode: check every character against nibble-indexed bit tables (or a 128-entry
//! `vpermi2b` table), add a per-row offset to get the 6-bit values, then merge pairs
//! with `pmaddubsw`/`pmaddwd` and pack the 3 bytes of each lane.

use core::arch::x86_64::*;

use super::Tables;

/// Byte `i` of each 32-bit lane after [`encode_sextets_128`]'s shuffle: the group's
/// bytes as `[b1, b0, b2, b1]`, so that the 16-bit halves hold `b0:b1` and `b1:b2`.
const SPREAD_GROUPS: [i8; 16] = [1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10];

/// The 3 output bytes of each 32-bit lane after the decode merge (big-endian order),
/// then 4 unused bytes.
const PACK_LANES: [i8; 16] = [2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1];

/// Loads a 16-byte table.
#[inline]
#[target_feature(enable = "sse2")]
fn load_table(table: &[u8; 16]) -> __m128i {
    // SAFETY: the table is 16 readable bytes; loadu has no alignment requirement.
    unsafe { _mm_loadu_si128(table.as_ptr().cast()) }
}

/// The four 6-bit values of each group in the low 12 bytes of `bytes`, one per byte
/// of the result, in encoding order.
#[inline]
#[target_feature(enable = "ssse3")]
fn encode_sextets_128(bytes: __m128i) -> __m128i {
    // SAFETY: SPREAD_GROUPS is 16 readable bytes.
    let spread = unsafe { _mm_loadu_si128(SPREAD_GROUPS.as_ptr().cast()) };
    let lanes = _mm_shuffle_epi8(bytes, spread);
    // Values 0 and 2 of each lane: the top 6 bits of each 16-bit half, moved down by
    // a high multiply.
    let high = _mm_mulhi_epu16(
        _mm_and_si128(lanes, _mm_set1_epi32(0x0FC0_FC00)),
        _mm_set1_epi32(0x0400_0040),
    );
    // Values 1 and 3: the middle bits, moved up by a low multiply into odd bytes.
    let low = _mm_mullo_epi16(
        _mm_and_si128(lanes, _mm_set1_epi32(0x003F_03F0)),
        _mm_set1_epi32(0x0100_0010),
    );
    _mm_or_si128(high, low)
}

/// Characters for 6-bit values: each value's class (see `Tables::encode_offsets`)
/// picks the offset to add.
#[inline]
#[target_feature(enable = "ssse3")]
fn ascii_from_sextets_128(sextets: __m128i, offsets: __m128i) -> __m128i {
    let above_51 = _mm_subs_epu8(sextets, _mm_set1_epi8(51));
    let below_26 = _mm_cmpgt_epi8(_mm_set1_epi8(26), sextets);
    let classes = _mm_or_si128(above_51, _mm_and_si128(below_26, _mm_set1_epi8(13)));
    _mm_add_epi8(sextets, _mm_shuffle_epi8(offsets, classes))
}

/// SSSE3: 12 bytes to 16 characters per step.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn encode_ssse3(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let offsets = load_table(&tables.encode_offsets);
    let (mut read, mut written) = (0, 0);
    // Each step loads 16 bytes and uses 12.
    while input.len() - read >= 16 && output.len() - written >= 16 {
        // SAFETY: 16 readable bytes at `read`, checked above.
        let bytes = unsafe { _mm_loadu_si128(input.as_ptr().add(read).cast()) };
        let chars = ascii_from_sextets_128(encode_sextets_128(bytes), offsets);
        // SAFETY: 16 writable bytes at `written`, checked above.
        unsafe { _mm_storeu_si128(output.as_mut_ptr().add(written).cast(), chars) };
        read += 12;
        written += 16;
    }
    (read, written)
}

/// AVX2: 24 bytes to 32 characters per step, 12 per 128-bit lane.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn encode_avx2(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let offsets = load_table(&tables.encode_offsets);
    let offsets = _mm256_broadcastsi128_si256(offsets);
    // SAFETY: SPREAD_GROUPS is 16 readable bytes.
    let spread =
        _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(SPREAD_GROUPS.as_ptr().cast()) });
    let (mut read, mut written) = (0, 0);
    // Each step loads 16 bytes at `read` and at `read + 12`.
    while input.len() - read >= 28 && output.len() - written >= 32 {
        // SAFETY: 28 readable bytes at `read`, checked above.
        let (first, second) = unsafe {
            let at = input.as_ptr().add(read);
            (
                _mm_loadu_si128(at.cast()),
                _mm_loadu_si128(at.add(12).cast()),
            )
        };
        let lanes = _mm256_shuffle_epi8(_mm256_set_m128i(second, first), spread);
        let high = _mm256_mulhi_epu16(
            _mm256_and_si256(lanes, _mm256_set1_epi32(0x0FC0_FC00)),
            _mm256_set1_epi32(0x0400_0040),
        );
        let low = _mm256_mullo_epi16(
            _mm256_and_si256(lanes, _mm256_set1_epi32(0x003F_03F0)),
            _mm256_set1_epi32(0x0100_0010),
        );
        let sextets = _mm256_or_si256(high, low);
        let above_51 = _mm256_subs_epu8(sextets, _mm256_set1_epi8(51));
        let below_26 = _mm256_cmpgt_epi8(_mm256_set1_epi8(26), sextets);
        let classes = _mm256_or_si256(above_51, _mm256_and_si256(below_26, _mm256_set1_epi8(13)));
        let chars = _mm256_add_epi8(sextets, _mm256_shuffle_epi8(offsets, classes));
        // SAFETY: 32 writable bytes at `written`, checked above.
        unsafe { _mm256_storeu_si256(output.as_mut_ptr().add(written).cast(), chars) };
        read += 24;
        written += 32;
    }
    // SAFETY: AVX2 implies SSSE3.
    let (more_read, more_written) =
        unsafe { encode_ssse3(&input[read..], &mut output[written..], tables) };
    (read + more_read, written + more_written)
}

/// `vpermb` indices spreading 48 bytes into 16 lanes of `[b1, b0, b2, b1]`.
const SPREAD_GROUPS_512: [u8; 64] = {
    let mut table = [0u8; 64];
    let mut group = 0;
    while group < 16 {
        let base = 3 * group as u8;
        table[4 * group] = base + 1;
        table[4 * group + 1] = base;
        table[4 * group + 2] = base + 2;
        table[4 * group + 3] = base + 1;
        group += 1;
    }
    table
};

/// `vpermb` indices packing the 3 bytes of each 32-bit lane (big-endian order) into 48
/// contiguous bytes.
const PACK_LANES_512: [u8; 64] = {
    let mut table = [0u8; 64];
    let mut group = 0;
    while group < 16 {
        let lane = 4 * group as u8;
        table[3 * group] = lane + 2;
        table[3 * group + 1] = lane + 1;
        table[3 * group + 2] = lane;
        group += 1;
    }
    table
};

/// The low 48 bytes of a 64-byte vector.
const LOW_48: __mmask64 = (1 << 48) - 1;

/// AVX-512 VBMI: 48 bytes to 64 characters per step; `vpmultishiftqb` cuts the 6-bit
/// fields and `vpermb` looks them up in the alphabet.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn encode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    if input.len() < 48 {
        // SAFETY: AVX-512 implies AVX2.
        return unsafe { encode_avx2(input, output, tables) };
    }
    // SAFETY: both tables are 64 readable bytes.
    let (alphabet, spread) = unsafe {
        (
            _mm512_loadu_si512(tables.encode.as_ptr().cast()),
            _mm512_loadu_si512(SPREAD_GROUPS_512.as_ptr().cast()),
        )
    };
    // Bit offsets of the four fields in each lane of [b1, b0, b2, b1], for both lanes
    // of a 64-bit word: 10, 4, 22, 16 and 32 more.
    let fields = _mm512_set1_epi64(0x3036_242A_1016_040A);
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= 48 && output.len() - written >= 64 {
        // SAFETY: 48 readable bytes at `read`, checked above; the mask keeps the load
        // to those.
        let bytes = unsafe { _mm512_maskz_loadu_epi8(LOW_48, input.as_ptr().add(read).cast()) };
        let lanes = _mm512_permutexvar_epi8(spread, bytes);
        // Each result byte holds a 6-bit value in its low bits; vpermb ignores the top two.
        let sextets = _mm512_multishift_epi64_epi8(fields, lanes);
        let chars = _mm512_permutexvar_epi8(sextets, alphabet);
        // SAFETY: 64 writable bytes at `written`, checked above.
        unsafe { _mm512_storeu_si512(output.as_mut_ptr().add(written).cast(), chars) };
        read += 48;
        written += 64;
    }
    // SAFETY: AVX-512 implies AVX2.
    let (more_read, more_written) =
        unsafe { encode_avx2(&input[read..], &mut output[written..], tables) };
    (read + more_read, written + more_written)
}

/// The decode tables as vectors.
#[derive(Clone, Copy)]
struct DecodeTables128 {
    invalid_by_low_nibble: __m128i,
    row_bit_by_high_nibble: __m128i,
    offsets: __m128i,
    char_63: __m128i,
}

impl DecodeTables128 {
    #[inline]
    #[target_feature(enable = "sse2")]
    fn new(tables: &Tables) -> DecodeTables128 {
        DecodeTables128 {
            invalid_by_low_nibble: load_table(&tables.invalid_by_low_nibble),
            row_bit_by_high_nibble: load_table(&tables.row_bit_by_high_nibble),
            offsets: load_table(&tables.decode_offsets),
            char_63: _mm_set1_epi8(tables.char_63 as i8),
        }
    }
}

/// 16 characters to their 6-bit values, or `None` if any is outside the alphabet.
#[inline]
#[target_feature(enable = "ssse3")]
fn decode_sextets_128(chars: __m128i, tables: DecodeTables128) -> Option<__m128i> {
    let nibble = _mm_set1_epi8(0x0F);
    let low = _mm_and_si128(chars, nibble);
    let high = _mm_and_si128(_mm_srli_epi32(chars, 4), nibble);
    let invalid = _mm_and_si128(
        _mm_shuffle_epi8(tables.invalid_by_low_nibble, low),
        _mm_shuffle_epi8(tables.row_bit_by_high_nibble, high),
    );
    if _mm_movemask_epi8(_mm_cmpeq_epi8(invalid, _mm_setzero_si128())) != 0xFFFF {
        return None;
    }
    let is_63 = _mm_cmpeq_epi8(chars, tables.char_63);
    let row = _mm_xor_si128(high, _mm_and_si128(is_63, _mm_set1_epi8(8)));
    Some(_mm_add_epi8(chars, _mm_shuffle_epi8(tables.offsets, row)))
}

/// Merges the four 6-bit values of each 32-bit lane into its low 24 bits.
#[inline]
#[target_feature(enable = "ssse3")]
fn merge_sextets_128(sextets: __m128i) -> __m128i {
    // a * 64 + b and c * 64 + d in each 16-bit half, then (ab << 12) + cd.
    let pairs = _mm_maddubs_epi16(sextets, _mm_set1_epi32(0x0140_0140));
    _mm_madd_epi16(pairs, _mm_set1_epi32(0x0001_1000))
}

/// SSSE3: 16 characters to 12 bytes per step.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn decode_ssse3(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let vectors = DecodeTables128::new(tables);
    // SAFETY: PACK_LANES is 16 readable bytes.
    let pack = unsafe { _mm_loadu_si128(PACK_LANES.as_ptr().cast()) };
    let (mut read, mut written) = (0, 0);
    // Each step stores 16 bytes and keeps 12.
    while input.len() - read >= 16 && output.len() - written >= 16 {
        // SAFETY: 16 readable bytes at `read`, checked above.
        let chars = unsafe { _mm_loadu_si128(input.as_ptr().add(read).cast()) };
        let Some(sextets) = decode_sextets_128(chars, vectors) else {
            break;
        };
        let bytes = _mm_shuffle_epi8(merge_sextets_128(sextets), pack);
        // SAFETY: 16 writable bytes at `written`, checked above.
        unsafe { _mm_storeu_si128(output.as_mut_ptr().add(written).cast(), bytes) };
        read += 16;
        written += 12;
    }
    (read, written)
}

/// AVX2: 32 characters to 24 bytes per step.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode_avx2(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    let vectors = DecodeTables128::new(tables);
    let invalid_by_low_nibble = _mm256_broadcastsi128_si256(vectors.invalid_by_low_nibble);
    let row_bit_by_high_nibble = _mm256_broadcastsi128_si256(vectors.row_bit_by_high_nibble);
    let offsets = _mm256_broadcastsi128_si256(vectors.offsets);
    let char_63 = _mm256_broadcastsi128_si256(vectors.char_63);
    // SAFETY: PACK_LANES is 16 readable bytes.
    let pack = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(PACK_LANES.as_ptr().cast()) });
    let nibble = _mm256_set1_epi8(0x0F);
    let (mut read, mut written) = (0, 0);
    // Each step stores 32 bytes and keeps 24.
    while input.len() - read >= 32 && output.len() - written >= 32 {
        // SAFETY: 32 readable bytes at `read`, checked above.
        let chars = unsafe { _mm256_loadu_si256(input.as_ptr().add(read).cast()) };
        let low = _mm256_and_si256(chars, nibble);
        let high = _mm256_and_si256(_mm256_srli_epi32(chars, 4), nibble);
        let invalid = _mm256_and_si256(
            _mm256_shuffle_epi8(invalid_by_low_nibble, low),
            _mm256_shuffle_epi8(row_bit_by_high_nibble, high),
        );
        if _mm256_testz_si256(invalid, invalid) == 0 {
            break;
        }
        let is_63 = _mm256_cmpeq_epi8(chars, char_63);
        let row = _mm256_xor_si256(high, _mm256_and_si256(is_63, _mm256_set1_epi8(8)));
        let sextets = _mm256_add_epi8(chars, _mm256_shuffle_epi8(offsets, row));
        let pairs = _mm256_maddubs_epi16(sextets, _mm256_set1_epi32(0x0140_0140));
        let merged = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x0001_1000));
        // 12 bytes at the start of each 128-bit lane, then the two lanes joined.
        let packed = _mm256_shuffle_epi8(merged, pack);
        let bytes = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
        // SAFETY: 32 writable bytes at `written`, checked above.
        unsafe { _mm256_storeu_si256(output.as_mut_ptr().add(written).cast(), bytes) };
        read += 32;
        written += 24;
    }
    if input.len() - read < 32 {
        // SAFETY: AVX2 implies SSSE3.
        let (more_read, more_written) =
            unsafe { decode_ssse3(&input[read..], &mut output[written..], tables) };
        return (read + more_read, written + more_written);
    }
    // Stopped at an invalid block: the scalar code reports it.
    (read, written)
}

/// AVX-512 VBMI: 64 characters to 48 bytes per step; `vpermi2b` looks each character
/// up in the first 128 entries of the decode table.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn decode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> (usize, usize) {
    if input.len() < 64 {
        // SAFETY: AVX-512 implies AVX2.
        return unsafe { decode_avx2(input, output, tables) };
    }
    // SAFETY: the decode table has 256 bytes and PACK_LANES_512 64.
    let (ascii_low, ascii_high, pack) = unsafe {
        (
            _mm512_loadu_si512(tables.decode.as_ptr().cast()),
            _mm512_loadu_si512(tables.decode.as_ptr().add(64).cast()),
            _mm512_loadu_si512(PACK_LANES_512.as_ptr().cast()),
        )
    };
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= 64 && output.len() - written >= 48 {
        // SAFETY: 64 readable bytes at `read`, checked above.
        let chars = unsafe { _mm512_loadu_si512(input.as_ptr().add(read).cast()) };
        // Indices use 7 bits; characters >= 0x80 are caught by their own top bit.
        let sextets = _mm512_permutex2var_epi8(ascii_low, chars, ascii_high);
        if _mm512_movepi8_mask(_mm512_or_si512(sextets, chars)) != 0 {
            break;
        }
        let pairs = _mm512_maddubs_epi16(sextets, _mm512_set1_epi32(0x0140_0140));
        let merged = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x0001_1000));
        let bytes = _mm512_permutexvar_epi8(pack, merged);
        // SAFETY: 48 writable bytes at `written`, checked above; the mask keeps the
        // store to those.
        unsafe { _mm512_mask_storeu_epi8(output.as_mut_ptr().add(written).cast(), LOW_48, bytes) };
        read += 64;
        written += 48;
    }
    if input.len() - read < 64 {
        // SAFETY: AVX-512 implies AVX2.
        let (more_read, more_written) =
            unsafe { decode_avx2(&input[read..], &mut output[written..], tables) };
        return (read + more_read, written + more_written);
    }
    // Stopped at an invalid block: the scalar code reports it.
    (read, written)
}

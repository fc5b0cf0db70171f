//! x86_64 kernels: the SSSE3 and AVX2 instances of `lanes.rs`, and AVX-512 VBMI, a
//! different algorithm after Wojciech Muła and Daniel Lemire's "Base64 encoding and
//! decoding at almost the speed of a memory copy" (2019): `vpmultishiftqb` cuts the
//! 6-bit fields and `vpermb` looks up the whole alphabet when encoding; `vpermi2b`
//! looks each character up in a 128-entry table when decoding.

use core::arch::x86_64::*;

use super::{lanes, scalar, DecodeError, Padding, Tables};
use crate::vector::x86_64::{V128, V256};
use crate::vector::{Lanes, Vector};

/// SSSE3: 12 bytes to 16 characters per step; the scalar code for inputs too short
/// for one.
///
/// Never inlined into the AVX2 kernel (which has its own SSSE3 steps): compiled for
/// SSSE3 alone, LLVM keeps its multiplies as `pmulhuw`/`pmullw`.
///
/// # Safety
/// The CPU must support SSSE3.
#[inline(never)]
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn encode_ssse3(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
    padding: Padding,
) {
    if input.len() < V128::GROUPS_READ {
        return scalar::encode(input, output, tables, padding);
    }
    // SAFETY: this function's target features are V128's.
    let (read, written) = unsafe { lanes::encode::<V128>(input, output, tables) };
    scalar::encode_partial(&input[read..], &mut output[written..], tables, padding);
}

/// AVX2: 24 bytes to 32 characters per step; SSSE3's 12 for inputs too short for one.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn encode_avx2(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
    padding: Padding,
) {
    if input.len() < V128::GROUPS_READ {
        return scalar::encode(input, output, tables, padding);
    }
    if is_short_avx2(input.len()) {
        // SAFETY: this function's target features are AVX2's; 16 to 24 bytes.
        return unsafe { encode_short_avx2(input, output, tables) };
    }
    let (read, written) = if input.len() < V256::GROUPS_READ {
        // SAFETY: AVX2 implies V128's SSSE3.
        unsafe { lanes::encode::<V128>(input, output, tables) }
    } else {
        // SAFETY: this function's target features are V256's.
        unsafe { lanes::encode::<V256>(input, output, tables) }
    };
    scalar::encode_partial(&input[read..], &mut output[written..], tables, padding);
}

/// The longest input [`encode_short_avx2`] takes: eight groups, one AVX2 step.
const SHORT_AVX2: usize = 24;

/// Whether [`encode_short_avx2`] takes an input of `len` bytes.
#[inline(always)]
pub(super) fn is_short_avx2(len: usize) -> bool {
    (16..=SHORT_AVX2).contains(&len)
}

/// [`encode_short_avx2`]'s constants, computed here so that a call loads them instead
/// of computing them from the length (16 bytes, portable build: 6.2 ns a call with
/// the tables, 7.6 ns computing them).
struct ShortAvx2 {
    /// Per input length from 16: the encoder's shuffle. The low lane holds the first
    /// 16 bytes and takes its four groups as [`lanes::SPREAD_GROUPS`] does; the high
    /// lane holds the last 16, whose groups from the 13th byte on start `28 - len`
    /// bytes in, and whose indices past the input are 0x80 (a zero byte).
    spread: [[u8; 32]; SHORT_AVX2 - 15],
    /// Per input length from 16: 0xFF at the high lane's characters past the encoded
    /// length without padding (where a padded output has its `=`).
    padding: [[u8; 16]; SHORT_AVX2 - 15],
    /// Per output length from 22: the shuffles that pick the output's last 16
    /// characters from the low lane and from the high lane (0x80: from the other).
    last_from_low: [[u8; 16]; 11],
    last_from_high: [[u8; 16]; 11],
}

const SHORT: ShortAvx2 = {
    let mut short = ShortAvx2 {
        spread: [[0; 32]; SHORT_AVX2 - 15],
        padding: [[0; 16]; SHORT_AVX2 - 15],
        last_from_low: [[0; 16]; 11],
        last_from_high: [[0; 16]; 11],
    };
    let mut len = 16;
    while len <= SHORT_AVX2 {
        let skip = 28 - len;
        let unpadded = (4 * len).div_ceil(3);
        let mut i = 0;
        while i < 16 {
            short.spread[len - 16][i] = lanes::SPREAD_GROUPS[i];
            let high = lanes::SPREAD_GROUPS[i] as usize + skip;
            short.spread[len - 16][16 + i] = if high < 16 { high as u8 } else { 0x80 };
            short.padding[len - 16][i] = if 16 + i >= unpadded { 0xFF } else { 0 };
            i += 1;
        }
        len += 1;
    }
    let mut total = 22;
    while total <= 32 {
        let mut i = 0;
        while i < 16 {
            let at = total - 16 + i;
            short.last_from_low[total - 22][i] = if at < 16 { at as u8 } else { 0x80 };
            short.last_from_high[total - 22][i] = if at >= 16 { (at - 16) as u8 } else { 0x80 };
            i += 1;
        }
        total += 1;
    }
    short
};

/// 16 to 24 bytes (tokens, keys, short credentials) in one AVX2 step, with the last
/// partial group and the padding, where `lanes::encode` would take two SSSE3 steps
/// and the scalar code for the partial group: 6.2 ns at 16 bytes instead of 8.6
/// (base64-simd 7.7; portable build, Zen 3).
///
/// The low lane holds the first 16 bytes, the high lane the last 16 ([`SHORT`] says
/// which of them each group takes). Of the 32 characters, those past the encoded
/// length without padding become `=`; the output gets the first 16 and its last 16,
/// picked from both lanes with two shuffles (the stores overlap by 0 to 10).
///
/// # Safety
/// The CPU must support AVX2; `input` must have 16 to [`SHORT_AVX2`] bytes and
/// `output` be exactly its encoded length (with padding or without).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn encode_short_avx2(input: &[u8], output: &mut [u8], tables: &Tables) {
    let (len, total) = (input.len(), output.len());
    debug_assert!((16..=SHORT_AVX2).contains(&len));
    debug_assert!(((4 * len).div_ceil(3)..=4 * len.div_ceil(3)).contains(&total));
    let (spread, padding) = (&SHORT.spread[len - 16], &SHORT.padding[len - 16]);
    let last_from_low = &SHORT.last_from_low[total - 22];
    let last_from_high = &SHORT.last_from_high[total - 22];
    // SAFETY: 16 readable bytes at 0 and at len - 16 (len >= 16); the tables' rows
    // are 32 and 16 bytes.
    let (lanes, spread, padding, last_from_low, last_from_high) = unsafe {
        (
            V256::from_halves(
                _mm_loadu_si128(input.as_ptr().cast()),
                _mm_loadu_si128(input.as_ptr().add(len - 16).cast()),
            ),
            V256::load(spread.as_ptr()),
            _mm_loadu_si128(padding.as_ptr().cast()),
            _mm_loadu_si128(last_from_low.as_ptr().cast()),
            _mm_loadu_si128(last_from_high.as_ptr().cast()),
        )
    };
    // SAFETY: AVX2 is this function's.
    let chars = unsafe { lanes::chars_spread_by(lanes, spread, tables) };
    let (low, high) = chars.halves();
    // `=` where `padding` is 0xFF: bitwise (one `vpternlogq` with AVX-512 VL), not
    // `pblendvb`, which such builds compiled as a compare into a mask register and a
    // masked move (the AVX-512 encoder at 16 bytes, portable build, Zen 4: 7.04 ->
    // 6.77 ns).
    let high = _mm_or_si128(
        _mm_andnot_si128(padding, high),
        _mm_and_si128(padding, _mm_set1_epi8(b'=' as i8)),
    );
    // SAFETY: AVX2 is this function's; output has total (22 to 32) bytes.
    unsafe { store_lanes(output, low, high, last_from_low, last_from_high) };
}

/// Writes the 16 to 32 bytes of `output` from two lanes: the low lane's 16 at the
/// start, then the last 16, picked from both by the shuffles `last_from_low` and
/// `last_from_high` (an index with its top bit set gives zero; each byte comes from
/// one of them). The second store rewrites whatever of the first is not output.
///
/// # Safety
/// The CPU must support AVX2; `output` must have 16 to 32 bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_lanes(
    output: &mut [u8],
    low: __m128i,
    high: __m128i,
    last_from_low: __m128i,
    last_from_high: __m128i,
) {
    debug_assert!((16..=32).contains(&output.len()));
    let last = _mm_or_si128(
        _mm_shuffle_epi8(low, last_from_low),
        _mm_shuffle_epi8(high, last_from_high),
    );
    // SAFETY: output has 16 bytes at 0 and at len - 16 (len >= 16).
    unsafe {
        _mm_storeu_si128(output.as_mut_ptr().cast(), low);
        _mm_storeu_si128(output.as_mut_ptr().add(output.len() - 16).cast(), last);
    }
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
/// fields and `vpermb` looks them up in the alphabet. The bytes after the last whole
/// step (up to 47) take one more step, whose lookup writes `=` past the last
/// character. That step reads and writes inside the buffers where they are long
/// enough: from an input of 64 bytes or more, its last 64 bytes, moved down by a
/// `vpermb` that zeroes the rest; into an output of 64 characters or more, its last
/// 64, the tail moved up and stored under a mask that keeps the characters before
/// it. A masked access covers its whole 64 bytes for the CPU's store forwarding, and
/// where those bytes overlapped a buffer written just before (the output of the
/// call before, next to the input on the heap), a 16-byte input took 8.3 ns against
/// 3.4 for 32 bytes (a Zen 5 host): so shorter inputs of 16 to 24 bytes take the
/// AVX2 kernel's in-bounds path ([`encode_short_avx2`]), and the rest the narrowest
/// masked load and store that hold them ([`load_prefix`], [`store_prefix`]).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VBMI (and so AVX2).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
pub(super) unsafe fn encode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
    padding: Padding,
) {
    if is_short_avx2(input.len()) {
        // SAFETY: AVX2 is this function's; 16 to 24 bytes, and the output is the
        // encoded length (padded or not), as for every kernel (`encode_to_slice_with`
        // cuts it), as encode_short_avx2 requires. Taken before the arithmetic below:
        // after it, 16 bytes took 7.0 ns against AVX2's 4.6 (portable build, Zen 4).
        return unsafe { encode_short_avx2(input, output, tables) };
    }
    let steps = input.len() / 48;
    let rest = input.len() - 48 * steps;
    // 2, 3 or 4 characters per group of 1, 2 or 3 bytes: at most 63 for 47 bytes.
    let characters = (4 * rest).div_ceil(3);
    // The characters after the whole steps, with the padding: at most 64.
    let tail = match padding {
        Padding::Padded => 4 * rest.div_ceil(3),
        Padding::Unpadded => characters,
    };
    assert!(
        output.len() >= 64 * steps + tail,
        "the output holds the encoded length"
    );
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
    for step in 0..steps {
        // SAFETY: 48 readable bytes at 48 * step < input.len(); the mask keeps the load
        // to those. (Unmasked 64-byte loads where the input has them, tried against
        // the stalls described above, made 1-16 KiB 1.2-1.3x slower on Zen 5.)
        let bytes =
            unsafe { _mm512_maskz_loadu_epi8(LOW_48, input.as_ptr().add(48 * step).cast()) };
        let lanes = _mm512_permutexvar_epi8(spread, bytes);
        // Each result byte holds a 6-bit value in its low bits; vpermb ignores the top two.
        let sextets = _mm512_multishift_epi64_epi8(fields, lanes);
        let chars = _mm512_permutexvar_epi8(sextets, alphabet);
        // SAFETY: 64 writable bytes at 64 * step, asserted above.
        unsafe { _mm512_storeu_si512(output.as_mut_ptr().add(64 * step).cast(), chars) };
    }
    if rest == 0 {
        return;
    }
    let bytes = if input.len() >= 64 {
        // SAFETY: 64 readable bytes end at the input's end.
        let last = unsafe { _mm512_loadu_si512(input.as_ptr().add(input.len() - 64).cast()) };
        // Byte i of the tail is byte i + 64 - rest of `last`; the others zero.
        let down = _mm512_add_epi8(BYTE_INDEX.0, _mm512_set1_epi8((64 - rest) as i8));
        _mm512_maskz_permutexvar_epi8((1 << rest) - 1, down, last)
    } else {
        // SAFETY: the `rest` readable bytes at 48 * steps.
        unsafe { load_prefix(input.as_ptr().add(48 * steps), rest) }
    };
    let lanes = _mm512_permutexvar_epi8(spread, bytes);
    let sextets = _mm512_multishift_epi64_epi8(fields, lanes);
    let chars = _mm512_mask_permutexvar_epi8(
        _mm512_set1_epi8(b'=' as i8),
        (1 << characters) - 1,
        sextets,
        alphabet,
    );
    let end = 64 * steps + tail;
    if end >= 64 {
        // Character j of the output's last 64 is tail character j - (64 - tail).
        let up = _mm512_sub_epi8(BYTE_INDEX.0, _mm512_set1_epi8((64 - tail) as i8));
        let last = _mm512_permutexvar_epi8(up, chars);
        // SAFETY: the 64 writable bytes before `end` (asserted above); the mask
        // writes only the last `tail` of them.
        unsafe {
            _mm512_mask_storeu_epi8(
                output.as_mut_ptr().add(end - 64).cast(),
                u64::MAX << (64 - tail),
                last,
            )
        };
    } else {
        // SAFETY: the `tail` (1 to 63) writable bytes at 0, asserted above.
        unsafe { store_prefix(output.as_mut_ptr(), tail, chars) };
    }
}

/// The `len` (1 to 64) bytes at `at`, zero above, read by the narrowest masked load
/// that holds them (16, 32 or 64 bytes): the CPU's store forwarding sees a masked
/// access as all its bytes, so a wider one than needed waits for stores to the
/// memory just past the data (see [`encode_avx512vbmi`]).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL; `len` bytes at `at` must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn load_prefix(at: *const u8, len: usize) -> __m512i {
    debug_assert!((1..=64).contains(&len));
    let mask = u64::MAX >> (64 - len);
    // SAFETY: the masks keep each load to the `len` readable bytes.
    unsafe {
        if len <= 16 {
            _mm512_zextsi128_si512(_mm_maskz_loadu_epi8(mask as __mmask16, at.cast()))
        } else if len <= 32 {
            _mm512_zextsi256_si512(_mm256_maskz_loadu_epi8(mask as __mmask32, at.cast()))
        } else {
            _mm512_maskz_loadu_epi8(mask, at.cast())
        }
    }
}

/// Writes the low `len` (1 to 64) bytes of `value` at `at` by the narrowest masked
/// store that holds them, as [`load_prefix`] reads.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL; `len` bytes at `at` must be writable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn store_prefix(at: *mut u8, len: usize, value: __m512i) {
    debug_assert!((1..=64).contains(&len));
    let mask = u64::MAX >> (64 - len);
    // SAFETY: the masks keep each store to the `len` writable bytes.
    unsafe {
        if len <= 16 {
            _mm_mask_storeu_epi8(at.cast(), mask as __mmask16, _mm512_castsi512_si128(value));
        } else if len <= 32 {
            _mm256_mask_storeu_epi8(at.cast(), mask as __mmask32, _mm512_castsi512_si256(value));
        } else {
            _mm512_mask_storeu_epi8(at.cast(), mask, value);
        }
    }
}

/// The bytes 0 to 63, in order: `vpermb` indices that move nothing.
#[repr(align(64))]
struct ByteIndex(__m512i);

/// [`ByteIndex`]'s one value.
// SAFETY: [u8; 64] and __m512i have the same size, and every bit pattern is a valid
// __m512i.
const BYTE_INDEX: ByteIndex = ByteIndex(unsafe {
    core::mem::transmute::<[u8; 64], __m512i>({
        let mut index = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            index[i] = i as u8;
            i += 1;
        }
        index
    })
});

/// SSSE3: 16 characters to 12 bytes per step.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn decode_ssse3(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    // SAFETY: this function's target features are V128's.
    let (read, written) = unsafe { lanes::decode::<V128>(body, output, tables) };
    scalar::decode(&body[read..], &mut output[written..], tables, read)
}

/// AVX2: 32 characters to 24 bytes per step; SSSE3's 16 for inputs too short for one.
/// A body that ends in a partial group and has at least [`SHORT_TAIL_FROM`] characters
/// ends with [`decode_short_avx2`] on its last seven whole groups and the partial one
/// (30 or 31 characters), which takes the partial group in the same step.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode_avx2(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    // SAFETY: this function's target features are AVX2's.
    if is_short_decode_avx2(body.len()) && unsafe { decode_short_avx2(body, output, tables) } {
        return Ok(());
    }
    if body.len() >= SHORT_TAIL_FROM && !body.len().is_multiple_of(4) {
        // From `tail` on: 28 characters of whole groups and the partial group's 2 or
        // 3, a length decode_short_avx2 takes; before it, at least one AVX2 step.
        let tail = body.len() / 4 * 4 - 28;
        let (head, rest) = output.split_at_mut(tail / 4 * 3);
        // SAFETY: this function's target features are V256's.
        let (read, written) = unsafe { lanes::decode::<V256>(&body[..tail], head, tables) };
        // SAFETY: as above; the rest of the body has 30 or 31 characters and `rest` is
        // what they decode to.
        if read == tail && unsafe { decode_short_avx2(&body[tail..], rest, tables) } {
            return Ok(());
        }
        return scalar::decode(&body[read..], &mut output[written..], tables, read);
    }
    let (read, written) = if body.len() < V256::BYTES {
        // SAFETY: AVX2 implies V128's SSSE3.
        unsafe { lanes::decode::<V128>(body, output, tables) }
    } else {
        // SAFETY: this function's target features are V256's.
        unsafe { lanes::decode::<V256>(body, output, tables) }
    };
    scalar::decode(&body[read..], &mut output[written..], tables, read)
}

/// The shortest and the longest body (input without padding) [`decode_short_avx2`]
/// takes: 16 to 24 bytes of output.
const SHORT_DECODE_AVX2: (usize, usize) = (22, 32);

/// The shortest body whose partial group [`decode_avx2`] decodes with
/// [`decode_short_avx2`]: one AVX2 step (32 characters) and then the last 28 whole
/// characters and the partial group's 2. Shorter bodies take the scalar code for it.
const SHORT_TAIL_FROM: usize = V256::BYTES + 28 + 2;

/// Whether [`decode_short_avx2`] takes a body of `len` characters.
#[inline(always)]
pub(super) fn is_short_decode_avx2(len: usize) -> bool {
    (SHORT_DECODE_AVX2.0..=SHORT_DECODE_AVX2.1).contains(&len)
}

/// Rows of [`SHORT_DECODE`]: one per body length from 22 to 32.
const SHORT_DECODE_ROWS: usize = SHORT_DECODE_AVX2.1 - SHORT_DECODE_AVX2.0 + 1;

/// [`decode_short_avx2`]'s constants, per body length from 22 (a row of 16 bytes
/// each).
struct ShortDecodeAvx2 {
    /// Moves the characters from the 17th on to the start of the high lane, which
    /// holds the body's last 16 (0x80 past the body: a zero byte).
    shift: [[u8; 16]; SHORT_DECODE_ROWS],
    /// 0xFF where the shifted high lane is past the body (filled with the alphabet's
    /// character for zero, so that a partial group decodes to its bytes and its
    /// trailing bits).
    fill: [[u8; 16]; SHORT_DECODE_ROWS],
    /// 0xFF at the high lane's bytes past the output: a partial group's trailing
    /// bits, which a canonical encoding has zero.
    trailing: [[u8; 16]; SHORT_DECODE_ROWS],
    /// The shuffles that pick the output's last 16 bytes from the low lane's 12 and
    /// from the high lane's (0x80: from the other).
    last_from_low: [[u8; 16]; SHORT_DECODE_ROWS],
    last_from_high: [[u8; 16]; SHORT_DECODE_ROWS],
}

const SHORT_DECODE: ShortDecodeAvx2 = {
    let mut short = ShortDecodeAvx2 {
        shift: [[0; 16]; SHORT_DECODE_ROWS],
        fill: [[0; 16]; SHORT_DECODE_ROWS],
        trailing: [[0; 16]; SHORT_DECODE_ROWS],
        last_from_low: [[0; 16]; SHORT_DECODE_ROWS],
        last_from_high: [[0; 16]; SHORT_DECODE_ROWS],
    };
    let mut row = 0;
    while row < SHORT_DECODE_ROWS {
        let len = SHORT_DECODE_AVX2.0 + row;
        let out = len * 3 / 4;
        let mut i = 0;
        while i < 16 {
            // Character 16 + i of the body is byte 16 + i - (len - 16) of the high lane.
            let from = 32 + i - len;
            short.shift[row][i] = if 16 + i < len { from as u8 } else { 0x80 };
            short.fill[row][i] = if 16 + i < len { 0 } else { 0xFF };
            short.trailing[row][i] = if 12 + i >= out && i < 12 { 0xFF } else { 0 };
            let at = out - 16 + i;
            short.last_from_low[row][i] = if at < 12 { at as u8 } else { 0x80 };
            short.last_from_high[row][i] = if at >= 12 { (at - 12) as u8 } else { 0x80 };
            i += 1;
        }
        row += 1;
    }
    short
};

/// 22 to 32 characters without padding (16 to 24 bytes: tokens, keys, digests) in one
/// AVX2 step, with the partial group, where `lanes::decode` would take two SSSE3
/// steps through a buffer and the scalar code for the partial group. Returns false,
/// having written nothing, where a character is outside the alphabet or the trailing
/// bits are not zero: the caller's steps find and report it.
///
/// The low lane holds the first 16 characters (four groups); the high lane the rest,
/// moved to its start from a load of the last 16 and filled with the alphabet's zero
/// character ([`SHORT_DECODE`]). The output gets the low lane's 16 bytes (12 and
/// four zeros) and then its last 16, picked from both lanes.
///
/// # Safety
/// The CPU must support AVX2; `body` must have 22 to 32 characters and `output` be
/// exactly the bytes they decode to.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode_short_avx2(body: &[u8], output: &mut [u8], tables: &Tables) -> bool {
    let (len, out) = (body.len(), output.len());
    debug_assert!(is_short_decode_avx2(len) && out == len * 3 / 4);
    let row = len - SHORT_DECODE_AVX2.0;
    let (shift, fill, trailing) = (
        &SHORT_DECODE.shift[row],
        &SHORT_DECODE.fill[row],
        &SHORT_DECODE.trailing[row],
    );
    let last_from_low = &SHORT_DECODE.last_from_low[row];
    let last_from_high = &SHORT_DECODE.last_from_high[row];
    // SAFETY: 16 readable bytes at 0 and at len - 16 (len >= 22); every row is 16
    // bytes.
    let (first, last, shift, fill, trailing, last_from_low, last_from_high) = unsafe {
        (
            _mm_loadu_si128(body.as_ptr().cast()),
            _mm_loadu_si128(body.as_ptr().add(len - 16).cast()),
            _mm_loadu_si128(shift.as_ptr().cast()),
            _mm_loadu_si128(fill.as_ptr().cast()),
            _mm_loadu_si128(trailing.as_ptr().cast()),
            _mm_loadu_si128(last_from_low.as_ptr().cast()),
            _mm_loadu_si128(last_from_high.as_ptr().cast()),
        )
    };
    let zero_char = _mm_set1_epi8(tables.encode[0] as i8);
    let rest = _mm_or_si128(
        _mm_shuffle_epi8(last, shift),
        _mm_and_si128(fill, zero_char),
    );
    // SAFETY: AVX2 is this function's.
    let Some(bytes) = (unsafe { lanes::decode_lanes(V256::from_halves(first, rest), tables) })
    else {
        return false;
    };
    let (low, high) = bytes.halves();
    if _mm_testz_si128(high, trailing) == 0 {
        return false;
    }
    // SAFETY: AVX2 is this function's; output has out (16 to 24) bytes, and the last
    // 16 cover every byte of the first 16 past the low lane's 12.
    unsafe { store_lanes(output, low, high, last_from_low, last_from_high) };
    true
}

/// AVX-512 VBMI: 64 characters to 48 bytes per step; `vpermi2b` looks each character
/// up in the first 128 entries of the decode table. The characters after the last
/// whole step (up to 15 whole groups and the partial group's 2 or 3) take one more
/// step, which reads the input's last 64 characters (moved down by `vpermb`), takes
/// the partial group's missing characters as zero sextets, checks that its bits below
/// its last byte are zero, and writes as the encoder's last step does
/// ([`encode_avx512vbmi`]: inside the output where it has 64 bytes, else the narrowest
/// masked store); the scalar code decodes any block with an invalid character or set
/// trailing bits, to report its exact position. Inputs shorter
/// than one step take the AVX2 kernel: at 16 characters this one took 8.4 ns against
/// AVX2's 3.6-6.6 (a Zen 5 host), at 64 it is ahead (8.8 against 12).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL and VBMI (and so AVX2).
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vbmi")]
pub(super) unsafe fn decode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    if input.len() < 64 {
        // SAFETY: AVX2 is this function's.
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
    // The sextets of 64 characters (index 0 where the mask is clear) and whether any
    // character the mask selects is outside the alphabet.
    let lookup = |chars: __m512i, mask: __mmask64| {
        // Indices use 7 bits; characters >= 0x80 are caught by their own top bit.
        // Zero where the mask is clear, so that a partial group merges to its bytes.
        let sextets = _mm512_maskz_permutex2var_epi8(mask, ascii_low, chars, ascii_high);
        let invalid = _mm512_movepi8_mask(_mm512_or_si512(sextets, chars)) & mask != 0;
        (sextets, invalid)
    };
    // The 48 bytes of 64 sextets, in the low 48 bytes.
    let merge = |sextets: __m512i| {
        let pairs = _mm512_maddubs_epi16(sextets, _mm512_set1_epi32(0x0140_0140));
        let merged = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x0001_1000));
        _mm512_permutexvar_epi8(pack, merged)
    };
    // The caller sizes `output` exactly: 3 bytes per group of 4 characters, 1 or 2 for
    // a partial group (the last step writes to the output's end).
    assert_eq!(
        output.len(),
        input.len() * 3 / 4,
        "the output is the decoded length"
    );
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= 64 {
        // SAFETY: 64 readable bytes at `read`, checked above.
        let chars = unsafe { _mm512_loadu_si512(input.as_ptr().add(read).cast()) };
        let (sextets, invalid) = lookup(chars, u64::MAX);
        if invalid {
            // The scalar code finds and reports the invalid character.
            return scalar::decode(&input[read..], &mut output[written..], tables, read);
        }
        // SAFETY: 48 writable bytes at `written` (3/4 of the 64 characters at `read`,
        // asserted above); the mask keeps the store to those.
        unsafe {
            _mm512_mask_storeu_epi8(
                output.as_mut_ptr().add(written).cast(),
                LOW_48,
                merge(sextets),
            )
        };
        read += 64;
        written += 48;
    }
    let count = input.len() - read;
    if count > 0 {
        // 3 bytes per whole group, 1 or 2 for a partial one (the output is exact).
        let bytes = output.len() - written;
        let mask: __mmask64 = (1 << count) - 1;
        // At least one whole step came before (shorter inputs went to AVX2), so the 64
        // characters that end the input are the input's.
        debug_assert!(read >= 64);
        // SAFETY: 64 readable bytes end at input.len(), and read >= 64.
        let last = unsafe { _mm512_loadu_si512(input.as_ptr().add(read + count - 64).cast()) };
        let down = _mm512_add_epi8(BYTE_INDEX.0, _mm512_set1_epi8((64 - count) as i8));
        let chars = _mm512_maskz_permutexvar_epi8(mask, down, last);
        let (sextets, invalid) = lookup(chars, mask);
        let merged = merge(sextets);
        // A partial group's bytes past its last: where the bits below that byte go,
        // which a canonical encoding has zero. (None without a partial group.)
        let groups_bytes = count.div_ceil(4) * 3;
        let trailing: __mmask64 = ((1 << groups_bytes) - 1) & !((1 << bytes) - 1);
        if invalid || _mm512_mask_test_epi8_mask(trailing, merged, merged) != 0 {
            return scalar::decode(&input[read..], &mut output[written..], tables, read);
        }
        let end = written + bytes;
        if end >= 64 {
            let up = _mm512_sub_epi8(BYTE_INDEX.0, _mm512_set1_epi8((64 - bytes) as i8));
            // SAFETY: the 64 writable bytes before `end`, the output's end; the mask
            // writes only the last `bytes`.
            unsafe {
                _mm512_mask_storeu_epi8(
                    output.as_mut_ptr().add(end - 64).cast(),
                    u64::MAX << (64 - bytes),
                    _mm512_permutexvar_epi8(up, merged),
                )
            };
        } else {
            // SAFETY: `bytes` writable bytes at `written`, the rest of the output.
            unsafe { store_prefix(output.as_mut_ptr().add(written), bytes, merged) };
        }
    }
    Ok(())
}

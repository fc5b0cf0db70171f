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
    let (read, written) = if input.len() < V256::GROUPS_READ {
        // SAFETY: AVX2 implies V128's SSSE3.
        unsafe { lanes::encode::<V128>(input, output, tables) }
    } else {
        // SAFETY: this function's target features are V256's.
        unsafe { lanes::encode::<V256>(input, output, tables) }
    };
    scalar::encode_partial(&input[read..], &mut output[written..], tables, padding);
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
/// step (up to 47) take one more step with a masked load and a masked store, whose
/// lookup writes `=` past the last character: no other kernel and no scalar code.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn encode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
    padding: Padding,
) {
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
    for step in 0..steps {
        // SAFETY: 48 readable bytes at 48 * step < input.len(); the mask keeps the load
        // to those.
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
    // SAFETY: the mask keeps the load to the `rest` readable bytes at 48 * steps.
    let bytes =
        unsafe { _mm512_maskz_loadu_epi8((1 << rest) - 1, input.as_ptr().add(48 * steps).cast()) };
    let lanes = _mm512_permutexvar_epi8(spread, bytes);
    let sextets = _mm512_multishift_epi64_epi8(fields, lanes);
    let chars = _mm512_mask_permutexvar_epi8(
        _mm512_set1_epi8(b'=' as i8),
        (1 << characters) - 1,
        sextets,
        alphabet,
    );
    // SAFETY: the mask keeps the store to the `tail` (1 to 64) writable bytes at
    // 64 * steps, asserted above.
    unsafe {
        _mm512_mask_storeu_epi8(
            output.as_mut_ptr().add(64 * steps).cast(),
            u64::MAX >> (64 - tail),
            chars,
        )
    };
}

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
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode_avx2(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    let (read, written) = if body.len() < V256::BYTES {
        // SAFETY: AVX2 implies V128's SSSE3.
        unsafe { lanes::decode::<V128>(body, output, tables) }
    } else {
        // SAFETY: this function's target features are V256's.
        unsafe { lanes::decode::<V256>(body, output, tables) }
    };
    scalar::decode(&body[read..], &mut output[written..], tables, read)
}

/// AVX-512 VBMI: 64 characters to 48 bytes per step; `vpermi2b` looks each character
/// up in the first 128 entries of the decode table. The whole groups after the last
/// whole step (up to 15) take one more step with a masked load and a masked store; the
/// scalar code decodes the partial group (2 or 3 characters) and any block with an
/// invalid character, to report its exact position.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub(super) unsafe fn decode_avx512vbmi(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
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
        let sextets = _mm512_permutex2var_epi8(ascii_low, chars, ascii_high);
        let invalid = _mm512_movepi8_mask(_mm512_or_si512(sextets, chars)) & mask != 0;
        (sextets, invalid)
    };
    // The 48 bytes of 64 sextets, in the low 48 bytes.
    let merge = |sextets: __m512i| {
        let pairs = _mm512_maddubs_epi16(sextets, _mm512_set1_epi32(0x0140_0140));
        let merged = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x0001_1000));
        _mm512_permutexvar_epi8(pack, merged)
    };
    // The caller sizes `output` exactly: 3 bytes per group of 4 characters.
    assert!(
        output.len() >= input.len() / 4 * 3,
        "the output holds the decoded length"
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
    let groups = (input.len() - read) / 4;
    if groups > 0 {
        let mask = (1 << (4 * groups)) - 1;
        // SAFETY: the mask keeps the load to the 4 * groups readable bytes at `read`.
        let chars = unsafe { _mm512_maskz_loadu_epi8(mask, input.as_ptr().add(read).cast()) };
        let (sextets, invalid) = lookup(chars, mask);
        if invalid {
            return scalar::decode(&input[read..], &mut output[written..], tables, read);
        }
        // SAFETY: 3 * groups writable bytes at `written`, as above; the mask keeps the
        // store to those.
        unsafe {
            _mm512_mask_storeu_epi8(
                output.as_mut_ptr().add(written).cast(),
                (1 << (3 * groups)) - 1,
                merge(sextets),
            )
        };
        read += 4 * groups;
        written += 3 * groups;
    }
    // The partial group (and its check of the bits below the last byte), if any.
    scalar::decode(&input[read..], &mut output[written..], tables, read)
}

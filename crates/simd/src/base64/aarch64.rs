//! aarch64 NEON kernels, as in the source article: `ld3` splits 48 bytes into the
//! first, second and third byte of each group, shifts and masks cut the four 6-bit
//! values, `tbl` over four table registers maps them to characters, and `st4`
//! interleaves them back. Decoding runs the same way backwards (`ld4`, a two-step
//! 128-entry `tbl`/`tbx` lookup, shifts, `st3`).

use core::arch::aarch64::*;

use super::{scalar, DecodeError, Padding, Tables};

/// NEON: 48 bytes to 64 characters per step, then the scalar code.
///
/// # Safety
/// The CPU must support NEON (every aarch64 Linux CPU does).
#[target_feature(enable = "neon")]
pub(super) unsafe fn encode_neon(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
    padding: Padding,
) {
    // SAFETY: the alphabet is 64 readable bytes.
    let alphabet = unsafe { vld1q_u8_x4(tables.encode.as_ptr()) };
    let six_bits = vdupq_n_u8(63);
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= 48 && output.len() - written >= 64 {
        // SAFETY: 48 readable bytes at `read`, checked above.
        let uint8x16x3_t(first, second, third) = unsafe { vld3q_u8(input.as_ptr().add(read)) };
        let a = vshrq_n_u8::<2>(first);
        let b = vandq_u8(
            vorrq_u8(vshlq_n_u8::<4>(first), vshrq_n_u8::<4>(second)),
            six_bits,
        );
        let c = vandq_u8(
            vorrq_u8(vshlq_n_u8::<2>(second), vshrq_n_u8::<6>(third)),
            six_bits,
        );
        let d = vandq_u8(third, six_bits);
        let chars = uint8x16x4_t(
            vqtbl4q_u8(alphabet, a),
            vqtbl4q_u8(alphabet, b),
            vqtbl4q_u8(alphabet, c),
            vqtbl4q_u8(alphabet, d),
        );
        // SAFETY: 64 writable bytes at `written`, checked above.
        unsafe { vst4q_u8(output.as_mut_ptr().add(written), chars) };
        read += 48;
        written += 64;
    }
    scalar::encode(&input[read..], &mut output[written..], tables, padding);
}

/// The 6-bit values of 16 characters: entries below 64 from the first four table
/// registers (`tbl` gives 0 out of range), 64..=127 from the next four (`tbx` keeps the
/// first result out of range). Invalid characters come out with bit 7 set, except
/// those >= 0x80, which the caller catches by their own bit 7.
#[inline]
#[target_feature(enable = "neon")]
fn sextets(chars: uint8x16_t, ascii_low: uint8x16x4_t, ascii_high: uint8x16x4_t) -> uint8x16_t {
    let low = vqtbl4q_u8(ascii_low, chars);
    vqtbx4q_u8(low, ascii_high, vsubq_u8(chars, vdupq_n_u8(64)))
}

/// NEON: 64 characters to 48 bytes per step, then the scalar code (which also reports
/// a step with an invalid character).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn decode_neon(
    input: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    // SAFETY: the decode table has 256 readable bytes.
    let (ascii_low, ascii_high) = unsafe {
        (
            vld1q_u8_x4(tables.decode.as_ptr()),
            vld1q_u8_x4(tables.decode.as_ptr().add(64)),
        )
    };
    let (mut read, mut written) = (0, 0);
    while input.len() - read >= 64 && output.len() - written >= 48 {
        // SAFETY: 64 readable bytes at `read`, checked above.
        let uint8x16x4_t(c0, c1, c2, c3) = unsafe { vld4q_u8(input.as_ptr().add(read)) };
        let (a, b, c, d) = (
            sextets(c0, ascii_low, ascii_high),
            sextets(c1, ascii_low, ascii_high),
            sextets(c2, ascii_low, ascii_high),
            sextets(c3, ascii_low, ascii_high),
        );
        let flags = vorrq_u8(
            vorrq_u8(vorrq_u8(a, b), vorrq_u8(c, d)),
            vorrq_u8(vorrq_u8(c0, c1), vorrq_u8(c2, c3)),
        );
        if vmaxvq_u8(flags) >= 0x80 {
            break;
        }
        let bytes = uint8x16x3_t(
            vorrq_u8(vshlq_n_u8::<2>(a), vshrq_n_u8::<4>(b)),
            vorrq_u8(vshlq_n_u8::<4>(b), vshrq_n_u8::<2>(c)),
            vorrq_u8(vshlq_n_u8::<6>(c), d),
        );
        // SAFETY: 48 writable bytes at `written`, checked above.
        unsafe { vst3q_u8(output.as_mut_ptr().add(written), bytes) };
        read += 64;
        written += 48;
    }
    scalar::decode(&input[read..], &mut output[written..], tables, read)
}

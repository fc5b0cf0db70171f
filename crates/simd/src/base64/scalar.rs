//! The portable code: the specification the SIMD kernels are tested against, and what
//! finishes the partial group they leave (all of inputs too short for a step).

use super::tables::{Tables, INVALID};
use super::{DecodeError, Padding};

/// Encodes `input` into `output`, which is exactly the encoded length under `padding`.
#[inline]
pub(super) fn encode(input: &[u8], output: &mut [u8], tables: &Tables, padding: Padding) {
    let alphabet = &tables.encode;
    let char_at = |bits: u64, shift: u32| u64::from(alphabet[(bits >> shift & 63) as usize]);
    let (mut read, mut written) = (0, 0);
    // Two groups from one 8-byte load (its top 48 bits) while 8 bytes remain, their 8
    // characters in one store.
    while let (Some(chunk), Some(slot)) = (
        input.get(read..read + 8),
        output.get_mut(written..written + 8),
    ) {
        let bits = u64::from_be_bytes(chunk.try_into().expect("8 bytes"));
        let chars = (0..8).fold(0, |chars, i| chars | char_at(bits, 58 - 6 * i) << (8 * i));
        slot.copy_from_slice(&chars.to_le_bytes());
        read += 6;
        written += 8;
    }
    while let (Some(group), Some(slot)) = (
        input.get(read..read + 3),
        output.get_mut(written..written + 4),
    ) {
        let bits = u64::from(group[0]) << 16 | u64::from(group[1]) << 8 | u64::from(group[2]);
        let chars = (0..4).fold(0, |chars, i| chars | char_at(bits, 18 - 6 * i) << (8 * i));
        slot.copy_from_slice(&(chars as u32).to_le_bytes());
        read += 3;
        written += 4;
    }
    encode_partial(&input[read..], &mut output[written..], tables, padding);
}

/// Encodes the last partial group, `rest` (0 to 2 bytes), into `tail` (exactly its
/// encoded length under `padding`: 4, or 2 or 3 unpadded).
#[inline(always)]
pub(super) fn encode_partial(rest: &[u8], tail: &mut [u8], tables: &Tables, padding: Padding) {
    debug_assert!(rest.len() < 3, "whole groups are the caller's");
    let (first, second) = match *rest {
        [] => return,
        [first] => (first, None),
        [first, second, ..] => (first, Some(second)),
    };
    let bits = u32::from(first) << 16 | u32::from(second.unwrap_or(0)) << 8;
    let char_at = |shift: u32| tables.encode[(bits >> shift & 63) as usize];
    let third = if second.is_some() { char_at(6) } else { b'=' };
    let chars = [char_at(18), char_at(12), third, b'='];
    match padding {
        // One 4-byte store.
        Padding::Padded => tail[..4].copy_from_slice(&chars),
        // Explicit stores: a copy of 2 or 3 bytes becomes a call to memcpy.
        Padding::Unpadded => {
            tail[0] = chars[0];
            tail[1] = chars[1];
            if second.is_some() {
                tail[2] = chars[2];
            }
        }
    }
}

/// The scalar decode kernel: [`decode`] from the start of the input.
pub(super) fn decode_body(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    decode(body, output, tables, 0)
}

/// Decodes `body` (the input without its padding, whose length is not a multiple of
/// 4 plus 1) into `output`, which is exactly the decoded length. `offset` is where
/// `body` starts in the caller's input, for error positions.
pub(super) fn decode(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
    offset: usize,
) -> Result<(), DecodeError> {
    let mut groups = body.chunks_exact(4);
    let mut slots = output.chunks_exact_mut(3);
    let mut position = offset;
    for (group, slot) in groups.by_ref().zip(slots.by_ref()) {
        let bits = sextets(group, tables, position)?;
        // Explicit stores: a 3-byte copy_from_slice becomes a call to memcpy.
        slot[0] = (bits >> 16) as u8;
        slot[1] = (bits >> 8) as u8;
        slot[2] = bits as u8;
        position += 4;
    }
    let rest = groups.remainder();
    if rest.is_empty() {
        return Ok(());
    }
    debug_assert!(
        rest.len() == 2 || rest.len() == 3,
        "the caller checks the length"
    );
    let bits = sextets(rest, tables, position)? << (6 * (4 - rest.len()));
    let tail = slots.into_remainder();
    tail[0] = (bits >> 16) as u8;
    if rest.len() == 3 {
        tail[1] = (bits >> 8) as u8;
    }
    // The bits of the last character below the last whole byte must be zero.
    let spare_bits = if rest.len() == 2 {
        0x00_00FFFF
    } else {
        0x00_0000FF
    };
    if bits & spare_bits != 0 {
        return Err(DecodeError::NonCanonicalTrailingBits {
            position: position + rest.len() - 1,
        });
    }
    Ok(())
}

/// The up to 24 bits of up to four characters starting at `position`, the first
/// character highest.
#[inline]
fn sextets(chars: &[u8], tables: &Tables, position: usize) -> Result<u32, DecodeError> {
    let mut bits = 0u32;
    let mut invalid = 0u8;
    for &c in chars {
        let value = tables.decode[usize::from(c)];
        invalid |= value;
        bits = bits << 6 | u32::from(value & 63);
    }
    if invalid & 0x80 == 0 {
        return Ok(bits);
    }
    let (index, &byte) = chars
        .iter()
        .enumerate()
        .find(|&(_, &c)| tables.decode[usize::from(c)] == INVALID)
        .expect("some character was invalid");
    Err(if byte == b'=' {
        DecodeError::InvalidPadding {
            position: position + index,
        }
    } else {
        DecodeError::InvalidByte {
            position: position + index,
            byte,
        }
    })
}

//! The portable code: the specification the SIMD kernels are tested against, and what
//! finishes the partial block they leave.

use super::tables::{Tables, INVALID};
use super::{DecodeError, Padding};

/// Encodes `input` into `output`, which is exactly the encoded length under `padding`.
pub(super) fn encode(input: &[u8], output: &mut [u8], tables: &Tables, padding: Padding) {
    let alphabet = &tables.encode;
    let mut groups = input.chunks_exact(3);
    for (group, slot) in groups.by_ref().zip(output.chunks_exact_mut(4)) {
        let bits = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        slot[0] = alphabet[(bits >> 18) as usize];
        slot[1] = alphabet[(bits >> 12 & 63) as usize];
        slot[2] = alphabet[(bits >> 6 & 63) as usize];
        slot[3] = alphabet[(bits & 63) as usize];
    }
    let rest = groups.remainder();
    if rest.is_empty() {
        return;
    }
    let tail = &mut output[input.len() / 3 * 4..];
    let bits = u32::from(rest[0]) << 16 | u32::from(rest.get(1).copied().unwrap_or(0)) << 8;
    tail[0] = alphabet[(bits >> 18) as usize];
    tail[1] = alphabet[(bits >> 12 & 63) as usize];
    if rest.len() == 2 {
        tail[2] = alphabet[(bits >> 6 & 63) as usize];
    }
    if padding == Padding::Padded {
        // Explicit stores: a fill() of one or two bytes becomes a call to memset.
        tail[3] = b'=';
        if rest.len() == 1 {
            tail[2] = b'=';
        }
    }
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

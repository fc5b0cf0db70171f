//! The hash, written once over [`Block`].
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: mixed into every lane's starting value, so `b"a"` and `b"a\0"` differ.
//! - Up to 16 bytes: one block of them without a variable-length copy (8..=16 bytes:
//!   the first and the last 8, overlapping; 4..=7: the first and last 4; 1..=3: the
//!   first, middle and last byte; with the length mixed in, distinct keys give
//!   distinct blocks), XOR key 0, then three rounds (two give full diffusion of a
//!   16-byte block; the third is for avalanche).
//! - 17 to 64 bytes: two or four 16-byte blocks (the first and last 16/32 bytes,
//!   overlapping), each absorbed into its own lane.
//! - Longer: four lanes absorb 64 bytes per step, then the last 64 bytes (overlapping).
//! - Absorbing a block: `lane = aesenc(aesenc(lane, block), key)`, two rounds.
//! - Finishing: the lanes are folded into one with a round each, two more rounds, and
//!   the 128 bits are folded to 64 by XOR.
//! - A running `Hasher` hashes each write with its state so far XORed into key 0.
//!
//! Go's arm64 aeshash lost bytes above 256 (a register reused in the loop); the tests
//! compare every implementation with the software one at every length to 1 KiB and
//! beyond, and check that every byte of long inputs matters.

use super::block::Block;

/// A 128-bit seed, from which the four round keys are derived (XOR with digits of π)
/// in registers at each call: building them in memory for a one-shot hash costs a
/// store-forwarding stall that is longer than hashing 16 bytes.
///
/// Two named fields rather than an array: Rust passes a pair of scalars in two
/// registers but a 16-byte array through memory, which costs the same stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    low: u64,
    high: u64,
}

/// Fractional digits of π (the first 512 bits), XORed into the seed per key.
const PI: [u64; 8] = [
    0x243F_6A88_85A3_08D3,
    0x1319_8A2E_0370_7344,
    0xA409_3822_299F_31D0,
    0x082E_FA98_EC4E_6C89,
    0x4528_21E6_38D0_1377,
    0xBE54_66CF_34E9_0C6C,
    0xC0AC_29B7_C97C_50DD,
    0x3F84_D5B5_B547_0917,
];

impl Keys {
    /// The keys of a seed.
    #[inline]
    pub(crate) fn new(seed: [u64; 2]) -> Keys {
        Keys {
            low: seed[0],
            high: seed[1],
        }
    }

    /// Round key `i` (0..4) with `tweak` XORed into its low half.
    ///
    /// # Safety
    /// The CPU must support `B`'s instructions.
    #[inline(always)]
    unsafe fn key<B: Block>(self, i: usize, tweak: u64) -> B {
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe { B::from_halves(self.low ^ PI[2 * i] ^ tweak, self.high ^ PI[2 * i + 1]) }
    }
}

/// The (low, high) halves of a block holding every byte of a key of up to 16 bytes
/// (see the module docs), read without a variable-length copy.
#[inline(always)]
fn small_block(bytes: &[u8]) -> (u64, u64) {
    let len = bytes.len();
    let read_u64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let read_u32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if len >= 8 {
        (read_u64(0), read_u64(len - 8))
    } else if len >= 4 {
        (u64::from(read_u32(0)), u64::from(read_u32(len - 4)))
    } else if len > 0 {
        let spread =
            u64::from(bytes[0]) | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]) << 16;
        (spread, 0)
    } else {
        (0, 0)
    }
}

/// The 16 bytes at `offset` (which must leave 16 in `bytes`).
#[inline(always)]
fn block_at(bytes: &[u8], offset: usize) -> &[u8; 16] {
    bytes[offset..offset + 16].try_into().expect("16 bytes")
}

/// The hash of `bytes` with `keys`, with `tweak` XORed into key 0 (how a running
/// `Hasher` chains its writes), for any [`Block`].
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash<B: Block>(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist; every other operation in
    // this block is safe Rust.
    unsafe {
        let k: [B; 4] = [
            keys.key(0, tweak),
            keys.key(1, 0),
            keys.key(2, 0),
            keys.key(3, 0),
        ];
        let len = bytes.len();
        let length = B::from_halves(len as u64, 0);
        if len <= 16 {
            let (low, high) = small_block(bytes);
            let s = B::from_halves(low, high).xor(k[0]).aesenc(k[1].xor(length));
            return fold(s.aesenc(k[2]).aesenc(k[3]));
        }
        let mut lanes = [
            k[0].xor(length),
            k[1].xor(length),
            k[2].xor(length),
            k[3].xor(length),
        ];
        let absorb = |lane: B, block: &[u8; 16], key: B| lane.aesenc(B::load(block)).aesenc(key);
        if len <= 32 {
            lanes[0] = absorb(lanes[0], block_at(bytes, 0), k[0]);
            lanes[1] = absorb(lanes[1], block_at(bytes, len - 16), k[1]);
        } else if len <= 64 {
            lanes[0] = absorb(lanes[0], block_at(bytes, 0), k[0]);
            lanes[1] = absorb(lanes[1], block_at(bytes, 16), k[1]);
            lanes[2] = absorb(lanes[2], block_at(bytes, len - 32), k[2]);
            lanes[3] = absorb(lanes[3], block_at(bytes, len - 16), k[3]);
        } else {
            // Every whole 64-byte step but the last, then the last 64 bytes.
            let steps = (len - 1) / 64;
            for step in bytes[..steps * 64].chunks_exact(64) {
                for (i, lane) in lanes.iter_mut().enumerate() {
                    *lane = absorb(*lane, block_at(step, 16 * i), k[i]);
                }
            }
            let last = &bytes[len - 64..];
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = absorb(*lane, block_at(last, 16 * i), k[i]);
            }
        }
        let s = lanes[0]
            .aesenc(lanes[1])
            .aesenc(lanes[2])
            .aesenc(lanes[3])
            .aesenc(k[0])
            .aesenc(k[1]);
        fold(s)
    }
}

/// 128 bits to 64 by XOR of the halves.
#[inline(always)]
unsafe fn fold<B: Block>(s: B) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist.
    let (low, high) = unsafe { s.halves() };
    low ^ high
}

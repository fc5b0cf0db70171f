//! The hash, written once over [`Block`].
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: mixed into every lane's starting value, so `b"a"` and `b"a\0"` differ.
//! - Up to 16 bytes: the bytes, zero-padded, XOR key 0, then three rounds (two give
//!   full diffusion of a 16-byte block; the third is for avalanche).
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

/// Four round keys derived from a 128-bit seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keys(pub [[u8; 16]; 4]);

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
    pub(crate) fn new(seed: [u64; 2]) -> Keys {
        Keys(core::array::from_fn(|i| {
            let low = (seed[0] ^ PI[2 * i]).to_le_bytes();
            let high = (seed[1] ^ PI[2 * i + 1]).to_le_bytes();
            core::array::from_fn(|b| if b < 8 { low[b] } else { high[b - 8] })
        }))
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
pub(crate) unsafe fn hash<B: Block>(bytes: &[u8], keys: &Keys, tweak: u64) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist; every other operation in
    // this block is safe Rust.
    unsafe {
        let mut tweak_block = [0u8; 16];
        tweak_block[..8].copy_from_slice(&tweak.to_le_bytes());
        let k: [B; 4] = [
            B::load(&keys.0[0]).xor(B::load(&tweak_block)),
            B::load(&keys.0[1]),
            B::load(&keys.0[2]),
            B::load(&keys.0[3]),
        ];
        let mut length = [0u8; 16];
        length[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        let length = B::load(&length);
        let len = bytes.len();
        if len <= 16 {
            let mut padded = [0u8; 16];
            padded[..len].copy_from_slice(bytes);
            let s = B::load(&padded).xor(k[0]).aesenc(k[1].xor(length));
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

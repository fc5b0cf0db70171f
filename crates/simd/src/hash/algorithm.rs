//! The hash, written once over [`Block`].
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: mixed into every lane's starting value, so `b"a"` and `b"a\0"` differ.
//! - Up to 16 bytes: the key's bytes as two 64-bit words without a variable-length
//!   copy (8..=16 bytes: the first and the last 8, overlapping; 4..=7: the first and
//!   last 4; 1..=3: the first, middle and last byte; with the length mixed in,
//!   distinct keys give distinct words), then two folded multiplies as in wyhash and
//!   foldhash: the 128-bit product of the words XOR the seed, and the product of its
//!   halves XOR the length and constants, folded to 64 bits by XOR. No AES here: three
//!   dependent rounds plus the call through the dispatcher cost 3-4x foldhash at 16
//!   bytes, while two multiplies pass the same quality tests and need no CPU feature,
//!   so [`super::hash_bytes`] takes this path before it dispatches.
//! - 17 to 64 bytes: two or four 16-byte blocks (the first and last 16/32 bytes,
//!   overlapping), each absorbed into its own lane.
//! - 65 to 128 bytes: the first and the last 64 bytes, overlapping, into eight lanes.
//! - Longer: eight lanes absorb 128 bytes per step, then the last 128 bytes
//!   (overlapping). Eight independent lanes keep two AES units busy: a round's latency
//!   is four cycles, and each block costs two dependent rounds (four lanes ran at half
//!   gxhash's speed, waiting on latency).
//! - Absorbing a block: `lane = aesenc(aesenc(lane, block), key)`, two rounds: with
//!   one, the difference one block leaves after a single S-box layer could be cancelled
//!   by the next block with a guess of a few bits, whatever the key.
//! - Finishing: the lanes are combined pairwise in a tree with a round per pair, two
//!   more rounds with keys, and the 128 bits are folded to 64 by XOR.
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

/// The hash of a key of at most 16 bytes (see the module docs); the same function for
/// every implementation.
///
/// The seed goes into the first product only: an attacker who does not know it can
/// make neither factor zero (which would make the key's other word irrelevant) but by
/// guessing 64 bits.
#[inline(always)]
pub(crate) fn hash_short(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    debug_assert!(bytes.len() <= 16);
    let (low, high) = small_block(bytes);
    let product = u128::from(low ^ keys.low ^ PI[0] ^ tweak) * u128::from(high ^ keys.high ^ PI[1]);
    folded_multiply(
        product as u64 ^ PI[2] ^ bytes.len() as u64,
        (product >> 64) as u64 ^ PI[3],
    )
}

/// The 128-bit product of `a` and `b`, folded to 64 bits by XOR of its halves.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    product as u64 ^ (product >> 64) as u64
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
    let len = bytes.len();
    if len <= 16 {
        return hash_short(bytes, keys, tweak);
    }
    // SAFETY: the caller guarantees B's instructions exist; every other operation in
    // this block is safe Rust.
    unsafe {
        let k: [B; 4] = [
            keys.key(0, tweak),
            keys.key(1, 0),
            keys.key(2, 0),
            keys.key(3, 0),
        ];
        // The length in the low half for lanes 0-3, in the high half for 4-7, so that
        // lanes sharing a key start apart.
        let length = [B::from_halves(len as u64, 0), B::from_halves(0, len as u64)];
        let mut lanes: [B; 8] = core::array::from_fn(|i| k[i % 4].xor(length[i / 4]));
        let absorb = |lane: B, block: &[u8; 16], key: B| lane.aesenc(B::load(block)).aesenc(key);
        let s = if len <= 32 {
            lanes[0] = absorb(lanes[0], block_at(bytes, 0), k[0]);
            lanes[1] = absorb(lanes[1], block_at(bytes, len - 16), k[1]);
            lanes[0].aesenc(lanes[1])
        } else if len <= 64 {
            lanes[0] = absorb(lanes[0], block_at(bytes, 0), k[0]);
            lanes[1] = absorb(lanes[1], block_at(bytes, 16), k[1]);
            lanes[2] = absorb(lanes[2], block_at(bytes, len - 32), k[2]);
            lanes[3] = absorb(lanes[3], block_at(bytes, len - 16), k[3]);
            combine4(&[lanes[0], lanes[1], lanes[2], lanes[3]])
        } else {
            if len <= 128 {
                // The first 64 bytes into lanes 0-3, the last 64 into lanes 4-7.
                for i in 0..4 {
                    lanes[i] = absorb(lanes[i], block_at(bytes, 16 * i), k[i]);
                    lanes[i + 4] = absorb(lanes[i + 4], block_at(bytes, len - 64 + 16 * i), k[i]);
                }
            } else {
                // Every whole 128-byte step but the last, then the last 128 bytes.
                let steps = (len - 1) / 128;
                let mut absorb_step = |step: &[u8]| {
                    for (i, lane) in lanes.iter_mut().enumerate() {
                        *lane = absorb(*lane, block_at(step, 16 * i), k[i % 4]);
                    }
                };
                for step in bytes[..steps * 128].chunks_exact(128) {
                    absorb_step(step);
                }
                absorb_step(&bytes[len - 128..]);
            }
            combine4(&[lanes[0], lanes[1], lanes[2], lanes[3]])
                .aesenc(combine4(&[lanes[4], lanes[5], lanes[6], lanes[7]]))
        };
        fold(s.aesenc(k[0]).aesenc(k[1]))
    }
}

/// Four lanes combined pairwise, a round per pair: two rounds deep where a chain
/// would be three.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn combine4<B: Block>(lanes: &[B; 4]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lanes[0].aesenc(lanes[1]).aesenc(lanes[2].aesenc(lanes[3])) }
}

/// 128 bits to 64 by XOR of the halves.
#[inline(always)]
unsafe fn fold<B: Block>(s: B) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist.
    let (low, high) = unsafe { s.halves() };
    low ^ high
}

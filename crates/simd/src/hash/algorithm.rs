//! The hash, written once over [`Block`] (and [`Steps`] for its long loop).
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: mixed into every lane's starting value, so `b"a"` and `b"a\0"` differ.
//! - Up to 16 bytes: the key's bytes as two 64-bit words without a variable-length
//!   copy (8..=16 bytes: the first and the last 8, overlapping; 4..=7: the first and
//!   last 4; 1..=3: the first, middle and last byte; with the length mixed in,
//!   distinct keys give distinct words), then two folded multiplies as in wyhash and
//!   foldhash: the 128-bit product of the words XOR the seed, and the product of its
//!   halves XOR the length and constants, folded to 64 bits by XOR. No AES here: three
//!   dependent rounds plus the call through the dispatcher took 2-4x foldhash's time
//!   at 16 bytes, while two multiplies pass the same quality tests and need no CPU
//!   feature, so [`super::hash_bytes`] takes this path before it dispatches. (One
//!   multiply, as `foldhash::fast` does, fails them: avalanche and seed bias 0.5.)
//! - 17 to 64 bytes: two or four 16-byte blocks (the first and last 16/32 bytes,
//!   overlapping), each absorbed into its own lane.
//! - 65 to 128 bytes: the first and the last 64 bytes, overlapping, into eight lanes;
//!   129 to 256: the first and the last 128 into sixteen.
//! - Longer: sixteen lanes absorb 256 bytes per step, then the last 256 bytes
//!   (overlapping). A round's latency is four cycles and a block costs two dependent
//!   rounds, so independent lanes are what keeps the AES units busy: four lanes ran at
//!   half gxhash's speed; eight fill two 128-bit units; sixteen fill them with VAES's
//!   256-bit rounds (two lanes per instruction, [`Steps`]), twice as fast again.
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

/// Lanes of the long loop, each a chain of AES rounds independent of the others.
pub(crate) const LANES: usize = 16;

/// Bytes one step of the long loop absorbs: a block per lane.
pub(crate) const STEP: usize = 16 * LANES;

/// How whole steps are absorbed into the lanes: lane `i` takes the 16 bytes at `16·i`
/// of each step with key `k[i % 4]` (see [`absorb`]). [`EachLane`] does it with one
/// `B` per lane; an implementation with wider AES instructions may do two lanes per
/// instruction, with the same values.
pub(crate) trait Steps<B: Block> {
    /// Absorbs every step of `steps` (a multiple of [`STEP`] bytes) into `lanes`.
    ///
    /// # Safety
    /// The CPU must support `B`'s instructions and the implementation's.
    unsafe fn absorb(lanes: &mut [B; LANES], steps: &[u8], k: &[B; 4]);
}

/// [`Steps`] one lane at a time: the definition.
pub(crate) struct EachLane;

impl<B: Block> Steps<B> for EachLane {
    #[inline(always)]
    unsafe fn absorb(lanes: &mut [B; LANES], steps: &[u8], k: &[B; 4]) {
        for step in steps.chunks_exact(STEP) {
            for (i, lane) in lanes.iter_mut().enumerate() {
                // SAFETY: the caller guarantees B's instructions exist.
                *lane = unsafe { absorb(*lane, block_at(step, 16 * i), k[i % 4]) };
            }
        }
    }
}

/// The hash of `bytes` with `keys`, with `tweak` XORed into key 0 (how a running
/// `Hasher` chains its writes), for any [`Block`], with `S` absorbing the long
/// loop's steps.
///
/// # Safety
/// The CPU must support `B`'s and `S`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash<B: Block, S: Steps<B>>(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    let len = bytes.len();
    if len <= 16 {
        return hash_short(bytes, keys, tweak);
    }
    // SAFETY: the caller guarantees B's and S's instructions exist; every other
    // operation in this block is safe Rust.
    unsafe {
        let k: [B; 4] = [
            keys.key(0, tweak),
            keys.key(1, 0),
            keys.key(2, 0),
            keys.key(3, 0),
        ];
        let s = if len <= 32 {
            combine2([
                one_block(bytes, &k, 0, 0),
                one_block(bytes, &k, 1, len - 16),
            ])
        } else if len <= 64 {
            // The first 32 bytes and the last 32, overlapping.
            combine4([
                one_block(bytes, &k, 0, 0),
                one_block(bytes, &k, 1, 16),
                one_block(bytes, &k, 2, len - 32),
                one_block(bytes, &k, 3, len - 16),
            ])
        } else if len <= 128 {
            // The first 64 bytes into lanes 0-3, the last 64 into 4-7.
            let last = len - 64;
            combine8([
                one_block(bytes, &k, 0, 0),
                one_block(bytes, &k, 1, 16),
                one_block(bytes, &k, 2, 32),
                one_block(bytes, &k, 3, 48),
                one_block(bytes, &k, 4, last),
                one_block(bytes, &k, 5, last + 16),
                one_block(bytes, &k, 6, last + 32),
                one_block(bytes, &k, 7, last + 48),
            ])
        } else {
            let mut lanes = [k[0]; LANES];
            for (i, start) in lanes.iter_mut().enumerate() {
                *start = lane_start(&k, i, len);
            }
            if len <= STEP {
                // 129 to 256 bytes: the first 128 into lanes 0-7, the last 128 into 8-15.
                let halves = [&bytes[..STEP / 2], &bytes[len - STEP / 2..]];
                for (half, lanes) in halves.into_iter().zip(lanes.chunks_exact_mut(8)) {
                    for (i, lane) in lanes.iter_mut().enumerate() {
                        *lane = absorb(*lane, block_at(half, 16 * i), k[i % 4]);
                    }
                }
            } else {
                // Every whole step but the last, then the last STEP bytes.
                let steps = (len - 1) / STEP;
                S::absorb(&mut lanes, &bytes[..steps * STEP], &k);
                S::absorb(&mut lanes, &bytes[len - STEP..], &k);
            }
            combine16(lanes)
        };
        fold(s.aesenc(k[0]).aesenc(k[1]))
    }
}

/// Lane `i`'s starting value: key `i % 4` XOR the length (low half) and the lane's
/// group `i / 4` (high half), so that lanes sharing a key start apart.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn lane_start<B: Block>(k: &[B; 4], i: usize, len: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { k[i % 4].xor(B::from_halves(len as u64, (i / 4) as u64)) }
}

/// Lane `i` of a hash of `bytes` after absorbing its one block, the 16 bytes at `at`.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn one_block<B: Block>(bytes: &[u8], k: &[B; 4], i: usize, at: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { absorb(lane_start(k, i, bytes.len()), block_at(bytes, at), k[i % 4]) }
}

/// Absorbs a block into a lane: `aesenc(aesenc(lane, block), key)`.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn absorb<B: Block>(lane: B, block: &[u8; 16], key: B) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lane.aesenc(B::load(block)).aesenc(key) }
}

/// Lanes combined pairwise in a tree, a round per pair: log2(n) rounds deep where a
/// chain would be n - 1. One function per count, spelled out: a loop over an array
/// of lanes was left as a loop through memory, five times slower at 256 bytes.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn combine2<B: Block>([a, b]: [B; 2]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { a.aesenc(b) }
}

/// Four lanes combined as [`combine2`] says.
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine4<B: Block>([a, b, c, d]: [B; 4]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { combine2([combine2([a, b]), combine2([c, d])]) }
}

/// Eight lanes combined as [`combine2`] says.
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine8<B: Block>(l: [B; 8]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        combine4([
            combine2([l[0], l[1]]),
            combine2([l[2], l[3]]),
            combine2([l[4], l[5]]),
            combine2([l[6], l[7]]),
        ])
    }
}

/// Sixteen lanes combined as [`combine2`] says.
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine16<B: Block>(l: [B; 16]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        combine8([
            combine2([l[0], l[1]]),
            combine2([l[2], l[3]]),
            combine2([l[4], l[5]]),
            combine2([l[6], l[7]]),
            combine2([l[8], l[9]]),
            combine2([l[10], l[11]]),
            combine2([l[12], l[13]]),
            combine2([l[14], l[15]]),
        ])
    }
}

/// 128 bits to 64 by XOR of the halves.
#[inline(always)]
unsafe fn fold<B: Block>(s: B) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist.
    let (low, high) = unsafe { s.halves() };
    low ^ high
}

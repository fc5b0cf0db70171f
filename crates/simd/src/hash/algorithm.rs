//! The hash, written once over [`Block`] (and [`Steps`] for its long loop).
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: mixed into every lane's starting value, so `b"a"` and `b"a\0"` differ.
//! - Up to 16 bytes: the key's bytes as two 64-bit words without a variable-length
//!   copy (8..=16 bytes: the first and the last 8, overlapping; 4..=7: the first and
//!   last 4; 1..=3: the first byte in one word, the middle and last in the other), the
//!   mixed seed XORed into both (rotated right by the length for the first, left by
//!   32 for the second), their folded 128-bit product, and a second folded multiply
//!   by a constant, as foldhash's quality variant does (the same two dependent
//!   multiplies and nothing else between them). No AES here: three dependent rounds
//!   plus the call through the dispatcher took 2-4x foldhash's time at 16 bytes, so
//!   [`super::hash_bytes`] takes this path before it dispatches. The seed is mixed
//!   (a folded multiply, [`Keys::short_seed`]) before it meets the key: XORed in raw
//!   into the word holding the key's bytes, it let hash(k, s) = hash(k', s ^ k ^ k')
//!   (SMHasher's PerlinNoise found 65,536 distinct hashes among 16.8 M 2-byte
//!   (key, seed) pairs). A `RandomState` mixes it once, when it is made; a direct
//!   call with a constant seed has it mixed at compile time.
//!   The length enters as the rotation of the mixed seed, beside the loads (XORed
//!   into the product between the multiplies, it was one more dependent step:
//!   1.41 against 1.36 ns at 16 bytes with AES, 1.97 against 1.48 ns portable, in
//!   paired runs on an idle Xeon); never raw into a word of the key, where keys of
//!   two lengths could be made equal.
//! - 17 to 64 bytes: two or four 16-byte blocks (the first and last 16/32 bytes,
//!   overlapping), each given two keyed rounds of its own (the first keyed with its
//!   lane's start, which holds the length) before it meets another lane; the lanes
//!   then meet with one round each (`aesenc(a, b)`, a tree), and one keyed round
//!   follows: five dependent rounds at 33-64 bytes ([`hash_medium`]).
//! - 65 to 128 bytes: the first and the last 64 bytes, overlapping, into eight lanes;
//!   129 to 256: the first and the last 128 into sixteen, as above (two keyed rounds
//!   per block, then a tree of one round per meeting).
//! - Longer: sixteen lanes absorb 256 bytes per step, then the last 256 bytes
//!   (overlapping). A round's latency is four cycles, so independent lanes are what
//!   keeps the AES units busy: four lanes ran at half gxhash's speed; eight fill two
//!   128-bit units; sixteen fill them with VAES's 256-bit rounds (two lanes per
//!   instruction, [`Steps`]), twice as fast again.
//! - Absorbing a block in the long loop ([`absorb`]): the block gets a keyed round of
//!   its own, off the lane's chain, and enters the lane as the key of the lane's
//!   round: `lane = aesenc(lane, aesenc(block ^ k, k'))`. Two rounds per block, one
//!   of them on the chain (it was `aesenc(aesenc(lane, block), key)`, two on the
//!   chain: at 1 KiB the four steps alone were eight rounds deep). A block entering
//!   raw with a single round on the chain would not do: its difference would reach
//!   the lane unchanged, and the next block could cancel it after one S-box layer
//!   with a guess of a few bits. Here the key enters before the block's S-boxes, so
//!   what a block's difference becomes is unknown without the key: cancelling it
//!   takes the block's S-boxes, the lane's round and the next block's S-boxes, six
//!   active S-boxes or more (the branch number of MixColumns is five), 2^-36 or less,
//!   where the old loop's two rounds on the lane gave five, 2^-30. After the last
//!   step each lane takes one more keyed round ([`last_round`]), so that the last
//!   step's blocks, too, have two keyed rounds behind them when the lanes meet.
//! - Finishing (longer than 64 bytes): the lanes meet pairwise in a tree of one round
//!   per meeting (`aesenc(a, b)`, [`combine2`]), then one more keyed round; at every
//!   length the 128 bits are folded to 64 by a folded multiply of the halves. When
//!   each block of the 17-64-byte path had one round of its own, lanes met with one
//!   round each and the halves were XORed, sparse 60-64-byte keys (up to 3 bits set)
//!   collided in full, 4-20 pairs among 22.4 M keys.
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

    /// The seed of the short path ([`hash_short`]): the 128-bit seed through a
    /// folded multiply, so that it never meets a key's bytes raw.
    #[inline(always)]
    pub(crate) fn short_seed(self) -> u64 {
        folded_multiply(self.low ^ PI[0], self.high ^ PI[1])
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

/// The two 64-bit words holding every byte of a key of up to 16 bytes (see the module
/// docs), read without a variable-length copy: 8..=16 bytes, the first and the last 8
/// (overlapping); 4..=7, the first and the last 4; 1..=3, the first byte in one word
/// and the middle and last in the other, so that the multiply of the two words has
/// key bytes in both factors.
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
        (
            u64::from(bytes[0]),
            u64::from(bytes[len / 2]) | u64::from(bytes[len - 1]) << 8,
        )
    } else {
        (0, 0)
    }
}

/// The hash of a key of at most 16 bytes (see the module docs), with `seed` from
/// [`Keys::short_seed`]; the same function for every implementation: the key's two
/// words XOR the seed (rotated right by the length for the first, so that keys of two
/// lengths whose words are equal stay apart; left by 32 for the second, so that equal
/// words stay apart), multiplied and folded, then `tweak` XORed in and a second
/// folded multiply by a constant (foldhash's quality variant's finish) so that every
/// input bit reaches every output bit.
///
/// `tweak` is 0 for a direct call; a running `Hasher` passes its state (XOR a held
/// integer, such as a `HashMap` key's length). It meets the product of the keyed
/// multiply, never a raw word of the key, so a tweak chosen by a caller cannot cancel
/// key bytes without the seed.
#[inline(always)]
pub(crate) fn hash_short(bytes: &[u8], seed: u64, tweak: u64) -> u64 {
    debug_assert!(bytes.len() <= 16);
    let (low, high) = small_block(bytes);
    let mixed = folded_multiply(
        low ^ seed.rotate_right(bytes.len() as u32),
        high ^ seed.rotate_left(32) ^ PI[2],
    );
    folded_multiply(mixed ^ tweak, PI[4])
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

/// The lanes of keys of more than 64 bytes, up to their meeting: for 65 to 128 bytes
/// eight lanes of one block each, for 129 to 256 sixteen, and beyond that the long
/// loop, the sixteen lanes started ([`lane_start`]), every whole step absorbed, lane
/// `i` taking the 16 bytes at `16·i` of each with keys `k[i % 4]` and `k[(i + 1) %
/// 4]` ([`absorb`]), then the last step, and the lanes met ([`combine16`]). The
/// provided methods and [`EachLane`] do it with one `B` per lane, the definition; an
/// implementation with wider AES instructions may do two lanes per instruction, with
/// the same values.
pub(crate) trait Steps<B: Block> {
    /// A key of 65 to 128 bytes: the first 64 bytes into lanes 0-3 and the last 64
    /// into lanes 4-7 (overlapping), each lane its one block ([`one_block`]), met
    /// ([`combine8`]).
    ///
    /// # Safety
    /// The CPU must support `B`'s instructions and the implementation's.
    #[inline(always)]
    unsafe fn eight_met(bytes: &[u8], k: &[B; 4]) -> B {
        let last = bytes.len() - 64;
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe {
            combine8([
                one_block(bytes, k, 0, 0),
                one_block(bytes, k, 1, 16),
                one_block(bytes, k, 2, 32),
                one_block(bytes, k, 3, 48),
                one_block(bytes, k, 4, last),
                one_block(bytes, k, 5, last + 16),
                one_block(bytes, k, 6, last + 32),
                one_block(bytes, k, 7, last + 48),
            ])
        }
    }

    /// A key of 129 to 256 bytes: the first 128 bytes into lanes 0-7 and the last 128
    /// into lanes 8-15, each lane its one block, met ([`combine16`]). Spelled out: a
    /// loop over the lanes was left as a loop through memory (40 ns at 256 bytes in
    /// the portable build, 2.5x 1 KiB's time).
    ///
    /// # Safety
    /// As for [`Steps::eight_met`].
    #[inline(always)]
    unsafe fn sixteen_met(bytes: &[u8], k: &[B; 4]) -> B {
        let last = bytes.len() - STEP / 2;
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe {
            combine16([
                one_block(bytes, k, 0, 0),
                one_block(bytes, k, 1, 16),
                one_block(bytes, k, 2, 32),
                one_block(bytes, k, 3, 48),
                one_block(bytes, k, 4, 64),
                one_block(bytes, k, 5, 80),
                one_block(bytes, k, 6, 96),
                one_block(bytes, k, 7, 112),
                one_block(bytes, k, 8, last),
                one_block(bytes, k, 9, last + 16),
                one_block(bytes, k, 10, last + 32),
                one_block(bytes, k, 11, last + 48),
                one_block(bytes, k, 12, last + 64),
                one_block(bytes, k, 13, last + 80),
                one_block(bytes, k, 14, last + 96),
                one_block(bytes, k, 15, last + 112),
            ])
        }
    }

    /// The lanes of a key of `len` bytes after `whole` (a multiple of [`STEP`] bytes)
    /// and then `last`, met.
    ///
    /// # Safety
    /// As for [`Steps::eight_met`].
    unsafe fn lanes_met(len: usize, whole: &[u8], last: &[u8; STEP], k: &[B; 4]) -> B;
}

/// [`Steps`] one lane at a time: the definition.
pub(crate) struct EachLane;

impl<B: Block> Steps<B> for EachLane {
    #[inline(always)]
    unsafe fn lanes_met(len: usize, whole: &[u8], last: &[u8; STEP], k: &[B; 4]) -> B {
        // SAFETY: the caller guarantees B's instructions exist; every other operation
        // in this block is safe Rust.
        unsafe {
            let mut lanes = [k[0]; LANES];
            for (i, start) in lanes.iter_mut().enumerate() {
                *start = lane_start(k, i, len);
            }
            for step in whole.chunks_exact(STEP).chain([&last[..]]) {
                for (i, lane) in lanes.iter_mut().enumerate() {
                    *lane = absorb(*lane, block_at(step, 16 * i), k, i);
                }
            }
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = last_round(*lane, k, i);
            }
            combine16(lanes)
        }
    }
}

/// The hash of `bytes` with `keys`, with `tweak` XORed into key 0 (how a running
/// `Hasher` chains its writes), for any [`Block`], with `S` absorbing the long
/// loop's steps: [`hash_short`], [`hash_medium`] or [`hash_long`] by length.
///
/// # Safety
/// The CPU must support `B`'s and `S`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash<B: Block, S: Steps<B>>(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    let len = bytes.len();
    // SAFETY: the caller guarantees B's and S's instructions exist.
    unsafe {
        if len <= 16 {
            hash_short(bytes, keys.short_seed(), tweak)
        } else if len <= 64 {
            hash_medium::<B>(bytes, keys, tweak)
        } else {
            hash_long::<B, S>(bytes, keys, tweak)
        }
    }
}

/// The four round keys, with `tweak` XORed into key 0.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn round_keys<B: Block>(keys: Keys, tweak: u64) -> [B; 4] {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        [
            keys.key(0, tweak),
            keys.key(1, 0),
            keys.key(2, 0),
            keys.key(3, 0),
        ]
    }
}

/// [`hash`] of 17 to 64 bytes: two or four blocks, each a lane of its own given two
/// keyed rounds ([`one_block`]); the lanes then meet with one round each,
/// `aesenc(a, b)` (four lanes: `aesenc(aesenc(a, b), aesenc(c, d))`), and one keyed
/// round follows. Small enough to be called in line where the build enables AES (a
/// `HashMap`'s `hash_one` stays in line around it); longer keys are a call.
///
/// One round per meeting, as in [`combine2`] (but its own tree, lane `i` meeting lane
/// `i + 1` where the longer paths meet `i + n/2`; it predates theirs, and changing it
/// would change every 33-64-byte value): `b` enters after a round of `a`,
/// which has had three by then against `b`'s two, so that a difference in one lane
/// cancels one in another only through a three-round AES differential (every
/// three-round trail has nine active S-boxes or more, so probability 2^-54 or less,
/// by AES's wide trail bound). With two rounds per meeting the 33-64-byte path was
/// seven dependent rounds deep and 0.8x ahash's AES path at 64 bytes; now five (four
/// at 17-32 bytes). Two lanes per VAES instruction here (lanes 0 and 2 in one
/// register, 1 and 3 in another: 7 AES instructions where there are 11) measured
/// faster over thousands of keys and slower on one key in a loop, the table's bench:
/// the inserts and the extract between 128 and 256 bits lengthen the chain (the
/// crate's README has the figures).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash_medium<B: Block>(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    let len = bytes.len();
    debug_assert!((17..=64).contains(&len));
    // SAFETY: the caller guarantees B's instructions exist; every other operation in
    // this block is safe Rust.
    unsafe {
        let k: [B; 4] = round_keys(keys, tweak);
        let s = if len <= 32 {
            one_block(bytes, &k, 0, 0).aesenc(one_block(bytes, &k, 1, len - 16))
        } else {
            // The first 32 bytes and the last 32, overlapping.
            let a = one_block(bytes, &k, 0, 0);
            let b = one_block(bytes, &k, 1, 16);
            let c = one_block(bytes, &k, 2, len - 32);
            let d = one_block(bytes, &k, 3, len - 16);
            a.aesenc(b).aesenc(c.aesenc(d))
        };
        finish(s, k[0])
    }
}

/// [`hash`] of more than 64 bytes.
///
/// # Safety
/// The CPU must support `B`'s and `S`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash_long<B: Block, S: Steps<B>>(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    let len = bytes.len();
    debug_assert!(len > 64);
    // SAFETY: the caller guarantees B's and S's instructions exist; every other
    // operation in this block is safe Rust.
    unsafe {
        let k: [B; 4] = round_keys(keys, tweak);
        let s = if len <= 128 {
            S::eight_met(bytes, &k)
        } else if len <= STEP {
            S::sixteen_met(bytes, &k)
        } else {
            // Every whole step but the last, then the last STEP bytes (overlapping).
            let whole = (len - 1) / STEP * STEP;
            let last = bytes[len - STEP..].try_into().expect("STEP bytes");
            S::lanes_met(len, &bytes[..whole], last, &k)
        };
        finish(s, k[0])
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
    unsafe { block_rounds(lane_start(k, i, bytes.len()), block_at(bytes, at), k, i) }
}

/// A lane's only block: `aesenc(aesenc(block ^ k[i % 4], start), k[(i + 1) % 4])`,
/// two keyed rounds on the block itself before it meets another lane. (When each
/// block of the 33-64-byte path had one round and 128 bits were folded to 64 by XOR,
/// sparse keys of 60-64 bytes collided in full. The long loop's blocks have one keyed
/// round of their own, [`absorb`]'s, and the lane's round after it; its last step's
/// blocks take [`last_round`] before they meet the tree.)
/// The lane's start, which holds the length, enters after the first round: XORed into
/// the block itself, a key of one length equalled a key of another whose bytes
/// differed by the lengths' XOR (SMHasher's Permutation keys: every 28-byte key of
/// 32-bit words below 8 collided with a 24-byte one).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn block_rounds<B: Block>(start: B, block: &[u8; 16], k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        B::load(block)
            .xor(k[i % 4])
            .aesenc(start)
            .aesenc(k[(i + 1) % 4])
    }
}

/// Absorbs a block into lane `i`: `aesenc(lane, aesenc(block ^ k[i % 4], k[(i + 1) % 4]))`,
/// the block's own keyed round off the lane's chain and one round on it (see the
/// module docs for why the key enters before the block's S-boxes).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn absorb<B: Block>(lane: B, block: &[u8; 16], k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lane.aesenc(B::load(block).xor(k[i % 4]).aesenc(k[(i + 1) % 4])) }
}

/// Lane `i`'s round after the last step, `aesenc(lane, k[(i + 1) % 4])`, before the
/// lanes meet: without it the last step's blocks, one keyed round of their own behind
/// them, reached the tree's root with that round alone (the tree's second lane enters
/// each meeting raw), and sparse keys collided in full in the last step's bytes (16
/// pairs among 22.4 M 1 KiB keys with up to 3 bits set in their last 64 bytes). With
/// it, every block has two keyed rounds behind it when it meets another lane, as in
/// the paths up to 256 bytes.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn last_round<B: Block>(lane: B, k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lane.aesenc(k[(i + 1) % 4]) }
}

/// Two lanes meet by one round, `aesenc(a, b)`: `b` enters as the round key of `a`.
/// Every block has two keyed rounds behind it when its lane first meets another (the
/// 65-256-byte paths' [`block_rounds`]; the long loop's [`absorb`] and
/// [`last_round`]), as in the 17-64-byte path, so that at each meeting one side has
/// had three rounds against the other's two. The lanes meet pairwise in a tree,
/// log2(n) rounds deep where a chain would be n - 1; one more keyed round follows the
/// root. The tree's last lane reaches the root with no round of the tree, which is
/// why a block needs its two: with one (no [`last_round`]), 1 KiB keys with up to 3
/// bits set in their last 64 bytes collided in full. (Two rounds per meeting, as this
/// was while the long loop had two rounds on the chain, made the tree of sixteen
/// lanes eight rounds deep: 0.75x gxhash's time at 1 KiB.) One function per count,
/// spelled out: a loop over an array of lanes was left as a loop through memory,
/// five times slower at 256 bytes.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn combine2<B: Block>([a, b]: [B; 2]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { a.aesenc(b) }
}

/// Four lanes combined as [`combine2`] says: lane `i` meets lane `i + 2`, then the
/// two results meet (at every level the first half meets the second, so that an
/// implementation holding two lanes per register meets whole registers).
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine4<B: Block>([a, b, c, d]: [B; 4]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { combine2([combine2([a, c]), combine2([b, d])]) }
}

/// Eight lanes combined as [`combine4`] says: lane `i` meets lane `i + 4` first.
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine8<B: Block>(l: [B; 8]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        combine4([
            combine2([l[0], l[4]]),
            combine2([l[1], l[5]]),
            combine2([l[2], l[6]]),
            combine2([l[3], l[7]]),
        ])
    }
}

/// Sixteen lanes combined as [`combine4`] says: lane `i` meets lane `i + 8` first.
///
/// # Safety
/// As for [`combine2`].
#[inline(always)]
unsafe fn combine16<B: Block>(l: [B; 16]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        combine8([
            combine2([l[0], l[8]]),
            combine2([l[1], l[9]]),
            combine2([l[2], l[10]]),
            combine2([l[3], l[11]]),
            combine2([l[4], l[12]]),
            combine2([l[5], l[13]]),
            combine2([l[6], l[14]]),
            combine2([l[7], l[15]]),
        ])
    }
}

/// The last keyed round, `aesenc(s, k0)`, and its 128 bits to 64 by a folded multiply
/// of the halves XOR digits of π (not the halves' XOR, which keeps any difference
/// that is equal in both halves from the last round's structure). The digits are
/// XORed into the round's key, which is the same (a round's key is XORed into its
/// output last) and leaves one operation fewer between the round and the multiply,
/// the key being ready long before.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn finish<B: Block>(s: B, k0: B) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist.
    let (low, high) = unsafe { s.aesenc(k0.xor(B::from_halves(PI[5], PI[6]))).halves() };
    folded_multiply(low, high)
}

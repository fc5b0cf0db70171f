//! The hash, written once over [`Block`] (and [`Steps`] for its long loop).
//!
//! - Keys: four 128-bit round keys, the seed XORed with constants (digits of π).
//! - Length: up to 16 bytes, the rotation of the seed; 17 to 64, in every lane's
//!   start; longer, XORed into the state after the lanes meet, before the last round.
//!   So `b"a"` and `b"a\0"` differ.
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
//!   then meet with one round each (`aesenc(a, b)`, a tree: at 33-64 bytes lane `i`
//!   meets lane `i + 2` first, so that VAES holds lanes 0-1 and 2-3 as the two
//!   32-byte halves of the key, [`Steps::four_met`]), and the finish's two rounds
//!   follow ([`finish_medium`]): six dependent rounds at 33-64 bytes, five at 17-32
//!   ([`hash_medium`]).
//! - 65 to 128 bytes: the first and the last 64 bytes, overlapping, into eight lanes;
//!   129 to 256: the first and the last 128 into sixteen, as above (two keyed rounds
//!   per block, then the lanes permuted and XORed).
//! - Longer: sixteen lanes absorb 256 bytes per step, then the last 256 bytes
//!   (overlapping). A round's latency is four cycles, so independent lanes are what
//!   keeps the AES units busy: four lanes ran at half gxhash's speed; eight fill two
//!   128-bit units; sixteen fill them with VAES's 256-bit rounds (two lanes per
//!   instruction, [`Steps`]), twice as fast again.
//! - Absorbing a block in the long loop ([`absorb`]): the block gets a keyed round of
//!   its own ([`own_round`]), off the lane's chain, and enters the lane as the key of
//!   the lane's round: `lane = aesenc(lane, aesenc(block ^ k, k'))`. Two rounds per
//!   block, one of them on the chain (it was `aesenc(aesenc(lane, block), key)`, two
//!   on the chain: at 1 KiB the four steps alone were eight rounds deep). A block
//!   entering raw with a single round on the chain would not do: its difference would
//!   reach the lane unchanged, and the next block could cancel it after one S-box
//!   layer with a guess of a few bits. Here the key enters before the block's S-boxes,
//!   so what a block's difference becomes is unknown without the key: cancelling it
//!   takes the block's S-boxes, the lane's round and the next block's S-boxes, six
//!   active S-boxes or more (the branch number of MixColumns is five), 2^-36 or less,
//!   where the old loop's two rounds on the lane gave five, 2^-30. The first step's
//!   blocks, after their own round, are XORed into the lanes' starts: until issue 57
//!   the lanes' round ran on the starts too, `aesenc(start, own)`, but a round of a
//!   value that depends on the keys alone is just another such value, and it cost
//!   eight VAES instructions per hash (1 KiB: 11.0 ns, now 10.1, a Zen 5 host). After
//!   the last step each lane takes one more keyed round ([`last_round`]), so that the
//!   last step's blocks, too, have two keyed rounds behind them when the lanes meet.
//! - Finishing (longer than 64 bytes): each lane's bytes permuted ([`LANE_MIX`]) and
//!   the lanes XORed ([`combine2`], whose docs give the bounds), the length XORed in,
//!   then one more keyed round, and the 128 bits folded to 64 by a folded multiply
//!   of the halves ([`finish`]). Until issue 57 these lanes met in a tree of one
//!   round per meeting (`aesenc(a, b)`), which cost a round of latency per level:
//!   four after the last step at 1 KiB (the 17-64-byte path keeps its tree: met by
//!   XOR it measured slower, see [`hash_medium`]). When each block of the
//!   17-64-byte path had one round of its own, lanes met with one round each and the
//!   halves were XORed, sparse 60-64-byte keys (up to 3 bits set) collided in full,
//!   4-20 pairs among 22.4 M keys.
//! - Finishing 17 to 64 bytes: the keyed round, then a round keyed with the state
//!   before it, and the low 64 bits ([`finish_medium`], ahash's shape), which keeps
//!   the result in the vector unit until one move out.
//! - A running `Hasher` hashes each write with its state so far XORed into key 0.
//!
//! Go's arm64 aeshash lost bytes above 256 (a register reused in the loop); the tests
//! compare every implementation with the software one at every length to 1 KiB and
//! beyond, and check that every byte of long inputs matters.

use super::block::Block;

/// A 128-bit seed, from which a direct hash derives the four round keys (XOR with
/// digits of π) in registers at each call: building them in memory for a one-shot
/// hash costs a store-forwarding stall that is longer than hashing 16 bytes. (A
/// `RandomState` keeps them made, [`StoredKeys`].)
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
}

/// Where a hash's round keys come from: computed from the seed at each call
/// ([`Keys`], a direct [`super::hash_bytes`]) or made once and kept in memory
/// ([`StoredKeys`], a `RandomState`'s).
pub(crate) trait KeySchedule: Copy {
    /// Round key `i` (0..4) with `tweak` XORed into its low half.
    ///
    /// # Safety
    /// The CPU must support `B`'s instructions.
    unsafe fn round_key<B: Block>(self, i: usize, tweak: u64) -> B;

    /// The seed's [`Keys::short_seed`].
    fn short_seed(self) -> u64;

    /// The seed, for the paths that take it in registers (the dispatcher's functions,
    /// and keys of more than 64 bytes, where a few instructions more are nothing).
    fn seed(self) -> Keys;
}

impl KeySchedule for Keys {
    #[inline(always)]
    unsafe fn round_key<B: Block>(self, i: usize, tweak: u64) -> B {
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe { B::from_halves(self.low ^ PI[2 * i] ^ tweak, self.high ^ PI[2 * i + 1]) }
    }

    #[inline(always)]
    fn short_seed(self) -> u64 {
        Keys::short_seed(self)
    }

    #[inline(always)]
    fn seed(self) -> Keys {
        self
    }
}

/// A seed's round keys (and short seed), made once, as a `RandomState` keeps them:
/// each round key is then one 16-byte load, where [`Keys`] from a seed in memory
/// took two loads, the XORs with the digits of π and the moves that join two 64-bit
/// halves in a vector, at the start of every hash's chain. A `HashMap`'s key of 64
/// bytes, one key in a loop, in a build that enables AES: 2.16 -> 2.06 ns (ahash's
/// map 2.30), 32 bytes 1.62 -> 1.36, 16 bytes 1.30 -> 1.08 (a Zen 4 host, issue 57).
/// Made when the hasher is, the memory is long written when a hash reads it, so
/// there is no store to wait for (see [`Keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredKeys {
    /// The seed itself, for [`KeySchedule::seed`] (joined from round key 0's halves
    /// instead, `hash_one` was too large to be in line).
    seed: Keys,
    /// Round key `i`: the seed XOR digits `2i` and `2i + 1` of [`PI`], as 16
    /// little-endian bytes.
    round: [[u8; 16]; 4],
    short_seed: u64,
}

impl StoredKeys {
    /// The keys of `keys`' seed.
    pub(crate) fn new(keys: Keys) -> StoredKeys {
        let round = core::array::from_fn(|i| {
            let mut key = [0; 16];
            key[..8].copy_from_slice(&(keys.low ^ PI[2 * i]).to_le_bytes());
            key[8..].copy_from_slice(&(keys.high ^ PI[2 * i + 1]).to_le_bytes());
            key
        });
        StoredKeys {
            seed: keys,
            round,
            short_seed: keys.short_seed(),
        }
    }
}

impl KeySchedule for &StoredKeys {
    #[inline(always)]
    unsafe fn round_key<B: Block>(self, i: usize, tweak: u64) -> B {
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe { B::load(&self.round[i]).xor(B::from_halves(tweak, 0)) }
    }

    #[inline(always)]
    fn short_seed(self) -> u64 {
        self.short_seed
    }

    #[inline(always)]
    fn seed(self) -> Keys {
        self.seed
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
    /// A key of 33 to 64 bytes: its first 32 bytes into lanes 0 and 1 and its last 32
    /// into lanes 2 and 3 (overlapping), each lane its one block ([`medium_block`]),
    /// met by one round per meeting in a tree: lane `i` with lane `i + 2`, then the two
    /// results, `aesenc(aesenc(a, c), aesenc(b, d))` (see [`hash_medium`]).
    ///
    /// # Safety
    /// The CPU must support `B`'s instructions and the implementation's.
    #[inline(always)]
    unsafe fn four_met(bytes: &[u8], k: &[B; 4]) -> B {
        let last = bytes.len() - 32;
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe {
            let a = medium_block(bytes, k, 0, 0);
            let b = medium_block(bytes, k, 1, 16);
            let c = medium_block(bytes, k, 2, last);
            let d = medium_block(bytes, k, 3, last + 16);
            a.aesenc(c).aesenc(b.aesenc(d))
        }
    }

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

    /// The lanes of a key after `whole` (a multiple of [`STEP`] bytes)
    /// and then `last`, met.
    ///
    /// # Safety
    /// As for [`Steps::eight_met`].
    unsafe fn lanes_met(whole: &[u8], last: &[u8; STEP], k: &[B; 4]) -> B;
}

/// [`Steps`] one lane at a time: the definition.
pub(crate) struct EachLane;

impl<B: Block> Steps<B> for EachLane {
    #[inline(always)]
    unsafe fn lanes_met(whole: &[u8], last: &[u8; STEP], k: &[B; 4]) -> B {
        // SAFETY: the caller guarantees B's instructions exist; every other operation
        // in this block is safe Rust.
        unsafe {
            let mut steps = whole.chunks_exact(STEP).chain([&last[..]]);
            let first = steps.next().expect("at least the last step");
            let mut lanes = [k[0]; LANES];
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = first_absorb(block_at(first, 16 * i), k, i);
            }
            for step in steps {
                for (i, lane) in lanes.iter_mut().enumerate() {
                    *lane = absorb(*lane, block_at(step, 16 * i), k, i);
                }
            }
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = mixed(last_round(*lane, k, i), i);
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
pub(crate) unsafe fn hash<B: Block, S: Steps<B>, K: KeySchedule>(
    bytes: &[u8],
    keys: K,
    tweak: u64,
) -> u64 {
    let len = bytes.len();
    // SAFETY: the caller guarantees B's and S's instructions exist.
    unsafe {
        if len <= 16 {
            hash_short(bytes, keys.short_seed(), tweak)
        } else if len <= 64 {
            hash_medium::<B, S, _>(bytes, keys, tweak)
        } else {
            hash_long::<B, S, _>(bytes, keys, tweak)
        }
    }
}

/// The four round keys, with `tweak` XORed into key 0.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn round_keys<B: Block, K: KeySchedule>(keys: K, tweak: u64) -> [B; 4] {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        [
            keys.round_key(0, tweak),
            keys.round_key(1, 0),
            keys.round_key(2, 0),
            keys.round_key(3, 0),
        ]
    }
}

/// [`hash`] of 17 to 64 bytes: two or four blocks, each a lane of its own given two
/// keyed rounds ([`medium_block`]); the lanes then meet with one round each, `aesenc(a,
/// b)` (four lanes: [`Steps::four_met`], `aesenc(aesenc(a, c), aesenc(b, d))`), and the
/// finish ([`finish_medium`]) follows. Small enough to be called in line where the
/// build enables AES (a `HashMap`'s `hash_one` stays in line around it); longer keys
/// are a call.
///
/// One round per meeting, a tree (the longer paths meet by XOR, [`combine2`]; here
/// that was tried and measured slower, below): `c` enters after a round of `a`,
/// which has had three by then against `c`'s two, so that a difference in one lane
/// cancels one in another only through a three-round AES differential (every
/// three-round trail has nine active S-boxes or more, so probability 2^-54 or less,
/// by AES's wide trail bound). With two rounds per meeting the 33-64-byte path was
/// seven dependent rounds deep and 0.8x ahash's AES path at 64 bytes; with one, five
/// (four at 17-32 bytes), and six (five) since the finish's second round, which
/// replaced the folded multiply and is shorter than it.
///
/// Lane `i` meets lane `i + 2` first (until issue 57, lane `i + 1`), so that with
/// VAES lanes 0 and 1 are the first 32 bytes of the key and lanes 2 and 3 the last
/// 32, each one 256-bit load, and the first meeting is one instruction for both
/// pairs: 7 AES instructions where there are 12, and nothing between 128 and 256 bits
/// but one extract before the last meeting. 64 bytes, one key in a loop on a Zen 4
/// host: 2.35 -> 1.98 ns in the table's bench (ahash 1.98), 1.75 against ahash's 1.93
/// in a loop over a plain slice. An earlier VAES version kept the old tree, lanes 0
/// and 2 in one register and 1 and 3 in another: its four inserts and the extract
/// lengthened the chain, and it measured slower on one key in a loop. Met by XOR
/// instead, each lane permuted first (as the longer paths meet: 9 AES instructions
/// and three `pshufb` where there are 12 AES instructions), it passed the quality
/// suite and SMHasher but measured 2.36 against 2.21 ns at 64 bytes and 1.39 against
/// 1.35 at 32 (one key in a loop, this crate's Zen 3 VM, issue 57): the loop is bound
/// by the instructions issued and the chain's depth, not by the AES units, so the
/// shuffles cost what the rounds saved.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash_medium<B: Block, S: Steps<B>, K: KeySchedule>(
    bytes: &[u8],
    keys: K,
    tweak: u64,
) -> u64 {
    let len = bytes.len();
    debug_assert!((17..=64).contains(&len));
    // SAFETY: the caller guarantees B's and S's instructions exist; every other
    // operation in this block is safe Rust.
    unsafe {
        let k: [B; 4] = round_keys(keys, tweak);
        let s = if len <= 32 {
            medium_block(bytes, &k, 0, 0).aesenc(medium_block(bytes, &k, 1, len - 16))
        } else {
            S::four_met(bytes, &k)
        };
        finish_medium(s, k[0])
    }
}

/// [`hash`] of more than 64 bytes.
///
/// # Safety
/// The CPU must support `B`'s and `S`'s instructions.
#[inline(always)]
pub(crate) unsafe fn hash_long<B: Block, S: Steps<B>, K: KeySchedule>(
    bytes: &[u8],
    keys: K,
    tweak: u64,
) -> u64 {
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
            S::lanes_met(&bytes[..whole], last, &k)
        };
        // The length, which the lanes of these paths do not hold.
        finish(s.xor(B::from_halves(len as u64, 0)), k[0])
    }
}

/// Lane `i`'s starting value: key `i % 4` XOR [`lane_start_halves`] of the lane's
/// group `i / 4`, so that lanes sharing a key start apart in every byte.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn lane_start<B: Block>(k: &[B; 4], i: usize) -> B {
    let (low, high) = lane_start_halves(i / 4);
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { k[i % 4].xor(B::from_halves(low, high)) }
}

/// Odd constants (the golden ratio's and xxHash's 64-bit primes) that spread a lane's
/// group over every byte of its start.
const GROUP_APART: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F];

/// What lane group `group` XORs into its key to start: the group times
/// [`GROUP_APART`] in each half (group 0: nothing), so that lanes sharing a key start
/// apart in every byte. Lanes meet by XOR ([`combine2`]); without the permutations of
/// [`LANE_MIX`], two lanes made equal would cancel, and with the groups one byte
/// apart a one-byte block difference reached such a pair's difference with
/// probability 2^-7. (The length is not here but in the XOR before [`finish`]: in the
/// starts it entered one round before the meeting, in byte 0 alone, and the all-zero
/// keys of lengths L and L ^ 0x15 collided.)
#[inline(always)]
pub(crate) fn lane_start_halves(group: usize) -> (u64, u64) {
    let group = group as u64;
    (
        group.wrapping_mul(GROUP_APART[0]),
        group.wrapping_mul(GROUP_APART[1]),
    )
}

/// The byte permutation of each lane before it meets the others by XOR (byte `j` of
/// the result is byte `LANE_MIX[i][j]` of lane `i`; lane 0's is the identity).
///
/// Why: after two AES rounds, a difference in one byte of a block lies in one of
/// four 32-bit subspaces of the 128-bit state (MixColumns and ShiftRows of the column
/// of S-boxes it reaches in the second round), the same four in every lane, so two
/// lanes whose differing bytes reach the same column cancelled under XOR with
/// probability 2^-32 (unpermuted: 65 full collisions among the 22.4 M 64-byte keys
/// with up to 3 bits set). Permuted by these, the 64 subspaces (lane, column) are in
/// general position as far as three: every pair and every triple from two lanes or
/// more is linearly independent (over GF(2^8), in which they are linear), so
/// differences in up to three bytes never cancel across lanes, and more take a
/// condition on all 128 bits. Found by a random search over permutations for that
/// property.
pub(crate) const LANE_MIX: [[u8; 16]; LANES] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [9, 15, 4, 10, 2, 5, 11, 12, 1, 3, 14, 13, 7, 6, 8, 0],
    [15, 11, 3, 0, 14, 10, 13, 1, 8, 12, 4, 5, 9, 2, 7, 6],
    [5, 9, 11, 7, 6, 0, 13, 8, 12, 1, 4, 15, 2, 10, 14, 3],
    [14, 3, 11, 10, 12, 8, 4, 1, 7, 6, 2, 13, 9, 0, 15, 5],
    [11, 9, 5, 12, 2, 14, 7, 10, 0, 4, 1, 6, 8, 13, 3, 15],
    [12, 7, 1, 5, 4, 2, 10, 15, 9, 13, 8, 11, 14, 0, 6, 3],
    [14, 8, 15, 4, 2, 13, 9, 10, 12, 7, 1, 11, 5, 6, 0, 3],
    [3, 6, 14, 11, 10, 8, 2, 7, 12, 13, 4, 15, 9, 0, 5, 1],
    [3, 1, 8, 6, 2, 7, 12, 11, 10, 15, 4, 5, 0, 13, 9, 14],
    [15, 6, 4, 5, 2, 9, 13, 11, 0, 10, 7, 12, 1, 3, 8, 14],
    [10, 14, 11, 1, 6, 0, 7, 4, 13, 3, 2, 8, 15, 9, 12, 5],
    [15, 8, 2, 5, 13, 12, 11, 3, 14, 6, 1, 7, 10, 0, 9, 4],
    [1, 7, 2, 5, 8, 12, 4, 6, 0, 3, 11, 10, 13, 9, 15, 14],
    [10, 13, 12, 4, 2, 1, 7, 11, 9, 15, 3, 0, 14, 8, 6, 5],
    [15, 10, 8, 14, 5, 9, 11, 13, 7, 2, 3, 12, 1, 0, 6, 4],
];

/// Lane `i` permuted by [`LANE_MIX`] before it meets the others.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn mixed<B: Block>(lane: B, i: usize) -> B {
    if i == 0 {
        lane
    } else {
        // SAFETY: the caller guarantees B's instructions exist.
        unsafe { lane.shuffle(&LANE_MIX[i]) }
    }
}

/// Lane `i` (0-3) of the 17-64-byte path after its one block, the 16 bytes at `at`:
/// [`block_rounds`] with the start `k[i] ^ len` (the length in the low half).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn medium_block<B: Block>(bytes: &[u8], k: &[B; 4], i: usize, at: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        let start = k[i].xor(B::from_halves(bytes.len() as u64, 0));
        block_rounds(start, block_at(bytes, at), k, i)
    }
}

/// Lane `i` of a hash of `bytes` after absorbing its one block, the 16 bytes at `at`.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn one_block<B: Block>(bytes: &[u8], k: &[B; 4], i: usize, at: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { mixed(block_rounds(lane_start(k, i), block_at(bytes, at), k, i), i) }
}

/// A lane's only block: `aesenc(aesenc(block ^ k[i % 4], start), k[(i + 1) % 4])`,
/// two keyed rounds on the block itself before it meets another lane. (When each
/// block of the 33-64-byte path had one round and 128 bits were folded to 64 by XOR,
/// sparse keys of 60-64 bytes collided in full. The long loop's blocks have one keyed
/// round of their own, [`absorb`]'s, and the lane's round after it; its last step's
/// blocks take [`last_round`] before they meet another lane.)
/// The lane's start enters after the first round. (The length, once in the start,
/// is now XORed in after the lanes meet ([`finish`]); XORed into the block itself, a
/// key of one length equalled a key of another whose bytes differed by the lengths'
/// XOR: SMHasher's Permutation keys, every 28-byte key of 32-bit words below 8
/// collided with a 24-byte one.)
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

/// A block of lane `i` after its own keyed round, `aesenc(block ^ k[i % 4], k[(i + 1)
/// % 4])`: what the block brings to its lane (see the module docs for why the key
/// enters before the block's S-boxes).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn own_round<B: Block>(block: &[u8; 16], k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { B::load(block).xor(k[i % 4]).aesenc(k[(i + 1) % 4]) }
}

/// Lane `i` after the first step's block: its start XOR the block's own round,
/// `lane_start(k, i) ^ own_round(block, k, i)`, computed as the one round with the
/// start XORed into its key. The two are equal (a round XORs its key into its output
/// last), and this takes the XOR off the lane's chain and lets the keys' XORs be
/// shared (a VAES loop of 1 KiB on Zen 4: 13.2-13.4 -> 12.5-12.7 ns).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn first_absorb<B: Block>(block: &[u8; 16], k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        B::load(block)
            .xor(k[i % 4])
            .aesenc(k[(i + 1) % 4].xor(lane_start(k, i)))
    }
}

/// Absorbs a block into lane `i` after the first step: `aesenc(lane, own_round(block))`,
/// the block's own keyed round off the lane's chain and one round on it. (The first
/// step's blocks meet the lanes' starts by XOR, [`Steps::lanes_met`].)
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn absorb<B: Block>(lane: B, block: &[u8; 16], k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lane.aesenc(own_round(block, k, i)) }
}

/// Lane `i`'s round after the last step, `aesenc(lane, k[(i + 1) % 4])`, before the
/// lanes meet: without it the last step's blocks, one keyed round of their own behind
/// them, met another lane with that round alone, and sparse keys collided in full in
/// the last step's bytes (16 pairs among 22.4 M 1 KiB keys with up to 3 bits set in
/// their last 64 bytes, when lanes met by a round). With it, every block has two
/// keyed rounds behind it when it meets another lane, as in the paths up to 256
/// bytes.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn last_round<B: Block>(lane: B, k: &[B; 4], i: usize) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { lane.aesenc(k[(i + 1) % 4]) }
}

/// Two lanes meet by XOR, each permuted by [`mixed`] before. Every block has two
/// keyed rounds behind it when its lane meets another (the 65-256-byte paths'
/// [`block_rounds`]; the long loop's [`absorb`] and [`last_round`]), so a difference
/// in one lane cancels one in another only where two two-round AES differentials,
/// each permuted, give the same output: never for differences in up to three bytes
/// ([`LANE_MIX`]), and otherwise with at most AES's two-round maximum differential
/// probability (53/2^34, about 2^-28, Keliher and Sui's exact bound) for an attacker
/// who does not know the key, where the meeting by a round before (`aesenc(a, b)`)
/// gave one side a third round. The lanes meet pairwise in a tree (the order does
/// not change the value; it lets an implementation with two lanes per register
/// XOR whole registers). One function per count, spelled out: a loop over an array of
/// lanes was left as a loop through memory, five times slower at 256 bytes.
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn combine2<B: Block>([a, b]: [B; 2]) -> B {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe { a.xor(b) }
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

/// The finish of keys longer than 64 bytes (17 to 64 take [`finish_medium`]): the
/// last keyed round, `aesenc(s, k0)`, and its 128 bits to 64 by a folded multiply
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

/// The finish of 17 to 64 bytes: the last keyed round as in [`finish`], then a
/// round keyed with the state before it (`aesenc(aesenc(s, k), s)`: the state XORed
/// into the round's output, so the two rounds cannot be undone from the output), and
/// the low 64 bits.
///
/// Why not [`finish`] here: its folded multiply takes the state out of the vector
/// unit as two words (`vmovq`, `vpextrq`: three instructions) and multiplies them,
/// about eight cycles and five instructions after the round, where this is one AES
/// round and one move. At 64 bytes, one key in a loop (the table's bench shape, Zen
/// 4): 1.96 -> 1.90 ns, ahash 1.97. Why not at every length: for keys longer than 64
/// bytes the length is XORed in after the lanes meet, one round before the finish,
/// and two rounds and the low 64 bits failed SMHasher's Zeroes there (all-zero keys
/// of lengths with the same number of long-loop steps differ only in the length:
/// 508 collisions in the low 28 bits against 78 expected). Here the length is in
/// every lane's start, four rounds before the output (five at 33-64 bytes).
///
/// # Safety
/// The CPU must support `B`'s instructions.
#[inline(always)]
unsafe fn finish_medium<B: Block>(s: B, k0: B) -> u64 {
    // SAFETY: the caller guarantees B's instructions exist.
    unsafe {
        s.aesenc(k0.xor(B::from_halves(PI[5], PI[6])))
            .aesenc(s)
            .halves()
            .0
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::super::block::aes_round;
    use super::{LANES, LANE_MIX};

    /// Multiplication in GF(2^8) modulo AES's polynomial.
    fn gf_mul(mut a: u8, mut b: u8) -> u8 {
        let mut product = 0;
        while b != 0 {
            if b & 1 != 0 {
                product ^= a;
            }
            a = (a << 1) ^ if a & 0x80 != 0 { 0x1b } else { 0 };
            b >>= 1;
        }
        product
    }

    fn gf_inverse(a: u8) -> u8 {
        (1..=255).find(|&b| gf_mul(a, b) == 1).expect("nonzero")
    }

    /// MixColumns after ShiftRows of a one-byte difference at `position`, up to a
    /// nonzero factor (which spans the same subspaces): the specification's round of
    /// a state with that byte 1, against the all-zero state's.
    fn spread(position: usize) -> [u8; 16] {
        let mut state = [0u8; 16];
        state[position] = 1;
        let (one, zero) = (aes_round(state, [0; 16]), aes_round([0; 16], [0; 16]));
        core::array::from_fn(|i| one[i] ^ zero[i])
    }

    /// The rank over GF(2^8) of `rows`.
    fn rank(mut rows: Vec<[u8; 16]>) -> usize {
        let mut rank = 0;
        for column in 0..16 {
            let Some(pivot) = (rank..rows.len()).find(|&i| rows[i][column] != 0) else {
                continue;
            };
            rows.swap(rank, pivot);
            let inverse = gf_inverse(rows[rank][column]);
            rows[rank] = rows[rank].map(|v| gf_mul(v, inverse));
            for i in 0..rows.len() {
                let factor = rows[i][column];
                if i != rank && factor != 0 {
                    let pivot_row = rows[rank];
                    for (v, p) in rows[i].iter_mut().zip(pivot_row) {
                        *v ^= gf_mul(factor, p);
                    }
                }
            }
            rank += 1;
        }
        rank
    }

    /// What [`LANE_MIX`]'s docs claim: the subspaces in which a one-byte difference
    /// lies after two rounds (one per column of the second round's S-boxes), each
    /// lane's permuted by its pattern, are independent in every pair and triple
    /// drawn from two lanes or more; without the permutations, two lanes share them.
    #[test]
    fn lane_permutations_keep_subspaces_apart() {
        let subspace = |lane: usize, column: usize| -> Vec<[u8; 16]> {
            (0..4)
                .map(|row| {
                    let spread = spread(4 * column + row);
                    core::array::from_fn(|j| spread[usize::from(LANE_MIX[lane][j])])
                })
                .collect()
        };
        let all: Vec<(usize, Vec<[u8; 16]>)> = (0..LANES)
            .flat_map(|lane| (0..4).map(move |column| (lane, subspace(lane, column))))
            .collect();
        let independent = |parts: &[&(usize, Vec<[u8; 16]>)]| {
            rank(
                parts
                    .iter()
                    .flat_map(|(_, rows)| rows.iter().copied())
                    .collect(),
            ) == 4 * parts.len()
        };
        for (a, first) in all.iter().enumerate() {
            for (b, second) in all.iter().enumerate().skip(a + 1) {
                if first.0 != second.0 {
                    assert!(independent(&[first, second]), "{a} {b}");
                }
                for third in &all[b + 1..] {
                    if first.0 != second.0 || second.0 != third.0 {
                        assert!(independent(&[first, second, third]), "{a} {b}");
                    }
                }
            }
        }
        // Unpermuted, lane 1's column-0 subspace is lane 0's.
        let plain = |column: usize| -> Vec<[u8; 16]> {
            (0..4).map(|row| spread(4 * column + row)).collect()
        };
        assert_eq!(rank([plain(0), plain(0)].concat()), 4);
    }
}

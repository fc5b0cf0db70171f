//! AES-NI: the block is an `__m128i`, the round `aesenc`; with VAES, keys of more
//! than 32 bytes run two lanes per 256-bit `vaesenc` (the long loop, and the one-block
//! lanes of 33 to 256 bytes: 1.1-1.2x faster at 128 and 256 bytes than one lane per
//! `aesenc`, on Zen 3; 1.2x at 64 bytes on Zen 4).

use core::arch::x86_64::*;

use super::algorithm::{self, EachLane, Keys, Steps, LANES, STEP};
use super::block::Block;

#[derive(Clone, Copy)]
struct AesNi(__m128i);

impl Block for AesNi {
    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn load(bytes: &[u8; 16]) -> AesNi {
        // SAFETY: bytes is 16 readable bytes; loadu has no alignment requirement.
        AesNi(unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) })
    }

    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn from_halves(low: u64, high: u64) -> AesNi {
        AesNi(_mm_set_epi64x(high as i64, low as i64))
    }

    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn xor(self, other: AesNi) -> AesNi {
        AesNi(_mm_xor_si128(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn aesenc(self, key: AesNi) -> AesNi {
        AesNi(_mm_aesenc_si128(self.0, key.0))
    }

    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn shuffle(self, pattern: &[u8; 16]) -> AesNi {
        // SAFETY: pattern is 16 readable bytes; loadu has no alignment requirement.
        AesNi(_mm_shuffle_epi8(self.0, unsafe {
            _mm_loadu_si128(pattern.as_ptr().cast())
        }))
    }

    #[inline]
    #[target_feature(enable = "aes,ssse3")]
    unsafe fn halves(self) -> (u64, u64) {
        let mut out = [0u8; 16];
        // SAFETY: out is 16 writable bytes; storeu has no alignment requirement.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), self.0) };
        let (low, high) = out.split_at(8);
        (
            u64::from_le_bytes(low.try_into().expect("8 bytes")),
            u64::from_le_bytes(high.try_into().expect("8 bytes")),
        )
    }
}

/// The hash with AES-NI (and SSSE3's `pshufb` for the lanes' permutations).
///
/// # Safety
/// The CPU must support AES-NI and SSSE3.
#[target_feature(enable = "aes,ssse3")]
pub(super) unsafe fn hash_aesni(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features are the ones AesNi needs.
    unsafe { algorithm::hash::<AesNi, EachLane, _>(bytes, keys, tweak) }
}

/// The hash with AES-NI in VEX encoding: the same instructions, but no SSE/AVX
/// transition stalls when the caller has left the upper halves of the vector
/// registers dirty (AVX code elsewhere in the process).
///
/// # Safety
/// The CPU must support AES-NI and AVX.
#[target_feature(enable = "aes,avx")]
pub(super) unsafe fn hash_aesni_avx(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features include the ones AesNi needs.
    unsafe { algorithm::hash::<AesNi, EachLane, _>(bytes, keys, tweak) }
}

/// The hash with AES-NI and VAES: the long loop's lanes in pairs, a 256-bit
/// `vaesenc` doing two lanes' rounds at once.
///
/// # Safety
/// The CPU must support AES-NI, AVX2 and VAES.
#[target_feature(enable = "aes,avx2,vaes")]
pub(super) unsafe fn hash_aesni_vaes(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features include AesNi's and VaesPairs'.
    unsafe { algorithm::hash::<AesNi, VaesPairs, _>(bytes, keys, tweak) }
}

/// [`Steps`] with VAES: lanes `2m` and `2m + 1` in one `__m256i` (low and high half),
/// so each instruction does the round of two lanes; their blocks are the 32 bytes at
/// `32·m` (of a step, or of the first or last half of a 65-256-byte key; of a
/// 33-64-byte key, pair 0 is its first 32 bytes and pair 1 its last 32). Lane `i`'s
/// block is XORed with `k[i % 4]` and takes a round keyed with `k[(i + 1) % 4]` (for
/// the pair, [`PairKeys`]' `block[m % 2]` and `round[m % 2]`), and the lane's last round
/// takes `k[(i + 1) % 4]` too, as [`EachLane`] has them. The trees meet lane `i` with
/// lane `i + n/2` at each level, so all levels but the last meet whole pairs, and only
/// the last takes the two halves apart.
struct VaesPairs;

/// The 256-bit keys of [`VaesPairs`]: each block's (`k[i % 4]`) and each round's
/// (`k[(i + 1) % 4]`) for pairs `m` with `m % 2` = 0 (lanes with keys 0 and 1) and 1
/// (keys 2 and 3).
struct PairKeys {
    block: [__m256i; 2],
    round: [__m256i; 2],
}

impl PairKeys {
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn new(k: &[AesNi; 4]) -> PairKeys {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            PairKeys {
                block: [
                    _mm256_set_m128i(k[1].0, k[0].0),
                    _mm256_set_m128i(k[3].0, k[2].0),
                ],
                round: [
                    _mm256_set_m128i(k[2].0, k[1].0),
                    _mm256_set_m128i(k[0].0, k[3].0),
                ],
            }
        }
    }

    /// Pair `m`'s starting value: lane `i` starts as `k[i % 4]` XOR
    /// `algorithm::lane_start_halves(i / 4)`, and both lanes of pair `m` are in group
    /// `m / 2`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn start(&self, m: usize) -> __m256i {
        let (low, high) = algorithm::lane_start_halves(m / 2);
        let (low, high) = (low as i64, high as i64);
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let start = _mm256_set_epi64x(high, low, high, low);
            _mm256_xor_si256(self.block[m % 2], start)
        }
    }

    /// Pair `m` of a 65-256-byte key after its two lanes' one block each, the 32
    /// bytes at `at` (`algorithm::block_rounds` for both lanes), permuted
    /// ([`pair_mixed`]).
    ///
    /// # Safety
    /// The CPU must support AVX2 and VAES.
    #[inline(always)]
    unsafe fn one_block(&self, bytes: &[u8], at: usize, m: usize) -> __m256i {
        let blocks: &[u8; 32] = bytes[at..at + 32].try_into().expect("32 bytes");
        // SAFETY: blocks is 32 readable bytes (loadu has no alignment requirement);
        // the caller guarantees AVX2 and VAES.
        unsafe {
            let blocks = _mm256_loadu_si256(blocks.as_ptr().cast());
            let keyed = _mm256_xor_si256(blocks, self.block[m % 2]);
            pair_mixed(
                _mm256_aesenc_epi128(
                    _mm256_aesenc_epi128(keyed, self.start(m)),
                    self.round[m % 2],
                ),
                m,
            )
        }
    }
}

/// Pair `m`'s two lanes permuted as `algorithm::LANE_MIX` says.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn pair_mixed(pair: __m256i, m: usize) -> __m256i {
    let mut pattern = [0u8; 32];
    pattern[..16].copy_from_slice(&algorithm::LANE_MIX[2 * m]);
    pattern[16..].copy_from_slice(&algorithm::LANE_MIX[2 * m + 1]);
    // SAFETY: pattern is 32 readable bytes; the caller guarantees AVX2.
    unsafe { _mm256_shuffle_epi8(pair, _mm256_loadu_si256(pattern.as_ptr().cast())) }
}

/// The last meeting of every tree: the two lanes of the last pair, XORed.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn halves_met(pair: __m256i) -> AesNi {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        AesNi(_mm_xor_si128(
            _mm256_castsi256_si128(pair),
            _mm256_extracti128_si256::<1>(pair),
        ))
    }
}

impl Steps<AesNi> for VaesPairs {
    #[inline(always)]
    unsafe fn four_met(bytes: &[u8], k: &[AesNi; 4]) -> AesNi {
        let last = bytes.len() - 32;
        // SAFETY: the caller guarantees AVX2 and VAES; every load reads the 32
        // bytes at 0 or at the length less 32 (loadu has no alignment requirement).
        unsafe {
            let keys = PairKeys::new(k);
            // algorithm::medium_block: each lane starts as its block's key XOR the
            // length (in the low half).
            let length = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128(bytes.len() as i64));
            let pair = |at: usize, m: usize| {
                let blocks: &[u8; 32] = bytes[at..at + 32].try_into().expect("32 bytes");
                let blocks = _mm256_loadu_si256(blocks.as_ptr().cast());
                let start = _mm256_xor_si256(keys.block[m], length);
                _mm256_aesenc_epi128(
                    _mm256_aesenc_epi128(_mm256_xor_si256(blocks, keys.block[m]), start),
                    keys.round[m],
                )
            };
            // Lanes 0 and 1, then 2 and 3: lane i meets lane i + 2 in one
            // instruction, then the halves meet.
            let met = _mm256_aesenc_epi128(pair(0, 0), pair(last, 1));
            AesNi(_mm_aesenc_si128(
                _mm256_castsi256_si128(met),
                _mm256_extracti128_si256::<1>(met),
            ))
        }
    }

    #[inline(always)]
    unsafe fn eight_met(bytes: &[u8], k: &[AesNi; 4]) -> AesNi {
        let last = bytes.len() - 64;
        // SAFETY: the caller guarantees AVX2 and VAES.
        unsafe {
            let keys = PairKeys::new(k);
            let [p0, p1, p2, p3] = [
                keys.one_block(bytes, 0, 0),
                keys.one_block(bytes, 32, 1),
                keys.one_block(bytes, last, 2),
                keys.one_block(bytes, last + 32, 3),
            ];
            // algorithm::combine8: lane i meets lane i + 4 (pair m meets pair m + 2),
            // then lane i meets i + 2 (pair 0 meets pair 1), then the halves.
            let (q0, q1) = (_mm256_xor_si256(p0, p2), _mm256_xor_si256(p1, p3));
            halves_met(_mm256_xor_si256(q0, q1))
        }
    }

    #[inline(always)]
    unsafe fn sixteen_met(bytes: &[u8], k: &[AesNi; 4]) -> AesNi {
        let last = bytes.len() - STEP / 2;
        // SAFETY: the caller guarantees AVX2 and VAES.
        unsafe {
            let keys = PairKeys::new(k);
            let [p0, p1, p2, p3, p4, p5, p6, p7] = [
                keys.one_block(bytes, 0, 0),
                keys.one_block(bytes, 32, 1),
                keys.one_block(bytes, 64, 2),
                keys.one_block(bytes, 96, 3),
                keys.one_block(bytes, last, 4),
                keys.one_block(bytes, last + 32, 5),
                keys.one_block(bytes, last + 64, 6),
                keys.one_block(bytes, last + 96, 7),
            ];
            pairs_met([p0, p1, p2, p3, p4, p5, p6, p7])
        }
    }

    #[inline(always)]
    unsafe fn lanes_met(whole: &[u8], last: &[u8; STEP], k: &[AesNi; 4]) -> AesNi {
        // SAFETY: the caller guarantees AVX2 and VAES; every load reads 32 bytes of a
        // STEP-byte step at 32·m < STEP (loadu has no alignment requirement).
        unsafe {
            let keys = PairKeys::new(k);
            // Pair m's blocks of `step`, keyed for their own round, and after it.
            let keyed = |step: &[u8], m: usize| {
                let blocks = _mm256_loadu_si256(step[32 * m..].as_ptr().cast());
                _mm256_xor_si256(blocks, keys.block[m % 2])
            };
            let own =
                |step: &[u8], m: usize| _mm256_aesenc_epi128(keyed(step, m), keys.round[m % 2]);
            // algorithm::first_absorb: the first step's blocks meet the starts by
            // XOR, which goes into their round's key (aesenc(x, k) ^ start =
            // aesenc(x, k ^ start): a round XORs its key into its output last).
            let mut steps = whole.chunks_exact(STEP).chain([&last[..]]);
            let first = steps.next().expect("at least the last step");
            let mut pairs = [_mm256_setzero_si256(); LANES / 2];
            for (m, pair) in pairs.iter_mut().enumerate() {
                *pair = _mm256_aesenc_epi128(
                    keyed(first, m),
                    _mm256_xor_si256(keys.round[m % 2], keys.start(m)),
                );
            }
            for step in steps {
                for (m, pair) in pairs.iter_mut().enumerate() {
                    *pair = _mm256_aesenc_epi128(*pair, own(step, m));
                }
            }
            // algorithm::last_round: lane i's round with k[(i + 1) % 4], then the
            // lanes permuted.
            for (m, pair) in pairs.iter_mut().enumerate() {
                *pair = pair_mixed(_mm256_aesenc_epi128(*pair, keys.round[m % 2]), m);
            }
            pairs_met(pairs)
        }
    }
}

/// Sixteen lanes in eight pairs met as `algorithm::combine16` meets them: lane `i`
/// meets lane `i + 8` (pair `m` meets pair `m + 4`), then `i + 4` (pair `m + 2`),
/// then `i + 2` (pair 0 meets pair 1), then the halves.
///
/// # Safety
/// The CPU must support AVX2, AES-NI and VAES.
#[inline(always)]
unsafe fn pairs_met([p0, p1, p2, p3, p4, p5, p6, p7]: [__m256i; LANES / 2]) -> AesNi {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        let (q0, q1, q2, q3) = (
            _mm256_xor_si256(p0, p4),
            _mm256_xor_si256(p1, p5),
            _mm256_xor_si256(p2, p6),
            _mm256_xor_si256(p3, p7),
        );
        let (r0, r1) = (_mm256_xor_si256(q0, q2), _mm256_xor_si256(q1, q3));
        halves_met(_mm256_xor_si256(r0, r1))
    }
}

/// The hash of more than 16 bytes with AES-NI, for builds that enable AES at compile
/// time (`-C target-cpu=native`, `-C target-feature=+aes`): 17 to 64 bytes in line,
/// without the dispatcher's indirect call, which at 17-64 bytes costs as much as the
/// hashing; longer keys through a direct call ([`hash_compiled_long`]), so that the
/// caller's code stays small enough for `BuildHasher::hash_one` to be in line (with
/// every path in line it was not, and a 16-byte `HashMap` key cost 0.75x foldhash's
/// quality variant).
#[cfg(all(target_feature = "aes", target_feature = "ssse3"))]
#[inline(always)]
pub(super) fn hash_compiled<K: algorithm::KeySchedule>(bytes: &[u8], keys: K, tweak: u64) -> u64 {
    if bytes.len() <= 64 {
        // SAFETY: the build enables AES-NI and SSSE3 in every
        // function, so the program only runs on CPUs that have them.
        unsafe { algorithm::hash_medium::<AesNi, CompiledSteps, _>(bytes, keys, tweak) }
    } else {
        hash_compiled_long(bytes, keys.seed(), tweak)
    }
}

/// [`hash_compiled`] of more than 64 bytes.
#[cfg(all(target_feature = "aes", target_feature = "ssse3"))]
#[inline(never)]
fn hash_compiled_long(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: the build enables AES-NI and SSSE3 (AVX2 and VAES
    // where CompiledSteps is VaesPairs) in every function, so the program only runs on
    // CPUs that have them.
    unsafe { algorithm::hash_long::<AesNi, CompiledSteps, _>(bytes, keys, tweak) }
}

/// The long loop of builds with AES: two lanes per instruction where the build also
/// enables AVX2 and VAES.
#[cfg(all(
    target_feature = "aes",
    target_feature = "ssse3",
    target_feature = "avx2",
    target_feature = "vaes"
))]
type CompiledSteps = VaesPairs;
#[cfg(all(
    target_feature = "aes",
    target_feature = "ssse3",
    not(all(target_feature = "avx2", target_feature = "vaes"))
))]
type CompiledSteps = EachLane;

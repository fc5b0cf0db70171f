//! AES-NI: the block is an `__m128i`, the round `aesenc`; with VAES, the long loop
//! runs two lanes per 256-bit `vaesenc`.

use core::arch::x86_64::*;

use super::algorithm::{self, EachLane, Keys, Steps, LANES, STEP};
use super::block::Block;

#[derive(Clone, Copy)]
struct AesNi(__m128i);

impl Block for AesNi {
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    unsafe fn load(bytes: &[u8; 16]) -> AesNi {
        // SAFETY: bytes is 16 readable bytes; loadu has no alignment requirement.
        AesNi(unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) })
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    unsafe fn from_halves(low: u64, high: u64) -> AesNi {
        AesNi(_mm_set_epi64x(high as i64, low as i64))
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    unsafe fn xor(self, other: AesNi) -> AesNi {
        AesNi(_mm_xor_si128(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    unsafe fn aesenc(self, key: AesNi) -> AesNi {
        AesNi(_mm_aesenc_si128(self.0, key.0))
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
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

/// The hash with AES-NI.
///
/// # Safety
/// The CPU must support AES-NI (and SSE2).
#[target_feature(enable = "aes,sse2")]
pub(super) unsafe fn hash_aesni(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features are the ones AesNi needs.
    unsafe { algorithm::hash::<AesNi, EachLane>(bytes, keys, tweak) }
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
    unsafe { algorithm::hash::<AesNi, EachLane>(bytes, keys, tweak) }
}

/// The hash with AES-NI and VAES: the long loop's lanes in pairs, a 256-bit
/// `vaesenc` doing two lanes' rounds at once.
///
/// # Safety
/// The CPU must support AES-NI, AVX2 and VAES.
#[target_feature(enable = "aes,avx2,vaes")]
pub(super) unsafe fn hash_aesni_vaes(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features include AesNi's and VaesPairs'.
    unsafe { algorithm::hash::<AesNi, VaesPairs>(bytes, keys, tweak) }
}

/// [`Steps`] with VAES: lanes `2m` and `2m + 1` in one `__m256i` (low and high half),
/// so each instruction does the round of two lanes; their blocks are the 32 bytes at
/// `32·m` and their keys `k[2m % 4]`, `k[(2m + 1) % 4]`, as [`EachLane`] has them.
struct VaesPairs;

impl Steps<AesNi> for VaesPairs {
    #[inline(always)]
    unsafe fn absorb(lanes: &mut [AesNi; LANES], steps: &[u8], k: &[AesNi; 4]) {
        // SAFETY: the caller guarantees AVX2 and VAES; every load reads 32 bytes of a
        // STEP-byte chunk at 32·m < STEP (loadu has no alignment requirement).
        unsafe {
            let keys = [
                _mm256_set_m128i(k[1].0, k[0].0),
                _mm256_set_m128i(k[3].0, k[2].0),
            ];
            let mut pairs = [_mm256_setzero_si256(); LANES / 2];
            for (m, pair) in pairs.iter_mut().enumerate() {
                *pair = _mm256_set_m128i(lanes[2 * m + 1].0, lanes[2 * m].0);
            }
            for step in steps.chunks_exact(STEP) {
                for (m, pair) in pairs.iter_mut().enumerate() {
                    let blocks = _mm256_loadu_si256(step[32 * m..].as_ptr().cast());
                    let round = _mm256_aesenc_epi128(*pair, blocks);
                    *pair = _mm256_aesenc_epi128(round, keys[m % 2]);
                }
            }
            for (m, pair) in pairs.iter().enumerate() {
                lanes[2 * m] = AesNi(_mm256_castsi256_si128(*pair));
                lanes[2 * m + 1] = AesNi(_mm256_extracti128_si256::<1>(*pair));
            }
        }
    }
}

/// The hash of more than 16 bytes with AES-NI, for builds that enable AES at compile
/// time (`-C target-cpu=native`, `-C target-feature=+aes`): 17 to 64 bytes in line,
/// without the dispatcher's indirect call, which at 17-64 bytes costs as much as the
/// hashing; longer keys through a direct call ([`hash_compiled_long`]), so that the
/// caller's code stays small enough for `BuildHasher::hash_one` to be in line (with
/// every path in line it was not, and a 16-byte `HashMap` key cost 0.75x foldhash's
/// quality variant).
#[cfg(target_feature = "aes")]
#[inline(always)]
pub(super) fn hash_compiled(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    if bytes.len() <= 64 {
        // SAFETY: the build enables AES-NI (and SSE2, x86_64's baseline) in every
        // function, so the program only runs on CPUs that have them.
        unsafe { algorithm::hash_medium::<AesNi>(bytes, keys, tweak) }
    } else {
        hash_compiled_long(bytes, keys, tweak)
    }
}

/// [`hash_compiled`] of more than 64 bytes.
#[cfg(target_feature = "aes")]
#[inline(never)]
fn hash_compiled_long(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: the build enables AES-NI (and SSE2, x86_64's baseline; AVX2 and VAES
    // where CompiledSteps is VaesPairs) in every function, so the program only runs on
    // CPUs that have them.
    unsafe { algorithm::hash_long::<AesNi, CompiledSteps>(bytes, keys, tweak) }
}

/// The long loop of builds with AES: two lanes per instruction where the build also
/// enables AVX2 and VAES.
#[cfg(all(
    target_feature = "aes",
    target_feature = "avx2",
    target_feature = "vaes"
))]
type CompiledSteps = VaesPairs;
#[cfg(all(
    target_feature = "aes",
    not(all(target_feature = "avx2", target_feature = "vaes"))
))]
type CompiledSteps = EachLane;

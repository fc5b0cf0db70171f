//! AES-NI: the block is an `__m128i`, the round `aesenc`.

use core::arch::x86_64::*;

use super::algorithm::{self, Keys};
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
    unsafe { algorithm::hash::<AesNi>(bytes, keys, tweak) }
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
    unsafe { algorithm::hash::<AesNi>(bytes, keys, tweak) }
}

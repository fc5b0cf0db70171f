//! ARMv8 AES: x86's `aesenc(s, k)` is `AESMC(AESE(s, 0)) ^ k` (AESE adds its key
//! before SubBytes/ShiftRows, AESENC after MixColumns), so the values are bit-exact.

use core::arch::aarch64::*;

use super::algorithm::{self, EachLane, Keys};
use super::block::Block;

#[derive(Clone, Copy)]
struct ArmAes(uint8x16_t);

impl Block for ArmAes {
    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn load(bytes: &[u8; 16]) -> ArmAes {
        // SAFETY: bytes is 16 readable bytes.
        ArmAes(unsafe { vld1q_u8(bytes.as_ptr()) })
    }

    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn from_halves(low: u64, high: u64) -> ArmAes {
        ArmAes(vreinterpretq_u8_u64(vcombine_u64(
            vcreate_u64(low),
            vcreate_u64(high),
        )))
    }

    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn xor(self, other: ArmAes) -> ArmAes {
        ArmAes(veorq_u8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn aesenc(self, key: ArmAes) -> ArmAes {
        ArmAes(veorq_u8(
            vaesmcq_u8(vaeseq_u8(self.0, vdupq_n_u8(0))),
            key.0,
        ))
    }

    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn shuffle(self, pattern: &[u8; 16]) -> ArmAes {
        // SAFETY: pattern is 16 readable bytes.
        ArmAes(vqtbl1q_u8(self.0, unsafe { vld1q_u8(pattern.as_ptr()) }))
    }

    #[inline]
    #[target_feature(enable = "neon,aes")]
    unsafe fn halves(self) -> (u64, u64) {
        let lanes = vreinterpretq_u64_u8(self.0);
        (vgetq_lane_u64::<0>(lanes), vgetq_lane_u64::<1>(lanes))
    }
}

/// The hash with the AES extension.
///
/// # Safety
/// The CPU must support NEON and AES.
#[target_feature(enable = "neon,aes")]
pub(super) unsafe fn hash_arm_aes(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: this function's target features are the ones ArmAes needs.
    unsafe { algorithm::hash::<ArmAes, EachLane, _>(bytes, keys, tweak) }
}

/// The hash of more than 16 bytes with the AES extension, for builds that enable it
/// at compile time (`-C target-cpu=native`, Apple targets): 17 to 64 bytes in line,
/// without the dispatcher's indirect call, longer keys through a direct call (as on
/// x86_64, so that the caller's `hash_one` stays in line).
#[cfg(target_feature = "aes")]
#[inline(always)]
pub(super) fn hash_compiled<K: algorithm::KeySchedule>(bytes: &[u8], keys: K, tweak: u64) -> u64 {
    if bytes.len() <= 64 {
        // SAFETY: the build enables NEON and AES in every function, so the program
        // only runs on CPUs that have them.
        unsafe { algorithm::hash_medium::<ArmAes, EachLane, _>(bytes, keys, tweak) }
    } else {
        hash_compiled_long(bytes, keys.seed(), tweak)
    }
}

/// [`hash_compiled`] of more than 64 bytes.
#[cfg(target_feature = "aes")]
#[inline(never)]
fn hash_compiled_long(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: the build enables NEON and AES in every function, so the program only
    // runs on CPUs that have them.
    unsafe { algorithm::hash_long::<ArmAes, EachLane, _>(bytes, keys, tweak) }
}

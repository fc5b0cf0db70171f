//! The aarch64 instance: [`Neon`], a 128-bit Advanced SIMD register (`Bytes` only;
//! NEON's base64 and adler32 are different algorithms, written directly).

use core::arch::aarch64::*;

use super::{Bytes, Vector};

/// A 128-bit NEON register of bytes.
#[derive(Clone, Copy)]
pub(crate) struct Neon(uint8x16_t);

impl Vector for Neon {
    const BYTES: usize = 16;

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn zero() -> Neon {
        Neon(vdupq_n_u8(0))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn load(from: *const u8) -> Neon {
        // SAFETY: the caller guarantees 16 readable bytes; vld1q_u8 has no alignment
        // requirement beyond a byte's.
        Neon(unsafe { vld1q_u8(from) })
    }
}

impl Bytes for Neon {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn splat(byte: u8) -> Neon {
        Neon(vdupq_n_u8(byte))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn eq_u8(self, other: Neon) -> Neon {
        Neon(vceqq_u8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn add_u8(self, other: Neon) -> Neon {
        Neon(vaddq_u8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn sub_u8(self, other: Neon) -> Neon {
        Neon(vsubq_u8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn and(self, other: Neon) -> Neon {
        Neon(vandq_u8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn sum_u8(self) -> usize {
        usize::from(vaddlvq_u8(self.0))
    }
}

//! Adler-32 (RFC 1950), the checksum of zlib streams: one-shot, streaming, and
//! combining the checksums of two pieces.
//!
//! ```
//! use ioserve_simd::adler32::{adler32, Adler32};
//!
//! assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
//! let mut running = Adler32::new();
//! running.update(b"Wiki");
//! running.update(b"pedia");
//! assert_eq!(running.finish(), 0x11E6_0398);
//! ```

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "aarch64"
))]
mod block;
pub mod scalar;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod x86_64;

#[cfg(target_arch = "aarch64")]
use crate::dispatch::arm_has;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::dispatch::x86_has;
use crate::dispatch::{Candidate, Choice};
use crate::Implementation;
use scalar::MOD;

/// The Adler-32 of `bytes`.
#[inline]
pub fn adler32(bytes: &[u8]) -> u32 {
    let mut running = Adler32::new();
    running.update(bytes);
    running.finish()
}

/// A running Adler-32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adler32 {
    a: u32,
    b: u32,
}

impl Adler32 {
    /// The checksum of nothing (1).
    pub fn new() -> Adler32 {
        Adler32 { a: 1, b: 0 }
    }

    /// Continues from a checksum already computed (`adler32(x)` → `from_checksum`
    /// then `update(y)` gives `adler32(x ++ y)`).
    pub fn from_checksum(checksum: u32) -> Adler32 {
        Adler32 {
            a: checksum & 0xFFFF,
            b: checksum >> 16,
        }
    }

    /// Adds `bytes` to the checksum.
    ///
    /// In builds that enable AVX2 at compile time (`-C target-cpu=native` on such a
    /// CPU), every input is taken in line once the choice is the AVX2 kernel, and
    /// inputs shorter than 1 KiB once it is AVX-512 BW's (which takes those with the
    /// same AVX2 code): the indirect call cost as much as the checksum at 64 bytes,
    /// and at 256 bytes it left ours at 0.95x zlib-rs, which is in line there (11.1
    /// against 8.8 ns in line, interleaved rounds on Zen 3, 2026-11-30; with AVX-512
    /// BW, when only inputs of up to 64 bytes were in line, 0.94x on Zen 4,
    /// 2026-12-02). Until the first choice, and after [`crate::force_scalar`], every
    /// call goes through the choice.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        let chosen = CHOICE.current();
        #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
        if chosen.implementation == Implementation::Avx2
            || (chosen.implementation == Implementation::Avx512Bw
                && bytes.len() < x86_64::AVX512_FROM)
        {
            // SAFETY: the build enables AVX2, all update_avx2_in_line needs.
            (self.a, self.b) = unsafe { x86_64::update_avx2_in_line(self.a, self.b, bytes) };
            return;
        }
        // SAFETY: the choice is `detect` or a function whose CPU features are present.
        (self.a, self.b) = unsafe { (chosen.function)(self.a, self.b, bytes) };
    }

    /// The checksum so far (`b << 16 | a`).
    pub fn finish(&self) -> u32 {
        (self.b << 16) | self.a
    }
}

impl Default for Adler32 {
    fn default() -> Adler32 {
        Adler32::new()
    }
}

/// The Adler-32 of `x ++ y` from `adler32(x)`, `adler32(y)` and `y.len()` (zlib's
/// `adler32_combine`), without the bytes.
pub fn combine(first: u32, second: u32, second_len: u64) -> u32 {
    let rem = (second_len % u64::from(MOD)) as u32;
    let a1 = first & 0xFFFF;
    let b1 = first >> 16;
    let a2 = second & 0xFFFF;
    let b2 = second >> 16;
    // a = a1 + a2 - 1; b = b1 + b2 + rem * (a1 - 1)  (mod MOD)
    let a = (a1 + a2 + MOD - 1) % MOD;
    let b = ((u64::from(rem) * u64::from(a1 + MOD - 1) + u64::from(b1) + u64::from(b2))
        % u64::from(MOD)) as u32;
    (b << 16) | a
}

/// An update function: (a, b, bytes) -> (a, b), with a and b below MOD.
type UpdateFn = unsafe fn(u32, u32, &[u8]) -> (u32, u32);

/// Where calls go: [`detect`] until the first call has chosen.
static CHOICE: Choice<UpdateFn> = Choice::new(&DETECT);
static DETECT: Candidate<UpdateFn> = Candidate::detect(detect);

/// Chooses (once), then calls the choice.
unsafe fn detect(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    let chosen = CHOICE.choose(CANDIDATES).function;
    // SAFETY: `choose` only picks a function whose CPU features are present.
    unsafe { chosen(a, b, bytes) }
}

/// Forgets the choice; the next call chooses again.
pub(crate) fn reset() {
    CHOICE.reset();
}

/// The implementation calls go to (choosing it if no call has yet).
pub fn implementation() -> Implementation {
    CHOICE.implementation(CANDIDATES)
}

/// The implementations, fastest first, for the dispatcher and [`implementations`].
static CANDIDATES: &[Candidate<UpdateFn>] = &[
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx512Bw,
        available: || x86_has!("avx512bw"),
        function: x86_64::update_avx512bw,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx2,
        available: || x86_has!("avx2"),
        function: x86_64::update_avx2,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Ssse3,
        available: || x86_has!("ssse3"),
        function: x86_64::update_ssse3,
    },
    #[cfg(target_arch = "aarch64")]
    Candidate {
        implementation: Implementation::Neon,
        available: || arm_has!("neon"),
        function: aarch64::update_neon,
    },
    Candidate {
        implementation: Implementation::Scalar,
        available: || true,
        function: scalar_update,
    },
];

/// The scalar kernel as an `UpdateFn`.
unsafe fn scalar_update(a: u32, b: u32, bytes: &[u8]) -> (u32, u32) {
    scalar::update(a, b, bytes)
}

/// Every implementation this CPU can run, for tests and benches.
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub fn implementations() -> alloc::vec::Vec<(Implementation, UpdateFn)> {
    crate::dispatch::all_available(CANDIDATES)
        .into_iter()
        .map(|candidate| (candidate.implementation, candidate.function))
        .collect()
}

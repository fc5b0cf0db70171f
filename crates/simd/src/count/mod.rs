//! Counting the occurrences of one byte in a slice.
//!
//! ```
//! assert_eq!(ioserve_simd::count::count(b"hello, world", b'o'), 2);
//! ```

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "aarch64"
))]
mod generic;
pub mod scalar;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod x86_64;

#[cfg(target_arch = "aarch64")]
use crate::dispatch::arm_has;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::dispatch::x86_has;
use crate::dispatch::{Candidate, Choice};
use crate::Implementation;

/// How many bytes of `haystack` equal `needle`.
///
/// On x86_64, haystacks shorter than 128 bytes are counted in line with
/// SSE2 (every x86_64 build has it) once a SIMD kernel has been chosen, as that kernel
/// would count them (AVX2's takes 16-byte vectors below 32 bytes too): the indirect
/// call cost as much as the counting there. In builds that enable AVX-512 BW or AVX2
/// at compile time, longer haystacks are counted in line too when that kernel is the
/// choice. Until the first choice, and after [`crate::force_scalar`], every call goes
/// through the choice.
#[inline]
pub fn count(haystack: &[u8], needle: u8) -> usize {
    let chosen = CHOICE.current();
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if haystack.len() < IN_LINE_BELOW && chosen.implementation != Implementation::Scalar {
        // SAFETY: the build enables SSE2, all count_sse2 needs.
        return unsafe { x86_64::count_sse2(haystack, needle) };
    }
    // Builds that enable AVX-512 BW or AVX2 at compile time (`-C target-cpu=native` on
    // such a CPU) count longer haystacks in line with it once the choice is that
    // kernel, as bytecount does there with AVX2.
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx512f",
        target_feature = "avx512bw",
        target_feature = "avx2",
        target_feature = "popcnt"
    ))]
    if chosen.implementation == Implementation::Avx512Bw {
        // SAFETY: the build enables every feature both functions need.
        return unsafe {
            if crate::dispatch::x86_splits_512_bit() {
                x86_64::count_avx512bw_split(haystack, needle)
            } else {
                x86_64::count_avx512bw(haystack, needle)
            }
        };
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    if chosen.implementation == Implementation::Avx2 {
        // SAFETY: the build enables AVX2, all count_avx2 needs.
        return unsafe { x86_64::count_avx2(haystack, needle) };
    }
    // SAFETY: the choice is `detect` or a function whose CPU features are present.
    unsafe { (chosen.function)(haystack, needle) }
}

/// Haystacks shorter than this are counted in line on x86_64 (see [`count`]).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const IN_LINE_BELOW: usize = 128;

type CountFn = unsafe fn(&[u8], u8) -> usize;

/// Where calls go: [`detect`] until the first call has chosen.
static CHOICE: Choice<CountFn> = Choice::new(&DETECT);
static DETECT: Candidate<CountFn> = Candidate::detect(detect);

/// Chooses (once), then calls the choice.
unsafe fn detect(haystack: &[u8], needle: u8) -> usize {
    let chosen = CHOICE.choose(CANDIDATES).function;
    // SAFETY: `choose` only picks a function whose CPU features are present.
    unsafe { chosen(haystack, needle) }
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
static CANDIDATES: &[Candidate<CountFn>] = &[
    // Zen 4 (see count_avx512bw_split): a function of its own, so that no call asks.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx512Bw,
        available: || {
            x86_has!("avx512f")
                && x86_has!("avx512bw")
                && x86_has!("avx2")
                && x86_has!("popcnt")
                && crate::dispatch::x86_splits_512_bit()
        },
        function: x86_64::count_avx512bw_split,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx512Bw,
        available: || {
            x86_has!("avx512f") && x86_has!("avx512bw") && x86_has!("avx2") && x86_has!("popcnt")
        },
        function: x86_64::count_avx512bw,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx2,
        available: || x86_has!("avx2"),
        function: x86_64::count_avx2,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Sse2,
        // SSE2 is part of x86_64 itself.
        available: || true,
        function: x86_64::count_sse2,
    },
    #[cfg(target_arch = "aarch64")]
    Candidate {
        implementation: Implementation::Neon,
        available: || arm_has!("neon"),
        function: aarch64::count_neon,
    },
    Candidate {
        implementation: Implementation::Scalar,
        available: || true,
        function: scalar_count,
    },
];

/// The scalar kernel as a `CountFn`.
unsafe fn scalar_count(haystack: &[u8], needle: u8) -> usize {
    scalar::count(haystack, needle)
}

/// Every implementation this CPU can run, for tests and benches.
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub fn implementations() -> alloc::vec::Vec<(Implementation, CountFn)> {
    crate::dispatch::all_available(CANDIDATES)
        .into_iter()
        .map(|candidate| (candidate.implementation, candidate.function))
        .collect()
}

//! Counting the occurrences of one byte in a slice.
//!
//! ```
//! assert_eq!(ioserve_simd::count::count(b"hello, world", b'o'), 2);
//! ```

#[cfg(target_arch = "aarch64")]
mod aarch64;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use crate::dispatch::cached_choice;
use crate::Implementation;

/// How many bytes of `haystack` equal `needle`.
#[inline]
pub fn count(haystack: &[u8], needle: u8) -> usize {
    let function = selected();
    // SAFETY: `choose` only picks a function whose CPU features are present.
    unsafe { function(haystack, needle) }
}

type CountFn = unsafe fn(&[u8], u8) -> usize;

cached_choice!(CountFn, choose);

fn choose() -> (CountFn, Implementation) {
    if !crate::dispatch::scalar_forced() {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::dispatch::x86_has;
            if x86_has!("avx2") {
                return (x86_64::count_avx2, Implementation::Avx2);
            }
            return (x86_64::count_sse2, Implementation::Sse2);
        }
        #[cfg(target_arch = "aarch64")]
        {
            use crate::dispatch::arm_has;
            if arm_has!("neon") {
                return (aarch64::count_neon, Implementation::Neon);
            }
        }
    }
    (scalar_count, Implementation::Scalar)
}

/// The scalar kernel as a `CountFn`.
unsafe fn scalar_count(haystack: &[u8], needle: u8) -> usize {
    scalar::count(haystack, needle)
}

/// Every implementation this CPU can run, for tests and benches.
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub fn implementations() -> alloc::vec::Vec<(Implementation, CountFn)> {
    let mut all: alloc::vec::Vec<(Implementation, CountFn)> =
        alloc::vec![(Implementation::Scalar, scalar_count as CountFn)];
    #[cfg(target_arch = "x86_64")]
    {
        use crate::dispatch::x86_has;
        all.push((Implementation::Sse2, x86_64::count_sse2));
        if x86_has!("avx2") {
            all.push((Implementation::Avx2, x86_64::count_avx2));
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use crate::dispatch::arm_has;
        if arm_has!("neon") {
            all.push((Implementation::Neon, aarch64::count_neon));
        }
    }
    all
}

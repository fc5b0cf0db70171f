//! Choosing an implementation once per kernel.
//!
//! Each kernel keeps the function it chose in an `AtomicPtr`, starting null: the first
//! call runs the kernel's `choose`, which asks the CPU (or, without `std`, the features
//! enabled at compile time) and stores the fastest function it may run. Later calls
//! are one load and an indirect call. [`force_scalar`] clears every choice and makes
//! the next ones scalar.

use core::sync::atomic::{AtomicBool, Ordering};

/// The implementations a kernel can dispatch to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Implementation {
    /// Portable Rust, the specification the others are tested against.
    Scalar,
    /// x86_64 SSE2 (128-bit, every x86_64 CPU).
    Sse2,
    /// x86_64 SSSE3 (128-bit with byte shuffles).
    Ssse3,
    /// x86_64 AVX2 (256-bit).
    Avx2,
    /// x86_64 AVX-512 BW (512-bit).
    Avx512Bw,
    /// x86_64 AVX-512 VBMI (512-bit byte permutes).
    Avx512Vbmi,
    /// x86_64 AES-NI.
    AesNi,
    /// x86_64 AES-NI in its VEX encoding (with AVX): no moves to keep a source
    /// register.
    AesNiAvx,
    /// x86_64 AES-NI with VAES (256-bit AES rounds, two 128-bit lanes per instruction).
    AesNiVaes,
    /// aarch64 Advanced SIMD (NEON).
    Neon,
    /// aarch64 AES instructions (AESE/AESMC).
    ArmAes,
}

impl Implementation {
    /// Every implementation, in discriminant order.
    const ALL: [Implementation; 11] = [
        Implementation::Scalar,
        Implementation::Sse2,
        Implementation::Ssse3,
        Implementation::Avx2,
        Implementation::Avx512Bw,
        Implementation::Avx512Vbmi,
        Implementation::AesNi,
        Implementation::AesNiAvx,
        Implementation::AesNiVaes,
        Implementation::Neon,
        Implementation::ArmAes,
    ];

    /// The implementation whose discriminant is `value` (as stored by `cached_choice!`).
    pub(crate) fn from_u8(value: u8) -> Implementation {
        Implementation::ALL[usize::from(value)]
    }

    /// A short lowercase name (`"avx2"`, `"neon"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Scalar => "scalar",
            Implementation::Sse2 => "sse2",
            Implementation::Ssse3 => "ssse3",
            Implementation::Avx2 => "avx2",
            Implementation::Avx512Bw => "avx512bw",
            Implementation::Avx512Vbmi => "avx512vbmi",
            Implementation::AesNi => "aes-ni",
            Implementation::AesNiAvx => "aes-ni+avx",
            Implementation::AesNiVaes => "aes-ni+vaes",
            Implementation::Neon => "neon",
            Implementation::ArmAes => "arm-aes",
        }
    }
}

impl core::fmt::Display for Implementation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

static FORCE_SCALAR: AtomicBool = AtomicBool::new(false);

/// Makes every kernel use its scalar implementation from the next call on, for tests
/// and for users who must (a CPU erratum, bit-exact reproduction of a bug report).
///
/// With the `std` feature, setting the environment variable `SIMD_FORCE_SCALAR` to a
/// value other than `0` before the first call does the same for a whole process, and
/// `SIMD_DISABLE=aes` (or any comma-separated list of CPU feature names such as
/// `avx512bw,avx2`) makes the kernels behave as on a CPU without those features.
pub fn force_scalar() {
    FORCE_SCALAR.store(true, Ordering::Relaxed);
    crate::base64::reset();
    crate::count::reset();
    crate::adler32::reset();
    crate::hash::reset();
}

/// One implementation of a kernel in its table of candidates: the table, fastest first
/// and ending with the scalar specification, is what both the dispatcher
/// ([`first_available`]) and the kernel's `implementations()` (tests, benches) read, so
/// that every path a CPU may dispatch to is also tested by name.
pub(crate) struct Candidate<F> {
    /// Which implementation it is.
    pub(crate) implementation: Implementation,
    /// Whether this CPU can run it (`x86_has!`/`arm_has!`; always true for scalar).
    pub(crate) available: fn() -> bool,
    /// The function.
    pub(crate) function: F,
}

/// The first candidate this CPU can run, or the last (scalar) one when
/// [`force_scalar`] or `SIMD_FORCE_SCALAR` asks for it.
pub(crate) fn first_available<F: Copy>(candidates: &[Candidate<F>]) -> (F, Implementation) {
    let scalar = candidates
        .last()
        .expect("a table ends with its scalar candidate");
    let chosen = if scalar_forced() {
        scalar
    } else {
        candidates
            .iter()
            .find(|candidate| (candidate.available)())
            .unwrap_or(scalar)
    };
    (chosen.function, chosen.implementation)
}

/// Every candidate this CPU can run, scalar first.
#[cfg(feature = "alloc")]
pub(crate) fn all_available<F: Copy>(
    candidates: &[Candidate<F>],
) -> alloc::vec::Vec<(Implementation, F)> {
    candidates
        .iter()
        .rev()
        .filter(|candidate| (candidate.available)())
        .map(|candidate| (candidate.implementation, candidate.function))
        .collect()
}

/// Whether kernels must choose their scalar implementation.
pub(crate) fn scalar_forced() -> bool {
    if FORCE_SCALAR.load(Ordering::Relaxed) {
        return true;
    }
    #[cfg(feature = "std")]
    {
        static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            std::env::var_os("SIMD_FORCE_SCALAR").is_some_and(|v| !v.is_empty() && v != "0")
        })
    }
    #[cfg(not(feature = "std"))]
    false
}

/// Whether the environment variable `SIMD_DISABLE` (a comma-separated list of feature
/// names as `is_x86_feature_detected!`/`is_aarch64_feature_detected!` spell them, e.g.
/// `aes` or `avx512bw,avx2`) names `feature`: the kernels then behave as on a CPU
/// without it, like Go's `GODEBUG=cpu.aes=off`. Read once per process.
#[cfg(feature = "std")]
pub(crate) fn disabled_by_env(feature: &str) -> bool {
    static DISABLED: std::sync::OnceLock<std::string::String> = std::sync::OnceLock::new();
    DISABLED
        .get_or_init(|| {
            std::env::var("SIMD_DISABLE")
                .unwrap_or_default()
                .to_ascii_lowercase()
        })
        .split(',')
        .any(|name| name.trim() == feature)
}

/// Whether the CPU has an x86 feature: asked at run time with `std` (less those
/// `SIMD_DISABLE` names), otherwise what the build enabled.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
macro_rules! x86_has {
    ($feature:tt) => {{
        #[cfg(feature = "std")]
        {
            std::is_x86_feature_detected!($feature) && !crate::dispatch::disabled_by_env($feature)
        }
        #[cfg(not(feature = "std"))]
        {
            cfg!(target_feature = $feature)
        }
    }};
}

/// As `x86_has!`, for aarch64.
#[cfg(target_arch = "aarch64")]
macro_rules! arm_has {
    ($feature:tt) => {{
        #[cfg(feature = "std")]
        {
            std::arch::is_aarch64_feature_detected!($feature)
                && !crate::dispatch::disabled_by_env($feature)
        }
        #[cfg(not(feature = "std"))]
        {
            cfg!(target_feature = $feature)
        }
    }};
}

/// Declares a kernel's cached choice: `SELECTED` (the function), `selected()` (choosing
/// on first use with `$choose: fn() -> ($fn_type, Implementation)`), `reset()` and
/// `implementation()`.
macro_rules! cached_choice {
    ($fn_type:ty, $choose:path) => {
        static SELECTED: core::sync::atomic::AtomicPtr<()> =
            core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
        static CHOSEN: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

        /// The chosen function, choosing it on first use.
        #[inline]
        fn selected() -> $fn_type {
            let pointer = SELECTED.load(core::sync::atomic::Ordering::Relaxed);
            if pointer.is_null() {
                let (function, implementation) = $choose();
                CHOSEN.store(implementation as u8, core::sync::atomic::Ordering::Relaxed);
                SELECTED.store(function as *mut (), core::sync::atomic::Ordering::Relaxed);
                function
            } else {
                // SAFETY: SELECTED only ever holds null or a `$fn_type` stored above;
                // function pointers and `*mut ()` have the same size and representation
                // on the targets this crate builds for.
                unsafe { core::mem::transmute::<*mut (), $fn_type>(pointer) }
            }
        }

        /// Forgets the choice; the next call chooses again.
        pub(crate) fn reset() {
            SELECTED.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Relaxed);
        }

        /// The implementation calls go to (choosing it if no call has yet).
        pub fn implementation() -> crate::Implementation {
            selected();
            crate::Implementation::from_u8(CHOSEN.load(core::sync::atomic::Ordering::Relaxed))
        }
    };
}

#[cfg(target_arch = "aarch64")]
pub(crate) use arm_has;
pub(crate) use cached_choice;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use x86_has;

#[cfg(test)]
mod tests {
    use super::Implementation;

    #[test]
    fn the_table_follows_the_discriminants() {
        for implementation in Implementation::ALL {
            assert_eq!(
                Implementation::from_u8(implementation as u8),
                implementation
            );
        }
    }
}

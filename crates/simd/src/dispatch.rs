//! Choosing an implementation once per kernel, one mechanism for all (memchr's):
//! each kernel has a [`Choice`], an `AtomicPtr` to the entry of its table of
//! [`Candidate`]s that calls go to. It starts at a `detect` entry whose function
//! chooses (asking the CPU, or without `std` the features enabled at compile time),
//! stores the chosen entry and calls it; later calls are one load and an indirect
//! call, with no branch on whether a choice was made. What a kernel reports
//! ([`Choice::implementation`]) is read from the same pointer the calls use, so it is
//! what runs. [`crate::force_scalar`] (in the crate root, which knows every kernel,
//! so that this module imports none of them) sets the flag and points every
//! `Choice` back at its `detect` entry.

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

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

/// Makes [`scalar_forced`] true for the rest of the process.
pub(crate) fn set_scalar_forced() {
    FORCE_SCALAR.store(true, Ordering::SeqCst);
}

/// A kernel's choice: the entry of its candidates that calls go to (see the module
/// docs).
pub(crate) struct Choice<F: 'static> {
    current: AtomicPtr<Candidate<F>>,
    detect: &'static Candidate<F>,
}

impl<F> Choice<F> {
    /// A choice not yet made: calls go to `detect`, whose function must call
    /// [`Choice::choose`] and then the function it returns.
    pub(crate) const fn new(detect: &'static Candidate<F>) -> Choice<F> {
        Choice {
            current: AtomicPtr::new(core::ptr::from_ref(detect).cast_mut()),
            detect,
        }
    }

    /// The entry calls go to now (the `detect` entry until a call has chosen).
    #[inline(always)]
    pub(crate) fn current(&self) -> &'static Candidate<F> {
        // SAFETY: `current` only ever holds pointers made from `&'static Candidate`
        // references (the detect entry, or an entry of a kernel's static table),
        // which are never written through.
        unsafe { &*self.current.load(Ordering::Relaxed) }
    }

    /// Chooses the first of `candidates` this CPU can run (the scalar one when
    /// forced), stores it and returns it.
    pub(crate) fn choose(&self, candidates: &'static [Candidate<F>]) -> &'static Candidate<F> {
        let forced = scalar_forced();
        let chosen = first_available(candidates, forced);
        self.current
            .store(core::ptr::from_ref(chosen).cast_mut(), Ordering::SeqCst);
        // force_scalar sets the flag, then resets every choice: if it ran between the
        // flag's load above and the store, its reset may have come first, so undo the
        // store (in the single total order of SeqCst operations, either the reset
        // follows the store, or the flag's store precedes this load).
        if !forced && scalar_forced() {
            self.reset();
        }
        chosen
    }

    /// Points calls back at `detect`: the next call chooses again.
    pub(crate) fn reset(&self) {
        self.current.store(
            core::ptr::from_ref(self.detect).cast_mut(),
            Ordering::SeqCst,
        );
    }

    /// The implementation calls go to, choosing it now if no call has.
    pub(crate) fn implementation(&self, candidates: &'static [Candidate<F>]) -> Implementation {
        let current = self.current();
        if core::ptr::eq(current, self.detect) {
            self.choose(candidates).implementation
        } else {
            current.implementation
        }
    }
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

impl<F> Candidate<F> {
    /// The entry a [`Choice`] starts at, whose `function` chooses (its
    /// `implementation` is never reported: [`Choice::implementation`] chooses first).
    pub(crate) const fn detect(function: F) -> Candidate<F> {
        Candidate {
            implementation: Implementation::Scalar,
            available: || false,
            function,
        }
    }
}

/// Whether this CPU runs 512-bit vector instructions as two 256-bit halves and
/// compares into mask registers at half the rate of 256-bit compares into vectors:
/// AMD's Zen 4 (family 19h, the only one of that family with AVX-512; Zen 5, family
/// 1Ah, has full-width units). Asked once with `cpuid`, which every x86_64 CPU has.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) fn x86_splits_512_bit() -> bool {
    use core::sync::atomic::AtomicU8;
    /// 0: not asked yet; 1: no; 2: yes.
    static ANSWER: AtomicU8 = AtomicU8::new(0);
    match ANSWER.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let splits = is_zen4();
            ANSWER.store(if splits { 2 } else { 1 }, Ordering::Relaxed);
            splits
        }
    }
}

/// Whether `cpuid` says AuthenticAMD, family 19h, with AVX-512 F (Zen 4). Cold and
/// never in line: `cpuid` writes EBX, which a caller with it in line saved and
/// restored on every call (two pushes and pops in `count_avx512bw`'s path to AVX2).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[cold]
#[inline(never)]
fn is_zen4() -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // SAFETY: every x86_64 CPU has `cpuid`; leaf 7 is read only where leaf 0 says it
    // exists. The intrinsics are safe in newer Rust, hence the allow.
    #[allow(unused_unsafe)]
    let (vendor, signature, features) = unsafe {
        let leaf0 = __cpuid(0);
        let vendor = [leaf0.ebx, leaf0.edx, leaf0.ecx];
        if leaf0.eax < 7 {
            return false;
        }
        (vendor, __cpuid(1).eax, __cpuid_count(7, 0).ebx)
    };
    // "AuthenticAMD" as cpuid returns it in EBX, EDX, ECX.
    let amd = vendor == [0x6874_7541, 0x6974_6E65, 0x444D_4163];
    let base = (signature >> 8) & 0xF;
    let family = if base == 0xF {
        base + ((signature >> 20) & 0xFF)
    } else {
        base
    };
    let avx512f = features & (1 << 16) != 0;
    amd && family == 0x19 && avx512f
}

/// The first candidate this CPU can run, or the last (scalar) one when `forced`.
fn first_available<F>(candidates: &'static [Candidate<F>], forced: bool) -> &'static Candidate<F> {
    let scalar = candidates
        .last()
        .expect("a table ends with its scalar candidate");
    if forced {
        scalar
    } else {
        candidates
            .iter()
            .find(|candidate| (candidate.available)())
            .unwrap_or(scalar)
    }
}

/// Every candidate this CPU can run, scalar first.
#[cfg(feature = "alloc")]
pub(crate) fn all_available<F>(
    candidates: &'static [Candidate<F>],
) -> alloc::vec::Vec<&'static Candidate<F>> {
    candidates
        .iter()
        .rev()
        .filter(|candidate| (candidate.available)())
        .collect()
}

/// Whether kernels must choose their scalar implementation.
pub(crate) fn scalar_forced() -> bool {
    if FORCE_SCALAR.load(Ordering::SeqCst) {
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

#[cfg(target_arch = "aarch64")]
pub(crate) use arm_has;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use x86_has;

#[cfg(test)]
mod tests {
    use super::{Candidate, Choice, Implementation};

    type Double = unsafe fn(u32) -> u32;

    static CANDIDATES: &[Candidate<Double>] = &[
        Candidate {
            implementation: Implementation::Avx2,
            available: || false,
            function: |x| x * 3,
        },
        Candidate {
            implementation: Implementation::Sse2,
            available: || true,
            function: |x| x * 2,
        },
        Candidate {
            implementation: Implementation::Scalar,
            available: || true,
            function: |x| x + x,
        },
    ];

    static DETECT: Candidate<Double> = Candidate::detect(detect);
    static CHOICE: Choice<Double> = Choice::new(&DETECT);

    unsafe fn detect(x: u32) -> u32 {
        // SAFETY: the test's functions need no CPU feature.
        unsafe { (CHOICE.choose(CANDIDATES).function)(x) }
    }

    #[test]
    fn a_choice_starts_at_detect_and_reports_what_it_stored() {
        assert!(core::ptr::eq(CHOICE.current(), &DETECT));
        // SAFETY: as in detect.
        assert_eq!(unsafe { (CHOICE.current().function)(21) }, 42);
        // The first available candidate, skipping the unavailable one.
        assert!(core::ptr::eq(CHOICE.current(), &CANDIDATES[1]));
        assert_eq!(CHOICE.implementation(CANDIDATES), Implementation::Sse2);
        CHOICE.reset();
        assert!(core::ptr::eq(CHOICE.current(), &DETECT));
        assert_eq!(CHOICE.implementation(CANDIDATES), Implementation::Sse2);
        assert!(core::ptr::eq(CHOICE.current(), &CANDIDATES[1]));
    }
}

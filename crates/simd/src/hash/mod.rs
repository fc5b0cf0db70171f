//! A fast keyed hash for hash tables, built on AES rounds like Go's runtime aeshash:
//! AES-NI on x86_64, AESE/AESMC on aarch64, and a software AES round elsewhere (the
//! specification; all three give the same values). Keys of up to 16 bytes are hashed
//! with two 64-bit multiplies instead (wyhash's and foldhash's folded multiply), in
//! line, without dispatch. Builds that enable AES at compile time (`-C
//! target-cpu=native`) use the AES instructions without the dispatcher too (in line
//! up to 64 bytes, a direct call beyond), whatever [`crate::force_scalar`] says: every
//! implementation gives the same values, and such a build only runs on CPUs with AES.
//!
//! ```
//! use std::collections::HashMap;
//! use ioserve_simd::hash::{hash_bytes, RandomState};
//!
//! // Reproducible: a fixed seed gives the same value in every process and on every CPU.
//! assert_eq!(hash_bytes(b"key", 42), hash_bytes(b"key", 42));
//! assert_ne!(hash_bytes(b"key", 42), hash_bytes(b"key", 43));
//!
//! // Keyed per process by default (HashDoS resistance).
//! let mut map: HashMap<&str, u32, RandomState> = HashMap::default();
//! map.insert("answer", 42);
//! assert_eq!(map["answer"], 42);
//! ```
//!
//! It is not a cryptographic hash or MAC: it resists collision flooding by an attacker
//! who does not know the key, as SipHash (std's default) does, but has had no
//! cryptanalysis.

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod algorithm;
mod block;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod x86_64;

use core::hash::{BuildHasher, Hasher};

#[cfg(target_arch = "aarch64")]
use crate::dispatch::arm_has;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::dispatch::x86_has;
use crate::dispatch::{Candidate, Choice};
use crate::Implementation;
#[cfg(all(target_arch = "aarch64", target_feature = "aes"))]
use aarch64 as compiled;
use algorithm::{EachLane, KeySchedule, Keys, StoredKeys};
use block::Soft;
// The compiled-in path's permutes are SSSE3's `pshufb`.
#[cfg(all(
    all(target_arch = "x86_64", target_feature = "ssse3"),
    target_feature = "aes"
))]
use x86_64 as compiled;

/// The hash of `bytes` under `seed`.
#[inline]
pub fn hash_bytes(bytes: &[u8], seed: u64) -> u64 {
    hash_keyed(bytes, Keys::new([seed, 0]), 0)
}

/// The hash of `bytes` with `keys` and `tweak`, by the cheapest way this build and
/// CPU allow: short keys in line (they need no CPU feature), the AES path without the
/// dispatcher in builds that enable AES (in line up to 64 bytes), else the dispatched
/// implementation.
#[inline]
fn hash_keyed<K: KeySchedule>(bytes: &[u8], keys: K, tweak: u64) -> u64 {
    if bytes.len() <= 16 {
        return algorithm::hash_short(bytes, keys.short_seed(), tweak);
    }
    #[cfg(all(
        any(
            all(target_arch = "x86_64", target_feature = "ssse3"),
            target_arch = "aarch64"
        ),
        target_feature = "aes"
    ))]
    {
        compiled::hash_compiled(bytes, keys, tweak)
    }
    #[cfg(not(all(
        any(
            all(target_arch = "x86_64", target_feature = "ssse3"),
            target_arch = "aarch64"
        ),
        target_feature = "aes"
    )))]
    {
        let function = CHOICE.current().function.0;
        // SAFETY: the choice is `detect` or a function whose CPU features are present.
        unsafe { function(bytes, keys.seed(), tweak) }
    }
}

/// A [`BuildHasher`] for `HashMap`/`HashSet`: random keys per process (and per
/// instance) with `std`, or fixed ones from [`RandomState::with_seed`].
#[derive(Clone, Debug)]
pub struct RandomState {
    keys: StoredKeys,
}

impl RandomState {
    /// Keys drawn from the operating system's randomness (through std's own
    /// `RandomState`), different for every instance.
    #[cfg(feature = "std")]
    pub fn new() -> RandomState {
        use core::hash::BuildHasher as _;
        let random = std::collections::hash_map::RandomState::new();
        RandomState::with_seeds(random.hash_one(0u8), random.hash_one(1u8))
    }

    /// Fixed keys, for reproducible hashing (tests, on-disk layouts). With the same
    /// seed, [`RandomState::hash_one`]`(bytes)` values are the same everywhere.
    pub fn with_seed(seed: u64) -> RandomState {
        RandomState::with_seeds(seed, 0)
    }

    /// Fixed keys from 128 bits of seed.
    pub fn with_seeds(low: u64, high: u64) -> RandomState {
        RandomState {
            keys: StoredKeys::new(Keys::new([low, high])),
        }
    }
}

#[cfg(feature = "std")]
impl Default for RandomState {
    fn default() -> RandomState {
        RandomState::new()
    }
}

impl BuildHasher for RandomState {
    type Hasher = AesHasher;

    #[inline(always)]
    fn build_hasher(&self) -> AesHasher {
        AesHasher {
            keys: self.keys,
            state: 0,
            pending: None,
        }
    }

    /// The provided method's body, marked to be in line: without it, builds that
    /// enable AES left `hash_one` a call, and a 16-byte `HashMap` key cost about 0.7x
    /// foldhash's quality variant, whose `hash_one` was in line.
    #[inline(always)]
    #[expect(
        clippy::manual_hash_one,
        reason = "this is the definition of hash_one that the lint points to"
    )]
    fn hash_one<T: core::hash::Hash>(&self, value: T) -> u64 {
        let mut hasher = self.build_hasher();
        value.hash(&mut hasher);
        hasher.finish()
    }
}

/// The [`Hasher`] of [`RandomState`]: each write is hashed with the state so far
/// mixed into the key, so writes chain and their order matters.
///
/// An integer write is held until the next write: a byte write takes it into its
/// tweak (the state XOR the integer), with no hashing of its own, so that a `HashMap`
/// key of bytes (`[u8]`, `str`, `Vec<u8>`: a length, then the bytes) costs one hash,
/// as a direct [`hash_bytes`] does; an integer that meets another integer or
/// [`Hasher::finish`] is hashed as its 8 little-endian bytes.
#[derive(Clone, Debug)]
pub struct AesHasher {
    keys: StoredKeys,
    state: u64,
    pending: Option<u64>,
}

impl AesHasher {
    #[inline(always)]
    fn absorb(&mut self, bytes: &[u8]) {
        let tweak = match self.pending.take() {
            Some(integer) => self.state ^ integer,
            None => self.state,
        };
        self.state = hash_keyed(bytes, &self.keys, tweak);
    }

    #[inline(always)]
    fn absorb_integer(&mut self, value: u64) {
        if let Some(earlier) = self.pending.replace(value) {
            self.state = hash_keyed(&earlier.to_le_bytes(), &self.keys, self.state);
        }
    }
}

impl Hasher for AesHasher {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        self.absorb(bytes);
    }

    #[inline(always)]
    fn write_u8(&mut self, value: u8) {
        self.absorb_integer(u64::from(value));
    }

    #[inline(always)]
    fn write_u16(&mut self, value: u16) {
        self.absorb_integer(u64::from(value));
    }

    #[inline(always)]
    fn write_u32(&mut self, value: u32) {
        self.absorb_integer(u64::from(value));
    }

    #[inline(always)]
    fn write_u64(&mut self, value: u64) {
        self.absorb_integer(value);
    }

    #[inline(always)]
    fn write_u128(&mut self, value: u128) {
        self.absorb(&value.to_le_bytes());
    }

    #[inline(always)]
    fn write_usize(&mut self, value: usize) {
        self.absorb_integer(value as u64);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        match self.pending {
            Some(integer) => hash_keyed(&integer.to_le_bytes(), &self.keys, self.state),
            None => self.state,
        }
    }
}

/// A hash function: (bytes, keys, tweak) -> hash.
type HashFn = unsafe fn(&[u8], Keys, u64) -> u64;

/// Where calls go: [`detect`] until the first call has chosen.
static CHOICE: Choice<(HashFn, SeededHashFn)> = Choice::new(&DETECT);
static DETECT: Candidate<(HashFn, SeededHashFn)> = Candidate::detect((detect, |bytes, seed| {
    // SAFETY: detect needs no CPU feature; what it calls, it has chosen.
    unsafe { detect(bytes, Keys::new([seed, 0]), 0) }
}));

/// Chooses (once), then calls the choice.
unsafe fn detect(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    let chosen = CHOICE.choose(CANDIDATES).function.0;
    // SAFETY: `choose` only picks a function whose CPU features are present.
    unsafe { chosen(bytes, keys, tweak) }
}

/// Forgets the choice; the next call chooses again.
pub(crate) fn reset() {
    CHOICE.reset();
}

/// The implementation [`hash_bytes`] dispatches to for keys of more than 16 bytes
/// (choosing it if no call has yet). Builds that enable AES at compile time call the
/// AES path without the dispatcher instead (the same values).
pub fn implementation() -> Implementation {
    CHOICE.implementation(CANDIDATES)
}

/// The hash's implementations, fastest first, each as the dispatcher calls it and as a
/// function of (bytes, seed) for [`implementations`].
static CANDIDATES: &[Candidate<(HashFn, SeededHashFn)>] = &[
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::AesNiVaes,
        available: || x86_has!("aes") && x86_has!("avx2") && x86_has!("vaes"),
        function: (x86_64::hash_aesni_vaes, |bytes, seed| {
            // SAFETY: called only through a table entry whose CPU features are present.
            unsafe { x86_64::hash_aesni_vaes(bytes, Keys::new([seed, 0]), 0) }
        }),
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::AesNiAvx,
        available: || x86_has!("aes") && x86_has!("avx"),
        function: (x86_64::hash_aesni_avx, |bytes, seed| {
            // SAFETY: called only through a table entry whose CPU features are present.
            unsafe { x86_64::hash_aesni_avx(bytes, Keys::new([seed, 0]), 0) }
        }),
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::AesNi,
        available: || x86_has!("aes") && x86_has!("ssse3"),
        function: (x86_64::hash_aesni, |bytes, seed| {
            // SAFETY: as above.
            unsafe { x86_64::hash_aesni(bytes, Keys::new([seed, 0]), 0) }
        }),
    },
    #[cfg(target_arch = "aarch64")]
    Candidate {
        implementation: Implementation::ArmAes,
        available: || arm_has!("aes"),
        function: (aarch64::hash_arm_aes, |bytes, seed| {
            // SAFETY: as above.
            unsafe { aarch64::hash_arm_aes(bytes, Keys::new([seed, 0]), 0) }
        }),
    },
    Candidate {
        implementation: Implementation::Scalar,
        available: || true,
        function: (hash_soft, |bytes, seed| {
            // SAFETY: the software round needs no CPU feature.
            unsafe { hash_soft(bytes, Keys::new([seed, 0]), 0) }
        }),
    },
];

/// The software AES round: the specification and the fallback.
unsafe fn hash_soft(bytes: &[u8], keys: Keys, tweak: u64) -> u64 {
    // SAFETY: Soft needs no CPU feature.
    unsafe { algorithm::hash::<Soft, EachLane, _>(bytes, keys, tweak) }
}

/// A hash of (bytes, seed), as [`hash_bytes`].
#[doc(hidden)]
pub type SeededHashFn = fn(&[u8], u64) -> u64;

/// Every implementation this CPU can run, for tests and benches, as functions of
/// (bytes, seed).
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub fn implementations() -> alloc::vec::Vec<(Implementation, SeededHashFn)> {
    crate::dispatch::all_available(CANDIDATES)
        .into_iter()
        .map(|candidate| (candidate.implementation, candidate.function.1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `RandomState`'s stored keys hash as its seed's keys do, on the path this build
    /// takes (AES in line where the build enables it, the dispatcher's choice
    /// elsewhere), and both as the software round does: the values a seed gives may not
    /// depend on whether a hasher or a direct call holds it.
    #[test]
    fn stored_keys_hash_as_the_seed_does() {
        let data: [u8; 1024] =
            core::array::from_fn(|i| (i as u8).wrapping_mul(151).wrapping_add(7));
        let lengths = (0..=280).chain([383, 511, 512, 513, 767, 1024]);
        for (low, high) in [(0, 0), (42, 0), (u64::MAX, 0x1234_5678_9ABC_DEF0)] {
            let keys = Keys::new([low, high]);
            let stored = StoredKeys::new(keys);
            for len in lengths.clone() {
                let bytes = &data[..len];
                for tweak in [0, len as u64, u64::MAX] {
                    // SAFETY: the software round needs no CPU feature.
                    let expected =
                        unsafe { algorithm::hash::<Soft, EachLane, _>(bytes, keys, tweak) };
                    let (direct, kept) = (
                        hash_keyed(bytes, keys, tweak),
                        hash_keyed(bytes, &stored, tweak),
                    );
                    assert_eq!(
                        direct, expected,
                        "seed ({low}, {high}), {len} bytes, tweak {tweak}"
                    );
                    assert_eq!(
                        kept, expected,
                        "seed ({low}, {high}), {len} bytes, tweak {tweak}"
                    );
                }
            }
        }
    }
}

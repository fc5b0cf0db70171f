//! SIMD kernels with runtime dispatch, each with a portable scalar version that is its
//! specification:
//!
//! - [`base64`]: RFC 4648 encode and strict decode, standard and URL-safe alphabets
//!   (SSSE3, AVX2, AVX-512 VBMI, NEON);
//! - [`count`]: occurrences of a byte (SSE2, AVX2, AVX-512 BW, NEON);
//! - [`adler32`]: the zlib checksum, one-shot, streaming and combined (SSSE3, AVX2,
//!   AVX-512 BW, NEON);
//! - [`hash`]: a keyed hash for hash tables from AES rounds (AES-NI, ARMv8 AES, a
//!   software round elsewhere; the same values on all).
//!
//! Each kernel picks its implementation at its first call (runtime CPU detection with
//! the `std` feature, the compile-time target features without it) and keeps it;
//! [`features`] says which were picked and [`force_scalar`] (or the environment
//! variable `SIMD_FORCE_SCALAR=1`) makes them all scalar. Every SIMD path is tested
//! against the scalar one for every length up to 1024, random lengths up to 1 MiB and
//! every start offset below 64, on x86_64 and (under qemu) on aarch64.
//!
//! `#![no_std]`; the `alloc` feature adds `Vec`/`String` conveniences and `std`
//! (default) adds runtime detection.
//!
//! # Examples
//!
//! A `HashMap` of download counts by path, hashed with the AES hash (keys drawn at
//! random for each map, so that clients cannot pick colliding paths):
//!
//! ```
//! use std::collections::HashMap;
//! use ioserve_simd::hash::RandomState;
//!
//! let mut downloads: HashMap<String, u64, RandomState> =
//!     HashMap::with_hasher(RandomState::new());
//! for path in ["/iso/debian.iso", "/iso/debian.iso", "/index.html"] {
//!     *downloads.entry(path.to_string()).or_default() += 1;
//! }
//! assert_eq!(downloads["/iso/debian.iso"], 2);
//! ```
//!
//! The same hash in [`hashbrown`](https://docs.rs/hashbrown)'s map, as a `no_std`
//! service embeds it (fixed seeds from the caller, since without `std` there is no
//! source of randomness here), and the hash of bytes under a seed called directly:
//!
//! ```
//! use hashbrown::HashMap;
//! use ioserve_simd::hash::{hash_bytes, RandomState};
//!
//! // One seed per table (or tenant): the same key hashes differently in each.
//! let mut sessions: HashMap<u64, &str, RandomState> =
//!     HashMap::with_hasher(RandomState::with_seeds(0x5EED_0001, 0x5EED_0002));
//! sessions.insert(7, "alice");
//! assert_eq!(sessions.get(&7), Some(&"alice"));
//! assert_ne!(hash_bytes(b"alice", 1), hash_bytes(b"alice", 2));
//! ```
//!
//! base64 into and out of the caller's buffers, with no allocation (what the `alloc`
//! feature's `encode`/`decode` wrap):
//!
//! ```
//! use ioserve_simd::base64::STANDARD;
//!
//! let mut encoded = [0u8; 64];
//! let written = STANDARD.encode_to_slice(b"user:secret", &mut encoded).unwrap();
//! assert_eq!(&encoded[..written], b"dXNlcjpzZWNyZXQ=");
//!
//! let mut decoded = [0u8; 48];
//! let len = STANDARD.decode_to_slice(&encoded[..written], &mut decoded).unwrap();
//! assert_eq!(&decoded[..len], b"user:secret");
//!
//! // A buffer too small is an error that says how much is needed, never a panic.
//! let error = STANDARD.encode_to_slice(b"user:secret", &mut [0u8; 8]).unwrap_err();
//! assert_eq!((error.needed, error.available), (16, 8));
//! ```
//!
//! base64 in a service: a session token encoded for a cookie, and a client's
//! `Authorization: Basic` credentials decoded strictly (bad input is an error that says
//! where, not a guess):
//!
//! ```
//! use ioserve_simd::base64::{DecodeError, STANDARD, URL_SAFE_NO_PAD};
//!
//! let session = URL_SAFE_NO_PAD.encode([0xfb, 0xff, 0x01, 0x02]);
//! assert_eq!(session, "-_8BAg");
//!
//! let header = "Basic dXNlcjpzZWNyZXQ=";
//! let credentials = STANDARD.decode(header.strip_prefix("Basic ").unwrap())?;
//! assert_eq!(credentials, b"user:secret");
//!
//! let forged = STANDARD.decode("dXNlcj*x");
//! assert_eq!(forged, Err(DecodeError::InvalidByte { position: 6, byte: b'*' }));
//! # Ok::<(), DecodeError>(())
//! ```

#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod adler32;
pub mod base64;
pub mod count;
mod dispatch;
pub mod hash;
// The SIMD registers' traits; x86_64 builds without SSE (x86_64-unknown-none, whose
// kernel code may not touch vector registers) use the scalar kernels only.
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "aarch64"
))]
mod vector;

pub use dispatch::Implementation;

/// The implementation each kernel dispatches to on this CPU (choosing them now if no
/// call has yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// [`base64`].
    pub base64: Implementation,
    /// [`count::count`].
    pub count: Implementation,
    /// [`adler32`].
    pub adler32: Implementation,
    /// [`hash`].
    pub hash: Implementation,
}

/// Makes every kernel use its scalar implementation from the next call on, for tests
/// and for users who must (a CPU erratum, bit-exact reproduction of a bug report).
///
/// With the `std` feature, setting the environment variable `SIMD_FORCE_SCALAR` to a
/// value other than `0` before the first call does the same for a whole process, and
/// `SIMD_DISABLE=aes` (or any comma-separated list of CPU feature names such as
/// `avx512bw,avx2`) makes the kernels behave as on a CPU without those features.
///
/// The hash's in-line paths (keys of up to 16 bytes; every length in builds that
/// enable AES at compile time) do not dispatch and are not switched: they give the
/// same values as the scalar code.
pub fn force_scalar() {
    dispatch::set_scalar_forced();
    base64::reset();
    count::reset();
    adler32::reset();
    hash::reset();
}

/// Which implementation each kernel uses.
///
/// ```
/// let features = ioserve_simd::features();
/// println!("count: {}, hash: {}", features.count, features.hash);
/// ```
pub fn features() -> Features {
    Features {
        base64: base64::implementation(),
        count: count::implementation(),
        adler32: adler32::implementation(),
        hash: hash::implementation(),
    }
}

//! Base64 (RFC 4648) for the standard and URL-safe alphabets, padded or not, with
//! strict decoding.
//!
//! ```
//! use ioserve_simd::base64::{STANDARD, URL_SAFE_NO_PAD};
//!
//! let mut text = [0u8; 8];
//! let written = STANDARD.encode_to_slice(b"hello", &mut text).unwrap();
//! assert_eq!(&text[..written], b"aGVsbG8=");
//!
//! let mut bytes = [0u8; 5];
//! let read = URL_SAFE_NO_PAD.decode_to_slice(b"aGVsbG8", &mut bytes).unwrap();
//! assert_eq!(&bytes[..read], b"hello");
//!
//! // With the `alloc` feature:
//! assert_eq!(URL_SAFE_NO_PAD.encode([0xfb, 0xff]), "-_8");
//! assert_eq!(STANDARD.decode("+/8=").unwrap(), [0xfb, 0xff]);
//! ```
//!
//! Decoding is strict, so that one byte string has one encoding: it rejects characters
//! outside the alphabet, padding where the engine expects none (or missing where it
//! expects it, or in the middle), a length no encoding has, and set bits below the
//! last full byte ("QR==" decodes to the same byte as "QQ==" in lax decoders). Each
//! [`DecodeError`] gives the byte position in the input.
//!
//! The SIMD kernels convert whole blocks (12 to 48 input bytes per step), the last
//! one overlapping the one before where the input is not a whole number of blocks,
//! and leave the last partial group (and the padding) to the scalar code; a block with
//! any invalid character is handed to the scalar code too, which finds and reports
//! the exact position. Exceptions: the AVX2 kernel takes 16 to 24 bytes (22 to 32
//! characters) in one step with their partial group and padding, and the same step
//! decodes the last 30 or 31 characters of longer inputs that end in a partial group,
//! handing invalid or non-canonical input to the steps above; the AVX-512 VBMI
//! decoder's last step takes the partial group too; and the AVX-512 VBMI encoder
//! writes the partial group and the padding itself.

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod error;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod lanes;
mod padding;
mod scalar;
mod tables;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod x86_64;

use core::fmt;

#[cfg(target_arch = "aarch64")]
use crate::dispatch::arm_has;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::dispatch::x86_has;
use crate::dispatch::{Candidate, Choice};
use crate::Implementation;
pub use error::DecodeError;
pub use padding::Padding;
pub(crate) use tables::Tables;

/// The characters an engine writes for the 64 six-bit values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alphabet {
    /// `A-Z a-z 0-9 + /` (RFC 4648 §4).
    Standard,
    /// `A-Z a-z 0-9 - _` (RFC 4648 §5, "base64url"), safe in URLs and file names.
    UrlSafe,
}

impl Alphabet {
    fn tables(self) -> &'static Tables {
        match self {
            Alphabet::Standard => &tables::STANDARD,
            Alphabet::UrlSafe => &tables::URL_SAFE,
        }
    }
}

/// An encoder/decoder for one alphabet and padding rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Base64 {
    alphabet: Alphabet,
    padding: Padding,
}

/// The standard alphabet with padding (RFC 4648 §4; MIME, PEM, HTTP Basic auth).
pub const STANDARD: Base64 = Base64::new(Alphabet::Standard, Padding::Padded);
/// The standard alphabet without padding.
pub const STANDARD_NO_PAD: Base64 = Base64::new(Alphabet::Standard, Padding::Unpadded);
/// The URL-safe alphabet with padding (RFC 4648 §5).
pub const URL_SAFE: Base64 = Base64::new(Alphabet::UrlSafe, Padding::Padded);
/// The URL-safe alphabet without padding (JWT, most tokens in URLs).
pub const URL_SAFE_NO_PAD: Base64 = Base64::new(Alphabet::UrlSafe, Padding::Unpadded);

/// The output slice given to [`Base64::encode_to_slice`] is too short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OutputTooSmall {
    /// Characters the encoding needs.
    pub needed: usize,
    /// Bytes the output slice has.
    pub available: usize,
}

impl fmt::Display for OutputTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "base64 output buffer too small: the encoding needs {} bytes, the buffer has {}",
            self.needed, self.available
        )
    }
}

impl core::error::Error for OutputTooSmall {}

impl Base64 {
    /// An engine for `alphabet` and `padding`.
    pub const fn new(alphabet: Alphabet, padding: Padding) -> Base64 {
        Base64 { alphabet, padding }
    }

    /// The alphabet.
    pub const fn alphabet(&self) -> Alphabet {
        self.alphabet
    }

    /// The padding rule.
    pub const fn padding(&self) -> Padding {
        self.padding
    }

    /// The exact number of characters `input_len` bytes encode to.
    ///
    /// # Panics
    /// If the result overflows `usize`, which no slice's length (at most `isize::MAX`)
    /// can make happen.
    pub const fn encoded_len(&self, input_len: usize) -> usize {
        let groups = input_len / 3;
        let rest = input_len % 3;
        let tail = match (rest, self.padding) {
            (0, _) => 0,
            (_, Padding::Padded) => 4,
            (1, Padding::Unpadded) => 2,
            _ => 3,
        };
        match groups.checked_mul(4) {
            Some(full) => full + tail,
            None => panic!("base64 encoded length overflows usize"),
        }
    }

    /// An upper bound on the bytes `input_len` characters decode to, for sizing the
    /// output of [`Base64::decode_to_slice`]: exact for valid unpadded input, and at
    /// most 2 more (the padding) for valid padded input.
    pub const fn decoded_len_estimate(&self, input_len: usize) -> usize {
        input_len / 4 * 3 + (input_len % 4) * 3 / 4
    }

    /// Encodes `input` into the front of `output`, returning the characters written
    /// ([`Base64::encoded_len`]).
    #[inline]
    pub fn encode_to_slice(
        &self,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<usize, OutputTooSmall> {
        self.encode_to_slice_with(selected(), input, output)
    }

    /// Decodes `input` into the front of `output`, returning the bytes written. On an
    /// error the content of `output` is unspecified.
    #[inline]
    pub fn decode_to_slice(&self, input: &[u8], output: &mut [u8]) -> Result<usize, DecodeError> {
        self.decode_to_slice_with(selected(), input, output)
    }

    /// [`Base64::encode_to_slice`] through the given kernels (tests and benches).
    #[inline]
    #[doc(hidden)]
    pub fn encode_to_slice_with(
        &self,
        kernels: &Kernels,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<usize, OutputTooSmall> {
        let needed = self.encoded_len(input.len());
        let Some(output) = output.get_mut(..needed) else {
            return Err(OutputTooSmall {
                needed,
                available: output.len(),
            });
        };
        // SAFETY: `kernels` is the current choice or an entry of `implementations`
        // (no other `Kernels` can be made outside this module): functions whose CPU
        // features were checked, or the detect functions, which choose such ones.
        unsafe { kernels.run_encode(input, output, self.alphabet.tables(), self.padding) };
        Ok(needed)
    }

    /// [`Base64::decode_to_slice`] through the given kernels (tests and benches).
    #[inline]
    #[doc(hidden)]
    pub fn decode_to_slice_with(
        &self,
        kernels: &Kernels,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<usize, DecodeError> {
        let body = self.unpadded_body(input)?;
        // Exact here: the body has no padding and a valid length.
        let needed = self.decoded_len_estimate(body.len());
        let Some(output) = output.get_mut(..needed) else {
            return Err(DecodeError::OutputTooSmall {
                needed,
                available: output.len(),
            });
        };
        let tables = self.alphabet.tables();
        // The AVX-512 decoder also gives inputs this short to the AVX2 kernel.
        #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
        if matches!(
            kernels.implementation,
            Implementation::Avx2 | Implementation::Avx512Vbmi
        ) && x86_64::is_short_decode_avx2(body.len())
            // SAFETY: the build enables AVX2 in every function; the length is checked.
            && unsafe { x86_64::decode_short_avx2(body, output, tables) }
        {
            return Ok(needed);
        }
        // SAFETY: as in `encode_to_slice_with`.
        unsafe { (kernels.decode)(body, output, tables) }?;
        Ok(needed)
    }

    /// Checks the length and strips the padding the engine requires, leaving the
    /// characters that carry data (whose length is not a multiple of 4 plus 1).
    #[inline]
    fn unpadded_body<'a>(&self, input: &'a [u8]) -> Result<&'a [u8], DecodeError> {
        let length = input.len();
        match self.padding {
            Padding::Padded => {
                if !length.is_multiple_of(4) {
                    return Err(DecodeError::InvalidLength { length });
                }
                let pads = input
                    .iter()
                    .rev()
                    .take(2)
                    .take_while(|&&b| b == b'=')
                    .count();
                // A '=' before these is caught by the decoder as misplaced padding.
                Ok(&input[..length - pads])
            }
            Padding::Unpadded => {
                if length % 4 == 1 {
                    return Err(DecodeError::InvalidLength { length });
                }
                Ok(input)
            }
        }
    }

    /// Encodes `input` into a new `String`.
    #[cfg(feature = "alloc")]
    pub fn encode(&self, input: impl AsRef<[u8]>) -> alloc::string::String {
        let input = input.as_ref();
        let mut output = alloc::vec![0u8; self.encoded_len(input.len())];
        let written = self
            .encode_to_slice(input, &mut output)
            .expect("the buffer has encoded_len bytes");
        debug_assert_eq!(written, output.len());
        // The alphabets and '=' are ASCII.
        alloc::string::String::from_utf8(output).expect("base64 output is ASCII")
    }

    /// Decodes `input` into a new `Vec`.
    #[cfg(feature = "alloc")]
    pub fn decode(&self, input: impl AsRef<[u8]>) -> Result<alloc::vec::Vec<u8>, DecodeError> {
        let input = input.as_ref();
        let mut output = alloc::vec![0u8; self.decoded_len_estimate(input.len())];
        let written = self.decode_to_slice(input, &mut output)?;
        output.truncate(written);
        Ok(output)
    }
}

/// One implementation's kernels. An encode kernel fills `output`, exactly the encoded
/// length of `input` under the padding given; a decode kernel fills `output`, exactly
/// the decoded length of `body` (the input without its padding, of a length some
/// encoding has), or reports the first error with its position in `body`. The SIMD
/// kernels convert whole blocks and leave the partial group to the scalar code, and a
/// block with an invalid character too, which finds and reports the exact position
/// (the AVX2 kernel's short step and the AVX-512 VBMI decoder's last excepted: see the
/// module docs).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct Kernels {
    implementation: Implementation,
    encode: EncodeFn,
    decode: DecodeFn,
}

impl Kernels {
    /// Which implementation these are.
    pub fn implementation(&self) -> Implementation {
        self.implementation
    }

    /// Calls the encode kernel: in line where the build enables its CPU features at
    /// compile time (AVX-512 VBMI with `-C target-cpu=native` on such a CPU), else
    /// through the function pointer.
    ///
    /// # Safety
    /// The CPU must have the kernel's features: `self` is one of the statics of this
    /// module, picked by `choose` or `implementations`.
    #[inline(always)]
    unsafe fn run_encode(
        &self,
        input: &[u8],
        output: &mut [u8],
        tables: &Tables,
        padding: Padding,
    ) {
        // 16 to 24 bytes: the AVX2 kernel's short path, which the AVX-512 encoder takes
        // too, in line before the larger kernel (called, at 16 bytes it was 0.83x
        // base64-simd in the native build, a Zen 5 host).
        #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
        if matches!(
            self.implementation,
            Implementation::Avx2 | Implementation::Avx512Vbmi
        ) && x86_64::is_short_avx2(input.len())
        {
            // SAFETY: the build enables AVX2 in every function; the length is checked.
            return unsafe { x86_64::encode_short_avx2(input, output, tables) };
        }
        #[cfg(all(
            all(target_arch = "x86_64", target_feature = "sse2"),
            target_feature = "avx512vbmi",
            target_feature = "avx512bw",
            target_feature = "avx512vl"
        ))]
        if self.implementation == Implementation::Avx512Vbmi {
            // SAFETY: the build enables AVX-512 F, BW, VL and VBMI in every function.
            return unsafe { x86_64::encode_avx512vbmi(input, output, tables, padding) };
        }
        // SAFETY: as the caller promises.
        unsafe { (self.encode)(input, output, tables, padding) }
    }
}

type EncodeFn = unsafe fn(&[u8], &mut [u8], &Tables, Padding);
type DecodeFn = unsafe fn(&[u8], &mut [u8], &Tables) -> Result<(), DecodeError>;

const SCALAR: Kernels = Kernels {
    implementation: Implementation::Scalar,
    encode: scalar::encode,
    decode: scalar::decode_body,
};
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const SSSE3: Kernels = Kernels {
    implementation: Implementation::Ssse3,
    encode: x86_64::encode_ssse3,
    decode: x86_64::decode_ssse3,
};
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const AVX2: Kernels = Kernels {
    implementation: Implementation::Avx2,
    encode: x86_64::encode_avx2,
    decode: x86_64::decode_avx2,
};
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const AVX512_VBMI: Kernels = Kernels {
    implementation: Implementation::Avx512Vbmi,
    encode: x86_64::encode_avx512vbmi,
    decode: x86_64::decode_avx512vbmi,
};
#[cfg(target_arch = "aarch64")]
const NEON: Kernels = Kernels {
    implementation: Implementation::Neon,
    encode: aarch64::encode_neon,
    decode: aarch64::decode_neon,
};

/// Where calls go: the detect kernels until the first call has chosen.
static CHOICE: Choice<Kernels> = Choice::new(&DETECT);
static DETECT: Candidate<Kernels> = Candidate::detect(Kernels {
    implementation: Implementation::Scalar,
    encode: detect_encode,
    decode: detect_decode,
});

/// Chooses (once), then encodes with the choice.
unsafe fn detect_encode(input: &[u8], output: &mut [u8], tables: &Tables, padding: Padding) {
    let chosen = CHOICE.choose(CANDIDATES).function;
    // SAFETY: `choose` only picks kernels whose CPU features are present.
    unsafe { (chosen.encode)(input, output, tables, padding) }
}

/// Chooses (once), then decodes with the choice.
unsafe fn detect_decode(
    body: &[u8],
    output: &mut [u8],
    tables: &Tables,
) -> Result<(), DecodeError> {
    let chosen = CHOICE.choose(CANDIDATES).function;
    // SAFETY: `choose` only picks kernels whose CPU features are present.
    unsafe { (chosen.decode)(body, output, tables) }
}

/// The kernels calls go to now.
#[inline(always)]
fn selected() -> &'static Kernels {
    &CHOICE.current().function
}

/// Forgets the choice; the next call chooses again.
pub(crate) fn reset() {
    CHOICE.reset();
}

/// The implementation calls go to (choosing it if no call has yet).
pub fn implementation() -> Implementation {
    CHOICE.implementation(CANDIDATES)
}

/// The kernels, fastest first, for the dispatcher and [`implementations`].
static CANDIDATES: &[Candidate<Kernels>] = &[
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx512Vbmi,
        available: || x86_has!("avx512vbmi") && x86_has!("avx512bw") && x86_has!("avx512vl"),
        function: AVX512_VBMI,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Avx2,
        available: || x86_has!("avx2"),
        function: AVX2,
    },
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    Candidate {
        implementation: Implementation::Ssse3,
        available: || x86_has!("ssse3"),
        function: SSSE3,
    },
    #[cfg(target_arch = "aarch64")]
    Candidate {
        implementation: Implementation::Neon,
        available: || arm_has!("neon"),
        function: NEON,
    },
    Candidate {
        implementation: Implementation::Scalar,
        available: || true,
        function: SCALAR,
    },
];

/// Every implementation this CPU can run, for tests and benches.
#[doc(hidden)]
#[cfg(feature = "alloc")]
pub fn implementations() -> alloc::vec::Vec<&'static Kernels> {
    crate::dispatch::all_available(CANDIDATES)
        .into_iter()
        .map(|candidate| &candidate.function)
        .collect()
}

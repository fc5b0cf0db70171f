//! Why a decode failed.

use core::fmt;

/// Why a decode failed; positions are byte offsets into the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// A byte that is neither in the alphabet nor padding.
    InvalidByte {
        /// Where it is.
        position: usize,
        /// The byte.
        byte: u8,
    },
    /// An input length no encoding has: a multiple of four plus one, or (padded) not a
    /// multiple of four.
    InvalidLength {
        /// The input's length.
        length: usize,
    },
    /// A `=` where none may be: in the middle, more than two, or any at all when the
    /// engine is unpadded.
    InvalidPadding {
        /// Where the first misplaced `=` is.
        position: usize,
    },
    /// The last character carries bits below the last whole byte that are not zero, so
    /// the input is not the canonical encoding of any bytes.
    NonCanonicalTrailingBits {
        /// Where that character is.
        position: usize,
    },
    /// The output slice is shorter than the decoded bytes.
    OutputTooSmall {
        /// Bytes the input decodes to.
        needed: usize,
        /// Bytes the output slice has.
        available: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::InvalidByte { position, byte } => write!(
                f,
                "invalid base64 byte {:?} (0x{byte:02x}) at position {position}: \
                 allowed are the 64 characters of the alphabet and '=' padding at the end",
                char::from(byte)
            ),
            DecodeError::InvalidLength { length } => write!(
                f,
                "invalid base64 length {length}: padded input must be a multiple of 4 \
                 characters and unpadded input must not be a multiple of 4 plus 1"
            ),
            DecodeError::InvalidPadding { position } => write!(
                f,
                "invalid base64 padding at position {position}: '=' is allowed only as the \
                 last one or two characters, and only when the engine is padded"
            ),
            DecodeError::NonCanonicalTrailingBits { position } => write!(
                f,
                "non-canonical base64 at position {position}: the last character's bits \
                 below the last whole byte must be zero"
            ),
            DecodeError::OutputTooSmall { needed, available } => write!(
                f,
                "base64 output buffer too small: the input decodes to {needed} bytes, \
                 the buffer has {available}"
            ),
        }
    }
}

impl core::error::Error for DecodeError {}

//! The padding rule of an encoding.

/// Whether encodings end in `=` up to a multiple of four characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// Encode with `=` padding and require it when decoding.
    Padded,
    /// Encode without padding and reject `=` when decoding.
    Unpadded,
}

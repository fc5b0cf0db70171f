//! A span of a file's bytes: what a strategy sends, and what a range request asks for.

/// A span of a file: a satisfiable, non-empty byte range of a representation of known
/// length, or a whole file (which may be empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteRange {
    /// Offset of the first byte.
    pub start: u64,
    /// Number of bytes; at least 1 for ranges from a `Range` header.
    pub len: u64,
}

impl ByteRange {
    /// The offset of the last byte, as written in `Content-Range`.
    ///
    /// Only meaningful for non-empty ranges.
    pub fn last(&self) -> u64 {
        self.start + self.len - 1
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

//! The specification: one comparison per byte.

/// How many bytes of `haystack` equal `needle`.
pub fn count(haystack: &[u8], needle: u8) -> usize {
    haystack.iter().filter(|&&byte| byte == needle).count()
}

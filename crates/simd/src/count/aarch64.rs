//! The aarch64 instance of the count (`generic.rs`): NEON, 16 bytes per vector; the
//! scalar loop for haystacks shorter than one.

use super::generic;
use crate::vector::aarch64::Neon;

/// NEON, 16 bytes per vector; the scalar loop for haystacks shorter than one.
///
/// # Safety
/// The CPU must support NEON (every aarch64 Linux CPU does).
#[target_feature(enable = "neon")]
pub(super) unsafe fn count_neon(haystack: &[u8], needle: u8) -> usize {
    if haystack.len() < 16 {
        return super::scalar::count(haystack, needle);
    }
    // SAFETY: this function's target features are Neon's.
    unsafe { generic::count::<Neon>(haystack, needle) }
}

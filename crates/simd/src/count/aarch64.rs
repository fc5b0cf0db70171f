//! The aarch64 instance of the count (`generic.rs`): NEON, 16 bytes per vector, then
//! the scalar loop.

use super::generic;
use crate::vector::aarch64::Neon;

/// NEON, 16 bytes per vector.
///
/// # Safety
/// The CPU must support NEON (every aarch64 Linux CPU does).
#[target_feature(enable = "neon")]
pub(super) unsafe fn count_neon(haystack: &[u8], needle: u8) -> usize {
    // SAFETY: this function's target features are Neon's.
    let (total, counted) = unsafe { generic::count::<Neon>(haystack, needle) };
    total + super::scalar::count(&haystack[counted..], needle)
}

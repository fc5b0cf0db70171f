//! SIMD registers behind small traits, so that `count`, `adler32` and the SSSE3/AVX2
//! base64 are each written once and instantiated per register width, as `hash` is over
//! its `Block` (memchr's shape). The traits are layered by what a kernel needs:
//!
//! - [`Vector`]: a register of `BYTES` bytes that loads (every instance);
//! - [`Bytes`]: byte-wise comparison, addition, subtraction and sum (count; SSE2, AVX2,
//!   NEON);
//! - `Sums`: widening sums of bytes (adler32; SSSE3, AVX2, AVX-512 BW);
//! - `Lanes`: byte shuffles and multiplies within 128-bit lanes, and stores (base64;
//!   SSSE3, AVX2).
//!
//! `Sums` and `Lanes` exist on x86_64 only.
//!
//! Every method is `unsafe`: the CPU must have the instance's features, which the
//! kernel's dispatcher checked before calling the `#[target_feature]` function that
//! instantiates it. Each method carries the instance's features and `#[inline]`, and
//! the generic kernels are `#[inline(always)]`, so that a whole kernel compiles into
//! one function with those features. Kernels that are different algorithms (AVX-512
//! VBMI base64, NEON's `ld3`/`tbl`/`st4` base64 and NEON adler32's column sums) are
//! written directly against their intrinsics.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) mod x86_64;

/// A register of `BYTES` bytes.
pub(crate) trait Vector: Copy {
    /// Bytes in the register.
    const BYTES: usize;

    /// All bits zero.
    ///
    /// # Safety
    /// The CPU must support the instance's features (as for every method here).
    unsafe fn zero() -> Self;

    /// `BYTES` bytes from `from`, with no alignment requirement.
    ///
    /// # Safety
    /// As for [`Vector::zero`], and `from` must be valid for reading `BYTES` bytes.
    unsafe fn load(from: *const u8) -> Self;
}

/// Byte-wise operations.
pub(crate) trait Bytes: Vector {
    /// Every byte `byte`.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn splat(byte: u8) -> Self;

    /// 0xFF in each byte where the two are equal, else 0.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn eq_u8(self, other: Self) -> Self;

    /// Byte-wise wrapping addition.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn add_u8(self, other: Self) -> Self;

    /// Byte-wise wrapping subtraction.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn sub_u8(self, other: Self) -> Self;

    /// Bitwise AND.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn and(self, other: Self) -> Self;

    /// The sum of all the bytes, as unsigned numbers.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn sum_u8(self) -> usize;
}

/// 32 zero bytes then 32 bytes of 0xFF, for [`keep_last`].
static LAST_BYTES_MASK: [u8; 64] = {
    let mut mask = [0u8; 64];
    let mut i = 32;
    while i < 64 {
        mask[i] = 0xFF;
        i += 1;
    }
    mask
};

/// `vector` with all but its last `n` bytes (0 to `V::BYTES`) zero: for one more
/// vector ending at the end of an input, whose first bytes an earlier vector has
/// already taken.
///
/// # Safety
/// As for [`Vector::zero`].
#[inline(always)]
pub(crate) unsafe fn keep_last<V: Bytes>(vector: V, n: usize) -> V {
    const { assert!(V::BYTES <= 32, "the mask covers vectors of up to 32 bytes") };
    assert!(n <= V::BYTES, "a vector has V::BYTES bytes");
    // SAFETY: the caller guarantees V's instructions; the window of V::BYTES bytes
    // starts at 32 - V::BYTES + n <= 32, within the mask's 64.
    unsafe {
        let mask = V::load(LAST_BYTES_MASK.as_ptr().add(32 - V::BYTES + n));
        vector.and(mask)
    }
}

/// Widening sums, for checksums.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) trait Sums: Vector {
    /// Lane-wise wrapping addition of 32-bit lanes.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn add_u32(self, other: Self) -> Self;

    /// Each 32-bit lane shifted left by `bits` (below 32).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn shl_u32(self, bits: u32) -> Self;

    /// The bytes of each 64-bit lane summed into that lane (x86's `psadbw` against
    /// zero), so that the 32-bit lanes hold sums of at most 8 × 255.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn sum_bytes_u64(self) -> Self;

    /// Lane-wise wrapping addition of 16-bit lanes.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn add_u16(self, other: Self) -> Self;

    /// Each 16-bit lane: the dot product of its 2 bytes (unsigned) with the 2 bytes of
    /// `weights` in the same positions (signed), saturated to 16 signed bits (x86's
    /// `pmaddubsw`; with weights below 128 and `w0 + w1` below 129 it never saturates).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn dot_u8_i8_pairs(self, weights: Self) -> Self;

    /// Each 32-bit lane: the sum of its two 16-bit lanes, as signed numbers (x86's
    /// `pmaddwd` against ones).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn widen_i16_pairs(self) -> Self;

    /// Each 32-bit lane: the dot product of its 4 bytes (unsigned) with the 4 bytes
    /// of `weights` in the same positions (signed, below 128, adjacent pairs summing
    /// to at most 128), as a 32-bit sum.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    #[inline(always)]
    unsafe fn dot_u8_i8(self, weights: Self) -> Self {
        // SAFETY: the caller guarantees V's instructions.
        unsafe { self.dot_u8_i8_pairs(weights).widen_i16_pairs() }
    }

    /// The sum of the 32-bit lanes, as unsigned numbers, modulo 2^32 (callers keep
    /// the true sum below that).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn sum_u32(self) -> u32;
}

/// Operations within each 128-bit lane (x86's byte shuffle and 16-bit multiplies), for
/// base64.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) trait Lanes: Bytes {
    /// The register's bytes to `to`, with no alignment requirement.
    ///
    /// # Safety
    /// As for [`Vector::zero`], and `to` must be valid for writing `BYTES` bytes.
    unsafe fn store(self, to: *mut u8);

    /// The 16 bytes of `table` in every 128-bit lane.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn broadcast(table: &[u8; 16]) -> Self;

    /// Every 32-bit lane `word`.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn splat_u32(word: u32) -> Self;

    /// Bytes input to base64's encoder: 12 bytes at the start of each 128-bit lane,
    /// taken from consecutive 12-byte groups at `from` (the last lane's 4 extra
    /// bytes are read too, and ignored by the caller).
    ///
    /// # Safety
    /// As for [`Vector::zero`], and `from` must be valid for reading
    /// [`Lanes::GROUPS_READ`] bytes.
    unsafe fn load_groups(from: *const u8) -> Self;

    /// How many bytes [`Lanes::load_groups`] reads and [`Lanes::store_groups`]
    /// writes: 12 per lane, plus 4.
    const GROUPS_READ: usize = Self::BYTES / 16 * 12 + 4;

    /// How many bytes before `from` [`Lanes::load_groups_behind`] starts reading.
    const BEHIND: usize;

    /// The groups [`Lanes::load_groups`] takes from `from`, but as one load of
    /// `BYTES` bytes starting [`Lanes::BEHIND`] bytes before `from`, each lane's 12
    /// bytes starting where [`Lanes::behind_skips`] says (AVX2: 4 bytes behind, so
    /// lane 0's groups start at its byte 4 and lane 1's at its byte 0, one load
    /// where `load_groups` needs two; SSSE3: `load_groups` itself).
    ///
    /// # Safety
    /// As for [`Vector::zero`], and the `BEHIND + GROUPS_READ` bytes from
    /// `from - BEHIND` must be valid for reading.
    unsafe fn load_groups_behind(from: *const u8) -> Self;

    /// In every byte of each 128-bit lane, where that lane's groups start in
    /// [`Lanes::load_groups_behind`]'s register.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn behind_skips() -> Self;

    /// Stores the first 12 bytes of each 128-bit lane as consecutive 12-byte groups
    /// at `to`, the inverse of [`Lanes::load_groups`] (the last lane's 4 other
    /// bytes are written too, after the groups).
    ///
    /// # Safety
    /// As for [`Vector::zero`], and `to` must be valid for writing
    /// [`Lanes::GROUPS_READ`] bytes.
    unsafe fn store_groups(self, to: *mut u8);

    /// Stores the same groups as [`Lanes::store_groups`], but ending at `end` and
    /// writing nothing else: for the last step of an output, where the bytes after
    /// the groups are not the caller's to write (a store of the whole register
    /// through a buffer and a copy stalled on the forwarding of the two stores).
    ///
    /// # Safety
    /// As for [`Vector::zero`], and the `BYTES / 4 * 3` bytes before `end` must be
    /// valid for writing.
    unsafe fn store_groups_ending(self, end: *mut u8);

    /// Byte `i` of each lane is byte `indices[i] & 15` of `self`'s same lane, or zero
    /// where the index's top bit is set (`pshufb`).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn shuffle(self, indices: Self) -> Self;

    /// Bitwise OR.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn or(self, other: Self) -> Self;

    /// Bitwise XOR.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn xor(self, other: Self) -> Self;

    /// Byte-wise saturating subtraction of unsigned bytes.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn saturating_sub_u8(self, other: Self) -> Self;

    /// 0xFF in each byte where `self > other` as signed bytes, else 0.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn gt_i8(self, other: Self) -> Self;

    /// Each 32-bit lane shifted right by 4 bits.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn shr4_u32(self) -> Self;

    /// The high 16 bits of each unsigned 16-bit product.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn mul_high_u16(self, other: Self) -> Self;

    /// The low 16 bits of each 16-bit product.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn mul_low_u16(self, other: Self) -> Self;

    /// Adjacent unsigned bytes times signed bytes of `other`, pairs added into 16-bit
    /// lanes (saturating; `pmaddubsw`).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn mul_add_pairs_u8(self, other: Self) -> Self;

    /// Adjacent signed 16-bit products added into 32-bit lanes (`pmaddwd`).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn mul_add_pairs_i16(self, other: Self) -> Self;

    /// Whether every bit is zero.
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn is_zero(self) -> bool;

    /// `self`, through an empty assembly block: the compiler no longer knows the
    /// value, so it cannot rewrite an operation on it for that value (no
    /// instruction is emitted, and the value stays in its register).
    ///
    /// # Safety
    /// As for [`Vector::zero`].
    unsafe fn opaque(self) -> Self;
}

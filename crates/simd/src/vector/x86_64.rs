//! The x86_64 instances: [`V128`] (SSE2, and SSSE3 for its `Sums` and `Lanes`),
//! [`V256`] (AVX2) and [`V512`] (AVX-512 F and BW, `Sums` only).

use core::arch::asm;
use core::arch::x86_64::*;

use super::{Bytes, Lanes, Sums, Vector};

/// A 128-bit register.
#[derive(Clone, Copy)]
pub(crate) struct V128(__m128i);

/// A 256-bit register.
#[derive(Clone, Copy)]
pub(crate) struct V256(__m256i);

/// A 512-bit register.
#[derive(Clone, Copy)]
pub(crate) struct V512(__m512i);

/// The sum of the four 32-bit lanes of `v`, modulo 2^32.
#[inline]
#[target_feature(enable = "sse2")]
fn sum_u32x4(v: __m128i) -> u32 {
    let pairs = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
    let total = _mm_add_epi32(pairs, _mm_shuffle_epi32::<0b10_11_00_01>(pairs));
    _mm_cvtsi128_si32(total) as u32
}

impl Vector for V128 {
    const BYTES: usize = 16;

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn zero() -> V128 {
        V128(_mm_setzero_si128())
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn load(from: *const u8) -> V128 {
        // SAFETY: the caller guarantees 16 readable bytes; loadu has no alignment
        // requirement.
        V128(unsafe { _mm_loadu_si128(from.cast()) })
    }
}

impl Bytes for V128 {
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn splat(byte: u8) -> V128 {
        V128(_mm_set1_epi8(byte as i8))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn eq_u8(self, other: V128) -> V128 {
        V128(_mm_cmpeq_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn add_u8(self, other: V128) -> V128 {
        V128(_mm_add_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn sub_u8(self, other: V128) -> V128 {
        V128(_mm_sub_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn and(self, other: V128) -> V128 {
        V128(_mm_and_si128(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn sum_u8(self) -> usize {
        // Two 64-bit sums of 8 bytes each (at most 2040, so 16 bits suffice).
        let sums = _mm_sad_epu8(self.0, _mm_setzero_si128());
        _mm_cvtsi128_si32(sums) as usize + _mm_extract_epi16::<4>(sums) as usize
    }
}

impl Sums for V128 {
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn add_u32(self, other: V128) -> V128 {
        V128(_mm_add_epi32(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn shl_u32(self, bits: u32) -> V128 {
        V128(_mm_sll_epi32(self.0, _mm_cvtsi32_si128(bits as i32)))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn sum_bytes_u64(self) -> V128 {
        V128(_mm_sad_epu8(self.0, _mm_setzero_si128()))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn add_u16(self, other: V128) -> V128 {
        V128(_mm_add_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn dot_u8_i8_pairs(self, weights: V128) -> V128 {
        V128(_mm_maddubs_epi16(self.0, weights.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn widen_i16_pairs(self) -> V128 {
        V128(_mm_madd_epi16(self.0, _mm_set1_epi16(1)))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn sum_u32(self) -> u32 {
        sum_u32x4(self.0)
    }
}

impl Lanes for V128 {
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn store(self, to: *mut u8) {
        // SAFETY: the caller guarantees 16 writable bytes; storeu has no alignment
        // requirement.
        unsafe { _mm_storeu_si128(to.cast(), self.0) }
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn broadcast(table: &[u8; 16]) -> V128 {
        // SAFETY: the table is 16 readable bytes.
        unsafe { V128::load(table.as_ptr()) }
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn splat_u32(word: u32) -> V128 {
        V128(_mm_set1_epi32(word as i32))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn load_groups(from: *const u8) -> V128 {
        // SAFETY: the caller guarantees GROUPS_READ (16) readable bytes.
        unsafe { V128::load(from) }
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn store_groups(self, to: *mut u8) {
        // SAFETY: the caller guarantees GROUPS_READ (16) writable bytes.
        unsafe { self.store(to) }
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn store_groups_ending(self, end: *mut u8) {
        // Bytes 0-7 to end - 12 and bytes 4-11 to end - 8 (the same values where they
        // overlap).
        // SAFETY: the caller guarantees the 12 bytes before `end` writable; these are
        // 8 at end - 12 and 8 at end - 8; storel has no alignment requirement.
        unsafe {
            _mm_storel_epi64(end.sub(12).cast(), self.0);
            _mm_storel_epi64(end.sub(8).cast(), _mm_srli_si128::<4>(self.0));
        }
    }

    const BEHIND: usize = 0;

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn load_groups_behind(from: *const u8) -> V128 {
        // SAFETY: the caller guarantees GROUPS_READ (16) readable bytes at `from`.
        unsafe { V128::load_groups(from) }
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn behind_skips() -> V128 {
        V128(_mm_setzero_si128())
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn shuffle(self, indices: V128) -> V128 {
        V128(_mm_shuffle_epi8(self.0, indices.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn or(self, other: V128) -> V128 {
        V128(_mm_or_si128(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn xor(self, other: V128) -> V128 {
        V128(_mm_xor_si128(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn saturating_sub_u8(self, other: V128) -> V128 {
        V128(_mm_subs_epu8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn gt_i8(self, other: V128) -> V128 {
        V128(_mm_cmpgt_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn shr4_u32(self) -> V128 {
        V128(_mm_srli_epi32::<4>(self.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn mul_high_u16(self, other: V128) -> V128 {
        V128(_mm_mulhi_epu16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn mul_low_u16(self, other: V128) -> V128 {
        V128(_mm_mullo_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn mul_add_pairs_u8(self, other: V128) -> V128 {
        V128(_mm_maddubs_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn mul_add_pairs_i16(self, other: V128) -> V128 {
        V128(_mm_madd_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn is_zero(self) -> bool {
        // SSE4.1's ptest is not in SSSE3: compare with zero and gather the bytes.
        _mm_movemask_epi8(_mm_cmpeq_epi8(self.0, _mm_setzero_si128())) == 0xFFFF
    }

    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn opaque(mut self) -> V128 {
        // SAFETY: the block is empty: it reads and writes nothing but this register.
        unsafe {
            asm!(
                "/* {0} */",
                inout(xmm_reg) self.0,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        self
    }
}

impl V256 {
    /// The register whose low 128-bit lane is `low` and high lane `high`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn from_halves(low: __m128i, high: __m128i) -> V256 {
        V256(_mm256_set_m128i(high, low))
    }

    /// The low and the high 128-bit lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn halves(self) -> (__m128i, __m128i) {
        (
            _mm256_castsi256_si128(self.0),
            _mm256_extracti128_si256::<1>(self.0),
        )
    }
}

impl Vector for V256 {
    const BYTES: usize = 32;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn zero() -> V256 {
        V256(_mm256_setzero_si256())
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load(from: *const u8) -> V256 {
        // SAFETY: the caller guarantees 32 readable bytes; loadu has no alignment
        // requirement.
        V256(unsafe { _mm256_loadu_si256(from.cast()) })
    }
}

impl Bytes for V256 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn splat(byte: u8) -> V256 {
        V256(_mm256_set1_epi8(byte as i8))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn eq_u8(self, other: V256) -> V256 {
        V256(_mm256_cmpeq_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn add_u8(self, other: V256) -> V256 {
        V256(_mm256_add_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sub_u8(self, other: V256) -> V256 {
        V256(_mm256_sub_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn and(self, other: V256) -> V256 {
        V256(_mm256_and_si256(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sum_u8(self) -> usize {
        // Four 64-bit sums of 8 bytes each, the two halves added.
        let sums = _mm256_sad_epu8(self.0, _mm256_setzero_si256());
        let half = _mm_add_epi64(
            _mm256_castsi256_si128(sums),
            _mm256_extracti128_si256::<1>(sums),
        );
        _mm_cvtsi128_si32(half) as usize + _mm_extract_epi16::<4>(half) as usize
    }
}

impl Sums for V256 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn add_u32(self, other: V256) -> V256 {
        V256(_mm256_add_epi32(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn shl_u32(self, bits: u32) -> V256 {
        V256(_mm256_sll_epi32(self.0, _mm_cvtsi32_si128(bits as i32)))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sum_bytes_u64(self) -> V256 {
        V256(_mm256_sad_epu8(self.0, _mm256_setzero_si256()))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn add_u16(self, other: V256) -> V256 {
        V256(_mm256_add_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot_u8_i8_pairs(self, weights: V256) -> V256 {
        V256(_mm256_maddubs_epi16(self.0, weights.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn widen_i16_pairs(self) -> V256 {
        V256(_mm256_madd_epi16(self.0, _mm256_set1_epi16(1)))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sum_u32(self) -> u32 {
        sum_u32x4(_mm_add_epi32(
            _mm256_castsi256_si128(self.0),
            _mm256_extracti128_si256::<1>(self.0),
        ))
    }
}

impl Lanes for V256 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store(self, to: *mut u8) {
        // SAFETY: the caller guarantees 32 writable bytes; storeu has no alignment
        // requirement.
        unsafe { _mm256_storeu_si256(to.cast(), self.0) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn broadcast(table: &[u8; 16]) -> V256 {
        // SAFETY: the table is 16 readable bytes; loadu has no alignment requirement.
        let lane = unsafe { _mm_loadu_si128(table.as_ptr().cast()) };
        V256(_mm256_broadcastsi128_si256(lane))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn splat_u32(word: u32) -> V256 {
        V256(_mm256_set1_epi32(word as i32))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_groups(from: *const u8) -> V256 {
        // SAFETY: the caller guarantees GROUPS_READ (28) readable bytes: 16 at `from`
        // and 16 at `from + 12`.
        let (first, second) = unsafe {
            (
                _mm_loadu_si128(from.cast()),
                _mm_loadu_si128(from.add(12).cast()),
            )
        };
        V256(_mm256_set_m128i(second, first))
    }

    const BEHIND: usize = 4;

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_groups_behind(from: *const u8) -> V256 {
        // SAFETY: the caller guarantees BEHIND + GROUPS_READ (32) readable bytes from
        // `from - 4`; loadu has no alignment requirement.
        V256(unsafe { _mm256_loadu_si256(from.sub(4).cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn behind_skips() -> V256 {
        // Lane 0 (bytes from - 4 .. from + 12) starts its groups 4 bytes in; lane 1
        // (from + 12 .. from + 28) at once.
        V256(_mm256_set_epi64x(
            0,
            0,
            0x0404_0404_0404_0404,
            0x0404_0404_0404_0404,
        ))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_groups(self, to: *mut u8) {
        // Two 16-byte stores, 12 bytes apart (a cross-lane permute to one store was
        // slower: vpermd, and a blend LLVM added to zero its top).
        // SAFETY: the caller guarantees GROUPS_READ (28) writable bytes: 16 at `to`
        // and 16 at `to + 12`.
        unsafe {
            _mm_storeu_si128(to.cast(), _mm256_castsi256_si128(self.0));
            _mm_storeu_si128(to.add(12).cast(), _mm256_extracti128_si256::<1>(self.0));
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_groups_ending(self, end: *mut u8) {
        // The groups are 32-bit words 0-2 and 4-6: words [0, 1, 2, 4] go to end - 24
        // and [2, 4, 5, 6] to end - 16 (the same values where they overlap).
        let words = _mm256_permutevar8x32_epi32(self.0, _mm256_setr_epi32(0, 1, 2, 4, 2, 4, 5, 6));
        // SAFETY: the caller guarantees the 24 bytes before `end` writable; these are
        // 16 at end - 24 and 16 at end - 16; storeu has no alignment requirement.
        unsafe {
            _mm_storeu_si128(end.sub(24).cast(), _mm256_castsi256_si128(words));
            _mm_storeu_si128(end.sub(16).cast(), _mm256_extracti128_si256::<1>(words));
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn shuffle(self, indices: V256) -> V256 {
        V256(_mm256_shuffle_epi8(self.0, indices.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn or(self, other: V256) -> V256 {
        V256(_mm256_or_si256(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn xor(self, other: V256) -> V256 {
        V256(_mm256_xor_si256(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn saturating_sub_u8(self, other: V256) -> V256 {
        V256(_mm256_subs_epu8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn gt_i8(self, other: V256) -> V256 {
        V256(_mm256_cmpgt_epi8(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn shr4_u32(self) -> V256 {
        V256(_mm256_srli_epi32::<4>(self.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_high_u16(self, other: V256) -> V256 {
        // Not `_mm256_mulhi_epu16`, which core::arch writes as a widening multiply and
        // a shift for LLVM to match back to `vpmulhuw`: with base64's constant
        // multipliers (powers of two per half) LLVM turned it into 32-bit variable
        // shifts instead, six instructions in place of one, and the encoder ran at
        // half speed; with the multiplier hidden behind `black_box` it still widened
        // to 32-bit lanes around the multiply (vpmovzxwd, vpackusdw, vpermq).
        let high: __m256i;
        // SAFETY: vpmulhuw (AVX2, enabled here) reads and writes these three
        // registers only.
        unsafe {
            asm!(
                "vpmulhuw {high}, {a}, {b}",
                high = lateout(ymm_reg) high,
                a = in(ymm_reg) self.0,
                b = in(ymm_reg) other.0,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        V256(high)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_low_u16(self, other: V256) -> V256 {
        V256(_mm256_mullo_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_add_pairs_u8(self, other: V256) -> V256 {
        V256(_mm256_maddubs_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul_add_pairs_i16(self, other: V256) -> V256 {
        V256(_mm256_madd_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn is_zero(self) -> bool {
        _mm256_testz_si256(self.0, self.0) == 1
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn opaque(mut self) -> V256 {
        // SAFETY: the block is empty: it reads and writes nothing but this register.
        unsafe {
            asm!(
                "/* {0} */",
                inout(ymm_reg) self.0,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        self
    }
}

impl Vector for V512 {
    const BYTES: usize = 64;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn zero() -> V512 {
        V512(_mm512_setzero_si512())
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load(from: *const u8) -> V512 {
        // SAFETY: the caller guarantees 64 readable bytes; loadu has no alignment
        // requirement.
        V512(unsafe { _mm512_loadu_si512(from.cast()) })
    }
}

impl Sums for V512 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn add_u32(self, other: V512) -> V512 {
        V512(_mm512_add_epi32(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn shl_u32(self, bits: u32) -> V512 {
        V512(_mm512_sll_epi32(self.0, _mm_cvtsi32_si128(bits as i32)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn sum_bytes_u64(self) -> V512 {
        V512(_mm512_sad_epu8(self.0, _mm512_setzero_si512()))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn add_u16(self, other: V512) -> V512 {
        V512(_mm512_add_epi16(self.0, other.0))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn dot_u8_i8_pairs(self, weights: V512) -> V512 {
        V512(_mm512_maddubs_epi16(self.0, weights.0))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn widen_i16_pairs(self) -> V512 {
        V512(_mm512_madd_epi16(self.0, _mm512_set1_epi16(1)))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn sum_u32(self) -> u32 {
        _mm512_reduce_add_epi32(self.0) as u32
    }
}

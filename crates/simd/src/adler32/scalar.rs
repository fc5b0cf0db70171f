//! The specification (RFC 1950 §9): two sums modulo 65521, updated per byte.

/// The modulus, the largest prime below 2^16.
pub const MOD: u32 = 65521;

/// Updates the two halves (`a`, `b`) of a running checksum with `bytes`.
pub fn update(mut a: u32, mut b: u32, bytes: &[u8]) -> (u32, u32) {
    for &byte in bytes {
        a = (a + u32::from(byte)) % MOD;
        b = (b + a) % MOD;
    }
    (a, b)
}

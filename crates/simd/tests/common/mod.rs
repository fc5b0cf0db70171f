//! Inputs shared by the simd test files.

/// A deterministic byte stream (xorshift64*), each byte reduced modulo `alphabet`
/// unless it is 0.
pub fn bytes(len: usize, seed: u64, alphabet: u8) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let value = (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
            if alphabet == 0 {
                value
            } else {
                value % alphabet
            }
        })
        .collect()
}

/// Random bytes over the whole range.
#[allow(dead_code, reason = "not every test file uses it")]
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    bytes(len, seed, 0)
}

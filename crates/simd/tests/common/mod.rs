//! Inputs shared by the simd test files.

/// A deterministic byte stream (fastrand seeded with `seed`), each byte below
/// `alphabet` unless it is 0.
pub fn bytes(len: usize, seed: u64, alphabet: u8) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len)
        .map(|_| {
            if alphabet == 0 {
                rng.u8(..)
            } else {
                rng.u8(..alphabet)
            }
        })
        .collect()
}

/// Random bytes over the whole range.
#[allow(dead_code, reason = "not every test file uses it")]
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    bytes(len, seed, 0)
}

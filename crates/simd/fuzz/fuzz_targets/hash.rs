//! The hash: every implementation (AES-NI, ARMv8 AES) equals the software AES round
//! for any bytes and seed (the first 8 bytes).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (seed, bytes) = data.split_at(data.len().min(8));
    let mut seed_bytes = [0u8; 8];
    seed_bytes[..seed.len()].copy_from_slice(seed);
    let seed = u64::from_le_bytes(seed_bytes);
    let implementations = ioserve_simd::hash::implementations();
    let expected = (implementations[0].1)(bytes, seed);
    for (implementation, function) in &implementations[1..] {
        assert_eq!(function(bytes, seed), expected, "{implementation}");
    }
});

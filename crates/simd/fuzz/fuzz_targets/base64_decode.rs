//! Decoding arbitrary bytes: every implementation gives the scalar result (value or
//! error with its position), and whatever decodes re-encodes to exactly the input
//! (strict decoding: one encoding per byte string).
#![no_main]

use ioserve_simd::base64::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let implementations = ioserve_simd::base64::implementations();
    for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
        let decode = |kernels| {
            let mut output = vec![0u8; engine.decoded_len_estimate(input.len())];
            engine
                .decode_to_slice_with(kernels, input, &mut output)
                .map(|written| output[..written].to_vec())
        };
        let expected = decode(implementations[0]);
        for &kernels in &implementations[1..] {
            assert_eq!(decode(kernels), expected, "{}", kernels.implementation());
        }
        if let Ok(bytes) = expected {
            assert_eq!(engine.encode(&bytes).as_bytes(), input);
        }
    }
});

//! Encoding arbitrary bytes: every implementation gives the scalar characters, and
//! they decode back to the input.
#![no_main]

use ioserve_simd::base64::{STANDARD, URL_SAFE_NO_PAD};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let implementations = ioserve_simd::base64::implementations();
    for engine in [STANDARD, URL_SAFE_NO_PAD] {
        let encode = |kernels| {
            let mut output = vec![0u8; engine.encoded_len(input.len())];
            engine
                .encode_to_slice_with(kernels, input, &mut output)
                .expect("encoded_len bytes are enough");
            output
        };
        let expected = encode(implementations[0]);
        for &kernels in &implementations[1..] {
            assert_eq!(encode(kernels), expected, "{}", kernels.implementation());
        }
        assert_eq!(engine.decode(&expected).as_deref(), Ok(input));
    }
});

//! Byte count: every implementation equals the scalar one (the first byte is the
//! needle, the rest the haystack).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&needle, haystack)) = data.split_first() else {
        return;
    };
    let expected = ioserve_simd::count::scalar::count(haystack, needle);
    for (implementation, function) in ioserve_simd::count::implementations() {
        // SAFETY: implementations() lists only what this CPU runs.
        let got = unsafe { function(haystack, needle) };
        assert_eq!(got, expected, "{implementation}");
    }
});

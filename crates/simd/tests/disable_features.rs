//! `SIMD_DISABLE` makes the kernels dispatch as on a CPU without the named features.
//! One test in its own process, since the variable is read once per process.

use ioserve_simd::Implementation;

#[test]
fn disabled_features_are_not_dispatched_to() {
    // SAFETY (of the call, unsafe from edition 2024): this is the only test in this
    // process, so no other thread reads the environment concurrently.
    std::env::set_var("SIMD_DISABLE", "AES, avx512bw,avx512vbmi");
    let features = ioserve_simd::features();
    assert_eq!(features.hash, Implementation::Scalar, "aes is disabled");
    for (kernel, implementation) in [
        ("base64", features.base64),
        ("count", features.count),
        ("adler32", features.adler32),
    ] {
        assert!(
            !matches!(
                implementation,
                Implementation::Avx512Bw | Implementation::Avx512Vbmi
            ),
            "{kernel} uses {implementation}"
        );
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        assert_eq!(features.count, Implementation::Avx2);
        assert_eq!(features.base64, Implementation::Avx2);
    }
    #[cfg(target_arch = "aarch64")]
    assert_eq!(features.base64, Implementation::Neon);
    // The values do not depend on the path.
    // The dispatched (software) hash gives the software round's value.
    let software = ioserve_simd::hash::implementations()[0].1;
    assert_eq!(
        ioserve_simd::hash::hash_bytes(b"key", 42),
        software(b"key", 42)
    );
    assert_eq!(ioserve_simd::base64::STANDARD.encode("hello"), "aGVsbG8=");
    assert_eq!(ioserve_simd::count::count(b"banana", b'a'), 3);
}

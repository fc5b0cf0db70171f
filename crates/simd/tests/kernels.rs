//! Every SIMD implementation against the scalar specification: every length 0..=1024 at
//! every start offset 0..64, random lengths up to 1 MiB, and inputs chosen to reach the
//! kernels' counter limits.

use ioserve_simd::{adler32, count, hash, Implementation};

mod common;

use common::bytes;

/// Lengths up to 1 MiB, random but fixed, plus the block edges.
fn long_lengths() -> Vec<usize> {
    if cfg!(miri) {
        // Miri interprets every byte: the block edges only.
        return vec![4095, 5552, 5553];
    }
    let mut lengths = vec![
        // count's one-counter bound: 255 vectors of 16 (SSE2, NEON) and 32 (AVX2).
        4080,
        4081,
        8159,
        8160,
        8161,
        4095,
        4096,
        4097,
        5551,
        5552,
        5553,
        16_320,
        16_321,
        65_536,
        1 << 20,
    ];
    lengths.extend(bytes(24, 99, 0).chunks(3).map(|c| {
        (usize::from(c[0]) << 12 | usize::from(c[1]) << 4 | usize::from(c[2]) >> 4) % (1 << 20)
    }));
    lengths
}

#[test]
fn count_matches_scalar_at_every_length_and_offset() {
    let data = bytes(1024 + 64, 1, 4);
    for (implementation, function) in count::implementations() {
        for offset in 0..64 {
            for len in 0..=1024 {
                let input = &data[offset..offset + len];
                // SAFETY: implementations() lists only what this CPU runs.
                let got = unsafe { function(input, 2) };
                assert_eq!(
                    got,
                    count::scalar::count(input, 2),
                    "{implementation} len {len} offset {offset}"
                );
            }
        }
    }
}

/// The entry point, which counts short haystacks in line (x86_64) and dispatches the
/// rest, on both sides of where it switches.
#[test]
fn count_entry_point_matches_scalar_at_every_length() {
    let data = bytes(512 + 64, 3, 4);
    for offset in [0, 1, 15, 33] {
        for len in 0..=512 {
            let input = &data[offset..offset + len];
            assert_eq!(
                count::count(input, 1),
                count::scalar::count(input, 1),
                "len {len} offset {offset}"
            );
        }
    }
}

#[test]
fn count_matches_scalar_on_long_inputs_and_full_counters() {
    for len in long_lengths() {
        let random = bytes(len, len as u64, 3);
        let all_needle = vec![7u8; len];
        for (implementation, function) in count::implementations() {
            // SAFETY: implementations() lists only what this CPU runs.
            let (got_random, got_all) = unsafe { (function(&random, 1), function(&all_needle, 7)) };
            assert_eq!(
                got_random,
                count::scalar::count(&random, 1),
                "{implementation} len {len}"
            );
            assert_eq!(got_all, len, "{implementation} all-needle len {len}");
        }
    }
}

#[test]
fn adler32_matches_scalar_at_every_length_and_offset() {
    // Past 1 KiB, where the AVX-512 kernel starts taking 64-byte chunks.
    let data = bytes(1200 + 64, 2, 0);
    for (implementation, function) in adler32::implementations() {
        for offset in 0..64 {
            for len in 0..=1200 {
                let input = &data[offset..offset + len];
                // Start from a state other than (1, 0) so both sums are exercised.
                let want = adler32::scalar::update(12_345, 54_321, input);
                // SAFETY: implementations() lists only what this CPU runs.
                let got = unsafe { function(12_345, 54_321, input) };
                assert_eq!(got, want, "{implementation} len {len} offset {offset}");
            }
        }
    }
}

#[test]
fn adler32_matches_scalar_on_long_and_saturating_inputs() {
    // The long lengths, and every short one around the loop-free paths (one or two
    // chunks of 16 or 32 bytes, up to 64 bytes, whose first chunk is weighted up to
    // 64) and the first loops after them.
    for len in long_lengths().into_iter().chain(0..=160) {
        let random = bytes(len, len as u64 + 5, 0);
        let all_ff = vec![0xFFu8; len];
        for input in [&random, &all_ff] {
            // The largest reduced state, and the largest a checksum's halves can hold
            // unreduced (Adler32::from_checksum(0xFFFF_FFFF)).
            for start in [65_520, 0xFFFF] {
                let want = adler32::scalar::update(start, start, input);
                for (implementation, function) in adler32::implementations() {
                    // SAFETY: implementations() lists only what this CPU runs.
                    let got = unsafe { function(start, start, input) };
                    assert_eq!(got, want, "{implementation} len {len} start {start}");
                }
                // The entry point, which takes short inputs in line in builds that
                // enable AVX2.
                let mut running = adler32::Adler32::from_checksum(start << 16 | start);
                running.update(input);
                assert_eq!(
                    running.finish(),
                    want.1 << 16 | want.0,
                    "entry point len {len} start {start}"
                );
            }
        }
    }
}

#[test]
fn adler32_equals_zlib() {
    // Known values (zlib's adler32()).
    let vectors: [(&[u8], u32); 5] = [
        (b"", 1),
        (b"a", 0x0062_0062),
        (b"abc", 0x024D_0127),
        (b"Wikipedia", 0x11E6_0398),
        (b"The quick brown fox jumps over the lazy dog", 0x5BDC_0FDA),
    ];
    for (input, want) in vectors {
        assert_eq!(
            adler32::adler32(input),
            want,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    // Random inputs against the adler2 crate (miniz_oxide's): every length up to past
    // the widest kernel's block (64 bytes) and its loops' tails; under Miri, which runs
    // only the byte-by-byte scalar path, a few lengths are enough.
    let short = if cfg!(miri) { 40 } else { 300 };
    for len in long_lengths().into_iter().chain(0..short) {
        let input = bytes(len, len as u64 + 11, 0);
        let mut reference = adler2::Adler32::new();
        reference.write_slice(&input);
        assert_eq!(adler32::adler32(&input), reference.checksum(), "len {len}");
    }
}

#[test]
fn adler32_streams_and_combines() {
    let len = if cfg!(miri) { 6_000 } else { 100_000 };
    let input = bytes(len, 3, 0);
    let whole = adler32::adler32(&input);
    for split in [0, 1, 31, 4096, 65_537, 100_000]
        .into_iter()
        .filter(|&split| split <= len)
    {
        let (x, y) = input.split_at(split);
        let mut running = adler32::Adler32::new();
        running.update(x);
        let resumed = adler32::Adler32::from_checksum(running.finish());
        running.update(y);
        assert_eq!(running.finish(), whole, "split {split}");
        let mut continued = resumed;
        continued.update(y);
        assert_eq!(continued.finish(), whole);
        let combined = adler32::combine(adler32::adler32(x), adler32::adler32(y), y.len() as u64);
        assert_eq!(combined, whole, "combine at {split}");
    }
}

#[test]
fn dispatch_reports_and_forces_scalar() {
    let before = ioserve_simd::features();
    #[cfg(target_arch = "x86_64")]
    assert_ne!(before.count, Implementation::Scalar);
    #[cfg(target_arch = "aarch64")]
    assert_eq!(before.adler32, Implementation::Neon);
    ioserve_simd::force_scalar();
    let after = ioserve_simd::features();
    assert_eq!(
        after,
        ioserve_simd::Features {
            base64: Implementation::Scalar,
            count: Implementation::Scalar,
            adler32: Implementation::Scalar,
            hash: Implementation::Scalar,
        }
    );
    // Forced scalar still computes the same values.
    assert_eq!(adler32::adler32(b"Wikipedia"), 0x11E6_0398);
    assert_eq!(count::count(b"banana", b'a'), 3);
    assert_eq!(ioserve_simd::base64::STANDARD.encode("hello"), "aGVsbG8=");
}

/// Every path a kernel may dispatch to on this CPU is one its tests run by name: the
/// implementation chosen is among those `implementations()` lists.
#[test]
fn the_dispatched_implementations_are_tested_by_name() {
    let features = ioserve_simd::features();
    let listed: [(&str, Implementation, Vec<Implementation>); 4] = [
        (
            "base64",
            features.base64,
            ioserve_simd::base64::implementations()
                .iter()
                .map(|kernels| kernels.implementation())
                .collect(),
        ),
        (
            "hash",
            features.hash,
            hash::implementations().iter().map(|(i, _)| *i).collect(),
        ),
        (
            "count",
            features.count,
            count::implementations().iter().map(|(i, _)| *i).collect(),
        ),
        (
            "adler32",
            features.adler32,
            adler32::implementations().iter().map(|(i, _)| *i).collect(),
        ),
    ];
    for (kernel, chosen, tested) in listed {
        assert!(
            tested.contains(&chosen),
            "{kernel}: {chosen} not in {tested:?}"
        );
    }
}

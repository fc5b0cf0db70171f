//! Seeds 002 and 003: the simd crate's kernels beside the crates a user would pick
//! instead, the strongest of each kind included (simdutf for base64, gxhash, xxh3 and
//! foldhash for the hash, bytecount with runtime dispatch, zlib-rs and simd-adler32 for
//! adler32), at sizes from 16 B to 1 MiB in steps of 4x, with a memcpy of the same
//! bytes as the limit. Throughput counts the binary bytes (the encoder's input, the
//! decoder's output) so that encode and decode rows compare the same amount of data.
//!
//! `cargo xtask bench` runs this twice: a portable build and a `-C target-cpu=native`
//! build, where the peers that decide at compile time (gxhash, ahash's AES path,
//! zlib-rs's AVX-512 path) get the CPU's features; ours dispatches at run time in both.

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::hash::BuildHasher;
use std::hint::black_box;

use base64::Engine as _;
use benches::{hash_with, KeyStream};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

/// 16 B to 1 MiB in steps of 4x: small keys, a line, a page, a chunk, a file.
const SIZES: [usize; 9] = [
    16,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];

/// Random bytes, fixed per size.
fn input(size: usize) -> Vec<u8> {
    let mut keys = KeyStream::new(size as u64);
    (0..size).map(|_| (keys.next_u64() >> 56) as u8).collect()
}

/// A human label for a size ("16B", "64KiB").
fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

fn memcpy(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    size: usize,
) {
    let source = input(size);
    let mut target = vec![0u8; size];
    group.bench_with_input(
        BenchmarkId::new("memcpy", label(size)),
        &source,
        |b, source| b.iter(|| target.copy_from_slice(black_box(source))),
    );
}

fn base64_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("base64_encode");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let bytes = input(size);
        let mut text = vec![0u8; ioserve_simd::base64::STANDARD.encoded_len(size)];
        let id = |name| BenchmarkId::new(name, label(size));
        memcpy(&mut group, size);
        group.bench_function(id("simd"), |b| {
            b.iter(|| ioserve_simd::base64::STANDARD.encode_to_slice(black_box(&bytes), &mut text))
        });
        group.bench_function(id("base64"), |b| {
            b.iter(|| {
                base64::engine::general_purpose::STANDARD.encode_slice(black_box(&bytes), &mut text)
            })
        });
        group.bench_function(id("base64-simd"), |b| {
            b.iter(|| {
                base64_simd::STANDARD
                    .encode(black_box(&bytes), base64_simd::Out::from_slice(&mut text))
                    .len()
            })
        });
        group.bench_function(id("simdutf"), |b| {
            b.iter(|| {
                let input = black_box(&bytes);
                assert!(text.len() >= simdutf::base64_length_from_binary(input.len(), DEFAULT));
                // SAFETY: input is input.len() readable bytes; text has room for the
                // encoded length (asserted); the two do not overlap.
                unsafe {
                    simdutf::binary_to_base64(
                        input.as_ptr(),
                        input.len(),
                        text.as_mut_ptr(),
                        DEFAULT,
                    )
                }
            })
        });
    }
    group.finish();
}

/// simdutf's standard alphabet with padding, as ours.
const DEFAULT: simdutf::Base64Options = simdutf::Base64Options::Default;

fn base64_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("base64_decode");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let text = ioserve_simd::base64::STANDARD
            .encode(input(size))
            .into_bytes();
        let mut bytes = vec![0u8; size];
        let id = |name| BenchmarkId::new(name, label(size));
        memcpy(&mut group, size);
        group.bench_function(id("simd"), |b| {
            b.iter(|| {
                ioserve_simd::base64::STANDARD
                    .decode_to_slice(black_box(&text), &mut bytes)
                    .unwrap()
            })
        });
        group.bench_function(id("base64"), |b| {
            b.iter(|| {
                base64::engine::general_purpose::STANDARD
                    .decode_slice(black_box(&text), &mut bytes)
                    .unwrap()
            })
        });
        group.bench_function(id("base64-simd"), |b| {
            b.iter(|| {
                base64_simd::STANDARD
                    .decode(black_box(&text), base64_simd::Out::from_slice(&mut bytes))
                    .unwrap()
                    .len()
            })
        });
        let mut room = vec![0u8; size + 3];
        group.bench_function(id("simdutf"), |b| {
            b.iter(|| {
                let input = black_box(&text);
                // SAFETY: input is input.len() readable bytes.
                let most = unsafe {
                    simdutf::maximal_binary_length_from_base64(input.as_ptr(), input.len())
                };
                assert!(room.len() >= most);
                // SAFETY: room has the maximal decoded length (asserted); no overlap.
                // Strict: padding required and unused bits zero, as ours.
                let result = unsafe {
                    simdutf::base64_to_binary(
                        input.as_ptr(),
                        input.len(),
                        room.as_mut_ptr(),
                        DEFAULT,
                        simdutf::LastChunkHandlingOptions::Strict,
                    )
                };
                assert_eq!(result.error, simdutf::ErrorCode::Success);
                result.count
            })
        });
    }
    group.finish();
}

/// A hash as a `HashMap` with byte-slice keys calls it: `hash_one(key)`, which
/// hashes `[u8]` as the length (`write_usize`) and then the bytes.
fn hash_as_map(builder: &impl BuildHasher, bytes: &[u8]) -> u64 {
    builder.hash_one(bytes)
}

/// Every hash two ways: `NAME` directly (bytes and seed, or one write and finish
/// where the crate has no such call) and `NAME-map` as a HashMap calls it.
fn hash(c: &mut Criterion) {
    let mut group = c.benchmark_group("hash");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let bytes = input(size);
        let id = |name| BenchmarkId::new(name, label(size));
        memcpy(&mut group, size);
        group.bench_function(id("simd"), |b| {
            b.iter(|| ioserve_simd::hash::hash_bytes(black_box(&bytes), 42))
        });
        let ours = ioserve_simd::hash::RandomState::with_seed(42);
        group.bench_function(id("simd-map"), |b| {
            b.iter(|| hash_as_map(&ours, black_box(&bytes)))
        });
        // The variant whose quality matches ours: fast's single multiply fails the
        // quality suite of crates/simd/tests (see the README).
        let foldhash_quality = foldhash::quality::FixedState::with_seed(42);
        group.bench_function(id("foldhash-quality"), |b| {
            b.iter(|| hash_with(&foldhash_quality, black_box(&bytes)))
        });
        group.bench_function(id("foldhash-quality-map"), |b| {
            b.iter(|| hash_as_map(&foldhash_quality, black_box(&bytes)))
        });
        let foldhash = foldhash::fast::FixedState::with_seed(42);
        group.bench_function(id("foldhash"), |b| {
            b.iter(|| hash_with(&foldhash, black_box(&bytes)))
        });
        group.bench_function(id("foldhash-map"), |b| {
            b.iter(|| hash_as_map(&foldhash, black_box(&bytes)))
        });
        let ahash = ahash::RandomState::with_seeds(1, 2, 3, 4);
        group.bench_function(id("ahash"), |b| {
            b.iter(|| hash_with(&ahash, black_box(&bytes)))
        });
        group.bench_function(id("ahash-map"), |b| {
            b.iter(|| hash_as_map(&ahash, black_box(&bytes)))
        });
        // gxhash refuses to build without AES enabled at compile time
        // (RUSTFLAGS="-C target-cpu=native"); its rows appear when it is.
        #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
        {
            group.bench_function(id("gxhash"), |b| {
                b.iter(|| gxhash::gxhash64(black_box(&bytes), 42))
            });
            let gxhash = gxhash::GxBuildHasher::with_seed(42);
            group.bench_function(id("gxhash-map"), |b| {
                b.iter(|| hash_as_map(&gxhash, black_box(&bytes)))
            });
        }
        group.bench_function(id("xxh3"), |b| {
            b.iter(|| xxhash_rust::xxh3::xxh3_64_with_seed(black_box(&bytes), 42))
        });
        let sip = std::collections::hash_map::RandomState::new();
        group.bench_function(id("std-siphash-map"), |b| {
            b.iter(|| hash_as_map(&sip, black_box(&bytes)))
        });
    }
    group.finish();
}

fn adler32(c: &mut Criterion) {
    let mut group = c.benchmark_group("adler32");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let bytes = input(size);
        let id = |name| BenchmarkId::new(name, label(size));
        memcpy(&mut group, size);
        group.bench_function(id("simd"), |b| {
            b.iter(|| ioserve_simd::adler32::adler32(black_box(&bytes)))
        });
        group.bench_function(id("adler2"), |b| {
            b.iter(|| adler2::adler32_slice(black_box(&bytes)))
        });
        group.bench_function(id("simd-adler32"), |b| {
            b.iter(|| simd_adler32::adler32(black_box(&bytes.as_slice())))
        });
        group.bench_function(id("zlib-rs"), |b| {
            b.iter(|| zlib_rs::adler32::adler32(1, black_box(&bytes)))
        });
    }
    group.finish();
}

fn count(c: &mut Criterion) {
    let mut group = c.benchmark_group("count");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        // One byte in 16 matches: memchr-style searches stop often, as in real text.
        let bytes: Vec<u8> = input(size).iter().map(|b| b % 16).collect();
        let id = |name| BenchmarkId::new(name, label(size));
        memcpy(&mut group, size);
        group.bench_function(id("simd"), |b| {
            b.iter(|| ioserve_simd::count::count(black_box(&bytes), 0))
        });
        group.bench_function(id("bytecount"), |b| {
            b.iter(|| bytecount::count(black_box(&bytes), 0))
        });
        group.bench_function(id("memchr-iter"), |b| {
            b.iter(|| memchr::memchr_iter(0, black_box(&bytes)).count())
        });
        group.bench_function(id("naive"), |b| {
            b.iter(|| black_box(&bytes).iter().filter(|&&b| b == 0).count())
        });
    }
    group.finish();
}

criterion_group! {
    name = kernels;
    config = benches::kernel_config();
    targets = base64_encode, base64_decode, hash, adler32, count
}

/// With `SIMD_BENCH_IMPLEMENTATIONS` set to a file, writes there which implementation
/// each kernel runs in this process and build (`kernel=name` lines), for the header of
/// `cargo xtask bench --simd-table`: what the dispatch chose on this CPU, less the
/// features `SIMD_DISABLE` names. The hash in a build that enables AES at compile time
/// calls its AES path without the dispatcher, and says so.
fn record_implementations() {
    let Some(path) = std::env::var_os("SIMD_BENCH_IMPLEMENTATIONS") else {
        return;
    };
    let features = ioserve_simd::features();
    let hash = if cfg!(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_feature = "aes"
    )) {
        "aes (compiled in)".to_owned()
    } else {
        features.hash.to_string()
    };
    let text = format!(
        "base64={}\ncount={}\nadler32={}\nhash={hash}\n",
        features.base64, features.count, features.adler32
    );
    if let Err(error) = std::fs::write(&path, text) {
        panic!("cannot write {}: {error}", path.to_string_lossy());
    }
}

fn main() {
    record_implementations();
    kernels();
    Criterion::default().configure_from_args().final_summary();
}

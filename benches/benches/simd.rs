//! Seeds 002 and 003: the simd crate's kernels beside the crates a user would pick
//! instead, at 16 B, 64 B, 1 KiB, 64 KiB and 1 MiB, with a memcpy of the same bytes as
//! the limit. Throughput counts the binary bytes (the encoder's input, the decoder's
//! output) so that encode and decode rows compare the same amount of data.

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;

use base64::Engine as _;
use benches::KeyStream;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SIZES: [usize; 5] = [16, 64, 1 << 10, 64 << 10, 1 << 20];

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
    }
    group.finish();
}

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
    }
    group.finish();
}

/// One `write` of the bytes and `finish`, through a `BuildHasher` built once.
fn hash_with(builder: &impl BuildHasher, bytes: &[u8]) -> u64 {
    let mut hasher = builder.build_hasher();
    hasher.write(bytes);
    hasher.finish()
}

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
        group.bench_function(id("simd-hasher"), |b| {
            b.iter(|| hash_with(&ours, black_box(&bytes)))
        });
        let sip = std::collections::hash_map::RandomState::new();
        group.bench_function(id("std-siphash"), |b| {
            b.iter(|| hash_with(&sip, black_box(&bytes)))
        });
        let ahash = ahash::RandomState::with_seeds(1, 2, 3, 4);
        group.bench_function(id("ahash"), |b| {
            b.iter(|| hash_with(&ahash, black_box(&bytes)))
        });
        let foldhash = foldhash::fast::FixedState::with_seed(42);
        group.bench_function(id("foldhash"), |b| {
            b.iter(|| hash_with(&foldhash, black_box(&bytes)))
        });
        // gxhash refuses to build without AES enabled at compile time
        // (RUSTFLAGS="-C target-cpu=native"); the row appears when it is.
        #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
        group.bench_function(id("gxhash"), |b| {
            b.iter(|| gxhash::gxhash64(black_box(&bytes), 42))
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
criterion_main!(kernels);

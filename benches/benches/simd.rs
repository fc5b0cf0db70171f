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
//!
//! Two ways to run the same cases: under criterion (the default: `cargo bench -p
//! benches --bench simd [-- FILTER]`), and in interleaved rounds (`SIMD_BENCH_ROUNDS=N`,
//! which `cargo xtask bench --simd-table` uses; see [`interleaved`]).

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

use std::hash::BuildHasher;
use std::hint::black_box;
use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::time::{Duration, Instant};

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

/// Bytes that start at a 64-byte boundary. Every function of a row reads the same
/// input (one buffer, shared) and writes a buffer of its own, all so aligned: copies
/// at the allocator's whims put one function's 32-byte loads across cache lines and
/// not another's, and the row measured that (count at 16 KiB: 0.91x bytecount in one
/// run, 1.11x in the next).
struct Aligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> Aligned {
        let storage = vec![0u8; len + 63];
        let start = storage.as_ptr().align_offset(64);
        Aligned {
            storage,
            start,
            len,
        }
    }

    /// A copy of `bytes`, shared by the cases of a row.
    fn shared(bytes: &[u8]) -> Rc<Aligned> {
        let mut copy = Aligned::zeroed(bytes.len());
        copy.copy_from_slice(bytes);
        Rc::new(copy)
    }
}

impl Deref for Aligned {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// A human label for a size ("16B", "64KiB").
fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

/// One function of a group at one size: its name and a batch of calls, timed. The
/// loop of each is compiled for its own closure (no indirect call per iteration), and
/// both ways of running the bench time the same batches: criterion's `iter_custom`
/// and the interleaved rounds ([`interleaved`]).
struct Case {
    function: &'static str,
    batch: Box<dyn FnMut(u64) -> Duration>,
}

/// `function`, timed as `iters` calls of `call`, each result through `black_box` (as
/// criterion's `iter` does).
fn case<R>(function: &'static str, mut call: impl FnMut() -> R + 'static) -> Case {
    Case {
        function,
        batch: Box::new(move |iters| {
            let started = Instant::now();
            for _ in 0..iters {
                black_box(call());
            }
            started.elapsed()
        }),
    }
}

/// A copy of `size` bytes: the limit, not a peer.
fn memcpy(size: usize) -> Case {
    let source = Aligned::shared(&input(size));
    let mut target = Aligned::zeroed(size);
    case("memcpy", move || target.copy_from_slice(black_box(&source)))
}

/// simdutf's standard alphabet with padding, as ours.
const DEFAULT: simdutf::Base64Options = simdutf::Base64Options::Default;

fn base64_encode(size: usize) -> Vec<Case> {
    let bytes = Aligned::shared(&input(size));
    let text = || Aligned::zeroed(ioserve_simd::base64::STANDARD.encoded_len(size));
    vec![
        memcpy(size),
        // Each case gives the length written (unwrapped, as the decoders' are): a
        // `Result` handed to `black_box` whole went through memory, two 8-byte stores
        // read back as one 16-byte load, a failed store forwarding that cost the
        // native build's encoder 3.4 ns a call (7-8 ns at 16 bytes where the call
        // took 3-4, a Zen 5 host), a cost of the bench and not of the encoder.
        case("simd", {
            let (bytes, mut text) = (Rc::clone(&bytes), text());
            move || {
                ioserve_simd::base64::STANDARD
                    .encode_to_slice(black_box(&bytes), &mut text)
                    .unwrap()
            }
        }),
        case("base64", {
            let (bytes, mut text) = (Rc::clone(&bytes), text());
            move || {
                base64::engine::general_purpose::STANDARD
                    .encode_slice(black_box(&bytes[..]), &mut text)
                    .unwrap()
            }
        }),
        case("base64-simd", {
            let (bytes, mut text) = (Rc::clone(&bytes), text());
            move || {
                base64_simd::STANDARD
                    .encode(black_box(&bytes), base64_simd::Out::from_slice(&mut text))
                    .len()
            }
        }),
        case("simdutf", {
            let mut text = text();
            move || {
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
            }
        }),
    ]
}

fn base64_decode(size: usize) -> Vec<Case> {
    let text = Aligned::shared(
        ioserve_simd::base64::STANDARD
            .encode(input(size))
            .as_bytes(),
    );
    let bytes = || Aligned::zeroed(size);
    vec![
        memcpy(size),
        case("simd", {
            let (text, mut bytes) = (Rc::clone(&text), bytes());
            move || {
                ioserve_simd::base64::STANDARD
                    .decode_to_slice(black_box(&text), &mut bytes)
                    .unwrap()
            }
        }),
        case("base64", {
            let (text, mut bytes) = (Rc::clone(&text), bytes());
            move || {
                base64::engine::general_purpose::STANDARD
                    .decode_slice(black_box(&text[..]), &mut bytes)
                    .unwrap()
            }
        }),
        case("base64-simd", {
            let (text, mut bytes) = (Rc::clone(&text), bytes());
            move || {
                base64_simd::STANDARD
                    .decode(black_box(&text), base64_simd::Out::from_slice(&mut bytes))
                    .unwrap()
                    .len()
            }
        }),
        case("simdutf", {
            let mut room = Aligned::zeroed(size + 3);
            move || {
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
            }
        }),
    ]
}

/// A hash as a `HashMap` with byte-slice keys calls it: `hash_one(key)`, which
/// hashes `[u8]` as the length (`write_usize`) and then the bytes.
fn hash_as_map(builder: &impl BuildHasher, bytes: &[u8]) -> u64 {
    builder.hash_one(bytes)
}

/// Every hash two ways: `NAME` directly (bytes and seed, or one write and finish
/// where the crate has no such call) and `NAME-map` as a HashMap calls it.
fn hash(size: usize) -> Vec<Case> {
    let bytes = Aligned::shared(&input(size));
    // A case hashing `bytes` with `hash(builder, bytes)`; generic over the function,
    // not a pointer to it, so that the hash is compiled into the case's loop.
    fn with<B: 'static>(
        function: &'static str,
        bytes: &Rc<Aligned>,
        builder: B,
        hash: impl Fn(&B, &[u8]) -> u64 + 'static,
    ) -> Case {
        let bytes = Rc::clone(bytes);
        case(function, move || hash(&builder, black_box(&bytes)))
    }
    let ours = ioserve_simd::hash::RandomState::with_seed(42);
    // The variant whose quality matches ours: fast's single multiply fails the
    // quality suite of crates/simd/tests (see the README).
    let foldhash_quality = foldhash::quality::FixedState::with_seed(42);
    let foldhash = foldhash::fast::FixedState::with_seed(42);
    let ahash = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let mut cases = vec![
        memcpy(size),
        with("simd", &bytes, (), |(), bytes| {
            ioserve_simd::hash::hash_bytes(bytes, 42)
        }),
        with("simd-map", &bytes, ours, hash_as_map),
        with(
            "foldhash-quality",
            &bytes,
            foldhash_quality.clone(),
            hash_with,
        ),
        with(
            "foldhash-quality-map",
            &bytes,
            foldhash_quality,
            hash_as_map,
        ),
        with("foldhash", &bytes, foldhash.clone(), hash_with),
        with("foldhash-map", &bytes, foldhash, hash_as_map),
        with("ahash", &bytes, ahash.clone(), hash_with),
        with("ahash-map", &bytes, ahash, hash_as_map),
    ];
    // gxhash refuses to build without AES enabled at compile time
    // (RUSTFLAGS="-C target-cpu=native"); its rows appear when it is.
    #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
    {
        cases.push(with("gxhash", &bytes, (), |(), bytes| {
            gxhash::gxhash64(bytes, 42)
        }));
        let gxhash = gxhash::GxBuildHasher::with_seed(42);
        cases.push(with("gxhash-map", &bytes, gxhash, hash_as_map));
    }
    cases.push(with("xxh3", &bytes, (), |(), bytes| {
        xxhash_rust::xxh3::xxh3_64_with_seed(bytes, 42)
    }));
    let sip = std::collections::hash_map::RandomState::new();
    cases.push(with("std-siphash-map", &bytes, sip, hash_as_map));
    cases
}

/// A case calling `call` on the row's shared input; generic over the function, not a
/// pointer to it, so that the call is compiled into the case's loop.
fn on_bytes<R>(
    function: &'static str,
    bytes: &Rc<Aligned>,
    call: impl Fn(&[u8]) -> R + 'static,
) -> Case {
    let bytes = Rc::clone(bytes);
    case(function, move || call(black_box(&bytes)))
}

fn adler32(size: usize) -> Vec<Case> {
    let bytes = Aligned::shared(&input(size));
    vec![
        memcpy(size),
        on_bytes("simd", &bytes, ioserve_simd::adler32::adler32),
        on_bytes("adler2", &bytes, adler2::adler32_slice),
        on_bytes("simd-adler32", &bytes, |bytes| {
            simd_adler32::adler32(&bytes)
        }),
        on_bytes("zlib-rs", &bytes, |bytes| {
            zlib_rs::adler32::adler32(1, bytes)
        }),
    ]
}

fn count(size: usize) -> Vec<Case> {
    // One byte in 16 matches: memchr-style searches stop often, as in real text.
    let bytes: Vec<u8> = input(size).iter().map(|b| b % 16).collect();
    let bytes = Aligned::shared(&bytes);
    vec![
        memcpy(size),
        on_bytes("simd", &bytes, |bytes| ioserve_simd::count::count(bytes, 0)),
        on_bytes("bytecount", &bytes, |bytes| bytecount::count(bytes, 0)),
        on_bytes("memchr-iter", &bytes, |bytes| {
            memchr::memchr_iter(0, bytes).count()
        }),
        on_bytes("naive", &bytes, |bytes| {
            bytes.iter().filter(|&&b| b == 0).count()
        }),
    ]
}

/// A group's cases at a size.
type Cases = fn(usize) -> Vec<Case>;

/// The groups, each with its cases at a size, in the order they run.
const GROUPS: [(&str, Cases); 5] = [
    ("base64_encode", base64_encode),
    ("base64_decode", base64_decode),
    ("hash", hash),
    ("adler32", adler32),
    ("count", count),
];

/// Every case under criterion: a group per kernel, a benchmark per function and size.
fn kernels(c: &mut Criterion) {
    for (name, cases) in GROUPS {
        let mut group = c.benchmark_group(name);
        for size in SIZES {
            group.throughput(Throughput::Bytes(size as u64));
            for mut case in cases(size) {
                let id = BenchmarkId::new(case.function, label(size));
                group.bench_function(id, |b| b.iter_custom(|iters| (case.batch)(iters)));
            }
        }
        group.finish();
    }
}

/// How long one timed batch of a case takes in the interleaved rounds: long against
/// the clock's own cost (tens of ns), short against a neighbour's burst.
const BATCH: Duration = Duration::from_micros(200);

/// Passes over every group and size that the interleaved rounds are spread across.
const PASSES: usize = 5;

/// A group at a size in the interleaved rounds: its cases, each one's calls per batch,
/// and each one's fastest round so far (ns per call).
struct Measured {
    group: &'static str,
    size: usize,
    cases: Vec<Case>,
    iters: Vec<u64>,
    fastest: Vec<f64>,
}

/// The interleaved rounds (`SIMD_BENCH_ROUNDS=N`), for `cargo xtask bench
/// --simd-table`: per group and size, every function (those whose id
/// `group/function/size` matches `SIMD_BENCH_FILTER`, a regex, when set) runs one
/// batch of about [`BATCH`] in turn, round after round, the order rotating by one each
/// round, and each keeps its fastest round. Criterion runs one function for seconds
/// before the next, so on a shared host a neighbour's burst lands on one function's
/// whole measurement; here it costs one round of each. The rounds are spread over
/// [`PASSES`] passes through every group and size, so that a burst longer than one
/// group's rounds (a tenth of a second: such bursts moved a whole row by 2x on this
/// project's VM) spoils one pass of it, not all. One JSON object per line on stdout
/// (or into the file `SIMD_BENCH_ROUNDS_OUT` names): group, function, value (the
/// size's label), bytes, ns (of one call, in the fastest round) and rounds.
fn interleaved(rounds: usize) {
    let filter = std::env::var("SIMD_BENCH_FILTER")
        .ok()
        .filter(|filter| !filter.is_empty())
        .map(|filter| {
            regex::Regex::new(&filter)
                .unwrap_or_else(|error| panic!("SIMD_BENCH_FILTER={filter}: {error}"))
        });
    let mut out: Box<dyn Write> =
        match std::env::var_os("SIMD_BENCH_ROUNDS_OUT") {
            Some(path) => Box::new(std::fs::File::create(&path).unwrap_or_else(|error| {
                panic!("cannot create {}: {error}", path.to_string_lossy())
            })),
            None => Box::new(std::io::stdout()),
        };
    let mut measured: Vec<Measured> = Vec::new();
    for (group, cases) in GROUPS {
        for size in SIZES {
            let mut cases: Vec<Case> = cases(size)
                .into_iter()
                .filter(|case| {
                    let id = format!("{group}/{}/{}", case.function, label(size));
                    filter.as_ref().is_none_or(|filter| filter.is_match(&id))
                })
                .collect();
            if !cases.is_empty() {
                let iters = cases.iter_mut().map(calibrate).collect();
                let fastest = vec![f64::INFINITY; cases.len()];
                measured.push(Measured {
                    group,
                    size,
                    cases,
                    iters,
                    fastest,
                });
            }
        }
    }
    let per_pass = rounds.div_ceil(PASSES);
    for pass in 0..PASSES {
        let rounds = per_pass.min(rounds - pass * per_pass);
        for at in &mut measured {
            let n = at.cases.len();
            for round in 0..rounds {
                for k in 0..n {
                    let i = (k + round) % n;
                    let took = (at.cases[i].batch)(at.iters[i]);
                    let ns = took.as_nanos() as f64 / at.iters[i] as f64;
                    at.fastest[i] = at.fastest[i].min(ns);
                }
            }
        }
        eprintln!("simd bench: pass {} of {PASSES} done", pass + 1);
    }
    for at in &measured {
        let (group, size, value) = (at.group, at.size, label(at.size));
        for (case, ns) in at.cases.iter().zip(&at.fastest) {
            writeln!(
                out,
                "{{\"group\":\"{group}\",\"function\":\"{}\",\"value\":\"{value}\",\
                 \"bytes\":{size},\"ns\":{ns},\"rounds\":{rounds}}}",
                case.function
            )
            .expect("cannot write the interleaved rounds' results");
        }
    }
}

/// Calls per batch of `case` for about [`BATCH`]: after a warm-up (a case's first
/// calls fault its buffers in and may make the dispatch's choice, tens of µs), four
/// times more calls until the faster of two batches takes an eighth of it, then
/// scaled. Without the warm-up a slow first call ended the search at one call per
/// batch, and the rounds then timed the clock (20 ns) instead of a 16-byte encode.
fn calibrate(case: &mut Case) -> u64 {
    (case.batch)(16);
    let mut iters = 1u64;
    loop {
        let took = (case.batch)(iters).min((case.batch)(iters));
        if took >= BATCH / 8 {
            let scaled = iters as u128 * BATCH.as_nanos() / took.as_nanos().max(1);
            return (scaled as u64).max(1);
        }
        iters *= 4;
    }
}

criterion_group! {
    name = criterion_kernels;
    config = benches::kernel_config();
    targets = kernels
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
    match std::env::var("SIMD_BENCH_ROUNDS") {
        Ok(rounds) => {
            let rounds = rounds
                .parse()
                .ok()
                .filter(|&rounds| rounds > 0)
                .unwrap_or_else(|| {
                    panic!("SIMD_BENCH_ROUNDS={rounds}: a count of rounds, 1 or more")
                });
            interleaved(rounds);
        }
        Err(_) => {
            criterion_kernels();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}

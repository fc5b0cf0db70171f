//! The hash at small key sizes, in interleaved paired rounds: criterion runs one
//! function for seconds before the next, and on a shared host the rows of one run
//! moved by 2x and more at 16 and 64 bytes (README, "Hash, count and base64 decode
//! after issue 38"), far more than the margins that matter there. Here every hash
//! takes the same 4096 keys in turn, round after round, and each keeps its fastest
//! round: a neighbour's burst slows one round of every function, not every round of
//! one.
//!
//! Each function hashes 4096 keys cut from 64-byte random buffers to the size (each
//! through `black_box`, so the length is not a constant), 20 times per round; the
//! result is ns per hash. Two ways per hash, as in `benches/simd.rs`: directly
//! (`hash_bytes(key, seed)`, `gxhash64`; foldhash and ahash have no such call, so one
//! `write` and `finish` on a hasher from a `BuildHasher` made once) and as a `HashMap`
//! with byte-slice keys calls it (`hash_one(key)`: the length, then the bytes).
//!
//! ```text
//! cargo bench -p benches --bench hash_paired [-- ROUNDS]
//! RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/native \
//!   cargo bench -p benches --bench hash_paired
//! ```
//!
//! It prints a markdown table: ns per hash, and each peer's time over ours (above
//! 1.0x: ours is faster).

use std::hash::BuildHasher;
use std::hint::black_box;
use std::time::Instant;

use benches::{hash_with, KeyStream};

/// Key sizes: the three paths of up to 16 bytes (1-3, 4-7, 8-16), one of 17-32 and
/// 33-64 each, and the first two longer paths.
const SIZES: [usize; 7] = [3, 8, 16, 32, 64, 128, 256];

/// Keys per batch: more than a branch predictor or a store buffer remembers, fewer
/// than fill the L1 cache (4096 x 256 bytes = 1 MiB stays in L2).
const KEYS: usize = 4096;

/// Batches per round and function.
const BATCHES: u32 = 20;

/// Rounds when the command line names none.
const DEFAULT_ROUNDS: usize = 201;

/// A hash as the bench calls it: the hasher's state (or nothing), the keys, the size.
type Batch = fn(&Hashes, &[Vec<u8>], usize) -> u64;

/// The hashers, built once (their `BuildHasher`s, with fixed seeds).
struct Hashes {
    ours: ioserve_simd::hash::RandomState,
    foldhash_quality: foldhash::quality::FixedState,
    foldhash: foldhash::fast::FixedState,
    ahash: ahash::RandomState,
    #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
    gxhash: gxhash::GxBuildHasher,
}

/// Defines a batch function: `|hashes, key| expression` summed over the keys, each
/// key cut to the size and passed through `black_box`.
macro_rules! batch {
    ($name:ident, |$hashes:ident, $key:ident| $hash:expr) => {
        #[inline(never)]
        fn $name($hashes: &Hashes, keys: &[Vec<u8>], size: usize) -> u64 {
            let mut sum = 0u64;
            for key in keys {
                let $key: &[u8] = black_box(&key[..size]);
                sum = sum.wrapping_add($hash);
            }
            sum
        }
    };
}

batch!(ours, |_h, key| ioserve_simd::hash::hash_bytes(key, 42));
batch!(ours_map, |h, key| h.ours.hash_one(key));
batch!(foldhash_quality, |h, key| hash_with(
    &h.foldhash_quality,
    key
));
batch!(foldhash_quality_map, |h, key| h
    .foldhash_quality
    .hash_one(key));
batch!(foldhash, |h, key| hash_with(&h.foldhash, key));
batch!(foldhash_map, |h, key| h.foldhash.hash_one(key));
batch!(ahash, |h, key| hash_with(&h.ahash, key));
batch!(ahash_map, |h, key| h.ahash.hash_one(key));
#[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
batch!(gxhash, |_h, key| gxhash::gxhash64(key, 42));
#[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
batch!(gxhash_map, |h, key| h.gxhash.hash_one(key));

/// Every function, ours first in each of the two groups (direct, map).
fn functions() -> Vec<(&'static str, Batch)> {
    let mut direct: Vec<(&'static str, Batch)> = vec![
        ("ours", ours),
        ("foldhash-quality", foldhash_quality),
        ("foldhash", foldhash),
        ("ahash", ahash),
    ];
    let mut map: Vec<(&'static str, Batch)> = vec![
        ("ours-map", ours_map),
        ("foldhash-quality-map", foldhash_quality_map),
        ("foldhash-map", foldhash_map),
        ("ahash-map", ahash_map),
    ];
    #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
    {
        direct.push(("gxhash", gxhash));
        map.push(("gxhash-map", gxhash_map));
    }
    direct.append(&mut map);
    direct
}

fn main() {
    // `cargo bench` passes `--bench`; the only other argument is the round count.
    let rounds = match std::env::args().skip(1).find(|a| a != "--bench") {
        None => DEFAULT_ROUNDS,
        Some(arg) => match arg.parse::<usize>() {
            Ok(rounds) if rounds > 0 => rounds,
            _ => {
                eprintln!("hash_paired: rounds must be a positive integer, not {arg:?}");
                std::process::exit(2);
            }
        },
    };
    let mut stream = KeyStream::new(38);
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|_| (0..256).map(|_| (stream.next_u64() >> 56) as u8).collect())
        .collect();
    let hashes = Hashes {
        ours: ioserve_simd::hash::RandomState::with_seed(42),
        foldhash_quality: foldhash::quality::FixedState::with_seed(42),
        foldhash: foldhash::fast::FixedState::with_seed(42),
        ahash: ahash::RandomState::with_seeds(1, 2, 3, 4),
        #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
        gxhash: gxhash::GxBuildHasher::with_seed(42),
    };
    let functions = functions();
    let direct = functions.len() / 2;
    println!(
        "ns per hash, fastest of {rounds} interleaved rounds ({KEYS} keys x {BATCHES} per round); \
         hash implementation: {}\n",
        ioserve_simd::hash::implementation()
    );
    let names: Vec<&str> = functions.iter().map(|(name, _)| *name).collect();
    println!(
        "| size | {} | peer ÷ ours (direct) | peer ÷ ours (map) |",
        names.join(" | ")
    );
    println!("|---|{}---|---|", "---:|".repeat(names.len()));
    for size in SIZES {
        let mut best = vec![f64::MAX; functions.len()];
        for _ in 0..rounds {
            for ((_, function), best) in functions.iter().zip(&mut best) {
                let start = Instant::now();
                let mut sum = 0u64;
                for _ in 0..BATCHES {
                    sum ^= function(black_box(&hashes), black_box(&keys), size);
                }
                black_box(sum);
                let ns = start.elapsed().as_nanos() as f64 / f64::from(BATCHES) / KEYS as f64;
                *best = best.min(ns);
            }
        }
        let cells: Vec<String> = best.iter().map(|ns| format!("{ns:.2}")).collect();
        let ratios = |from: usize, to: usize| -> String {
            (from + 1..to)
                .map(|i| format!("{} {:.2}x", names[i], best[i] / best[from]))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {size} B | {} | {} | {} |",
            cells.join(" | "),
            ratios(0, direct),
            ratios(direct, functions.len())
        );
    }
}

//! The hash's quality suite, modelled on SMHasher, run on ours and on the peers
//! (foldhash's quality variant; gxhash in builds that enable AES at compile time,
//! which gxhash requires) in the same run, at every key length from 0 to 128 and a
//! spread of longer ones.
//!
//! Each test measures one number per (hash, key length); a length class's row in the
//! table shows the worst value over its lengths. "No worse" is, per key length:
//!
//! - Biases (avalanche, seed avalanche: max |p − 0.5| over every (input bit, output
//!   bit) cell; bit independence: max |correlation| over every (input bit, output
//!   pair)): ours ≤ max(the noise limit, the better peer's + [`BIAS_MARGIN`]). The
//!   noise limit is 0.05 for flip rates from [`AVALANCHE_SAMPLES`] samples (6.3
//!   standard errors) and 6.5/√N for correlations from N samples.
//! - Full 64-bit collisions (sparse, appended zeros, cyclic keys, (key, seed) grids):
//!   ours ≤ the fewer of the peers' and ≤ the Poisson bound of the expected count
//!   (n² / 2⁶⁵ for n keys): the smallest k with P(X > k) ≤ 10⁻⁶, which is 0 wherever
//!   fewer than 10⁻⁶ collisions are expected. The grids' distinct-hash counts are
//!   the pairs minus the collisions, so they must be all pairs but that bound.

use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};

use crate::common::random_bytes;

/// A hash under test, as a function of (bytes, seed).
#[derive(Clone, Copy)]
pub struct Candidate {
    /// Its name in the table.
    pub name: &'static str,
    /// The hash of (bytes, seed).
    pub hash: fn(&[u8], u64) -> u64,
}

fn ours(bytes: &[u8], seed: u64) -> u64 {
    ioserve_simd::hash::hash_bytes(bytes, seed)
}

fn foldhash_quality(bytes: &[u8], seed: u64) -> u64 {
    let mut hasher = foldhash::quality::FixedState::with_seed(seed).build_hasher();
    hasher.write(bytes);
    hasher.finish()
}

#[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
fn gxhash(bytes: &[u8], seed: u64) -> u64 {
    gxhash::gxhash64(bytes, seed as i64)
}

/// Ours first, then the peers this build has.
pub fn candidates() -> Vec<Candidate> {
    let mut list = vec![
        Candidate {
            name: "ioserve-simd",
            hash: ours,
        },
        Candidate {
            name: "foldhash-quality",
            hash: foldhash_quality,
        },
    ];
    list.extend(gxhash_candidate());
    list
}

/// gxhash, in builds where it compiles.
fn gxhash_candidate() -> Option<Candidate> {
    #[cfg(all(target_arch = "x86_64", target_feature = "aes"))]
    return Some(Candidate {
        name: "gxhash",
        hash: gxhash,
    });
    #[cfg(not(all(target_arch = "x86_64", target_feature = "aes")))]
    None
}

/// How much of the suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// What `cargo test` runs (CI): every length, fewer keys per length.
    Short,
    /// `cargo xtask hash-quality`.
    Full,
}

/// Samples per (input bit, output bit) cell of the avalanche tests.
pub const AVALANCHE_SAMPLES: usize = 4000;
/// The largest |p − 0.5| a fair coin shows over the suite's cells from
/// [`AVALANCHE_SAMPLES`] samples (6.3 standard errors).
pub const AVALANCHE_NOISE: f64 = 0.05;
/// How far above the better peer's bias ours may be.
pub const BIAS_MARGIN: f64 = 0.01;
/// The false-alarm probability of a collision bound.
const POISSON_TAIL: f64 = 1e-6;

/// The key lengths the suite covers: every length to 128, then a spread.
pub fn lengths(profile: Profile) -> Vec<usize> {
    let long: &[usize] = match profile {
        Profile::Short => &[129, 200, 256, 257, 511, 1024],
        Profile::Full => &[
            129, 150, 191, 192, 200, 255, 256, 257, 300, 384, 511, 512, 513, 1000, 1024, 4096,
        ],
    };
    (0..=128).chain(long.iter().copied()).collect()
}

/// The length class a key length belongs to, as the table groups them (the hash's
/// own branches: ≤ 16 in line, 17–32, 33–64, 65–128, 129–256, the long loop).
pub fn class(len: usize) -> &'static str {
    match len {
        0 => "0",
        1 => "1",
        2 => "2",
        3 => "3",
        4..=7 => "4-7",
        8 => "8",
        9..=15 => "9-15",
        16 => "16",
        17..=32 => "17-32",
        33..=64 => "33-64",
        65..=128 => "65-128",
        129..=256 => "129-256",
        _ => "257+",
    }
}

/// One measurement of every candidate at one key length.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The test's name.
    pub test: &'static str,
    /// The key length (or, for the grids, the key width).
    pub len: usize,
    /// One value per candidate, ours first.
    pub values: Vec<f64>,
    /// The largest value ours may have.
    pub limit: f64,
    /// What a value is (`bias`, `collisions`, ...).
    pub unit: &'static str,
}

impl Measurement {
    fn passes(&self) -> bool {
        self.values[0] <= self.limit
    }
}

/// Every measurement so far.
#[derive(Default, Debug)]
pub struct Report {
    /// The measurements, in the order they were made.
    pub measurements: Vec<Measurement>,
}

impl Report {
    /// The measurements ours fails.
    pub fn failures(&self) -> Vec<String> {
        self.measurements
            .iter()
            .filter(|m| !m.passes())
            .map(|m| {
                format!(
                    "{} at length {}: ours {} > limit {} (peers {:?})",
                    m.test,
                    m.len,
                    m.values[0],
                    m.limit,
                    &m.values[1..]
                )
            })
            .collect()
    }

    /// Panics with every failure, if any.
    pub fn assert_no_worse(&self) {
        let failures = self.failures();
        assert!(
            failures.is_empty(),
            "{} measurement(s) fail:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    /// A Markdown table, one row per (test, length class): the worst value of each
    /// candidate over the class's lengths, the tightest limit, and the verdict.
    pub fn table(&self, names: &[&str]) -> String {
        let mut out = String::new();
        let _ = write!(out, "| test | lengths | unit |");
        for name in names {
            let _ = write!(out, " {name} |");
        }
        let _ = writeln!(out, " limit (ours) | verdict |");
        let _ = write!(out, "|---|---|---|");
        for _ in names {
            let _ = write!(out, "---:|");
        }
        let _ = writeln!(out, "---:|---|");
        let mut groups: Vec<(&str, &str, Vec<&Measurement>)> = Vec::new();
        for m in &self.measurements {
            let key_class = if m.test.starts_with("grid") || m.test.starts_with("combinations") {
                "keys"
            } else {
                class(m.len)
            };
            match groups
                .iter_mut()
                .find(|(test, group, _)| *test == m.test && *group == key_class)
            {
                Some((_, _, list)) => list.push(m),
                None => groups.push((m.test, key_class, vec![m])),
            }
        }
        for (test, group, list) in groups {
            let (first, last) = (list[0].len, list[list.len() - 1].len);
            let lengths = if first == last {
                format!("{first}")
            } else if group == "keys" {
                list.iter()
                    .map(|m| m.len.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            } else if test.contains("window") {
                format!("{group} ({} windows)", list.len())
            } else {
                format!("{group} ({} lengths)", list.len())
            };
            let _ = write!(out, "| {test} | {lengths} | {} |", list[0].unit);
            for i in 0..names.len() {
                let worst = list.iter().map(|m| m.values[i]).fold(f64::MIN, f64::max);
                let _ = write!(out, " {} |", format_value(worst, list[0].unit));
            }
            let limit = list.iter().map(|m| m.limit).fold(f64::MAX, f64::min);
            let failed: Vec<usize> = list.iter().filter(|m| !m.passes()).map(|m| m.len).collect();
            let verdict = if failed.is_empty() {
                "pass".to_owned()
            } else {
                format!("FAIL at {failed:?}")
            };
            let _ = writeln!(out, " {} | {verdict} |", format_value(limit, list[0].unit));
        }
        out
    }
}

fn format_value(value: f64, unit: &str) -> String {
    if unit == "bias" || unit == "|corr|" {
        format!("{value:.4}")
    } else {
        format!("{value:.0}")
    }
}

/// The limit for a bias: the noise limit, or the better peer's plus the margin.
fn bias_limit(values: &[f64], noise: f64) -> f64 {
    let best_peer = values[1..].iter().copied().fold(f64::MAX, f64::min);
    noise.max(best_peer + BIAS_MARGIN)
}

/// The smallest k with P(X > k) ≤ [`POISSON_TAIL`] for X ~ Poisson(λ).
pub fn poisson_bound(lambda: f64) -> u64 {
    let mut k = 0u64;
    let mut term = (-lambda).exp();
    let mut cumulative = term;
    while 1.0 - cumulative > POISSON_TAIL && k < 1 << 40 {
        k += 1;
        term *= lambda / k as f64;
        cumulative += term;
    }
    k
}

/// The expected number of full 64-bit collisions among `n` random hashes.
pub fn expected_collisions(n: u64) -> f64 {
    let n = n as f64;
    n * (n - 1.0) / 2.0 / 2f64.powi(64)
}

/// The number of hashes that equal an earlier one.
pub fn count_collisions(mut hashes: Vec<u64>) -> u64 {
    let total = hashes.len();
    hashes.sort_unstable();
    hashes.dedup();
    (total - hashes.len()) as u64
}

/// The limit for a collision count among `n` keys: the fewer of the peers' (at least
/// what is expected), and at most the Poisson bound.
fn collision_limit(values: &[f64], n: u64) -> f64 {
    let expected = expected_collisions(n);
    let bound = poisson_bound(expected) as f64;
    let best_peer = values[1..].iter().copied().fold(f64::MAX, f64::min);
    bound.min(best_peer.max(expected.floor()))
}

fn collision_measurement(
    test: &'static str,
    len: usize,
    candidates: &[Candidate],
    keys: u64,
    hashes_of: impl Fn(Candidate) -> Vec<u64>,
) -> Measurement {
    let values: Vec<f64> = candidates
        .iter()
        .map(|&c| {
            let hashes = hashes_of(c);
            assert_eq!(hashes.len() as u64, keys, "{test}: key count");
            count_collisions(hashes) as f64
        })
        .collect();
    Measurement {
        test,
        len,
        limit: collision_limit(&values, keys),
        values,
        unit: "collisions",
    }
}

/// Flip counts of every output bit, summed over the samples.
fn add_flips(counts: &mut [u32; 64], diff: u64) {
    for (out, count) in counts.iter_mut().enumerate() {
        *count += ((diff >> out) & 1) as u32;
    }
}

/// The input bits of a `len`-byte key the avalanche tests flip: every bit up to 16
/// bytes; beyond, in the full profile every bit up to 128 bytes and the first,
/// middle and last 64 of longer keys, in the short one 32 bits (the first 8, the last
/// 8 and 16 spread between).
fn input_bits(len: usize, profile: Profile) -> Vec<usize> {
    let total = len * 8;
    if len <= 16 || (profile == Profile::Full && len <= 128) {
        (0..total).collect()
    } else if profile == Profile::Full {
        let middle = total / 2 - 32;
        (0..64)
            .chain(middle..middle + 64)
            .chain(total - 64..total)
            .collect()
    } else {
        let between = (8..total - 8).step_by((total - 16) / 16);
        (0..8)
            .chain(between.take(16))
            .chain(total - 8..total)
            .collect()
    }
}

/// Max |p − 0.5| over every (flipped bit, output bit) cell: `hash(key, sample)` is
/// the hash of a sample, `flipped(key, sample, bit)` that with `bit` flipped.
fn worst_flip_bias(
    len: usize,
    bits: &[usize],
    samples: usize,
    hash: impl Fn(&[u8], u64) -> u64,
    flipped: impl Fn(&mut [u8], u64, usize) -> u64,
) -> f64 {
    let mut counts = vec![[0u32; 64]; bits.len()];
    for sample in 0..samples {
        let mut key = random_bytes(len, sample as u64 * 7919 + len as u64 + 1);
        let before = hash(&key, sample as u64);
        for (row, &bit) in bits.iter().enumerate() {
            add_flips(
                &mut counts[row],
                before ^ flipped(&mut key, sample as u64, bit),
            );
        }
    }
    counts
        .iter()
        .flatten()
        .map(|&c| (f64::from(c) / samples as f64 - 0.5).abs())
        .fold(0.0, f64::max)
}

fn sample_seed(sample: u64) -> u64 {
    sample.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0123_4567_89AB_CDEF
}

/// Avalanche: flipping any one input bit flips each output bit half the time (the
/// seed varies per sample).
pub fn avalanche(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    for len in lengths(profile).into_iter().filter(|&len| len > 0) {
        let bits = input_bits(len, profile);
        let values: Vec<f64> = candidates
            .iter()
            .map(|c| {
                worst_flip_bias(
                    len,
                    &bits,
                    AVALANCHE_SAMPLES,
                    |key, sample| (c.hash)(key, sample_seed(sample)),
                    |key, sample, bit| {
                        key[bit / 8] ^= 1 << (bit % 8);
                        let hash = (c.hash)(key, sample_seed(sample));
                        key[bit / 8] ^= 1 << (bit % 8);
                        hash
                    },
                )
            })
            .collect();
        report.measurements.push(Measurement {
            test: "avalanche",
            len,
            limit: bias_limit(&values, AVALANCHE_NOISE),
            values,
            unit: "bias",
        });
    }
}

/// Avalanche under one fixed seed (0, as SMHasher's Avalanche): keys of 1 and 2
/// bytes are all enumerated (each cell then has 2^(8·len − 1) distinct pairs, which
/// sets its noise limit: 6.3 standard errors, 0.28 for 1-byte keys), longer ones are
/// [`AVALANCHE_SAMPLES`] random keys.
pub fn fixed_seed_avalanche(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let lens: Vec<usize> = match profile {
        Profile::Short => (1..=16).chain([24, 32, 48, 64, 100]).collect(),
        Profile::Full => lengths(profile)
            .into_iter()
            .filter(|&len| len > 0)
            .collect(),
    };
    for len in lens {
        let bits = input_bits(len, profile);
        let (keys, pairs): (Vec<Vec<u8>>, f64) = if len <= 2 {
            let all = (0u32..1 << (8 * len))
                .map(|v| v.to_le_bytes()[..len].to_vec())
                .collect::<Vec<_>>();
            let pairs = all.len() as f64 / 2.0;
            (all, pairs)
        } else {
            let random = (0..AVALANCHE_SAMPLES)
                .map(|i| random_bytes(len, i as u64 * 104_729 + len as u64))
                .collect();
            (random, AVALANCHE_SAMPLES as f64)
        };
        let noise = AVALANCHE_NOISE.max(6.3 * 0.5 / pairs.sqrt());
        let values: Vec<f64> = candidates
            .iter()
            .map(|c| {
                let mut counts = vec![[0u32; 64]; bits.len()];
                for key in &keys {
                    let before = (c.hash)(key, 0);
                    let mut flipped = key.clone();
                    for (row, &bit) in bits.iter().enumerate() {
                        flipped[bit / 8] ^= 1 << (bit % 8);
                        add_flips(&mut counts[row], before ^ (c.hash)(&flipped, 0));
                        flipped[bit / 8] ^= 1 << (bit % 8);
                    }
                }
                counts
                    .iter()
                    .flatten()
                    .map(|&n| (f64::from(n) / keys.len() as f64 - 0.5).abs())
                    .fold(0.0, f64::max)
            })
            .collect();
        report.measurements.push(Measurement {
            test: "avalanche (seed 0)",
            len,
            limit: bias_limit(&values, noise),
            values,
            unit: "bias",
        });
    }
}

/// Seed avalanche: flipping any one seed bit flips each output bit half the time.
pub fn seed_avalanche(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let lens: Vec<usize> = match profile {
        Profile::Short => vec![
            0, 1, 2, 3, 4, 7, 8, 12, 16, 17, 24, 32, 48, 64, 100, 128, 200,
        ],
        Profile::Full => lengths(profile),
    };
    let bits: Vec<usize> = (0..64).collect();
    for len in lens {
        let values: Vec<f64> = candidates
            .iter()
            .map(|c| {
                worst_flip_bias(
                    len,
                    &bits,
                    AVALANCHE_SAMPLES,
                    |key, sample| (c.hash)(key, sample_seed(sample)),
                    |key, sample, bit| (c.hash)(key, sample_seed(sample) ^ (1 << bit)),
                )
            })
            .collect();
        report.measurements.push(Measurement {
            test: "seed avalanche",
            len,
            limit: bias_limit(&values, AVALANCHE_NOISE),
            values,
            unit: "bias",
        });
    }
}

/// Bit independence (SMHasher's BIC): for a flipped input bit, whether output bit j
/// flips says nothing about whether output bit k does: max |correlation| over every
/// (input bit, j < k).
pub fn bit_independence(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let (lens, samples): (&[usize], usize) = match profile {
        Profile::Short => (&[1, 3, 8, 16, 24, 40, 64, 100], 2000),
        Profile::Full => (
            &[
                1, 2, 3, 4, 7, 8, 12, 16, 20, 24, 32, 40, 48, 60, 64, 100, 128, 256,
            ],
            4000,
        ),
    };
    let noise = 6.5 / (samples as f64).sqrt();
    for &len in lens {
        // Up to 64 input bits per length, spread over the key.
        let total = len * 8;
        let bits: Vec<usize> = (0..total).step_by(total.div_ceil(64)).collect();
        let values: Vec<f64> = candidates
            .iter()
            .map(|c| {
                let mut worst = 0.0f64;
                for &bit in &bits {
                    let mut single = [0u32; 64];
                    let mut pairs = vec![0u32; 64 * 64];
                    for sample in 0..samples {
                        let key = random_bytes(len, sample as u64 * 31 + len as u64 + 7);
                        let seed = sample_seed(sample as u64);
                        let mut flipped = key.clone();
                        flipped[bit / 8] ^= 1 << (bit % 8);
                        let diff = (c.hash)(&key, seed) ^ (c.hash)(&flipped, seed);
                        add_flips(&mut single, diff);
                        let mut rest = diff;
                        while rest != 0 {
                            let j = rest.trailing_zeros() as usize;
                            rest &= rest - 1;
                            let mut above = rest;
                            while above != 0 {
                                let k = above.trailing_zeros() as usize;
                                above &= above - 1;
                                pairs[j * 64 + k] += 1;
                            }
                        }
                    }
                    let n = samples as f64;
                    for j in 0..64 {
                        for k in j + 1..64 {
                            let pj = f64::from(single[j]) / n;
                            let pk = f64::from(single[k]) / n;
                            let pjk = f64::from(pairs[j * 64 + k]) / n;
                            let spread = (pj * (1.0 - pj) * pk * (1.0 - pk)).sqrt();
                            let corr = if spread > 0.0 {
                                (pjk - pj * pk) / spread
                            } else {
                                1.0
                            };
                            worst = worst.max(corr.abs());
                        }
                    }
                }
                worst
            })
            .collect();
        report.measurements.push(Measurement {
            test: "bit independence",
            len,
            limit: bias_limit(&values, noise),
            values,
            unit: "|corr|",
        });
    }
}

/// Every key of `len` bytes with at most `max_bits` bits set (SMHasher's Sparse).
fn sparse_hashes(len: usize, max_bits: usize, seed: u64, hash: fn(&[u8], u64) -> u64) -> Vec<u64> {
    sparse_hashes_in(len, 0..len * 8, max_bits, seed, hash)
}

/// Every key of `len` bytes, zero outside the bit positions `bits`, with at most
/// `max_bits` (1 to 3) of those set.
fn sparse_hashes_in(
    len: usize,
    bits: std::ops::Range<usize>,
    max_bits: usize,
    seed: u64,
    hash: fn(&[u8], u64) -> u64,
) -> Vec<u64> {
    let mut key = vec![0u8; len];
    let mut hashes = vec![hash(&key, seed)];
    let set = |key: &mut [u8], bit: usize| key[bit / 8] ^= 1 << (bit % 8);
    for a in bits.clone() {
        set(&mut key, a);
        hashes.push(hash(&key, seed));
        if max_bits >= 2 {
            for b in a + 1..bits.end {
                set(&mut key, b);
                hashes.push(hash(&key, seed));
                if max_bits >= 3 {
                    for c in b + 1..bits.end {
                        set(&mut key, c);
                        hashes.push(hash(&key, seed));
                        set(&mut key, c);
                    }
                }
                set(&mut key, b);
            }
        }
        set(&mut key, a);
    }
    hashes
}

fn binomial(n: u64, k: u64) -> u64 {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// The bits set in the sparse keys of each length: 3 at every length in the full
/// profile; in the short one 3 up to 16 bytes and at 64 (where the old 33–64-byte
/// path collided in full), 2 elsewhere.
fn sparse_bits(len: usize, profile: Profile) -> usize {
    match profile {
        Profile::Full => 3,
        Profile::Short if len <= 16 || len == 64 => 3,
        Profile::Short => 2,
    }
}

/// Sparse keys: full 64-bit collisions among all keys of each length from 1 to 128
/// with up to 3 bits set (as [`sparse_bits`] says, and 2 beyond `three_bits_to`).
pub fn sparse(
    report: &mut Report,
    candidates: &[Candidate],
    profile: Profile,
    three_bits_to: usize,
) {
    for len in 1..=128 {
        let bits = if len <= three_bits_to {
            sparse_bits(len, profile)
        } else {
            2
        };
        let keys: u64 = (0..=bits as u64).map(|k| binomial(8 * len as u64, k)).sum();
        report.measurements.push(collision_measurement(
            if bits == 3 {
                "sparse (<= 3 bits)"
            } else {
                "sparse (<= 2 bits)"
            },
            len,
            candidates,
            keys,
            |c| sparse_hashes(len, bits, 0x5EED_0000 + len as u64, c.hash),
        ));
    }
}

/// Sparse keys longer than the sparse test's: keys of up to 4 KiB, zero but for up to 3
/// bits set in a 64-byte window (22.4 M keys per window, as many as SMHasher's 64-byte
/// sparse keyset). The windows sit where a path's blocks have the fewest rounds behind
/// them when the lanes meet: the long loop's last step (a variant of it without a
/// round after the last step gave 16 full collisions among the keys of a 1 KiB key's
/// last 64 bytes), and the 65-256-byte paths' second half. The short profile tries
/// that 1 KiB window alone.
pub fn sparse_windows(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let windows: &[(usize, usize)] = match profile {
        Profile::Short => &[(1024, 960)],
        Profile::Full => &[
            (100, 36),
            (128, 64),
            (200, 136),
            (256, 192),
            (257, 193),
            (300, 236),
            (300, 40),
            (1024, 960),
            (1024, 896),
            (1024, 488),
            (1024, 0),
            (2048, 1000),
            (4096, 4032),
        ],
    };
    let keys = (0..=3).map(|k| binomial(512, k)).sum();
    for &(len, at) in windows {
        report.measurements.push(collision_measurement(
            "sparse 64-byte window (<= 3 bits)",
            len,
            candidates,
            keys,
            |c| {
                let window = at * 8..(at + 64) * 8;
                sparse_hashes_in(len, window, 3, 0x5EED_1000 + (len + at) as u64, c.hash)
            },
        ));
    }
}

/// Appended zeros: a key and the same key with 1, 2, ... zero bytes appended all hash
/// differently (SMHasher's Zeroes, from many starting keys).
pub fn appended_zeros(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let zeros = match profile {
        Profile::Short => 256,
        Profile::Full => 1024,
    };
    // Bases that are not zero-extensions of one another: each ends in a non-zero byte
    // (the empty key is the first base).
    let bases: Vec<Vec<u8>> = (0..=64)
        .map(|len| {
            let mut base = random_bytes(len, 1000 + len as u64);
            if let Some(last) = base.last_mut() {
                *last |= 1;
            }
            base
        })
        .collect();
    let keys = (bases.len() * (zeros + 1)) as u64;
    report.measurements.push(collision_measurement(
        "appended zeros",
        0,
        candidates,
        keys,
        |c| {
            let mut hashes = Vec::new();
            for base in &bases {
                let mut key = base.clone();
                for _ in 0..=zeros {
                    hashes.push((c.hash)(&key, 3));
                    key.push(0);
                }
            }
            hashes
        },
    ));
}

/// Cyclic keys (SMHasher's Cyclic): `repeats` copies of a random `cycle`-byte unit, for
/// many units; full collisions among them, per total length.
pub fn cyclic(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let units = match profile {
        Profile::Short => 100_000u64,
        Profile::Full => 1_000_000,
    };
    for cycle in [3usize, 4, 5, 8, 12, 16, 17] {
        for repeats in [2usize, 4, 8] {
            let len = cycle * repeats;
            report.measurements.push(collision_measurement(
                "cyclic",
                len,
                candidates,
                units,
                |c| {
                    (0..units)
                        .map(|i| {
                            let mut unit = random_bytes(cycle, i * 7 + cycle as u64);
                            unit[..3].copy_from_slice(&i.to_le_bytes()[..3]);
                            let key = unit.repeat(repeats);
                            (c.hash)(&key, 0xC1C1)
                        })
                        .collect()
                },
            ));
        }
    }
}

/// (key, seed) grids like SMHasher's PerlinNoise: keys x < side, little-endian in the
/// first bytes of a `width`-byte key, under seeds y < side; a hash that lets the seed
/// alias the key's bytes gives far fewer distinct hashes than pairs.
pub fn grids(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let side: u64 = match profile {
        Profile::Short => 1024,
        Profile::Full => 4096,
    };
    for width in [1usize, 2, 3, 4, 8, 12, 16, 24, 64] {
        let key_side = if width == 1 { 256 } else { side };
        let pairs = key_side * side;
        report.measurements.push(collision_measurement(
            "grid (key x seed)",
            width,
            candidates,
            pairs,
            |c| {
                let mut hashes = Vec::with_capacity(pairs as usize);
                let mut key = vec![0u8; width];
                for x in 0..key_side {
                    let bytes = x.to_le_bytes();
                    let n = width.min(8);
                    key[..n].copy_from_slice(&bytes[..n]);
                    for y in 0..side {
                        hashes.push((c.hash)(&key, y));
                    }
                }
                hashes
            },
        ));
    }
}

/// Keys of 1 to `max_blocks` 32-bit words, each word one of `blocks` (SMHasher's
/// Permutation/Combination keysets): full collisions over all of them together, so
/// that keys of different lengths must differ too.
fn combination_hashes(blocks: &[u32], max_blocks: u32, hash: fn(&[u8], u64) -> u64) -> Vec<u64> {
    let base = blocks.len() as u64;
    let mut hashes = Vec::new();
    let mut key = Vec::with_capacity(4 * max_blocks as usize);
    for count in 1..=max_blocks {
        for mut index in 0..base.pow(count) {
            key.clear();
            for _ in 0..count {
                key.extend_from_slice(&blocks[(index % base) as usize].to_le_bytes());
                index /= base;
            }
            hashes.push(hash(&key, 0));
        }
    }
    hashes
}

/// Combinations of a few 32-bit blocks (SMHasher's Permutation tests): set 1, low
/// bits (0..8); set 2, high bits (multiples of 2^29); sets 3 and 4, null and one bit
/// (0 and 1, 0 and 2^31), up to 7 blocks of the first two and 16 (full: 20) of the
/// others.
pub fn combinations(report: &mut Report, candidates: &[Candidate], profile: Profile) {
    let null_blocks = match profile {
        Profile::Short => 16,
        Profile::Full => 20,
    };
    let low: Vec<u32> = (0..8).collect();
    let high: Vec<u32> = (0..8).map(|i| i << 29).collect();
    let sets: [(&[u32], u32, usize); 4] = [
        (&low, 7, 1),
        (&high, 7, 2),
        (&[0, 1], null_blocks, 3),
        (&[0, 0x8000_0000], null_blocks, 4),
    ];
    for (blocks, max_blocks, set) in sets {
        let keys: u64 = (1..=max_blocks).map(|n| (blocks.len() as u64).pow(n)).sum();
        report.measurements.push(collision_measurement(
            "combinations (sets 1-4)",
            set,
            candidates,
            keys,
            |c| combination_hashes(blocks, max_blocks, c.hash),
        ));
    }
}

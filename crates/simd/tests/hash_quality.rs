//! The hash against its specification, and its quality, modelled on SMHasher: sanity,
//! appended zeros, every key of up to 3 bytes, cyclic, sparse and permuted keys,
//! avalanche, seed dependence and bucket balance, for every length class the
//! implementation branches on (≤ 16, ≤ 32, ≤ 64, the 64-byte loop) up to 1 KiB.
//!
//! Bias bound used below: with N samples per (input bit, output bit) cell, a fair
//! coin's flip rate has standard error 0.5/√N; cells must stay within 0.5 ± 0.05,
//! which for N = 4000 is 6.3 standard errors (no false alarm over the ~10^5 cells
//! checked, while a weak round structure shows biases of 0.1 and more).

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use ioserve_simd::hash::{hash_bytes, RandomState};
use ioserve_simd::Implementation;

mod common;
mod quality;

use common::random_bytes;

/// Lengths in every class the hash branches on, and around the 64-byte loop's edges.
const CLASS_LENGTHS: [usize; 12] = [3, 8, 16, 17, 31, 32, 33, 64, 65, 128, 257, 1024];

fn assert_no_collisions(name: &str, mut hashes: Vec<u64>) {
    let total = hashes.len();
    hashes.sort_unstable();
    hashes.dedup();
    assert_eq!(
        hashes.len(),
        total,
        "{name}: {} collisions",
        total - hashes.len()
    );
}

#[test]
fn every_implementation_equals_the_software_round() {
    let data = random_bytes(1024 + 64, 1);
    let implementations = ioserve_simd::hash::implementations();
    let &(_, spec) = implementations
        .iter()
        .find(|(implementation, _)| *implementation == Implementation::Scalar)
        .expect("the software round is always available");
    for len in 0..=1024 {
        for offset in [0, 1, 7, 15, 16, 33, 63] {
            let input = &data[offset..offset + len];
            let want = spec(input, 7);
            for &(implementation, function) in &implementations {
                assert_eq!(
                    function(input, 7),
                    want,
                    "{implementation} len {len} offset {offset}"
                );
            }
            // The way this build calls it: in builds that enable AES, in line
            // without the dispatcher.
            assert_eq!(
                hash_bytes(input, 7),
                want,
                "hash_bytes len {len} offset {offset}"
            );
        }
    }
    for len in [4096, 65_537, 1 << 20] {
        let input = random_bytes(len, len as u64);
        let want = spec(&input, 3);
        for &(implementation, function) in &implementations {
            assert_eq!(function(&input, 3), want, "{implementation} len {len}");
        }
        assert_eq!(hash_bytes(&input, 3), want, "hash_bytes len {len}");
    }
}

#[test]
fn sanity_and_every_byte_matters_at_every_length() {
    for len in 1..=1024 {
        let key = random_bytes(len, len as u64);
        let h = hash_bytes(&key, 0);
        assert_eq!(h, hash_bytes(&key, 0));
        // Changing any single byte changes the hash (Go's arm64 bug lost bytes > 256).
        for position in [0, len / 3, len / 2, len - 1] {
            let mut changed = key.clone();
            changed[position] ^= 0x01;
            assert_ne!(hash_bytes(&changed, 0), h, "len {len} byte {position}");
        }
    }
}

#[test]
fn appended_zeros_change_the_hash() {
    for base in [&b""[..], b"a", b"abc", &[0u8; 40]] {
        let hashes: Vec<u64> = (0..=300)
            .map(|zeros| {
                let mut key = base.to_vec();
                key.resize(base.len() + zeros, 0);
                hash_bytes(&key, 9)
            })
            .collect();
        assert_no_collisions("appended zeros", hashes);
    }
}

#[test]
fn all_keys_up_to_three_bytes_are_distinct() {
    // Every 3-byte key on x86_64; 2 bytes elsewhere (qemu is too slow for 16M hashes).
    let max_len = if cfg!(target_arch = "x86_64") { 3 } else { 2 };
    let mut hashes = vec![hash_bytes(&[], 5)];
    for len in 1..=max_len {
        for value in 0u32..(1 << (8 * len)) {
            hashes.push(hash_bytes(&value.to_le_bytes()[..len], 5));
        }
    }
    assert_no_collisions("keys of <= 3 bytes", hashes);
}

#[test]
fn cyclic_keys_are_distinct() {
    for cycle in [3usize, 4, 8, 16, 17] {
        for repeats in [2usize, 8, 64] {
            let hashes = (0..20_000u32)
                .map(|i| {
                    // Distinct units: i in the first bytes, random after.
                    let mut unit = random_bytes(cycle, u64::from(i) + 1);
                    unit[..3].copy_from_slice(&i.to_le_bytes()[..3]);
                    hash_bytes(&unit.repeat(repeats), 1)
                })
                .collect();
            assert_no_collisions("cyclic", hashes);
        }
    }
}

#[test]
fn sparse_keys_are_distinct() {
    for len in [4usize, 16, 32, 64, 128, 256, 1024] {
        let bits = len * 8;
        let mut hashes = vec![hash_bytes(&vec![0u8; len], 2)];
        for first in 0..bits {
            let mut key = vec![0u8; len];
            key[first / 8] |= 1 << (first % 8);
            hashes.push(hash_bytes(&key, 2));
            // Two bits set, while the key count stays reasonable.
            if bits <= 512 {
                for second in first + 1..bits {
                    let mut two = key.clone();
                    two[second / 8] |= 1 << (second % 8);
                    hashes.push(hash_bytes(&two, 2));
                }
            }
        }
        assert_no_collisions("sparse", hashes);
    }
}

/// Long keys with one bit set in each of two consecutive 256-byte steps of the long
/// loop (every pair of bits on x86_64: 4.2 M keys per length; elsewhere, under qemu,
/// the first bit in the first two bytes of each of the step's sixteen blocks). Lanes
/// `i` and `i + 8` share a round key, and a bit in one step can meet a bit of the
/// next in its lane: the loop with one keyed round per block tried for issue 57 (see
/// the README) collided here, 48 pairs at 512 bytes (16 with the smaller set), where
/// the sparse keys above, whose two bits are at most 64 bytes apart, the quality
/// suite's 64-byte windows and SMHasher, whose keys stop at 256 bytes, saw nothing.
#[test]
fn two_bit_keys_across_long_loop_steps_are_distinct() {
    const STEP: usize = 256;
    // 512 bytes: the first whole step and the last; 1 KiB: the last two steps.
    for (len, first_step) in [(2 * STEP, 0), (4 * STEP, 2 * STEP)] {
        let first_bits: Vec<usize> = if cfg!(target_arch = "x86_64") {
            (0..STEP * 8).collect()
        } else {
            (0..STEP)
                .filter(|byte| byte % 16 < 2)
                .flat_map(|byte| (0..8).map(move |bit| byte * 8 + bit))
                .collect()
        };
        let mut key = vec![0u8; len];
        let mut hashes = Vec::with_capacity(first_bits.len() * STEP * 8);
        for &first in &first_bits {
            let first = first_step * 8 + first;
            key[first / 8] ^= 1 << (first % 8);
            for second in (first_step + STEP) * 8..(first_step + 2 * STEP) * 8 {
                key[second / 8] ^= 1 << (second % 8);
                hashes.push(hash_bytes(&key, 2));
                key[second / 8] ^= 1 << (second % 8);
            }
            key[first / 8] ^= 1 << (first % 8);
        }
        assert_no_collisions(&format!("two bits across steps, {len} bytes"), hashes);
    }
}

#[test]
fn permuted_blocks_are_distinct() {
    // All 8! orders of eight distinct 4-byte and 16-byte blocks.
    for block in [4usize, 16] {
        let blocks: Vec<Vec<u8>> = (0..8).map(|i| random_bytes(block, i + 100)).collect();
        let mut order: Vec<usize> = (0..8).collect();
        let mut hashes = Vec::new();
        permutations(&mut order, 0, &mut |o| {
            let key: Vec<u8> = o.iter().flat_map(|&i| blocks[i].iter().copied()).collect();
            hashes.push(hash_bytes(&key, 4));
        });
        assert_eq!(hashes.len(), 40_320);
        assert_no_collisions("permutations", hashes);
    }
}

fn permutations(items: &mut Vec<usize>, k: usize, visit: &mut impl FnMut(&[usize])) {
    if k == items.len() {
        visit(items);
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permutations(items, k + 1, visit);
        items.swap(k, i);
    }
}

/// Flip rates of every output bit for each flipped input bit in `bits`.
/// `flip(key, sample, bit)` returns the hashes before and after flipping `bit`.
fn worst_bias(
    samples: usize,
    len: usize,
    bits: &[usize],
    flip: impl Fn(&[u8], u64, usize) -> (u64, u64),
) -> f64 {
    let mut flips = vec![[0u32; 64]; bits.len()];
    for sample in 0..samples {
        let key = random_bytes(len, sample as u64 * 7919 + len as u64);
        for (row, &bit) in bits.iter().enumerate() {
            let (before, after) = flip(&key, sample as u64, bit);
            let diff = before ^ after;
            for (out, count) in flips[row].iter_mut().enumerate() {
                *count += ((diff >> out) & 1) as u32;
            }
        }
    }
    flips
        .iter()
        .flatten()
        .map(|&c| (f64::from(c) / samples as f64 - 0.5).abs())
        .fold(0.0, f64::max)
}

#[test]
fn avalanche_in_every_length_class() {
    const SAMPLES: usize = 4000;
    for len in CLASS_LENGTHS {
        let total_bits = len * 8;
        // Every bit of short keys; for long ones the first, middle and last 64.
        let bits: Vec<usize> = if total_bits <= 256 {
            (0..total_bits).collect()
        } else {
            let middle = total_bits / 2 - 32;
            (0..64)
                .chain(middle..middle + 64)
                .chain(total_bits - 64..total_bits)
                .collect()
        };
        let bias = worst_bias(SAMPLES, len, &bits, |key, _, bit| {
            let mut flipped = key.to_vec();
            flipped[bit / 8] ^= 1 << (bit % 8);
            (hash_bytes(key, 11), hash_bytes(&flipped, 11))
        });
        assert!(bias <= 0.05, "len {len}: worst avalanche bias {bias:.4}");
    }
}

#[test]
fn every_seed_bit_changes_every_output_bit_half_the_time() {
    for len in [0usize, 8, 24, 48, 200] {
        let bits: Vec<usize> = (0..64).collect();
        // The seed varies per sample too, so that the empty key is tested.
        let bias = worst_bias(4000, len, &bits, |key, sample, bit| {
            let seed = sample.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0123_4567_89AB_CDEF;
            (hash_bytes(key, seed), hash_bytes(key, seed ^ (1 << bit)))
        });
        assert!(bias <= 0.05, "len {len}: worst seed bias {bias:.4}");
    }
}

#[test]
fn sequential_integers_fill_buckets_evenly() {
    let state = RandomState::with_seed(17);
    let n = 1u64 << 20;
    let mut low_buckets = vec![0u32; 1 << 12];
    let mut tags = [0u32; 128];
    for i in 0..n {
        let h = state.hash_one(i);
        low_buckets[(h & 0xFFF) as usize] += 1;
        tags[(h >> 57) as usize] += 1;
    }
    // Binomial: mean 256 per bucket, sd 16; mean 8192 per tag, sd 90.
    for (name, counts, mean) in [
        ("low 12 bits", &low_buckets[..], 256.0),
        ("top 7 bits", &tags[..], 8192.0),
    ] {
        let sd = f64::sqrt(mean);
        for &c in counts {
            assert!(
                (f64::from(c) - mean).abs() < 6.0 * sd,
                "{name}: a bucket holds {c}, mean {mean}"
            );
        }
    }
    // And it works as a HashMap hasher.
    let mut map: HashMap<u64, u64, RandomState> = HashMap::with_hasher(state);
    for i in 0..10_000 {
        map.insert(i, i * 2);
    }
    assert!((0..10_000).all(|i| map[&i] == i * 2));
}

#[test]
fn random_states_differ_and_seeded_ones_repeat() {
    let a = RandomState::new();
    let b = RandomState::new();
    assert_ne!(a.hash_one("key"), b.hash_one("key"));
    assert_eq!(
        RandomState::with_seed(1).hash_one("key"),
        RandomState::with_seed(1).hash_one("key")
    );
    // Writes chain: the order of fields matters.
    let seeded = RandomState::with_seed(1);
    assert_ne!(seeded.hash_one((1u32, 2u32)), seeded.hash_one((2u32, 1u32)));
    let distinct: HashSet<u64> = (0..1000u32).map(|i| seeded.hash_one(i)).collect();
    assert_eq!(distinct.len(), 1000);
}

/// The quality suite's short profile (see `quality`): every key length to 128 and a
/// spread beyond, ours against foldhash-quality (and gxhash in builds with AES).
mod no_worse_than_the_peers {
    use super::quality::{self, Profile, Report};

    fn check(run: impl FnOnce(&mut Report, &[quality::Candidate])) {
        let candidates = quality::candidates();
        let mut report = Report::default();
        run(&mut report, &candidates);
        let names: Vec<&str> = candidates.iter().map(|c| c.name).collect();
        println!("{}", report.table(&names));
        report.assert_no_worse();
    }

    #[test]
    fn avalanche_at_every_length() {
        check(|report, candidates| quality::avalanche(report, candidates, Profile::Short));
    }

    #[test]
    fn avalanche_under_a_fixed_seed() {
        check(|report, candidates| {
            quality::fixed_seed_avalanche(report, candidates, Profile::Short)
        });
    }

    #[test]
    fn seed_avalanche() {
        check(|report, candidates| quality::seed_avalanche(report, candidates, Profile::Short));
    }

    #[test]
    fn bit_independence() {
        check(|report, candidates| quality::bit_independence(report, candidates, Profile::Short));
    }

    #[test]
    fn sparse_keys_at_every_length() {
        check(|report, candidates| quality::sparse(report, candidates, Profile::Short, 128));
    }

    #[test]
    fn sparse_windows_of_long_keys() {
        check(|report, candidates| quality::sparse_windows(report, candidates, Profile::Short));
    }

    #[test]
    fn appended_zeros_and_cyclic_keys() {
        check(|report, candidates| {
            quality::appended_zeros(report, candidates, Profile::Short);
            quality::cyclic(report, candidates, Profile::Short);
        });
    }

    #[test]
    fn combinations_of_blocks() {
        check(|report, candidates| quality::combinations(report, candidates, Profile::Short));
    }

    #[test]
    fn key_and_seed_grids() {
        check(|report, candidates| quality::grids(report, candidates, Profile::Short));
    }
}

/// The quality suite's full profile, which `cargo xtask hash-quality` runs (minutes of
/// CPU): prints the table and, when `HASH_QUALITY_TABLE` names a file, writes it there;
/// `HASH_QUALITY_SPARSE_MAX_LEN` (1..=128, default 128) bounds the sparse test's
/// lengths. Each test runs on its own thread.
#[test]
#[ignore = "minutes of CPU: cargo xtask hash-quality runs it"]
fn full_quality_table() {
    use quality::{Profile, Report};
    let sparse_max_len = match std::env::var("HASH_QUALITY_SPARSE_MAX_LEN") {
        Ok(value) => match value.parse::<usize>() {
            Ok(len @ 1..=128) => len,
            _ => panic!("HASH_QUALITY_SPARSE_MAX_LEN={value}: expected a length from 1 to 128"),
        },
        Err(_) => 128,
    };
    let candidates = quality::candidates();
    let names: Vec<&str> = candidates.iter().map(|c| c.name).collect();
    type Section = fn(&mut Report, &[quality::Candidate], Profile, usize);
    let sections: [Section; 10] = [
        |r, c, p, _| quality::avalanche(r, c, p),
        |r, c, p, _| quality::fixed_seed_avalanche(r, c, p),
        |r, c, p, _| quality::seed_avalanche(r, c, p),
        |r, c, p, _| quality::bit_independence(r, c, p),
        |r, c, p, max| quality::sparse(r, c, p, max),
        |r, c, p, _| quality::sparse_windows(r, c, p),
        |r, c, p, _| quality::appended_zeros(r, c, p),
        |r, c, p, _| quality::cyclic(r, c, p),
        |r, c, p, _| quality::grids(r, c, p),
        |r, c, p, _| quality::combinations(r, c, p),
    ];
    let reports: Vec<Report> = std::thread::scope(|scope| {
        let handles: Vec<_> = sections
            .iter()
            .map(|section| {
                let candidates = &candidates;
                scope.spawn(move || {
                    let mut report = Report::default();
                    section(&mut report, candidates, Profile::Full, sparse_max_len);
                    report
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a quality section panicked"))
            .collect()
    });
    let mut report = Report::default();
    for part in reports {
        report.measurements.extend(part.measurements);
    }
    let table = format!(
        "Sparse keys with up to 3 bits set at every length to {sparse_max_len} bytes.\n\n{}",
        report.table(&names)
    );
    println!("{table}");
    if let Some(path) = std::env::var_os("HASH_QUALITY_TABLE") {
        std::fs::write(&path, &table).expect("writing HASH_QUALITY_TABLE");
    }
    report.assert_no_worse();
}

//! Inputs from fuzzing (`fuzz/`, see FUZZING.md) kept as regression tests,
//! plus deterministic corruption of the fuzzer's seed messages.

use crate::proptests::check_regression;

fn seeds() -> Vec<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/parse_message");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .expect("seed directory")
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "seeds missing from {dir}");
    seeds
}

#[test]
fn seeds_parse() {
    for seed in seeds() {
        crate::Message::parse(bytes::Bytes::from(seed)).expect("every seed is valid");
    }
}

#[test]
fn every_prefix_of_every_seed() {
    for seed in seeds() {
        for len in 0..seed.len() {
            check_regression(&seed[..len]);
        }
    }
}

#[test]
fn every_single_bit_flip_of_every_seed() {
    for seed in seeds() {
        for i in 0..seed.len() {
            for bit in 0..8 {
                let mut corrupted = seed.clone();
                corrupted[i] ^= 1 << bit;
                check_regression(&corrupted);
            }
        }
    }
}

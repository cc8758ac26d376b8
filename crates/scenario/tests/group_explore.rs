#![allow(clippy::unwrap_used)]
mod common;
#[test]
#[ignore]
fn explore() {
    let path = std::env::var("GROUP_FILE").unwrap();
    let src = std::fs::read_to_string(&path).unwrap();
    let seeds: u64 = std::env::var("SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for seed in 0..seeds {
        let r = common::run_src(&src, seed);
        println!("{r}\n{:#?}", r.properties);
    }
}

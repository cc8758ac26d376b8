#![allow(clippy::disallowed_methods)]
fn main() {
    let data = vec![0x5au8; 262_144];
    let t = std::time::Instant::now();
    let mut x = 0u16;
    for _ in 0..1000 {
        x ^= viastack_sp::wire::checksum(&[std::hint::black_box(&data)]);
    }
    let e = t.elapsed();
    println!(
        "{x} {:?} per 256 KiB, {:.1} GB/s",
        e / 1000,
        262_144.0 * 1000.0 / e.as_secs_f64() / 1e9
    );
    let t = std::time::Instant::now();
    let mut v = Vec::with_capacity(300_000);
    for _ in 0..1000 {
        v.clear();
        v.extend_from_slice(std::hint::black_box(&data));
    }
    println!("memcpy {:?}", t.elapsed() / 1000);
}

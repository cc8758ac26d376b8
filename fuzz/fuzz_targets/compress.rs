//! Any bytes as a compressed message: decoding never panics and never allocates past the
//! bounds; and any bytes as a payload round-trip exactly through encode + decode.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Message;
use viastack_protocols::compress::{decode, encode, Compress, Config};

fuzz_target!(|data: &[u8]| {
    let config = Config {
        threshold: 16,
        max_size: 1 << 20,
    };
    // As a received message: a typed error or bytes within max_size.
    let mut m = Message::from_wire(data.to_vec());
    if decode(&mut m, &config).is_ok() {
        assert!(m.len() <= config.max_size);
    }
    // As a payload: the round trip is exact.
    let mut m = Message::from_payload(data);
    encode(&mut m, &config);
    assert!(m.len() <= data.len() + 1);
    let mut back = Message::from_wire(m.as_slice().to_vec());
    assert!(decode(&mut back, &config).is_ok());
    assert_eq!(back.as_slice(), data);
    // Through a kernel.
    common::feed(vec![Arc::new(Compress::new("compress", config))], data);
});

//! Any bytes as a `messagestore` layer message: decoding never panics, and what decodes
//! encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_protocols::messagestore::{decode, encode};

fuzz_target!(|data: &[u8]| {
    if let Some(m) = decode(data) {
        assert_eq!(encode(&m), data);
    }
});

//! Any bytes as a bundle datagram: the decoder accepts exactly what re-encodes to the same
//! bytes, and the same bytes (split at 0xff) arriving at a node whose channels run `device` +
//! `bundle` never panic.
#![no_main]

mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_protocols::bundle::{decode, encode_bundle, Bundle, Decoded};

fuzz_target!(|data: &[u8]| {
    if let Ok(Decoded::Bundle(ranges)) = decode(data) {
        let again = encode_bundle(ranges.iter().map(|r| &data[r.clone()]));
        assert_eq!(again, data, "a decoded bundle re-encodes to its bytes");
    }
    common::feed(vec![Arc::new(Bundle::new("bundle", 1400))], data);
});

//! Any bytes as datagrams at a node running `device` + `ttl`: nothing panics.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_protocols::ttl::Ttl;

fuzz_target!(|data: &[u8]| {
    common::feed(vec![Arc::new(Ttl::new("ttl", 64))], data);
});

//! Any bytes as datagrams at a node running `device` + `dedup` (a small window and source table,
//! so sliding and eviction are exercised): the header decoder and the window never panic.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_protocols::dedup::{Config, Dedup};

fuzz_target!(|data: &[u8]| {
    let config = Config {
        window: 64,
        max_sources: 2,
    };
    common::feed(vec![Arc::new(Dedup::new("dedup", config))], data);
});

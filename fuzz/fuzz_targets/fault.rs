//! Fault layers (all five, stacked, acting both ways) under arbitrary datagrams and timer
//! firings: nothing panics and held messages stay bounded.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::{Duration, LayerRef};
use viastack_protocols::fault::{Config, Fault, FaultLayer, Faulty};

fuzz_target!(|data: &[u8]| {
    let faults = [
        Fault::Duplicate,
        Fault::Corrupt,
        Fault::Reorder {
            hold: Duration::from_millis(2),
        },
        Fault::Delay {
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(3),
        },
        Fault::Drop,
    ];
    let layers: Vec<LayerRef> = faults
        .into_iter()
        .enumerate()
        .map(|(i, fault)| {
            let l: LayerRef = Arc::new(FaultLayer::new(
                format!("f{i}"),
                Config {
                    fault,
                    rate: 0.5,
                    direction: Faulty::Both,
                    max_held: 8,
                },
            ));
            l
        })
        .collect();
    common::feed(layers, data);
});

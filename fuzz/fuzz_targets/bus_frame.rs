//! Any bytes as a bus frame (crates/bus/src/wire.rs): the length check and the parser never
//! panic, and a frame that parses re-encodes to bytes that parse to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_bus::term::Arena;
use viastack_bus::wire::{frame_len, Frame};

fuzz_target!(|data: &[u8]| {
    let mut arena = Arena::new();
    let _ = frame_len(data, 1 << 20);
    if let Ok(f) = Frame::parse(&mut arena, data, 1 << 20) {
        let again = f.to_bytes();
        let g = Frame::parse(&mut arena, &again, 1 << 20).expect("a re-encoded frame parses");
        assert_eq!(f, g, "re-encoding changed the frame");
    }
});

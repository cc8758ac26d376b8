//! Any bytes as a bus term, both ways (crates/bus/src/saf.rs and term.rs): the binary decoder
//! and the text parser never panic; a decoded term re-encodes to the same bytes, and parsed
//! text prints to text that parses back to the same node (maximal sharing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_bus::saf;
use viastack_bus::term::Arena;

fuzz_target!(|data: &[u8]| {
    let mut arena = Arena::new();
    if let Ok(t) = saf::decode(&mut arena, data) {
        assert_eq!(saf::encode(&t), data, "re-encoding changed the stream");
        // Decoded symbols need not be valid names in text: printing must only not panic.
        let _ = arena.parse(&t.to_string());
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(t) = arena.parse(s) {
            let again = arena.parse(&t.to_string()).expect("printed text parses");
            assert!(again.ptr_eq(&t), "text round trip changed the term");
        }
    }
});

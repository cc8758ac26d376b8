//! Any bytes as a bus term, both ways (crates/bus/src/saf.rs and term.rs): the binary decoder
//! and the text parser never panic; a decoded term re-encodes to the same bytes, and parsed
//! text prints to text that parses back to the same node (maximal sharing). The in-place
//! decoder of mapped memfds (`saf::decode_shared`) gives the same term as `decode`, and the
//! segmented encoder (`saf::encode_segments`, a memfd written at `put`) the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_bus::saf;
use viastack_bus::term::Arena;

fuzz_target!(|data: &[u8]| {
    let mut arena = Arena::new();
    if let Ok(t) = saf::decode(&mut arena, data) {
        assert_eq!(saf::encode(&t), data, "re-encoding changed the stream");
        let shared = viastack_bus::term::Bytes::from(data.to_vec());
        let t2 = saf::decode_shared(&mut arena, &shared).expect("decode_shared as decode");
        assert!(t2.ptr_eq(&t), "decode_shared gave another term");
        let mut joined = Vec::new();
        for seg in saf::encode_segments(&t) {
            match seg {
                saf::Segment::Own(v) => joined.extend_from_slice(&v),
                saf::Segment::Blob(b) => joined.extend_from_slice(&b),
            }
        }
        assert_eq!(joined, data, "segments differ from the stream");
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

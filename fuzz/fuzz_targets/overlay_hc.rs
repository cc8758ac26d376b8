//! Any bytes as a hypercube control message: never panics; a message that parses re-encodes to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_overlay::wire::hc::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    assert_eq!(Packet::new_checked(data).is_ok(), Repr::parse_bytes(data).is_ok());
    let Ok(r) = Repr::parse_bytes(data) else {
        return;
    };
    let mut again = Vec::new();
    r.emit_into(&mut again).expect("a parsed message re-encodes");
    assert_eq!(again, data, "re-encoding changed the message");
});

//! Any bytes as an overlay application message: the view and the parser never panic, agree,
//! and a message that parses re-encodes to exactly the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_overlay::wire::app::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let checked = Packet::new_checked(data);
    let parsed = Repr::parse_bytes(data);
    assert_eq!(checked.is_ok(), parsed.is_ok(), "view and parser disagree");
    let (Ok(p), Ok(r)) = (checked, parsed) else {
        return;
    };
    let _ = (p.mode(), p.hop_limit(), p.src(), p.prev_hop(), p.dest());
    assert_eq!(p.extensions(), r.extensions);
    let mut again = Vec::new();
    r.emit_into(&mut again).expect("a parsed message re-encodes");
    assert_eq!(again, data, "re-encoding changed the message");
});

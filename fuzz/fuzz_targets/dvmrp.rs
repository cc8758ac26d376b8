//! Any bytes as a DVMRP message: never panics; the checked view and the repr agree on
//! validity, and a message that parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_mcast::wire::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    assert_eq!(Packet::new_checked(data).is_ok(), Repr::parse_bytes(data).is_ok());
    let Ok(r) = Repr::parse_bytes(data) else {
        return;
    };
    assert_eq!(r.buffer_len(), data.len());
    let again = r.to_vec().expect("a parsed message re-encodes");
    assert_eq!(again, data, "re-encoding changed the message");
});

//! Any bytes as an SP packet: the checked view, the parser and the checksum never panic, and a
//! packet that parses re-encodes to exactly the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_sp::wire::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (p.dest_id(), p.src_id(), p.priority(), p.cb(), p.flags().names().count());
    let _ = (p.pblock(), p.tblock(), p.mess_seq_no(), p.mess_ack_no(), p.sync_no());
    let _ = (p.window_size(), p.verify_checksum());
    if let Ok(r) = Repr::parse(&p) {
        let mut again = Vec::new();
        r.emit_into(p.payload(), &mut again).expect("a parsed payload fits");
        assert_eq!(again, data, "re-encoding changed the packet");
    }
});

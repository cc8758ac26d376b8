//! Any bytes as an SP packet: the checked view, the parser and the checksum never panic, a
//! packet that parses re-encodes to exactly the same bytes, and parsing it received in two
//! pieces (header, payload: `Repr::parse_split`, the in-place receive path) decides exactly as
//! parsing it whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_sp::wire::{Packet, Repr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let whole = Packet::new_checked(data).and_then(|p| Repr::parse(&p));
    let (head, payload) = data.split_at(data.len().min(HEADER_LEN));
    assert_eq!(Repr::parse_split(head, payload), whole, "split parse differs");
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

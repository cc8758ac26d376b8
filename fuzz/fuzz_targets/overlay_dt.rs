//! Any bytes as a DT control message: never panics; a message that parses re-encodes to the
//! same bytes and converts to a protocol message (with a socket-address substrate) or is refused.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use viastack_overlay::dt::Message;
use viastack_overlay::wire::dt::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    assert_eq!(Packet::new_checked(data).is_ok(), Repr::parse_bytes(data).is_ok());
    let Ok(r) = Repr::parse_bytes(data) else {
        return;
    };
    let mut again = Vec::new();
    r.emit_into(&mut again).expect("a parsed message re-encodes");
    assert_eq!(again, data, "re-encoding changed the message");
    if let Some(m) = r.to_message::<SocketAddr>() {
        let back: Option<Message<SocketAddr>> = Repr::from_message(&m).to_message();
        assert_eq!(back, Some(m));
    }
});

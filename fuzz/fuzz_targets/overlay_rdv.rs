//! Any bytes as a rendezvous message (`viastack overlay rendezvous`, the server every joining
//! node and partition leader talks to): never panics; a message that parses re-encodes to the
//! same bytes, and what a server would make of it (as UDP substrate addresses) never panics.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Instant;
use viastack_overlay::rendezvous::{Server, ServerConfig};
use viastack_overlay::wire::rdv::Repr;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Repr::parse_bytes(data) else {
        return;
    };
    let mut again = Vec::new();
    r.emit_into(&mut again).expect("a parsed message re-encodes");
    assert_eq!(again, data, "re-encoding changed the message");
    if let Some(m) = r.to_message::<SocketAddr>() {
        let mut s = Server::new(ServerConfig::default());
        s.handle_message(Instant::ZERO, m);
        while let Some((_, answer)) = s.poll_transmit() {
            let mut b = Vec::new();
            Repr::from_message(&answer).emit_into(&mut b).expect("answers encode");
        }
    }
});

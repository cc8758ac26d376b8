//! Any bytes as an IGMPv2 message, and as input to the IGMP router and host: never panics; a
//! message that parses re-encodes to the same first 8 bytes (RFC 2236 §2.5: longer messages are
//! read for their first 8 bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Instant;
use viastack_mcast::igmp::{self, Repr};
use viastack_mcast::{Addr, GlobalMemory};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Repr::parse(data) {
        assert_eq!(&r.to_bytes()[..], &data[..8], "re-encoding changed the message");
    }
    let t = igmp::Timers::rfc().scaled(0.01);
    let mut mem = GlobalMemory::new(Addr(5));
    let mut router = igmp::Router::new(Addr(5), 2, t, Instant::ZERO, &mut mem);
    router.handle_datagram(Instant::from_millis(1), 1, Addr(3), data, &mut mem);
    router.handle_timeout(Instant::from_millis(5_000), &mut mem);
    assert!(mem.check_invariants().is_ok());
    let mut host = igmp::Host::new(t, 7);
    host.join(Instant::ZERO, Addr(0xef00_0001));
    host.handle_datagram(Instant::from_millis(1), data);
    host.handle_timeout(Instant::from_millis(5_000));
});

//! Any bytes as multicast data arriving at a router and a host: never panics; a header that
//! parses re-encodes to the same 16 bytes, and forwarding never copies data that does not parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Instant;
use viastack_mcast::dvmrp::{Config, Interface, Timers};
use viastack_mcast::forward::{DataHeader, HEADER_LEN};
use viastack_mcast::node::{HostNode, RouterNode};
use viastack_mcast::{node_addr, Addr, Prefix};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = DataHeader::parse(data) {
        let again = h.to_vec(&data[HEADER_LEN..]).expect("a parsed header re-encodes");
        assert_eq!(again, data);
    }
    let cfg = Config {
        addr: node_addr(1),
        gen_id: 1,
        interfaces: vec![
            Interface {
                prefix: Prefix::of_link(0),
                metric: 1,
            },
            Interface {
                prefix: Prefix::of_link(1),
                metric: 1,
            },
        ],
        timers: Timers::rfc().scaled(0.01),
    };
    let mut r = RouterNode::new(cfg, 0.01, Instant::ZERO);
    r.handle_datagram(Instant::from_millis(1), 0, Addr(0x0a00_0002), data);
    r.handle_datagram(Instant::from_millis(2), 1, node_addr(2), data);
    r.handle_timeout(Instant::from_millis(3_000));
    assert!(r.mem.check_invariants().is_ok());
    let mut h = HostNode::new(Addr(0x0a00_0003), 0.01, 1);
    h.join(Instant::ZERO, Addr(0xef00_0001));
    h.handle_datagram(Instant::from_millis(1), data);
    while h.poll_delivery().is_some() {}
});

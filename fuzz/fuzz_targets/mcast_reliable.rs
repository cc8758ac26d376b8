//! Any bytes as reliable multicast traffic (issue 17): parsed as a control message (NACK,
//! stability report, session) and as reliable data, and fed to a source, a receiver and a
//! router: never panics; what parses re-encodes to the same bytes; buffers stay within their
//! capacities.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_kernel::Instant;
use viastack_mcast::reliable::{Config, Control, RData, Receiver, Repairer, Sender};
use viastack_mcast::{Addr, GlobalMemory};

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        send_capacity: 4,
        cache_capacity: 4,
        window: 8,
        ..Config::defaults()
    };
    let t = Instant::from_millis(1);
    let mut rx = Receiver::new(cfg, 1);
    let mut tx = Sender::new(cfg, Addr(0x0a00_0001), Addr(0xef01_0101));
    let mut rt = Repairer::new(cfg);
    let mem = GlobalMemory::new(Addr(0x0aff_0001));
    if let Ok(c) = Control::parse(data) {
        assert_eq!(c.to_vec(), data);
        rx.handle(t, &c);
        tx.handle(t, Addr(2), &c);
        rt.handle(t, 1, Addr(2), &c, &mem);
    }
    if let Ok(r) = RData::parse(data) {
        assert_eq!(RData::wrap(&RData::unwrap(data), r.trail), data);
        rx.handle_data(t, &r);
        rt.handle_data(t, 0, data, &mem);
    }
    for _ in 0..6 {
        let _ = tx.send(t, data);
    }
    assert!(tx.buffered() <= 4 && rt.cached() <= 4);
    rx.handle_timeout(Instant::from_millis(5_000));
    while rx.poll_transmit().is_some() {}
    while rx.poll_event().is_some() {}
});

//! Any bytes as datagrams arriving at a node whose channels run `device` + `reliable-fifo`,
//! which also sends to the fuzzer's "peers" so that ACKs meet real streams: DATA, ACK and NACK
//! headers are decoded, nothing panics, and the send and reorder buffers stay bounded.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    Dest, Direction, Duration, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId,
    Qos, Sendable,
};
use viastack_protocols::reliable::{Config, ReliableFifo, ReliableSession};

fuzz_target!(|data: &[u8]| {
    let config = Config {
        send_buffer: 8,
        send_window: 4,
        receive_window: 4,
        reorder_bytes: 256,
        rto_min: Duration::from_millis(1),
        rto_initial: Duration::from_millis(2),
        max_retries: 2,
        ..Config::default()
    };
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let layer: LayerRef = Arc::new(ReliableFifo::new("reliable-fifo", config));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), layer]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let ch = k.create_channel("a", &qos);
    if let Ok(mut c) = k.cursor(ch) {
        let _ = c.set_session(device);
    }
    let _ = k.start_channel(ch, Instant::ZERO);
    let rel = k.channel_sessions(ch).get(1).copied().flatten();
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        let now = Instant::from_millis(i as u64);
        let peer = NodeId(i as u32 % 3);
        let _ = k.inject(
            now,
            Event::sendable(
                SENDABLE.id(),
                Direction::Down,
                ch,
                Sendable::new(NodeId(0), Dest::Node(peer), Message::from_payload(&[i as u8])),
            ),
        );
        k.handle_datagram(now, device, peer, Message::from_wire(chunk.to_vec()));
        k.handle_timeout(now);
        while k.poll_output().is_some() {}
        if let Some(s) = rel.and_then(|r| k.session::<ReliableSession>(r)) {
            for p in 0..3 {
                assert!(s.pending(ch, NodeId(p)) <= 8);
                assert!(s.reorder_bytes(ch, NodeId(p)) <= 256);
            }
        }
    }
});

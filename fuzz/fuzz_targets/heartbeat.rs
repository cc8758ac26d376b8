//! Any bytes as datagrams arriving, at advancing times, at a node whose three channels share
//! one `heartbeat` session over one device: the kind byte and heartbeat header are decoded,
//! timers fire, and nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::Device;
use viastack_kernel::{Duration, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::heartbeat::{Config, Heartbeat};

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new("fd", NodeId(0), 4, Config::default()));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), fd.clone()]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let shared = k.create_session(&fd);
    for name in ["a", "b", "c"] {
        let ch = k.create_channel(name, &qos);
        if let Ok(mut c) = k.cursor(ch) {
            let _ = c.set_session(device);
            c.up();
            let _ = c.set_session(shared);
        }
        let _ = k.start_channel(ch, Instant::ZERO);
    }
    let mut now = Instant::ZERO;
    // Split the input into datagrams from several senders; the first byte of each chunk
    // moves time forward (so suspicions and returns happen).
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        if let Some(step) = chunk.first() {
            now += Duration::from_millis(u64::from(*step) * 4);
            k.handle_timeout(now);
        }
        k.handle_datagram(now, device, NodeId(i as u32 % 6), Message::from_wire(chunk.to_vec()));
        while k.poll_output().is_some() {}
    }
});

//! Any bytes as datagrams arriving, at advancing times, at a node running the group stack
//! (`device` + `heartbeat` + `vsync` + `total-order`, stacks/group.toml): each chunk is handed
//! up as heartbeat data (channel 0, kind 0) so the group decoders see it; timers fire, views
//! change, and nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_group::{vsync, TotalOrder, Vsync};
use viastack_kernel::layers::Device;
use viastack_kernel::{Duration, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::heartbeat::{self, Heartbeat};

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new("fd", NodeId(0), 4, heartbeat::Config::default()));
    let vs: LayerRef = Arc::new(Vsync::new("vs", NodeId(0), 4, vsync::Config::default()));
    let to: LayerRef = Arc::new(TotalOrder::new("to", NodeId(0), 64));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), fd, vs, to]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let ch = k.create_channel("g", &qos);
    if let Ok(mut c) = k.cursor(ch) {
        let _ = c.set_session(device);
    }
    let _ = k.start_channel(ch, Instant::ZERO);
    let mut now = Instant::ZERO;
    for (i, chunk) in data.split(|b| *b == 0xfe).enumerate() {
        if let Some(step) = chunk.first() {
            now += Duration::from_millis(u64::from(*step));
            k.handle_timeout(now);
        }
        let mut bytes = vec![0, 0, 0];
        bytes.extend_from_slice(chunk.get(1..).unwrap_or(&[]));
        k.handle_datagram(now, device, NodeId(1 + i as u32 % 3), Message::from_wire(bytes));
        while k.poll_output().is_some() {}
    }
});

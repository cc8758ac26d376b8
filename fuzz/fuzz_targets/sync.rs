//! Any bytes as datagrams arriving, at advancing times, at a node whose two media channels
//! share one `sync` session over one device: the sync header is decoded, media are held and
//! released, the buffer stays bounded, and nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::Device;
use viastack_kernel::{Duration, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::sync::{Config, Sync, SyncSession};

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let config = Config {
        capacity: 16,
        ..Config::default()
    };
    let sync: LayerRef = Arc::new(Sync::new("sync", config));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), sync.clone()]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let shared = k.create_session(&sync);
    for name in ["audio", "video"] {
        let ch = k.create_channel(name, &qos);
        if let Ok(mut c) = k.cursor(ch) {
            let _ = c.set_session(device);
            c.up();
            let _ = c.set_session(shared);
        }
        let _ = k.start_channel(ch, Instant::ZERO);
    }
    let mut now = Instant::from_millis(1);
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        if let Some(step) = chunk.first() {
            now += Duration::from_millis(u64::from(*step));
            k.handle_timeout(now);
        }
        k.handle_datagram(now, device, NodeId(i as u32 % 3), Message::from_wire(chunk.to_vec()));
        while k.poll_output().is_some() {}
        let held = k.session::<SyncSession>(shared).map_or(0, SyncSession::held);
        assert!(held <= 16, "the playout buffer exceeded its capacity: {held}");
    }
});

//! Any bytes as datagrams arriving at a node whose channels run `device` + `fragment` (a small
//! reassembly bound, time moving on): fragment headers are decoded, messages reassembled,
//! evicted or timed out, nothing panics and the bound holds.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::Device;
use viastack_kernel::{Duration, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::fragment::{Config, Fragment, FragmentSession};

const BOUND: usize = 8 * 1024;

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let layer: LayerRef = Arc::new(Fragment::new(
        "fragment",
        Config {
            mtu: 16,
            reassembly_timeout: Duration::from_millis(5),
            max_reassembly_bytes: BOUND,
        },
    ));
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
    let frag = k.channel_sessions(ch).get(1).copied().flatten();
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        let now = Instant::from_millis(i as u64);
        k.handle_datagram(now, device, NodeId(i as u32 % 3), Message::from_wire(chunk.to_vec()));
        k.handle_timeout(now);
        while k.poll_output().is_some() {}
        if let Some(s) = frag.and_then(|f| k.session::<FragmentSession>(f)) {
            assert!(s.reassembly_bytes() <= BOUND);
        }
    }
});

//! Any bytes as datagrams arriving at a node whose channels run `device` + `fragment` (a small
//! reassembly bound, time moving on): fragment headers are decoded, messages reassembled,
//! evicted or timed out, nothing panics and the bound holds. The first byte chooses whether a
//! layer between them promises reliable FIFO delivery, so both of fragment's modes (timers and
//! eviction; one partial per source, refusals sent back) meet hostile bytes.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::{Device, Ghost};
use viastack_kernel::{
    Delivery, Duration, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos,
};
use viastack_protocols::fragment::{Config, Fragment, FragmentSession};

const BOUND: usize = 8 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let path: LayerRef = Arc::new(if mode & 1 == 1 {
        Ghost::promising("transport", Delivery::RELIABLE_FIFO)
    } else {
        Ghost::new("transport")
    });
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let layer: LayerRef = Arc::new(Fragment::new(
        "fragment",
        Config {
            mtu: 16,
            reassembly_timeout: Duration::from_millis(5),
            max_reassembly_bytes: BOUND,
        },
    ));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), path, layer]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let ch = k.create_channel("a", &qos);
    if let Ok(mut c) = k.cursor(ch) {
        let _ = c.set_session(device);
    }
    let _ = k.start_channel(ch, Instant::ZERO);
    let frag = k.channel_sessions(ch).get(2).copied().flatten();
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

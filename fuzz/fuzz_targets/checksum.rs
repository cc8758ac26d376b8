//! Any bytes as datagrams arriving at a node whose channels run `device` + `checksum`: the CRC
//! header is decoded and checked, and nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::Device;
use viastack_kernel::{Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::checksum::Checksum;

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let layer: LayerRef = Arc::new(Checksum::new("checksum"));
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
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        k.handle_datagram(Instant::ZERO, device, NodeId(i as u32 % 3), Message::from_wire(chunk.to_vec()));
        while k.poll_output().is_some() {}
    }
});

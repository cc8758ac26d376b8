//! Any bytes as a datagram arriving at a node whose channels run `device` + `fifo`: the device's
//! channel tag and the fifo header are decoded, and nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::layers::Device;
use viastack_kernel::{Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};
use viastack_protocols::fifo::Fifo;

fuzz_target!(|data: &[u8]| {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let fifo: LayerRef = Arc::new(Fifo::new("fifo"));
    let Ok(qos) = Qos::new("q", vec![dev.clone(), fifo]) else {
        return;
    };
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    for name in ["a", "b"] {
        let ch = k.create_channel(name, &qos);
        if let Ok(mut c) = k.cursor(ch) {
            let _ = c.set_session(device);
        }
        let _ = k.start_channel(ch, Instant::ZERO);
    }
    // Split the input into several datagrams from several senders.
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        k.handle_datagram(Instant::ZERO, device, NodeId(i as u32 % 3), Message::from_wire(chunk.to_vec()));
        while k.poll_output().is_some() {}
    }
});

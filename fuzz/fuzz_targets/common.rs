//! Shared by the layer fuzz targets: a node whose two channels run `device` + the given layers,
//! fed the input split at 0xff bytes as datagrams from three senders, timers fired as time
//! advances by 1 ms per datagram.

use viastack_kernel::layers::Device;
use viastack_kernel::{Instant, Kernel, KernelConfig, LayerRef, Message, NodeId, Qos};

pub fn feed(layers: Vec<LayerRef>, data: &[u8]) {
    let dev: LayerRef = std::sync::Arc::new(Device::new("device", 0));
    let mut all = vec![dev.clone()];
    all.extend(layers);
    let Ok(qos) = Qos::new("q", all) else {
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
    for (i, chunk) in data.split(|b| *b == 0xff).enumerate() {
        let now = Instant::from_millis(i as u64);
        k.handle_timeout(now);
        k.handle_datagram(
            now,
            device,
            NodeId(i as u32 % 3),
            Message::from_wire(chunk.to_vec()),
        );
        while k.poll_output().is_some() {}
    }
}

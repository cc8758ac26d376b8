//! Any bytes as encrypted datagrams: authentication fails without panicking; and any bytes as a
//! plaintext round-trip through seal + open, while every one-bit change of the sealed packet is
//! refused.
#![no_main]

#[path = "common.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use viastack_kernel::{ChannelId, Message, NodeId};
use viastack_protocols::encrypt::{open, seal, Cipher, Config, Encrypt};

fuzz_target!(|data: &[u8]| {
    let key = [0x42u8; 32];
    let cipher = Cipher::new(&key, NodeId(1));
    let mut m = Message::from_payload(data);
    seal(&cipher, ChannelId(0), 7, data.len() as u64, &mut m);
    let sealed = m.as_slice().to_vec();
    let mut back = Message::from_wire(sealed.clone());
    assert!(open(&cipher, ChannelId(0), &mut back).is_ok());
    assert_eq!(back.as_slice(), data);
    if let Some(&b) = data.first() {
        let mut bad = sealed;
        let bit = usize::from(b) % (bad.len() * 8);
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(open(&cipher, ChannelId(0), &mut Message::from_wire(bad)).is_err());
    }
    let config = Config {
        key,
        replay_window: 64,
        max_peers: 2,
    };
    common::feed(vec![Arc::new(Encrypt::new("encrypt", config))], data);
});

//! Any bytes through the light-weight group decoder (`lwg`'s `LwgPdu`: data, joined, and the
//! move's switch, flushed and moved; crates/group/src/lwg.rs):
//! no panic, and whatever decodes re-encodes to the bytes it was read from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_group::wire::LwgPdu;

fuzz_target!(|data: &[u8]| {
    if let Ok((pdu, len)) = LwgPdu::parse(data) {
        let bytes = pdu.emit();
        assert_eq!(&bytes[..], &data[..len]);
    }
});

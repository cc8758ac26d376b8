//! Any bytes through the group decoders (`vsync`'s `Pdu`, `total-order`'s `TotalPdu`,
//! `causal-order`'s `CausalPdu`, `state-transfer`'s `StatePdu`): no
//! panic, and whatever decodes re-encodes to the bytes it was read from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_group::wire::{CausalPdu, Pdu, StatePdu, TotalPdu};

fuzz_target!(|data: &[u8]| {
    if let Ok((pdu, len)) = Pdu::parse(data) {
        let bytes = pdu.emit();
        assert_eq!(&bytes[..], &data[..len]);
    }
    if let Ok((pdu, len)) = TotalPdu::parse(data) {
        let bytes = pdu.emit();
        assert_eq!(&bytes[..], &data[..len]);
    }
    if let Ok((pdu, len)) = CausalPdu::parse(data) {
        let bytes = pdu.emit();
        assert_eq!(&bytes[..], &data[..len]);
    }
    if let Ok((pdu, len)) = StatePdu::parse(data) {
        let bytes = pdu.emit();
        assert_eq!(&bytes[..], &data[..len]);
    }
});

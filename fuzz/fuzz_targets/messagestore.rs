//! Any bytes as a `messagestore` layer message: decoding never panics, and what decodes
//! encodes back to the same bytes (with its root's hypercube label in version 2); the same for the spec-fetch payloads (issue 16 §4:
//! `SPEC_REQUEST` / `SPEC_RESPONSE`), whether inside a message or alone, and reassembling a
//! decoded chunk never panics. A batch (several messages for one next hop) decodes only when
//! all of its framing holds; its messages encode back to the same batch.
//! Repairs (MessageType 0xFA) and their acknowledgements (0xF9) are messages of this format:
//! covered by the same decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_protocols::messagestore::{
    decode, decode_batch, decode_labelled, encode, encode_batch, encode_labelled,
};
use viastack_protocols::specbundle::{
    decode_chunk, decode_request, encode_chunk, encode_request, Assembly, SPEC_REQUEST,
    SPEC_RESPONSE,
};

fn payloads(p: &[u8]) {
    if let Some(want) = decode_request(p) {
        assert_eq!(encode_request(want.as_ref()), p);
    }
    if let Some(c) = decode_chunk(p) {
        assert_eq!(encode_chunk(&c), p);
        let mut a = Assembly::new(&c);
        if let Some(b) = a.add(c.clone()) {
            assert_eq!(b.text.len(), c.total as usize);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some((m, label)) = decode_labelled(data) {
        assert_eq!(encode_labelled(&m, label), data);
        if label.is_none() {
            assert_eq!(encode(&m), data);
        }
        assert_eq!(decode(data).as_ref(), Some(&m));
        if matches!(m.message_type, SPEC_REQUEST | SPEC_RESPONSE) {
            payloads(m.payload.as_deref().unwrap_or(&[]));
        }
    }
    payloads(data);
    if let Some(ranges) = decode_batch(data) {
        assert!(ranges.len() >= 2);
        let parts: Vec<&[u8]> = ranges.iter().map(|r| &data[r.clone()]).collect();
        assert_eq!(encode_batch(&parts), data);
        for p in parts {
            if let Some(m) = decode(p) {
                assert_eq!(encode(&m), p);
            }
        }
    }
});

//! The `messagestore` layer's message format against `testdata/vectors/messagestore.json`:
//! every valid vector decodes to its fields and encodes back to its bytes; every invalid one is
//! refused (the layer counts it `malformed`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{hex, vectors};
use viastack_protocols::messagestore::{decode, decode_labelled, encode, encode_labelled};

#[test]
fn vectors_decode_encode_and_refuse() {
    let all = vectors("messagestore");
    assert!(all.len() >= 12);
    assert!(all.iter().any(|v| v.get("root_label").is_some()));
    for v in all {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let got = decode_labelled(&bytes);
        if v.get("error").is_some() {
            assert!(got.is_none(), "{name}: decoded {got:?}");
            assert!(decode(&bytes).is_none(), "{name}");
            continue;
        }
        let (m, label) = got.unwrap_or_else(|| panic!("{name}: refused"));
        assert_eq!(
            label.map(|l| u64::from(l.value())),
            v.get("root_label").map(|l| l.as_u64().unwrap()),
            "{name}"
        );
        assert_eq!(decode(&bytes).as_ref(), Some(&m), "{name}");
        let field = |k: &str| v[k].as_u64().unwrap();
        assert_eq!(u64::from(m.service_id), field("service_id"), "{name}");
        assert_eq!(m.message_id, field("message_id"), "{name}");
        assert_eq!(u64::from(m.message_type), field("message_type"), "{name}");
        assert_eq!(u64::from(m.delivery_mode), field("delivery_mode"), "{name}");
        assert_eq!(u64::from(m.hop_limit), field("hop_limit"), "{name}");
        assert_eq!(m.source.0, field("source"), "{name}");
        assert_eq!(m.destination.0, field("destination"), "{name}");
        assert_eq!(m.root.0, field("root"), "{name}");
        assert_eq!(m.seq, field("seq"), "{name}");
        match v.get("payload_hex").and_then(|p| p.as_str()) {
            Some(p) => assert_eq!(m.payload.as_deref(), Some(&hex(p)[..]), "{name}"),
            None => assert!(m.payload.is_none(), "{name}"),
        }
        assert_eq!(encode_labelled(&m, label), bytes, "{name}: re-encoded");
        if label.is_none() {
            assert_eq!(encode(&m), bytes, "{name}: re-encoded");
        }
    }
}

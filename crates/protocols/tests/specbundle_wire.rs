//! The spec-fetch payloads (issue 16 §4: `SPEC_REQUEST` / `SPEC_RESPONSE` of the
//! `messagestore` layer) against `testdata/vectors/specbundle.json`: every valid vector decodes
//! to its fields and encodes back to its bytes; every invalid one is refused (the layer counts
//! it `malformed`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{hex, to_hex, vectors};
use viastack_protocols::specbundle::{decode_chunk, decode_request, encode_chunk, encode_request};

#[test]
fn vectors_decode_encode_and_refuse() {
    let all = vectors("specbundle");
    assert!(all.len() >= 12);
    for v in all {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let bad = v.get("error").is_some();
        match v["kind"].as_str().unwrap() {
            "request" => {
                let got = decode_request(&bytes);
                if bad {
                    assert!(got.is_none(), "{name}: decoded {got:?}");
                    continue;
                }
                let want = got.unwrap_or_else(|| panic!("{name}: refused"));
                assert_eq!(
                    want.map(|h| to_hex(&h)).as_deref(),
                    v["want"].as_str(),
                    "{name}"
                );
                assert_eq!(encode_request(want.as_ref()), bytes, "{name}: re-encoded");
            }
            _ => {
                let got = decode_chunk(&bytes);
                if bad {
                    assert!(got.is_none(), "{name}: decoded {got:?}");
                    continue;
                }
                let c = got.unwrap_or_else(|| panic!("{name}: refused"));
                assert_eq!(to_hex(&c.hash), v["hash"].as_str().unwrap(), "{name}");
                assert_eq!(u64::from(c.total), v["total"].as_u64().unwrap(), "{name}");
                assert_eq!(u64::from(c.offset), v["offset"].as_u64().unwrap(), "{name}");
                assert_eq!(
                    c.signature.map(|s| to_hex(&s.key)).as_deref(),
                    v["key"].as_str(),
                    "{name}"
                );
                assert_eq!(
                    c.signature.map(|s| to_hex(&s.sig)).as_deref(),
                    v["sig"].as_str(),
                    "{name}"
                );
                assert_eq!(to_hex(&c.data), v["data_hex"].as_str().unwrap(), "{name}");
                assert_eq!(encode_chunk(&c), bytes, "{name}: re-encoded");
            }
        }
    }
}

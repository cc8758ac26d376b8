//! The DVMRP hex vectors in `testdata/vectors/dvmrp.json`: probes (with and without
//! neighbours), reports (connected, unreachable, poison-reverse metrics, default and host
//! routes, empty), prunes, grafts and graft acks, and invalid messages with the error class the decoder must give. Each valid
//! vector decodes to its fields and re-encodes to the same bytes.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde_json::Value;
use viastack_mcast::wire::{Packet, Repr, WireError};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn class(e: WireError) -> &'static str {
    match e {
        WireError::Truncated { .. } => "truncated",
        WireError::Type(_) => "type",
        WireError::Version { .. } => "version",
        WireError::Reserved(_) => "reserved",
        WireError::Length { .. } => "length",
        WireError::Prefix { .. } => "prefix",
        WireError::Metric { .. } => "metric",
        WireError::Buffer { .. } => "buffer",
        WireError::BodyLength { .. } => "body_length",
        WireError::Group => "group",
        WireError::Source => "source",
    }
}

#[test]
fn dvmrp_vectors() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/dvmrp.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    let (mut valid, mut invalid) = (0, 0);
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = Repr::parse_bytes(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            assert!(Packet::new_checked(&bytes[..]).is_err(), "{name}");
            invalid += 1;
            continue;
        }
        let r = Repr::parse_bytes(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(sg) = v.get("prune_graft") {
            let kind = sg["kind"].as_str().unwrap();
            let (k, source, group, lifetime, seq) = match &r {
                Repr::Prune {
                    source,
                    group,
                    lifetime_ms,
                    seq,
                } => ("prune", source, group, Some(u64::from(*lifetime_ms)), seq),
                Repr::Graft { source, group, seq } => ("graft", source, group, None, seq),
                Repr::GraftAck { source, group, seq } => ("graft_ack", source, group, None, seq),
                _ => panic!("{name}: decoded {r:?}"),
            };
            assert_eq!(Some(u64::from(*seq)), sg["seq"].as_u64(), "{name}");
            assert_eq!(k, kind, "{name}");
            assert_eq!(source.to_string(), sg["source"].as_str().unwrap(), "{name}");
            assert_eq!(group.to_string(), sg["group"].as_str().unwrap(), "{name}");
            assert_eq!(lifetime, sg["lifetime_ms"].as_u64(), "{name}");
            assert_eq!(r.to_vec().unwrap(), bytes, "{name}: re-encoding differs");
            valid += 1;
            continue;
        }
        match (&r, v.get("probe"), v.get("report")) {
            (Repr::Probe { gen_id, neighbors }, Some(p), None) => {
                assert_eq!(u64::from(*gen_id), p["gen_id"].as_u64().unwrap(), "{name}");
                let want: Vec<&str> = p["neighbors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap())
                    .collect();
                let got: Vec<String> = neighbors.iter().map(ToString::to_string).collect();
                assert_eq!(got, want, "{name}");
            }
            (Repr::Report { entries }, None, Some(rep)) => {
                let want: Vec<(String, u64)> = rep
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        (
                            e["prefix"].as_str().unwrap().to_string(),
                            e["metric"].as_u64().unwrap(),
                        )
                    })
                    .collect();
                let got: Vec<(String, u64)> = entries
                    .iter()
                    .map(|e| (e.prefix.to_string(), u64::from(e.metric)))
                    .collect();
                assert_eq!(got, want, "{name}");
            }
            _ => panic!("{name}: decoded {r:?}, which does not match the vector's kind"),
        }
        assert_eq!(r.to_vec().unwrap(), bytes, "{name}: re-encoding differs");
        valid += 1;
    }
    assert!(
        valid >= 4 && invalid >= 10,
        "{valid} valid, {invalid} invalid"
    );
}

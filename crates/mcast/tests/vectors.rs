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

fn load(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors")
        .join(name);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["vectors"].as_array().unwrap().clone()
}

/// The IGMPv2 vectors in `testdata/vectors/igmp.json`: queries (general, group-specific),
/// reports (v2, v1), leaves, an unknown type, trailing bytes, and invalid messages with their
/// error class. Each valid vector decodes to its fields and re-encodes to its first 8 bytes.
#[test]
fn igmp_vectors() {
    use viastack_mcast::igmp::wire::WireError as E;
    use viastack_mcast::igmp::Repr;
    let (mut valid, mut invalid) = (0, 0);
    for v in load("igmp.json") {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = Repr::parse(&bytes).unwrap_err();
            let class = match got {
                E::Truncated(_) => "truncated",
                E::Checksum => "checksum",
                E::Group(_) => "group",
            };
            assert_eq!(class, e, "{name}: {got}");
            invalid += 1;
            continue;
        }
        let r = Repr::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = &v["igmp"];
        let group = |g: Option<viastack_mcast::Addr>| g.map(|g| g.to_string());
        match (want["kind"].as_str().unwrap(), r) {
            ("query", Repr::Query { max_resp, group: g }) => {
                assert_eq!(
                    u64::from(max_resp),
                    want["max_resp"].as_u64().unwrap(),
                    "{name}"
                );
                assert_eq!(group(g).as_deref(), want["group"].as_str(), "{name}");
            }
            ("report", Repr::Report { group: g, v1 }) => {
                assert_eq!(g.to_string(), want["group"].as_str().unwrap(), "{name}");
                assert_eq!(v1, want["v1"].as_bool().unwrap(), "{name}");
            }
            ("leave", Repr::Leave { group: g }) => {
                assert_eq!(g.to_string(), want["group"].as_str().unwrap(), "{name}");
            }
            ("unknown", Repr::Unknown(t)) => {
                assert_eq!(u64::from(t), want["type"].as_u64().unwrap(), "{name}");
            }
            (k, r) => panic!("{name}: decoded {r:?}, the vector says {k}"),
        }
        assert_eq!(
            &r.to_bytes()[..],
            &bytes[..8],
            "{name}: re-encoding differs"
        );
        valid += 1;
    }
    assert!(
        valid >= 6 && invalid >= 5,
        "{valid} valid, {invalid} invalid"
    );
}

/// The multicast data vectors in `testdata/vectors/mcast.json`.
#[test]
fn multicast_data_vectors() {
    use viastack_mcast::forward::{DataError as E, DataHeader, HEADER_LEN};
    let (mut valid, mut invalid) = (0, 0);
    for v in load("mcast.json") {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = DataHeader::parse(&bytes).unwrap_err();
            let class = match got {
                E::Truncated(_) => "truncated",
                E::Type(_) => "type",
                E::Reserved => "reserved",
                E::Group => "group",
            };
            assert_eq!(class, e, "{name}: {got}");
            invalid += 1;
            continue;
        }
        let h = DataHeader::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = &v["data"];
        assert_eq!(u64::from(h.ttl), want["ttl"].as_u64().unwrap(), "{name}");
        assert_eq!(
            h.source.to_string(),
            want["source"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(
            h.group.to_string(),
            want["group"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(u64::from(h.seq), want["seq"].as_u64().unwrap(), "{name}");
        let payload = &bytes[HEADER_LEN..];
        assert_eq!(
            payload,
            &hex(want["payload"].as_str().unwrap())[..],
            "{name}"
        );
        assert_eq!(
            h.to_vec(payload).unwrap(),
            bytes,
            "{name}: re-encoding differs"
        );
        valid += 1;
    }
    assert!(
        valid >= 2 && invalid >= 4,
        "{valid} valid, {invalid} invalid"
    );
}

/// The reliable multicast vectors in `testdata/vectors/mcast-reliable.json`: reliable data
/// (the `0x31` header inside a data payload), NACK, stability report, session, and malformed
/// ones with their error class.
#[test]
fn reliable_multicast_vectors() {
    use viastack_mcast::reliable::{Control, RData, RelError as E, RDATA_LEN};
    let class = |e: E| match e {
        E::Truncated { .. } => "truncated",
        E::Type(_) => "type",
        E::Reserved => "reserved",
        E::Count(_) => "count",
        E::Trailing(_) => "trailing",
        E::Group => "group",
    };
    let (mut valid, mut invalid) = (0, 0);
    for v in load("mcast-reliable.json") {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = if bytes.first() == Some(&0x30) {
                RData::parse(&bytes).unwrap_err()
            } else {
                Control::parse(&bytes).unwrap_err()
            };
            assert_eq!(class(got), e, "{name}: {got}");
            invalid += 1;
            continue;
        }
        if let Some(want) = v.get("rdata") {
            let r = RData::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.data.source.to_string(), want["source"].as_str().unwrap());
            assert_eq!(r.data.group.to_string(), want["group"].as_str().unwrap());
            assert_eq!(u64::from(r.data.seq), want["seq"].as_u64().unwrap());
            assert_eq!(u64::from(r.trail), want["trail"].as_u64().unwrap());
            let payload = &bytes[viastack_mcast::forward::HEADER_LEN + RDATA_LEN..];
            assert_eq!(payload, &hex(want["payload"].as_str().unwrap())[..]);
            let plain = RData::unwrap(&bytes);
            assert_eq!(RData::wrap(&plain, r.trail), bytes, "{name}: re-encoding");
            valid += 1;
            continue;
        }
        let want = &v["control"];
        let c = Control::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let u = |k: &str| want[k].as_u64().unwrap() as u32;
        let s = |k: &str| want[k].as_str().unwrap().to_string();
        match (&c, want["kind"].as_str().unwrap()) {
            (
                Control::Nack {
                    source,
                    group,
                    seqs,
                },
                "nack",
            ) => {
                assert_eq!(
                    (source.to_string(), group.to_string()),
                    (s("source"), s("group"))
                );
                let w: Vec<u32> = want["seqs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as u32)
                    .collect();
                assert_eq!(seqs, &w, "{name}");
            }
            (
                Control::Stable {
                    source,
                    group,
                    stable,
                    member,
                },
                "stable",
            ) => {
                assert_eq!(
                    (source.to_string(), group.to_string()),
                    (s("source"), s("group"))
                );
                assert_eq!(*stable, u("stable"), "{name}");
                assert_eq!(*member, want["member"].as_bool().unwrap(), "{name}");
            }
            (
                Control::Session {
                    ttl,
                    source,
                    group,
                    next,
                    trail,
                },
                "session",
            ) => {
                assert_eq!(
                    (source.to_string(), group.to_string()),
                    (s("source"), s("group"))
                );
                assert_eq!(
                    (u32::from(*ttl), *next, *trail),
                    (u("ttl"), u("next"), u("trail"))
                );
            }
            (c, k) => panic!("{name}: decoded {c:?}, vector says {k}"),
        }
        assert_eq!(c.to_vec(), bytes, "{name}: re-encoding differs");
        valid += 1;
    }
    assert!(
        valid >= 4 && invalid >= 8,
        "{valid} valid, {invalid} invalid"
    );
}

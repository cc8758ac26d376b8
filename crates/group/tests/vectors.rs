//! The group hex vectors in `testdata/vectors/group.json` (written from docs/WIRE.md, not from
//! this code): every valid `vsync` and `total-order` packet decodes to the fields the file
//! names and re-encodes to the same bytes; every invalid one gives the error class named.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde_json::Value;
use viastack_group::wire::{Cut, Member, Pdu, TotalPdu, ViewId, WireError};
use viastack_kernel::NodeId;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn class(e: WireError) -> &'static str {
    match e {
        WireError::Truncated => "truncated",
        WireError::Version(_) => "version",
        WireError::Kind(_) => "kind",
        WireError::TooLong(_) => "too_long",
        WireError::Malformed(_) => "malformed",
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

fn member(v: &Value) -> Member {
    Member {
        node: NodeId(u(&v[0]) as u32),
        epoch: u(&v[1]) as u32,
    }
}

fn members(v: &Value) -> Vec<Member> {
    v.as_array().unwrap().iter().map(member).collect()
}

fn view(v: &Value) -> ViewId {
    ViewId {
        counter: u(&v["counter"]),
        coord: member(&v["coord"]),
    }
}

fn digest(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(u).collect()
}

fn doc() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/group.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn vsync_vectors() {
    let doc = doc();
    let (mut valid, mut invalid) = (0, 0);
    for v in doc["vsync"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = Pdu::parse(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            invalid += 1;
            continue;
        }
        let (pdu, len) = Pdu::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match v["kind"].as_str().unwrap() {
            "data" => Pdu::Data {
                view: view(&v["view"]),
                origin: member(&v["origin"]),
                seq: u(&v["seq"]),
            },
            "status" => Pdu::Status {
                view: view(&v["view"]),
                from: member(&v["from_"]),
                digest: digest(&v["digest"]),
            },
            "nak" => Pdu::Nak {
                view: view(&v["view"]),
                origin: NodeId(u(&v["origin"]) as u32),
                first: u(&v["first"]),
                last: u(&v["last"]),
            },
            "flush" => Pdu::Flush {
                proposal: view(&v["proposal"]),
                members: members(&v["members"]),
            },
            "flush_ok" => Pdu::FlushOk {
                proposal: view(&v["proposal"]),
                from: member(&v["from_"]),
                old: view(&v["old"]),
                digest: digest(&v["digest"]),
            },
            "flush_no" => Pdu::FlushNo {
                proposal: view(&v["proposal"]),
                from: member(&v["from_"]),
                accepted: u(&v["accepted"]),
            },
            "new_view" => Pdu::NewView {
                view: view(&v["view"]),
                members: members(&v["members"]),
                cuts: v["cuts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| Cut {
                        old: view(&c["old"]),
                        upto: digest(&c["upto"]),
                        holders: c["holders"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|h| NodeId(u(h) as u32))
                            .collect(),
                    })
                    .collect(),
            },
            "beacon" => Pdu::Beacon {
                view: view(&v["view"]),
                members: members(&v["members"]),
            },
            "leave" => Pdu::Leave {
                view: view(&v["view"]),
                from: member(&v["from_"]),
            },
            other => panic!("{name}: unknown kind {other}"),
        };
        assert_eq!(pdu, want, "{name}");
        let payload = v["payload_hex"].as_str().map(hex).unwrap_or_default();
        assert_eq!(&bytes[len..], &payload[..], "{name}: payload");
        let mut again = pdu.emit();
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes, "{name}: re-encoding");
        valid += 1;
    }
    assert!(
        valid >= 9 && invalid >= 8,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn total_order_vectors() {
    let doc = doc();
    let mut n = 0;
    for v in doc["total"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        n += 1;
        if let Some(e) = v["error"].as_str() {
            let got = TotalPdu::parse(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            continue;
        }
        let (pdu, len) = TotalPdu::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match v["kind"].as_str().unwrap() {
            "data" => TotalPdu::Data {
                local: u(&v["local"]),
            },
            "order" => TotalPdu::Order {
                view: view(&v["view"]),
                entries: v["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| (NodeId(u(&e[0]) as u32), u(&e[1])))
                    .collect(),
            },
            other => panic!("{name}: unknown kind {other}"),
        };
        assert_eq!(pdu, want, "{name}");
        let payload = v["payload_hex"].as_str().map(hex).unwrap_or_default();
        let mut again = pdu.emit();
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes, "{name}: re-encoding");
        assert_eq!(&bytes[len..], &payload[..]);
    }
    assert!(n >= 4);
}

#[test]
fn causal_order_vectors() {
    use viastack_group::wire::CausalPdu;
    let doc = doc();
    let mut n = 0;
    for v in doc["causal"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        n += 1;
        if let Some(e) = v["error"].as_str() {
            let got = CausalPdu::parse(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            continue;
        }
        let (pdu, len) = CausalPdu::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = CausalPdu {
            view: view(&v["view"]),
            sender: u(&v["sender"]) as u16,
            vc: digest(&v["vc"]),
        };
        assert_eq!(pdu, want, "{name}");
        let payload = hex(v["payload_hex"].as_str().unwrap());
        assert_eq!(&bytes[len..], &payload[..], "{name}");
        let mut again = pdu.emit();
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes, "{name}: re-encoding");
    }
    assert!(n >= 4);
}

#[test]
fn state_transfer_vectors() {
    use viastack_group::wire::StatePdu;
    let doc = doc();
    let mut n = 0;
    for v in doc["state"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        n += 1;
        if let Some(e) = v["error"].as_str() {
            let got = StatePdu::parse(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            continue;
        }
        let (pdu, len) = StatePdu::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match v["kind"].as_str().unwrap() {
            "data" => StatePdu::Data,
            _ => StatePdu::State {
                view: view(&v["view"]),
                from: (!v["from"].is_null()).then(|| view(&v["from"])),
                count: u(&v["count"]),
                hash: u(&v["hash"]),
            },
        };
        assert_eq!(pdu, want, "{name}");
        let payload = v["payload_hex"].as_str().map(hex).unwrap_or_default();
        assert_eq!(&bytes[len..], &payload[..], "{name}");
        let mut again = pdu.emit();
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes, "{name}: re-encoding");
    }
    assert!(n >= 6);
}

#[test]
fn lwg_vectors() {
    use viastack_group::wire::LwgPdu;
    let doc = doc();
    let (mut valid, mut invalid) = (0, 0);
    for v in doc["lwg"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        if let Some(e) = v["error"].as_str() {
            let got = LwgPdu::parse(&bytes).unwrap_err();
            assert_eq!(class(got), e, "{name}: {got}");
            invalid += 1;
            continue;
        }
        let (pdu, len) = LwgPdu::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = match v["kind"].as_str().unwrap() {
            "data" => LwgPdu::Data {
                group: u(&v["group"]) as u32,
            },
            "switch" => LwgPdu::Switch {
                group: u(&v["group"]) as u32,
                to: u(&v["to"]) as u32,
                generation: u(&v["generation"]) as u32,
            },
            "flushed" => LwgPdu::Flushed {
                group: u(&v["group"]) as u32,
            },
            "moved" => LwgPdu::Moved {
                view: view(&v["view"]),
                group: u(&v["group"]) as u32,
                generation: u(&v["generation"]) as u32,
                open: v["open"].as_bool().unwrap(),
            },
            "joined_at" => LwgPdu::JoinedAt {
                view: view(&v["view"]),
                groups: v["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (u(&p[0]) as u32, u(&p[1]) as u32))
                    .collect(),
            },
            _ => LwgPdu::Joined {
                view: view(&v["view"]),
                groups: v["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| u(g) as u32)
                    .collect(),
            },
        };
        assert_eq!(pdu, want, "{name}");
        let payload = v["payload_hex"].as_str().map(hex).unwrap_or_default();
        assert_eq!(&bytes[len..], &payload[..], "{name}");
        let mut again = pdu.emit();
        again.extend_from_slice(&payload);
        assert_eq!(again, bytes, "{name}: re-encoding");
        valid += 1;
    }
    assert!(
        valid >= 8 && invalid >= 9,
        "{valid} valid, {invalid} invalid"
    );
}

//! The overlay hex vectors in `testdata/vectors/overlay/`: application messages (every delivery
//! mode, both address types, payload and MessageStore extensions, an unknown extension kept),
//! DT control messages (every type, with and without CW/CCW, UDP and simulated substrates),
//! hypercube control messages, and invalid datagrams with the error the decoder must give.
//!
//! The files are written by this test with `OVERLAY_BLESS=1` from the encoders and always
//! checked against the decoders: `fields` is what the decoder reads, `hex` re-encodes exactly.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{json, Value};
use viastack_overlay::wire::app::{self, Address, DeliveryMode, Extension, MessageType};
use viastack_overlay::wire::{dt, hc, rdv, SubstrateKind, WireError, WireSubstrate};
use viastack_overlay::{DtAddr, HcLabel, SimAddr};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/overlay")
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn addr_json(a: Address) -> Value {
    match a {
        Address::Dt(p) => json!({"dt": [p.x(), p.y()]}),
        Address::Hc(l) => json!({"hc": l.value()}),
    }
}

fn sub_json(s: &viastack_overlay::wire::SubstrateRepr) -> Value {
    let kind = match s.kind() {
        SubstrateKind::Sim => "sim".to_string(),
        SubstrateKind::Udp4 => "udp4".to_string(),
        SubstrateKind::Udp6 => "udp6".to_string(),
        SubstrateKind::Unknown(n) => format!("unknown({n})"),
    };
    json!({"kind": kind, "hex": to_hex(s.bytes())})
}

fn app_fields(b: &[u8]) -> Value {
    let r = app::Repr::parse_bytes(b).unwrap();
    let exts: Vec<Value> = r
        .extensions
        .iter()
        .map(|e| match e {
            Extension::Payload(p) => json!({"payload": to_hex(p)}),
            Extension::MessageStore {
                service_id,
                message_id,
                message_type,
            } => json!({"message_store": {"service_id": service_id, "message_id": message_id,
                "message_type": message_type.to_u8()}}),
            Extension::Unknown { kind, body } => {
                json!({"unknown": {"kind": kind, "body": to_hex(body)}})
            }
        })
        .collect();
    json!({"mode": r.mode.to_u8(), "hop_limit": r.hop_limit, "src": addr_json(r.src),
        "prev_hop": addr_json(r.prev_hop), "dest": addr_json(r.dest), "extensions": exts})
}

fn peer_json(p: &Option<dt::WirePeer>) -> Value {
    match p {
        None => Value::Null,
        Some((a, s)) => json!({"addr": [a.x(), a.y()], "substrate": sub_json(s)}),
    }
}

fn dt_fields(b: &[u8]) -> Value {
    match dt::Repr::parse_bytes(b).unwrap() {
        dt::Repr::HelloNeighbor { src, cw, ccw } => json!({"type": "HelloNeighbor",
            "src": [src.x(), src.y()], "cw": peer_json(&cw), "ccw": peer_json(&ccw)}),
        dt::Repr::HelloNotNeighbor { src, cw, ccw } => json!({"type": "HelloNotNeighbor",
            "src": [src.x(), src.y()], "cw": peer_json(&cw), "ccw": peer_json(&ccw)}),
        dt::Repr::Goodbye { src } => json!({"type": "Goodbye", "src": [src.x(), src.y()]}),
        dt::Repr::NewNode { node, hops } => json!({"type": "NewNode", "hops": hops,
            "node": peer_json(&Some(node))}),
        dt::Repr::Unknown { kind, body } => {
            json!({"type": format!("unknown({kind})"), "body": to_hex(body)})
        }
    }
}

fn hc_fields(b: &[u8]) -> Value {
    let r = hc::Repr::parse_bytes(b).unwrap();
    let mut v = json!({"type": format!("{:?}", r.kind), "hops": r.hops, "label": r.label.value(),
        "value": r.value, "substrate": r.substrate.as_ref().map(sub_json)});
    if let Some(c) = r.cube {
        v["cube"] = json!(c);
    }
    v
}

fn rdv_fields(b: &[u8]) -> Value {
    match rdv::Repr::parse_bytes(b).unwrap() {
        rdv::Repr::Register { leader, node } => {
            json!({"type": "Register", "leader": leader, "node": sub_json(&node)})
        }
        rdv::Repr::Query { node } => json!({"type": "Query", "node": sub_json(&node)}),
        rdv::Repr::Members(v) => json!({"type": "Members", "members": v
            .iter()
            .map(|(l, s)| json!({"leader": l, "node": sub_json(s)}))
            .collect::<Vec<_>>()}),
    }
}

fn p(x: i32, y: i32) -> DtAddr {
    DtAddr::new(x, y).unwrap()
}

fn udp(s: &str) -> viastack_overlay::wire::SubstrateRepr {
    s.parse::<SocketAddr>().unwrap().to_wire()
}

fn generate() -> Vec<(&'static str, &'static str, Vec<Value>)> {
    let mut apps = Vec::new();
    let payload = b"hello overlay";
    let cases: Vec<(&str, app::Repr)> = vec![
        (
            "unicast, DT addresses, payload only",
            app::Repr {
                mode: DeliveryMode::Unicast,
                hop_limit: 255,
                src: Address::Dt(p(100, 100)),
                prev_hop: Address::Dt(p(200, 200)),
                dest: Address::Dt(p(-300, 300)),
                extensions: vec![Extension::Payload(payload)],
            },
        ),
        (
            "multicast data message of service 1 (MessageStore + payload)",
            app::Repr {
                mode: DeliveryMode::Multicast,
                hop_limit: 16,
                src: Address::Dt(p(1, 2)),
                prev_hop: Address::Dt(p(3, 4)),
                dest: Address::Dt(p(0, 0)),
                extensions: vec![
                    Extension::MessageStore {
                        service_id: 1,
                        message_id: 0x0102_0304_0506_0708,
                        message_type: MessageType::Data,
                    },
                    Extension::Payload(payload),
                ],
            },
        ),
        (
            "flood control message (MessageStore only, type 3), hypercube labels",
            app::Repr {
                mode: DeliveryMode::Flood,
                hop_limit: 8,
                src: Address::Hc(HcLabel::new(5)),
                prev_hop: Address::Hc(HcLabel::new(7)),
                dest: Address::Hc(HcLabel::new(0)),
                extensions: vec![Extension::MessageStore {
                    service_id: 7,
                    message_id: 42,
                    message_type: MessageType::Service(3),
                }],
            },
        ),
        (
            "service request (message type 0xff)",
            app::Repr {
                mode: DeliveryMode::Unicast,
                hop_limit: 255,
                src: Address::Hc(HcLabel::new(1)),
                prev_hop: Address::Hc(HcLabel::new(1)),
                dest: Address::Hc(HcLabel::new(3)),
                extensions: vec![Extension::MessageStore {
                    service_id: 9,
                    message_id: 1,
                    message_type: MessageType::ServiceRequest,
                }],
            },
        ),
        (
            "unknown extension 0x40 kept, unknown delivery mode 7 kept, no extension after",
            app::Repr {
                mode: DeliveryMode::Unknown(7),
                hop_limit: 1,
                src: Address::Dt(p(0, 0)),
                prev_hop: Address::Dt(p(0, 0)),
                dest: Address::Dt(p(0, 0)),
                extensions: vec![
                    Extension::Unknown {
                        kind: 0x40,
                        body: &[0xde, 0xad],
                    },
                    Extension::Payload(&[]),
                ],
            },
        ),
        (
            "no extension at all",
            app::Repr {
                mode: DeliveryMode::Multicast,
                hop_limit: 0,
                src: Address::Hc(HcLabel::new(0xffff_ffff)),
                prev_hop: Address::Hc(HcLabel::new(0)),
                dest: Address::Hc(HcLabel::new(0)),
                extensions: vec![],
            },
        ),
    ];
    for (name, r) in cases {
        let mut b = Vec::new();
        r.emit_into(&mut b).unwrap();
        assert_eq!(b.len(), r.buffer_len());
        apps.push(json!({"name": name, "hex": to_hex(&b), "fields": app_fields(&b)}));
    }

    let mut dts = Vec::new();
    let cases: Vec<(&str, dt::Repr)> = vec![
        (
            "HelloNeighbor with CW and CCW (UDP substrates)",
            dt::Repr::HelloNeighbor {
                src: p(100, 200),
                cw: Some((p(150, 250), udp("10.0.0.2:9000"))),
                ccw: Some((p(50, 260), udp("[fe80::1]:9001"))),
            },
        ),
        (
            "HelloNeighbor alone (no CW, no CCW)",
            dt::Repr::HelloNeighbor {
                src: p(-5, 7),
                cw: None,
                ccw: None,
            },
        ),
        (
            "HelloNotNeighbor with CCW only (simulated substrate)",
            dt::Repr::HelloNotNeighbor {
                src: p(1, 1),
                cw: None,
                ccw: Some((p(2, 2), SimAddr(77).to_wire())),
            },
        ),
        (
            "Goodbye",
            dt::Repr::Goodbye {
                src: p(DtAddr::MAX_COORD, -DtAddr::MAX_COORD),
            },
        ),
        (
            "NewNode with 64 hops left",
            dt::Repr::NewNode {
                node: (p(300, 400), udp("192.168.1.9:5000")),
                hops: 64,
            },
        ),
        (
            "unknown type 9 kept with its body",
            dt::Repr::Unknown {
                kind: 9,
                body: &[0, 1, 2],
            },
        ),
    ];
    for (name, r) in cases {
        let mut b = Vec::new();
        r.emit_into(&mut b).unwrap();
        assert_eq!(b.len(), r.buffer_len());
        dts.push(json!({"name": name, "hex": to_hex(&b), "fields": dt_fields(&b)}));
    }

    let mut hcs = Vec::new();
    let sim = SimAddr(3).to_wire();
    let cases: Vec<(&str, hc::Repr)> = vec![
        (
            "Beacon from HRoot 0b110, sequence 5",
            hc::Repr {
                kind: hc::MessageKind::Beacon,
                hops: 0,
                label: HcLabel::new(0b110),
                value: 5,
                substrate: Some(udp("10.0.0.1:7000")),
                cube: None,
            },
        ),
        (
            "Ping from 0b011",
            hc::Repr {
                kind: hc::MessageKind::Ping,
                hops: 0,
                label: HcLabel::new(0b011),
                value: 0,
                substrate: None,
                cube: None,
            },
        ),
        (
            "Lookup for 0b101 from 0b100, 12 hops left",
            hc::Repr {
                kind: hc::MessageKind::Lookup,
                hops: 12,
                label: HcLabel::new(0b101),
                value: 0b100,
                substrate: Some(sim),
                cube: None,
            },
        ),
        (
            "Join",
            hc::Repr {
                kind: hc::MessageKind::Join,
                hops: 0,
                label: HcLabel::new(0),
                value: 0,
                substrate: Some(sim),
                cube: None,
            },
        ),
        (
            "Assign 0b111",
            hc::Repr {
                kind: hc::MessageKind::Assign,
                hops: 0,
                label: HcLabel::new(0b111),
                value: 0,
                substrate: None,
                cube: None,
            },
        ),
        (
            "Leave from 0b010",
            hc::Repr {
                kind: hc::MessageKind::Leave,
                hops: 0,
                label: HcLabel::new(0b010),
                value: 0,
                substrate: None,
                cube: None,
            },
        ),
        (
            "Hole at 0b001",
            hc::Repr {
                kind: hc::MessageKind::Hole,
                hops: 0,
                label: HcLabel::new(0b001),
                value: 0,
                substrate: None,
                cube: None,
            },
        ),
        (
            "Duplicate of 0b011, also held by sim:3",
            hc::Repr {
                kind: hc::MessageKind::Duplicate,
                hops: 0,
                label: HcLabel::new(0b011),
                value: 0,
                substrate: Some(sim),
                cube: None,
            },
        ),
        (
            "Beacon from HRoot 0b110, sequence 5, of cube 0x1234abcd",
            hc::Repr {
                kind: hc::MessageKind::Beacon,
                hops: 0,
                label: HcLabel::new(0b110),
                value: 5,
                substrate: Some(sim),
                cube: Some(0x1234_abcd),
            },
        ),
        (
            "Assign 0b111 in cube 0x1234abcd",
            hc::Repr {
                kind: hc::MessageKind::Assign,
                hops: 0,
                label: HcLabel::new(0b111),
                value: 0,
                substrate: None,
                cube: Some(0x1234_abcd),
            },
        ),
        (
            "Rejoin: cube 0x0badcafe lost a merge, join through sim:3",
            hc::Repr {
                kind: hc::MessageKind::Rejoin,
                hops: 0,
                label: HcLabel::new(0),
                value: 0,
                substrate: Some(sim),
                cube: Some(0x0bad_cafe),
            },
        ),
        (
            "unknown type 200 kept",
            hc::Repr {
                kind: hc::MessageKind::Unknown(200),
                hops: 0,
                label: HcLabel::new(1),
                value: 2,
                substrate: None,
                cube: None,
            },
        ),
    ];
    for (name, r) in cases {
        let mut b = Vec::new();
        r.emit_into(&mut b).unwrap();
        assert_eq!(b.len(), r.buffer_len());
        hcs.push(json!({"name": name, "hex": to_hex(&b), "fields": hc_fields(&b)}));
    }

    let mut rdvs = Vec::new();
    let cases: Vec<(&str, rdv::Repr)> = vec![
        (
            "Register of a leader at 10.0.0.1:7000",
            rdv::Repr::Register {
                leader: true,
                node: udp("10.0.0.1:7000"),
            },
        ),
        (
            "Register of a member, sim:3",
            rdv::Repr::Register {
                leader: false,
                node: sim,
            },
        ),
        ("Query from sim:3", rdv::Repr::Query { node: sim }),
        ("Members: nobody", rdv::Repr::Members(vec![])),
        (
            "Members: a leader and a member",
            rdv::Repr::Members(vec![(true, udp("10.0.0.1:7000")), (false, sim)]),
        ),
    ];
    for (name, r) in cases {
        let mut b = Vec::new();
        r.emit_into(&mut b).unwrap();
        assert_eq!(b.len(), r.buffer_len());
        rdvs.push(json!({"name": name, "hex": to_hex(&b), "fields": rdv_fields(&b)}));
    }

    let invalid = |name: &str, decoder: &str, b: &[u8], e: WireError| json!({"name": name, "decoder": decoder, "hex": to_hex(b), "error": e.to_string()});
    let good_app = hex(apps[0]["hex"].as_str().unwrap());
    let good_dt = hex(dts[0]["hex"].as_str().unwrap());
    let mut bad = Vec::new();
    bad.push(invalid(
        "empty",
        "app",
        &[],
        WireError::Truncated { len: 0, need: 1 },
    ));
    let mut v = good_app.clone();
    v[0] = 0x20;
    bad.push(invalid("version 2", "app", &v, WireError::Version(2)));
    let mut v = good_app.clone();
    v[3] = 9;
    bad.push(invalid(
        "address type 9",
        "app",
        &v,
        WireError::AddressType(9),
    ));
    let mut v = good_app.clone();
    v[5] = 1;
    bad.push(invalid(
        "reserved byte set",
        "app",
        &v,
        WireError::Reserved(1),
    ));
    let v = &good_app[..good_app.len() - 1];
    bad.push(invalid(
        "payload extension cut short",
        "app",
        v,
        WireError::Truncated { len: 45, need: 46 },
    ));
    let mut v = good_app.clone();
    v.push(0);
    bad.push(invalid(
        "a byte after the chain",
        "app",
        &v,
        WireError::Trailing(1),
    ));
    let mut v = good_app.clone();
    v[6..10].copy_from_slice(&0x4000_0000u32.to_be_bytes());
    bad.push(invalid(
        "coordinate out of range",
        "app",
        &v,
        WireError::Address(viastack_overlay::AddrError::Coordinate(0x4000_0000)),
    ));
    let mut v = good_app.clone();
    v[0] = 0x11;
    bad.push(invalid(
        "a DT control message given to the application decoder",
        "app",
        &v,
        WireError::Kind(1),
    ));
    let v = &good_dt[..10];
    bad.push(invalid(
        "DT hello cut in its address",
        "dt",
        v,
        WireError::Truncated { len: 10, need: 12 },
    ));
    let mut v = good_dt.clone();
    v[2] |= 0x80;
    bad.push(invalid(
        "DT reserved flag",
        "dt",
        &v,
        WireError::Reserved(0x80),
    ));
    let mut v = good_dt.clone();
    v[12 + 8] = 1; // CW's substrate kind: sim, whose length must be 4
    bad.push(invalid(
        "DT substrate of the wrong length for its kind",
        "dt",
        &v,
        WireError::Substrate { kind: 1, len: 6 },
    ));
    bad.push(invalid(
        "hypercube message cut",
        "hc",
        &[0x12, 2, 0, 0, 0],
        WireError::Truncated { len: 5, need: 8 },
    ));
    bad.push(invalid(
        "rendezvous type 7",
        "rdv",
        &[0x13, 7, 0, 0],
        WireError::Kind(7),
    ));
    bad.push(invalid(
        "rendezvous Query with the leader flag",
        "rdv",
        &[0x13, 2, 1, 0, 1, 4, 0, 0, 0, 3],
        WireError::Reserved(1),
    ));
    bad.push(invalid(
        "rendezvous Members announcing 2 entries, holding 1",
        "rdv",
        &[0x13, 3, 0, 2, 0, 1, 4, 0, 0, 0, 3],
        WireError::Truncated { len: 11, need: 12 },
    ));
    bad.push(invalid(
        "rendezvous Members with 33 entries",
        "rdv",
        &[0x13, 3, 0, 33],
        WireError::Reserved(33),
    ));
    bad.push(invalid(
        "rendezvous Register with a byte after the substrate",
        "rdv",
        &[0x13, 1, 0, 0, 1, 4, 0, 0, 0, 3, 0],
        WireError::Trailing(1),
    ));
    vec![
        ("app.json", "overlay application messages: version/kind, mode, hop limit, address type, next header, reserved, src, prev-hop, dest, then the extension chain (see docs/WIRE.md, Overlay)", apps),
        ("dt.json", "DT control messages (see docs/WIRE.md, Overlay)", dts),
        ("hc.json", "hypercube control messages (see docs/WIRE.md, Overlay)", hcs),
        ("rdv.json", "rendezvous messages (see docs/WIRE.md, Overlay)", rdvs),
        ("invalid.json", "datagrams every decoder must refuse, with the error", bad),
    ]
}

#[test]
fn vectors_match_encoders_and_decoders() {
    let files = generate();
    if std::env::var("OVERLAY_BLESS").is_ok() {
        std::fs::create_dir_all(dir()).unwrap();
        for (file, about, vectors) in &files {
            let v = json!({"about": about, "vectors": vectors});
            std::fs::write(
                dir().join(file),
                serde_json::to_string_pretty(&v).unwrap() + "\n",
            )
            .unwrap();
        }
    }
    for (file, _, _) in &files {
        let text = std::fs::read_to_string(dir().join(file)).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        let vectors = v["vectors"].as_array().unwrap();
        assert!(!vectors.is_empty(), "{file}");
        for vec in vectors {
            let name = vec["name"].as_str().unwrap();
            let b = hex(vec["hex"].as_str().unwrap());
            match *file {
                "app.json" => {
                    assert_eq!(app_fields(&b), vec["fields"], "{file}: {name}");
                    let r = app::Repr::parse_bytes(&b).unwrap();
                    let mut again = Vec::new();
                    r.emit_into(&mut again).unwrap();
                    assert_eq!(again, b, "{file}: {name} re-encodes");
                    let view = app::Packet::new_checked(&b[..]).unwrap();
                    assert_eq!(view.extensions(), r.extensions, "{file}: {name} view");
                }
                "dt.json" => {
                    assert_eq!(dt_fields(&b), vec["fields"], "{file}: {name}");
                    let mut again = Vec::new();
                    dt::Repr::parse_bytes(&b)
                        .unwrap()
                        .emit_into(&mut again)
                        .unwrap();
                    assert_eq!(again, b, "{file}: {name} re-encodes");
                }
                "hc.json" => {
                    assert_eq!(hc_fields(&b), vec["fields"], "{file}: {name}");
                    let mut again = Vec::new();
                    hc::Repr::parse_bytes(&b)
                        .unwrap()
                        .emit_into(&mut again)
                        .unwrap();
                    assert_eq!(again, b, "{file}: {name} re-encodes");
                }
                "rdv.json" => {
                    assert_eq!(rdv_fields(&b), vec["fields"], "{file}: {name}");
                    let mut again = Vec::new();
                    rdv::Repr::parse_bytes(&b)
                        .unwrap()
                        .emit_into(&mut again)
                        .unwrap();
                    assert_eq!(again, b, "{file}: {name} re-encodes");
                }
                _ => {
                    let err = match vec["decoder"].as_str().unwrap() {
                        "app" => app::Packet::new_checked(&b[..]).err(),
                        "dt" => dt::Packet::new_checked(&b[..]).err(),
                        "rdv" => rdv::Repr::parse_bytes(&b[..]).err(),
                        _ => hc::Packet::new_checked(&b[..]).err(),
                    };
                    assert_eq!(
                        err.map(|e| e.to_string()),
                        vec["error"].as_str().map(String::from),
                        "{file}: {name}"
                    );
                }
            }
        }
    }
}

#[test]
fn forwarding_rewrites_hop_limit_and_previous_hop_in_place() {
    let r = app::Repr {
        mode: DeliveryMode::Multicast,
        hop_limit: 9,
        src: Address::Dt(p(1, 1)),
        prev_hop: Address::Dt(p(1, 1)),
        dest: Address::Dt(p(0, 0)),
        extensions: vec![Extension::Payload(b"x")],
    };
    let mut b = Vec::new();
    r.emit_into(&mut b).unwrap();
    let mut view = app::Packet::new_checked(&mut b[..]).unwrap();
    view.set_hop_limit(8);
    view.set_prev_hop(Address::Dt(p(5, -6)));
    view.set_prev_hop(Address::Hc(HcLabel::new(1))); // wrong type: ignored
    let again = app::Repr::parse_bytes(&b).unwrap();
    assert_eq!(again.hop_limit, 8);
    assert_eq!(again.prev_hop, Address::Dt(p(5, -6)));
    assert_eq!(again.src, Address::Dt(p(1, 1)));
    assert_eq!(again.payload(), Some(&b"x"[..]));
}

#[test]
fn emit_refuses_mixed_addresses_and_short_buffers() {
    let r = app::Repr {
        mode: DeliveryMode::Unicast,
        hop_limit: 1,
        src: Address::Dt(p(1, 1)),
        prev_hop: Address::Hc(HcLabel::new(1)),
        dest: Address::Dt(p(0, 0)),
        extensions: vec![],
    };
    assert_eq!(r.emit(&mut [0u8; 64]), Err(WireError::AddressType(2)));
    let d = dt::Repr::Goodbye { src: p(0, 0) };
    assert_eq!(
        d.emit(&mut [0u8; 3]),
        Err(WireError::Buffer { have: 3, need: 12 })
    );
}

#[test]
fn protocol_messages_round_trip_through_the_wire() {
    use viastack_overlay::dt::{Message, Peer};
    let m: Message<SocketAddr> = Message::HelloNeighbor {
        src: p(1, 2),
        cw: Some(Peer {
            addr: p(3, 4),
            substrate: "127.0.0.1:4000".parse().unwrap(),
        }),
        ccw: None,
    };
    let mut b = Vec::new();
    dt::Repr::from_message(&m).emit_into(&mut b).unwrap();
    let back: Option<Message<SocketAddr>> = dt::Repr::parse_bytes(&b).unwrap().to_message();
    assert_eq!(back, Some(m));
    // A simulated substrate cannot become a socket address: refused, not misread.
    let m: Message<SimAddr> = Message::NewNode {
        node: Peer {
            addr: p(0, 0),
            substrate: SimAddr(1),
        },
        hops: 3,
    };
    let mut b = Vec::new();
    dt::Repr::from_message(&m).emit_into(&mut b).unwrap();
    assert_eq!(
        dt::Repr::parse_bytes(&b)
            .unwrap()
            .to_message::<SocketAddr>(),
        None
    );
    assert_eq!(
        dt::Repr::parse_bytes(&b).unwrap().to_message::<SimAddr>(),
        Some(m)
    );
}

#[test]
fn hypercube_messages_round_trip_through_the_wire() {
    use viastack_overlay::hypercube::Message;
    let s = SimAddr(9);
    let l = HcLabel::new(0b101);
    let all: Vec<Message<SimAddr>> = vec![
        Message::Beacon {
            root: l,
            seq: 7,
            root_substrate: s,
            cube: 0xfeed,
        },
        Message::Ping { src: l },
        Message::Lookup {
            target: l,
            origin: HcLabel::new(4),
            origin_substrate: s,
            hops: 3,
        },
        Message::Join { joiner: s },
        Message::Assign {
            label: l,
            cube: 0xfeed,
        },
        Message::Leave { src: l },
        Message::Hole { label: l },
        Message::Duplicate {
            label: l,
            holder: s,
        },
        Message::Rejoin { cube: 3, via: s },
    ];
    for m in all {
        let mut b = Vec::new();
        hc::Repr::from_message(&m).emit_into(&mut b).unwrap();
        let back: Option<Message<SimAddr>> = hc::Repr::parse_bytes(&b).unwrap().to_message();
        assert_eq!(back, Some(m));
    }
    // A Join without its substrate address is refused, not misread.
    let r = hc::Repr {
        kind: hc::MessageKind::Join,
        hops: 0,
        label: l,
        value: 0,
        substrate: None,
        cube: None,
    };
    assert_eq!(r.to_message::<SimAddr>(), None);
}

#[test]
fn rendezvous_messages_round_trip_through_the_wire() {
    use viastack_overlay::rendezvous::{Member, Message};
    let all: Vec<Message<SimAddr>> = vec![
        Message::Register {
            leader: true,
            node: SimAddr(4),
        },
        Message::Query { node: SimAddr(5) },
        Message::Members(vec![
            Member {
                leader: true,
                node: SimAddr(1),
            },
            Member {
                leader: false,
                node: SimAddr(2),
            },
        ]),
    ];
    for m in all {
        let mut b = Vec::new();
        rdv::Repr::from_message(&m).emit_into(&mut b).unwrap();
        let back: Option<Message<SimAddr>> = rdv::Repr::parse_bytes(&b).unwrap().to_message();
        assert_eq!(back, Some(m));
    }
    // At most MAX_MEMBERS members go on the wire.
    let many = Message::Members(
        (0..100)
            .map(|i| Member {
                leader: false,
                node: SimAddr(i),
            })
            .collect(),
    );
    let r = rdv::Repr::from_message(&many);
    let mut b = Vec::new();
    r.emit_into(&mut b).unwrap();
    assert_eq!(b[3] as usize, rdv::MAX_MEMBERS);
}

//! Behaviour the seed prescribes, checked on the services compiled to Rust (the random-trace
//! comparison with the store cannot see a mistake the specification and the generated code
//! share).
#![allow(clippy::unwrap_used)]

use viastack_kernel::time::Instant;
use viastack_spec::service::trace::{self, Input, Options};
use viastack_spec::service::{Addr, InstanceKey, Message, NodeInfo};

fn msg(service: u32, t: u8, src: u64) -> Message {
    Message {
        service_id: service,
        message_id: 7,
        message_type: t,
        source: Addr(src),
        previous_hop: Addr(src),
        hop_limit: 255,
        ..Message::default()
    }
}

/// `(type, destination, mode)` of every control message sent at or after `from_ms`.
fn requests(out: &[serde_json::Value], from_ms: f64) -> Vec<(i64, i64, i64)> {
    out.iter()
        .filter(|l| l["t_ms"].as_f64().unwrap_or(0.0) >= from_ms)
        .filter(|l| l["action"] == "sendControlMessage")
        .map(|l| {
            let m = &l["message"];
            (
                m["MessageType"].as_i64().unwrap(),
                m["DestinationAddress"].as_i64().unwrap(),
                m["DeliveryMode"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn inputs(service: u32, ack_type: u8) -> Vec<Input> {
    let t = Instant::from_millis;
    vec![
        Input::Node(
            t(0),
            NodeInfo {
                address: Addr(1),
                parent: Addr(9),
                children: vec![Addr(2), Addr(3), Addr(4)],
                neighbours: vec![],
            },
        ),
        Input::Message(t(1), msg(service, 0x80, 9)),
        Input::Message(t(2), msg(service, ack_type, 3)),
        Input::Timer(
            t(1001),
            InstanceKey {
                service,
                message: 7,
            },
            3,
        ),
    ]
}

/// Seed 000 Table 3.2: Timeout_ACK sends the ACK Request to the children that have not
/// acknowledged (2 and 4; 3 did), each by unicast.
#[test]
fn compiled_h2hack_requests_acks_only_from_silent_children() {
    let out = trace::run(
        &mut viastack_services::h2hack::Compiled::default(),
        &inputs(1, 2),
        Options::default(),
    );
    assert_eq!(requests(&out, 1001.0), [(3, 2, 3), (3, 4, 3)]);
}

/// The same for the Full ACKs of the end-to-end service (§3.1.2.2).
#[test]
fn compiled_e2eack_requests_full_acks_only_from_silent_children() {
    let out = trace::run(
        &mut viastack_services::e2eack::Compiled::default(),
        &inputs(2, 5),
        Options::default(),
    );
    assert_eq!(requests(&out, 1001.0), [(3, 2, 3), (3, 4, 3)]);
}

//! The shipped services (`specs/*.scxml`) driven through event traces (the `spec run` JSONL
//! format), asserting the action stream.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::Value;
use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{Service, Store, StoreConfig};

fn load(name: &str) -> Service {
    let path = format!("{}/../../specs/{name}.scxml", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    let (svc, warnings) =
        Service::load(&format!("{name}.scxml"), &src).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        warnings.is_empty(),
        "{name}: unexpected warnings:\n{}",
        warnings
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    svc
}

/// Runs a JSONL trace; returns one compact line per output: `t action type>dst payload` for
/// message actions, `t action id` for timers, `t #id state` after each step.
fn run(name: &str, trace_src: &str, auto_timers: bool) -> Vec<String> {
    let mut store = Store::new(vec![Arc::new(load(name))], StoreConfig::default());
    let inputs = trace::parse(trace_src).unwrap();
    let out = trace::run(
        &mut store,
        &inputs,
        Options {
            auto_timers,
            end_ms: None,
        },
    );
    out.iter()
        .map(|l| {
            let t = &l["t_ms"];
            let id = &l["instance"]["message"];
            if let Some(a) = l.get("action").and_then(Value::as_str) {
                match l.get("message") {
                    Some(m) => {
                        let p = m
                            .get("Payload")
                            .and_then(Value::as_str)
                            .map(|p| format!(" {p}"))
                            .unwrap_or_default();
                        format!(
                            "{t} #{id} {a} {}>{}{p}",
                            m["MessageType"], m["DestinationAddress"]
                        )
                    }
                    None => match l.get("timer") {
                        Some(x) => format!("{t} #{id} {a} {x}"),
                        None => format!("{t} #{id} {a}"),
                    },
                }
            } else if let Some(e) = l.get("error") {
                format!("{t} #{id} error {e}")
            } else {
                format!("{t} #{id} {}", l["state"].as_str().unwrap_or("-"))
            }
        })
        .collect()
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_spec_loads_without_warnings() {
    for name in [
        "h2hack",
        "e2eack",
        "dupelim",
        "ordering",
        "sync",
        "incast",
        "selection",
        "handshake",
        "leakybucket",
    ] {
        load(name);
    }
}

#[test]
fn e2eack_leaf_acks_at_once_inner_node_after_all_full_acks() {
    let leaf = run(
        "e2eack",
        r#"{"t_ms":0,"node":{"address":3,"parent":1,"children":[]}}
           {"t_ms":1,"message":{"ServiceID":2,"MessageID":7,"MessageType":-128,"SourceAddress":1,"PreviousHopAddress":1,"Payload":"x"}}"#,
        false,
    );
    assert_eq!(leaf, lines("1 #7 setTimer 1\n 1 #7 toApplication 128>0 x\n 1 #7 sendControlMessage 5>1\n 1 #7 setTimer 5\n 1 #7 done"));
    let inner = run(
        "e2eack",
        r#"{"t_ms":0,"node":{"address":2,"parent":1,"children":[3,4]}}
           {"t_ms":1,"message":{"ServiceID":2,"MessageID":7,"MessageType":-128,"SourceAddress":1,"PreviousHopAddress":1,"Payload":"x"}}
           {"t_ms":2,"message":{"ServiceID":2,"MessageID":7,"MessageType":5,"SourceAddress":3}}
           {"t_ms":501,"timer":{"ServiceID":2,"MessageID":7,"TimerIdentifier":9}}
           {"t_ms":600,"message":{"ServiceID":2,"MessageID":7,"MessageType":5,"SourceAddress":4}}"#,
        false,
    );
    assert_eq!(
        inner,
        lines(
            "1 #7 setTimer 1
             1 #7 toApplication 128>0 x
             1 #7 sendDataMessage 128>0 x
             1 #7 setTimer 3
             1 #7 setTimer 4
             1 #7 setTimer 9
             1 #7 waitack
             2 #7 waitack
             501 #7 sendControlMessage 6>1
             501 #7 setTimer 9
             501 #7 waitack
             600 #7 sendControlMessage 5>1
             600 #7 cancelTimer 3
             600 #7 cancelTimer 4
             600 #7 cancelTimer 9
             600 #7 setTimer 5
             600 #7 done"
        )
    );
}

/// Seed 000 §3.1.2.2 with Table 3.2 (the acknowledgement timers are the Full ACK timers):
/// on Timeout_ACK the ACK Request goes, by unicast, only to the children that have not sent
/// their Full ACK — child 3 did, child 4 did not. A Partial ACK (4 is alive) does not count.
#[test]
fn e2eack_ack_request_goes_only_to_children_without_a_full_ack() {
    let out = run(
        "e2eack",
        r#"{"t_ms":0,"node":{"address":2,"parent":1,"children":[3,4,5]}}
           {"t_ms":1,"message":{"ServiceID":2,"MessageID":7,"MessageType":-128,"SourceAddress":1,"PreviousHopAddress":1,"Payload":"x"}}
           {"t_ms":2,"message":{"ServiceID":2,"MessageID":7,"MessageType":5,"SourceAddress":3}}
           {"t_ms":3,"message":{"ServiceID":2,"MessageID":7,"MessageType":6,"SourceAddress":4}}
           {"t_ms":1001,"timer":{"ServiceID":2,"MessageID":7,"TimerIdentifier":3}}"#,
        false,
    );
    assert_eq!(
        out[out.len() - 4..],
        lines(
            "1001 #7 sendControlMessage 3>4
             1001 #7 sendControlMessage 3>5
             1001 #7 setTimer 3
             1001 #7 waitack"
        )[..]
    );
}

/// §3.1.2.2 (ACK Request and NACK as in §3.1.2.1): a node that has not got the payload
/// answers every ACK Request with a NACK, the repeated one too, as h2hack does.
#[test]
fn e2eack_answers_a_repeated_ack_request_with_a_nack() {
    let out = run(
        "e2eack",
        r#"{"t_ms":0,"node":{"address":3,"parent":1,"children":[]}}
           {"t_ms":1,"message":{"ServiceID":2,"MessageID":7,"MessageType":3,"SourceAddress":1}}
           {"t_ms":500,"message":{"ServiceID":2,"MessageID":7,"MessageType":3,"SourceAddress":1}}"#,
        false,
    );
    assert_eq!(
        out[out.len() - 2..],
        lines(
            "500 #7 sendControlMessage 1>1
             500 #7 nopayload"
        )[..]
    );
}

/// Table 3.1: a Reset is passed on to the children in "done" too.
#[test]
fn e2eack_reset_in_done_is_passed_on() {
    let out = run(
        "e2eack",
        r#"{"t_ms":0,"node":{"address":3,"parent":1,"children":[]}}
           {"t_ms":1,"message":{"ServiceID":2,"MessageID":7,"MessageType":-128,"SourceAddress":1,"PreviousHopAddress":1,"Payload":"x"}}
           {"t_ms":2,"message":{"ServiceID":2,"MessageID":7,"MessageType":4,"SourceAddress":1}}"#,
        false,
    );
    assert_eq!(
        out[out.len() - 5..],
        lines(
            "2 #7 cancelTimer 5
             2 #7 sendControlMessage 4>0
             2 #7 setTimer 6
             2 #7 setTimer 7
             2 #7 reset"
        )[..]
    );
}

#[test]
fn dupelim_delivers_and_forwards_once() {
    let out = run(
        "dupelim",
        r#"{"t_ms":0,"node":{"address":2}}
           {"t_ms":1,"message":{"ServiceID":3,"MessageID":1,"MessageType":128,"SourceAddress":1,"Payload":"a"}}
           {"t_ms":2,"message":{"ServiceID":3,"MessageID":1,"MessageType":128,"SourceAddress":4,"Payload":"a"}}
           {"t_ms":3,"message":{"ServiceID":3,"MessageID":2,"MessageType":128,"SourceAddress":1,"Payload":"b"}}"#,
        false,
    );
    assert_eq!(
        out,
        lines(
            "1 #1 toApplication 128>0 a
             1 #1 forwardMessage 128>0 a
             1 #1 setTimer 5
             1 #1 seen
             2 #1 seen
             3 #2 toApplication 128>0 b
             3 #2 forwardMessage 128>0 b
             3 #2 setTimer 5
             3 #2 seen"
        )
    );
}

#[test]
fn ordering_delivers_in_sequence_with_holes() {
    let mut t = String::new();
    for (i, seq) in [0, 2, 1, 3, 3, 5, 4].iter().enumerate() {
        t.push_str(&format!(
            "{{\"t_ms\":{i},\"message\":{{\"ServiceID\":4,\"MessageID\":9,\"MessageType\":128,\"SequenceNumber\":{seq},\"Payload\":\"m{seq}\"}}}}\n"
        ));
    }
    let out = run("ordering", &t, false);
    let delivered: Vec<&str> = out
        .iter()
        .filter(|l| l.contains("toApplication"))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(delivered, ["m0", "m2", "m3", "m5"]);
}

#[test]
fn sync_repeats_until_every_neighbour_holds_the_message() {
    // Seed 000 Table 3.5: the message is synchronised with every neighbour — the one it came
    // from too, so that neighbour learns this node holds it — and again periodically with
    // those that have not shown they hold it. A neighbour shows it by sending a copy (the
    // previous hop; a forwarded copy keeps its SourceAddress): 2 did, so only 3 is asked again.
    let out = run(
        "sync",
        r#"{"t_ms":0,"node":{"address":1,"neighbours":[2,3]}}
           {"t_ms":1,"message":{"ServiceID":5,"MessageID":4,"MessageType":128,"SourceAddress":9,"PreviousHopAddress":2,"Payload":"s"}}
           {"t_ms":500,"message":{"ServiceID":5,"MessageID":4,"MessageType":128,"SourceAddress":9,"PreviousHopAddress":2,"Payload":"s"}}
           {"t_ms":1001,"timer":{"ServiceID":5,"MessageID":4,"TimerIdentifier":2}}
           {"t_ms":1200,"message":{"ServiceID":5,"MessageID":4,"MessageType":128,"SourceAddress":9,"PreviousHopAddress":3,"Payload":"s"}}"#,
        false,
    );
    assert_eq!(
        out,
        lines(
            "1 #4 toApplication 128>0 s
             1 #4 sendDataMessage 128>2 s
             1 #4 sendDataMessage 128>3 s
             1 #4 setTimer 2
             1 #4 setTimer 1
             1 #4 syncing
             500 #4 syncing
             1001 #4 sendDataMessage 128>3 s
             1001 #4 setTimer 2
             1001 #4 syncing
             1200 #4 cancelTimer 2
             1200 #4 synced"
        )
    );
}

#[test]
fn incast_merges_the_children_payloads() {
    // Seed 000 Table 3.5: payloads with the same message id and destination (7) merge into one
    // message that goes on towards that destination (not to the parent: the forwarding engine
    // routes a unicast up the tree rooted at its destination).
    let all = run(
        "incast",
        r#"{"t_ms":0,"node":{"address":2,"parent":1,"children":[3,4]}}
           {"t_ms":1,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":3,"DestinationAddress":7,"Payload":"a"}}
           {"t_ms":2,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":4,"DestinationAddress":7,"Payload":"b"}}"#,
        false,
    );
    assert_eq!(all, lines("1 #5 setTimer 1\n 1 #5 collecting\n 2 #5 cancelTimer 1\n 2 #5 sendDataMessage 128>7 a|b\n 2 #5 setTimer 2\n 2 #5 sent"));
    let partial = run(
        "incast",
        r#"{"t_ms":0,"node":{"address":2,"parent":1,"children":[3,4]}}
           {"t_ms":1,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":3,"DestinationAddress":7,"Payload":"a"}}
           {"t_ms":501,"timer":{"ServiceID":6,"MessageID":5,"TimerIdentifier":1}}
           {"t_ms":600,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":4,"DestinationAddress":7,"Payload":"late"}}"#,
        false,
    );
    assert_eq!(
        partial[2..],
        lines("501 #5 sendDataMessage 128>7 a\n 501 #5 setTimer 2\n 501 #5 sent\n 600 #5 sendDataMessage 128>7 late\n 600 #5 sent"),
        "what the collection time missed is forwarded on its own, not dropped"
    );
}

#[test]
fn incast_does_not_merge_payloads_for_another_destination() {
    let out = run(
        "incast",
        r#"{"t_ms":0,"node":{"address":2,"parent":1,"children":[3,4,5]}}
           {"t_ms":1,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":3,"DestinationAddress":7,"Payload":"a"}}
           {"t_ms":2,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":4,"DestinationAddress":8,"Payload":"x"}}
           {"t_ms":3,"message":{"ServiceID":6,"MessageID":5,"MessageType":128,"SourceAddress":5,"DestinationAddress":7,"Payload":"b"}}"#,
        false,
    );
    assert_eq!(
        out[2..],
        lines("2 #5 sendDataMessage 128>8 x\n 2 #5 collecting\n 3 #5 cancelTimer 1\n 3 #5 sendDataMessage 128>7 a|b\n 3 #5 setTimer 2\n 3 #5 sent")
    );
}

#[test]
fn selection_delivers_only_accepted_sources_and_terminates() {
    let out = run(
        "selection",
        r#"{"t_ms":1,"message":{"ServiceID":7,"MessageID":1,"MessageType":128,"SourceAddress":8,"Payload":"no"}}
           {"t_ms":2,"message":{"ServiceID":7,"MessageID":1,"MessageType":128,"SourceAddress":6,"Payload":"yes"}}
           {"t_ms":3,"message":{"ServiceID":7,"MessageID":1,"MessageType":128,"SourceAddress":5,"Payload":"again"}}
           {"t_ms":5002,"timer":{"ServiceID":7,"MessageID":1,"TimerIdentifier":1}}"#,
        false,
    );
    assert_eq!(
        out,
        lines(
            "1 #1 setTimer 1
             1 #1 init
             2 #1 toApplication 128>0 yes
             2 #1 sent
             3 #1 sent
             5002 #1 terminate
             5002 #1 -"
        )
    );
}

#[test]
fn handshake_both_sides_reach_established() {
    // Node B (address 2) connects to A (address 1); A's replies are fed back by hand.
    let b = run(
        "handshake",
        r#"{"t_ms":0,"node":{"address":2}}
           {"t_ms":1,"message":{"ServiceID":8,"MessageID":3,"MessageType":23,"SourceAddress":2,"DestinationAddress":1}}
           {"t_ms":101,"timer":{"ServiceID":8,"MessageID":3,"TimerIdentifier":1}}
           {"t_ms":102,"message":{"ServiceID":8,"MessageID":3,"MessageType":21,"SourceAddress":1,"DestinationAddress":2}}"#,
        false,
    );
    assert_eq!(
        b,
        lines(
            "1 #3 setTimer 2
             1 #3 setTimer 1
             1 #3 init
             101 #3 sendControlMessage 20>1
             101 #3 synsent
             102 #3 sendControlMessage 22>1
             102 #3 toApplication 21>2
             102 #3 established"
        )
    );
    let a = run(
        "handshake",
        r#"{"t_ms":0,"node":{"address":1}}
           {"t_ms":101,"message":{"ServiceID":8,"MessageID":3,"MessageType":20,"SourceAddress":2,"DestinationAddress":1}}
           {"t_ms":103,"message":{"ServiceID":8,"MessageID":3,"MessageType":22,"SourceAddress":2,"DestinationAddress":1}}"#,
        false,
    );
    assert_eq!(a, lines("101 #3 setTimer 2\n 101 #3 sendControlMessage 21>2\n 101 #3 synrcvd\n 103 #3 toApplication 22>1\n 103 #3 established"));
}

#[test]
fn leaky_bucket_lets_one_message_out_per_token() {
    let out = run(
        "leakybucket",
        r#"{"t_ms":0,"message":{"ServiceID":9,"MessageID":1,"MessageType":128,"Payload":"a"}}
           {"t_ms":1,"message":{"ServiceID":9,"MessageID":1,"MessageType":128,"Payload":"b"}}
           {"t_ms":2,"message":{"ServiceID":9,"MessageID":1,"MessageType":128,"Payload":"c"}}"#,
        true,
    );
    let sends: Vec<&String> = out
        .iter()
        .filter(|l| l.contains("sendDataMessage"))
        .collect();
    assert_eq!(
        sends,
        [
            "100 #1 sendDataMessage 128>0 a",
            "200 #1 sendDataMessage 128>0 b",
            "300 #1 sendDataMessage 128>0 c"
        ]
    );
    assert_eq!(
        out.last().unwrap(),
        "2000 #1 -",
        "terminated after 2 s: {out:?}"
    );
    assert!(out.contains(&"2000 #1 terminate".to_string()));
}

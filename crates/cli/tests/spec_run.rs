//! End-to-end tests of `viastack spec run` and `viastack bench spec`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::{text, viastack};

fn write(test: &str, name: &str, src: &str) -> PathBuf {
    common::write("spec-run", test, name, src)
}

#[test]
fn run_prints_every_action_and_state_as_jsonl() {
    let out = viastack(&[
        "spec",
        "run",
        "specs/h2hack.scxml",
        "--trace",
        "testdata/traces/h2hack.jsonl",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let actions: Vec<&str> = lines.iter().filter_map(|l| l["action"].as_str()).collect();
    assert_eq!(
        &actions[..4],
        [
            "setTimer",
            "sendControlMessage",
            "toApplication",
            "sendDataMessage"
        ]
    );
    assert_eq!(lines[1]["message"]["DestinationAddress"], 9);
    assert_eq!(lines[1]["instance"]["message"], 7);
    let states: Vec<&serde_json::Value> = lines.iter().filter_map(|l| l.get("state")).collect();
    assert_eq!(states.first().unwrap().as_str(), Some("waitack"));
    assert_eq!(states.iter().rev().nth(1).unwrap().as_str(), Some("done"));
    assert!(states.last().unwrap().is_null(), "freed after Timeout_Msg");
}

#[test]
fn run_reports_bad_specs_and_traces() {
    let bad = write(
        "bad",
        "bad.scxml",
        "<scxml xmlns=\"http://www.w3.org/2005/07/scxml\" initial=\"a\"><state id=\"a\"/></scxml>",
    );
    let out = viastack(&[
        "spec",
        "run",
        bad.to_str().unwrap(),
        "--trace",
        "testdata/traces/h2hack.jsonl",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bad.scxml:1:1: error: expected <data name=\"service\">"),
        "{}",
        text(&out.stderr)
    );
    let trace = write(
        "bad",
        "t.jsonl",
        "{\"t_ms\": 0, \"node\": {}}\n{\"t_ms\": 1, \"message\": {\"MessageType\": 999}}\n",
    );
    let out = viastack(&[
        "spec",
        "run",
        "specs/h2hack.scxml",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("t.jsonl:line 2: MessageType"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bench_spec_json_has_the_issue_fields() {
    let out = viastack(&[
        "bench",
        "spec",
        "--messages",
        "2000",
        "--concurrent",
        "100",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    for side in ["compiled", "handwritten"] {
        for f in ["events_per_s", "messages_per_s", "bytes_per_instance"] {
            assert!(v[side][f].as_f64().unwrap() > 0.0, "{side}.{f}: {v}");
        }
    }
    assert!(v["compiled_vs_handwritten"].as_f64().unwrap() > 0.0);
}

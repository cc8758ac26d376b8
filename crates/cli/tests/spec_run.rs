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

/// `spec explore` end to end: a shipped service holds (exit 0, figures), a broken one does not
/// (exit 1) and its `--trace-out` replays through `spec run` as a multi-node trace.
#[test]
fn explore_reports_figures_and_a_replayable_counterexample() {
    let out = viastack(&[
        "spec",
        "explore",
        "specs/h2hack.scxml",
        "--topology",
        "tree:3",
        "--loss",
        "1",
        "--json",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(j["exhausted"], true);
    assert!(j["states"].as_u64().unwrap() > 10, "{j}");
    assert!(j["violation"].is_null());

    let trace = write("explore", "cex.jsonl", "");
    let fixture = "crates/spec/tests/data/h2hack_no_retransmit.scxml";
    let out = viastack(&[
        "spec",
        "explore",
        fixture,
        "--topology",
        "line:2",
        "--loss",
        "1",
        "--trace-out",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("violation of `reaches-every-node`"));
    let cex = std::fs::read_to_string(&trace).unwrap();
    assert!(
        cex.contains("# lost") && cex.contains("# violation"),
        "{cex}"
    );
    let out = viastack(&["spec", "run", fixture, "--trace", trace.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let delivered_at = |n: u64| {
        lines
            .iter()
            .any(|l| l["action"] == "toApplication" && l["at"] == n)
    };
    assert!(delivered_at(0), "the root's application got the payload");
    assert!(
        !delivered_at(1),
        "node 1's never did: the violation reproduced"
    );
    assert!(lines.iter().all(|l| l.get("at").is_some()));
}

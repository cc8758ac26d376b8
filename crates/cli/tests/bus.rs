//! `viastack bus`: `check` reports script errors as file:line:col, `decode` prints the shared
//! vectors' frames as their listed fields, and `serve` runs a script that two Rust tools (the
//! crate's client) connect to, moving a 5 MB value by reference, then exits with the script.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;

use viastack_bus::client::{Request, Tool, ToolConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn viastack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_viastack"))
}

#[test]
fn check_accepts_the_example_and_names_errors() {
    let out = viastack()
        .args(["bus", "check"])
        .arg(root().join("examples/bus/pipeline.tb"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("toolbus: Main"));
    let dir = std::env::temp_dir().join(format!("viastack-bus-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.tb");
    std::fs::write(&bad, "process P is\n  tau * tau * tau\ntoolbus(P)\n").unwrap();
    let out = viastack()
        .args(["bus", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.tb:2:") && err.contains("does not chain"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn decode_prints_the_vectors_fields() {
    let text = std::fs::read_to_string(root().join("testdata/vectors/bus/frames.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for vec in v["vectors"].as_array().unwrap().iter().take(6) {
        let out = viastack()
            .args(["bus", "decode", vec["hex"].as_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success());
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got, vec["fields"], "{}", vec["name"]);
    }
    let out = viastack()
        .args(["bus", "decode", "00000000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty frame"));
}

#[test]
fn serve_moves_a_value_by_reference_between_two_tools() {
    let dir = std::env::temp_dir().join(format!("viastack-bus-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("pipe.tb");
    std::fs::write(
        &script,
        std::fs::read_to_string(root().join("examples/bus/pipeline.tb"))
            .unwrap()
            .replace("make(50000000)", "make(5000000)"),
    )
    .unwrap();
    let mut child = viastack()
        .args(["bus", "serve", "--listen", "127.0.0.1:0", "--trace"])
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.rsplit(' ').next().unwrap().to_string();
    let a2 = addr.clone();
    let producer = thread::spawn(move || {
        let mut t = Tool::connect(&a2, ToolConfig::new("producer")).unwrap();
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    let blob = t.arena.blob(vec![7u8; 5_000_000]);
                    let v = t.arena.appl("data", vec![blob]);
                    let r = t.put(&v);
                    assert!(r.as_ref_info().is_some());
                    t.value(request, r).unwrap();
                }
                Request::Fin { .. } => assert_eq!(t.held(), 0),
                Request::Terminate { .. } => return,
                other => panic!("{other:?}"),
            }
        }
    });
    let consumer = thread::spawn(move || {
        let mut t = Tool::connect(&addr, ToolConfig::new("consumer")).unwrap();
        loop {
            match t.next_request().unwrap() {
                Request::Eval {
                    request,
                    delivery,
                    term,
                } => {
                    let v = t.resolve(&term, delivery).unwrap();
                    let (_, args) = v.as_appl().unwrap();
                    let (_, inner) = args[0].as_appl().unwrap();
                    assert_eq!(inner[0].as_blob().unwrap().len(), 5_000_000);
                    let ok = t.arena.appl("ok", vec![]);
                    t.value(request, ok).unwrap();
                }
                Request::Terminate { .. } => return t.stats.fetches,
                other => panic!("{other:?}"),
            }
        }
    });
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), 1);
    let trace: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success());
    assert!(
        trace
            .iter()
            .any(|l| l.contains("rec-value(P,V?)") && l.contains("@ref(")),
        "the script bound a reference, not the value: {trace:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

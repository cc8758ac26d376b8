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

#[test]
fn serve_over_tls_moves_a_value_over_tls_from_the_owners_listener() {
    use viastack_bus::net::TlsClient;
    let dir = std::env::temp_dir().join(format!("viastack-bus-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("pipe.tb");
    std::fs::write(
        &script,
        std::fs::read_to_string(root().join("examples/bus/pipeline.tb"))
            .unwrap()
            .replace("make(50000000)", "make(3000000)"),
    )
    .unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), pem("CERTIFICATE", ck.cert.der())).unwrap();
    std::fs::write(
        dir.join("key.pem"),
        pem("PRIVATE KEY", &ck.signing_key.serialize_der()),
    )
    .unwrap();
    let mut child = viastack()
        .args(["bus", "serve", "--listen", "127.0.0.1:0", "--trace"])
        .arg("--tls-cert")
        .arg(dir.join("cert.pem"))
        .arg("--tls-key")
        .arg(dir.join("key.pem"))
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.rsplit(' ').next().unwrap().to_string();
    let tls = TlsClient::from_pem(&dir.join("cert.pem"), "localhost").unwrap();
    let (a2, tls2) = (addr.clone(), tls.clone());
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        cfg.tls = Some(tls2);
        let mut t = Tool::connect(&a2, cfg).unwrap();
        assert!(t.location().starts_with("tls:"), "{}", t.location());
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    let blob = t.arena.blob(vec![9u8; 3_000_000]);
                    let v = t.arena.appl("data", vec![blob]);
                    let r = t.put(&v);
                    t.value(request, r).unwrap();
                }
                Request::Fin { .. } => assert_eq!(t.held(), 0),
                Request::Terminate { .. } => return,
                other => panic!("{other:?}"),
            }
        }
    });
    let consumer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("consumer");
        cfg.tls = Some(tls);
        // About TLS: the same-host memfd path (the owner's Unix socket) is off.
        cfg.memfd = false;
        let mut t = Tool::connect(&addr, cfg).unwrap();
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
                    let b = inner[0].as_blob().unwrap();
                    assert!(b.len() == 3_000_000 && b.iter().all(|x| *x == 9));
                    let ok = t.arena.appl("ok", vec![]);
                    t.value(request, ok).unwrap();
                }
                Request::Terminate { .. } => return t.stats,
                other => panic!("{other:?}"),
            }
        }
    });
    producer.join().unwrap();
    let stats = consumer.join().unwrap();
    assert_eq!((stats.fetches, stats.tls_fetches), (1, 1), "{stats:?}");
    let trace: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success());
    assert!(
        trace
            .iter()
            .any(|l| l.contains("@ref(") && l.contains("tls:127.0.0.1:")),
        "the reference did not name a TLS location: {trace:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// PEM armour for DER bytes (rcgen is built without its `pem` feature).
fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b = String::new();
    for c in der.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                b.push(B64[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                b.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out + &format!("-----END {label}-----\n")
}

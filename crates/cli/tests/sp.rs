//! `viastack sp`: a real loopback transfer (listen + send a file, bytes compared), `decode`
//! of the shared vectors, and decode errors naming the invalid field.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{root, viastack};
use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    common::scratch("sp-cli").join(name)
}

fn transfer(mode: &str, size: usize) {
    let input = tmp(&format!("in-{mode}-{size}"));
    let output = tmp(&format!("out-{mode}-{size}"));
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let mut listener = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(["sp", "listen", "127.0.0.1:0", "--out"])
        .arg(&output)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(listener.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.strip_prefix("listening on ").unwrap().to_string();
    let sent = viastack(&[
        "sp",
        "send",
        &addr,
        input.to_str().unwrap(),
        "--reliability",
        mode,
        "--priority",
        "2",
    ]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(listener.wait().unwrap().success(), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("priority=2")), "{rest:?}");
    assert_eq!(std::fs::read(&output).unwrap(), data, "{mode} {size}");
}

#[test]
fn listen_and_send_move_a_file_intact() {
    transfer("reliable", 300_000);
    transfer("reliable", 0);
    transfer("checksummed", 70_000);
    transfer("unreliable", 5_000);
}

#[test]
fn send_refuses_an_unknown_reliability() {
    let o = viastack(&[
        "sp",
        "send",
        "127.0.0.1:9",
        "Cargo.toml",
        "--reliability",
        "sometimes",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown reliability"));
}

#[test]
fn decode_prints_every_vector_as_recorded() {
    for file in ["types.json", "flags.json", "invalid.json"] {
        let text = std::fs::read_to_string(root().join("testdata/vectors/sp").join(file)).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        for v in doc["vectors"].as_array().unwrap() {
            let o = viastack(&["sp", "decode", v["hex"].as_str().unwrap()]);
            let name = v["name"].as_str().unwrap();
            match (v.get("fields"), v.get("error").and_then(Value::as_str)) {
                (Some(fields), _) => {
                    assert!(o.status.success(), "{name}");
                    let got: Value = serde_json::from_slice(&o.stdout).unwrap();
                    assert_eq!(&got, fields, "{name}");
                }
                (None, Some(field)) => {
                    assert!(!o.status.success(), "{name}");
                    let err = String::from_utf8_lossy(&o.stderr);
                    assert!(err.contains(&format!("invalid {field}")), "{name}: {err}");
                }
                _ => panic!("{name}: neither fields nor error"),
            }
        }
    }
}

#[test]
fn decode_rejects_bad_hex() {
    let o = viastack(&["sp", "decode", "0g"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid hex"));
}

#[test]
fn bench_sp_reports_every_protocol_and_draws_a_png() {
    let png = tmp("bench.png");
    let o = viastack(&[
        "bench",
        "sp",
        "--size",
        "1024,4096",
        "--transfers",
        "5",
        "--repeat",
        "1",
        "--json",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let sizes = v["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    assert_eq!(sizes[0]["size"], 1024);
    for row in sizes {
        for p in ["sp_reliable", "sp_unreliable", "tcp", "udp"] {
            assert!(row[p]["mean_us"].as_f64().unwrap() > 0.0, "{p}: {row}");
            assert!(row[p]["p99_us"].is_number(), "{p}: {row}");
            assert!(row[p]["p50_us"].as_f64().unwrap() > 0.0, "{p}: {row}");
        }
        for r in [
            "sp_reliable_vs_udp",
            "sp_reliable_vs_tcp",
            "sp_reliable_vs_udp_p50",
            "sp_reliable_vs_tcp_p50",
            "sp_unreliable_vs_udp_p50",
            "sp_unreliable_vs_tcp_p50",
        ] {
            assert!(row[r].as_f64().unwrap() > 0.0, "{r}: {row}");
        }
    }
    let ci = &sizes[1]["sp_unreliable_vs_tcp_p50_ci95"];
    assert!(ci[0].as_f64().unwrap() <= ci[1].as_f64().unwrap(), "{ci}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

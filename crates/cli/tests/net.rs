//! `viastack run --net`: the same stack file on real loopback sockets, one process per node and
//! one thread per node, with the same report as the simulator.
#![allow(clippy::unwrap_used)]

use std::process::Command;

const STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.order]
kind = "fifo"
[qos.q]
layers = ["dev", "order"]
[channels.data]
qos = "q"
[scenario]
nodes = 3
duration = "10s"
expect = "fifo"
[scenario.link]
loss = 0.1
[[scenario.workload]]
channel = "data"
messages = 50
size = 300
interval = "2ms"
"#;

fn write_stack(name: &str) -> std::path::PathBuf {
    write_src(name, STACK)
}

fn write_src(name: &str, src: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("viastack-net-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("net.toml");
    std::fs::write(&path, src).unwrap();
    path
}

fn run(path: &std::path::Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .arg("run")
        .arg(path)
        .args(["--json", "--duration", "600ms"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {stderr}"));
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn check(report: &serde_json::Value, driver: &str) {
    assert_eq!(report["driver"], driver);
    assert_eq!(report["sent"], 150, "{report}");
    assert_eq!(report["duplicated"], 0, "{report}");
    assert_eq!(report["out_of_order"], 0, "{report}");
    assert_eq!(report["corrupted"], 0, "{report}");
    let delivered = report["delivered"].as_u64().unwrap();
    assert!(
        delivered >= 148,
        "loopback lost more than 2 of 150: {report}"
    );
    assert_eq!(report["verdict"]["holds"], true, "{report}");
    assert_eq!(report["network"]["sent"], 150, "{report}");
}

#[test]
fn run_net_with_one_process_per_node() {
    let path = write_stack("procs");
    let (code, report, stderr) = run(&path, &["--net"]);
    assert_eq!(code, 0, "{stderr}");
    check(&report, "udp-processes");
    assert!(
        stderr.contains("link faults") && stderr.contains("not applied"),
        "the run says the simulated loss is not applied: {stderr}"
    );
}

#[test]
fn run_net_with_one_thread_per_node() {
    let path = write_stack("threads");
    let (code, report, stderr) = run(&path, &["--net", "--threads"]);
    assert_eq!(code, 0, "{stderr}");
    check(&report, "udp-threads");
}

#[test]
fn run_net_over_tcp_frames() {
    let src = STACK.replace(
        "kind = \"device\"",
        "kind = \"device\"\ntransport = \"tcp\"",
    );
    let path = write_src("tcp", &src);
    let (code, report, stderr) = run(&path, &["--net"]);
    assert_eq!(code, 0, "{stderr}");
    check(&report, "tcp-processes");
    let (code, report, stderr) = run(&path, &["--net", "--threads"]);
    assert_eq!(code, 0, "{stderr}");
    check(&report, "tcp-threads");
    // TCP does not lose on loopback: every message arrives.
    assert_eq!(report["delivered"], 150, "{report}");
}

#[test]
fn threads_need_net() {
    let path = write_stack("needs");
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .arg("run")
        .arg(&path)
        .arg("--threads")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--net"));
}

//! `viastack node`: a member node on real sockets, fed by an application through the API, and
//! its Prometheus endpoint scraped over HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};

use viastack::{Deployment, Node, NodeId};

fn free_udp() -> std::net::SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("port")
}

fn free_tcp() -> std::net::SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("port")
}

fn scrape(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}

#[test]
fn a_member_node_prints_messages_and_serves_metrics() {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/../../stacks/chat.toml");
    let (a0, a1, metrics) = (free_udp(), free_udp(), free_tcp());
    let dir = std::env::temp_dir().join(format!("viastack-node-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let deployment = dir.join("deploy.toml");
    std::fs::write(
        &deployment,
        format!("[nodes]\n0 = \"{a0}\"\n1 = \"{a1}\"\n"),
    )
    .expect("write");
    let mut member = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(["node", stack, "--id", "1", "--deployment"])
        .arg(&deployment)
        .args(["--metrics", &metrics.to_string(), "--duration", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start viastack node");
    // The member says where it listens once it is up.
    let mut err = BufReader::new(member.stderr.take().expect("stderr"));
    let mut line = wait_for_line(&mut err, "metrics at");

    let node = Node::open(
        stack,
        Deployment::from_file(&deployment)
            .expect("deployment")
            .with_id(NodeId(0)),
    )
    .expect("open node 0");
    let chat = node.channel("chat").expect("channel");
    for i in 0..20 {
        chat.send(NodeId(1), format!("hello {i}")).expect("send");
    }
    let mut out = BufReader::new(member.stdout.take().expect("stdout"));
    for i in 0..20 {
        line.clear();
        out.read_line(&mut line).expect("stdout");
        assert_eq!(line.trim_end(), format!("chat from n0: hello {i}"));
    }
    let text = scrape(metrics, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("text/plain; version=0.0.4"), "{text}");
    let received: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("viastack_transport_received_total{node=\"1\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no received counter in {text}"));
    assert!(received >= 20, "{text}");
    assert!(text.contains("layer=\"rel\""), "per-layer counters: {text}");
    assert!(
        text.contains(
            "viastack_channel_messages_total{node=\"1\",channel=\"chat\",kind=\"received\"} 20\n"
        ),
        "per-channel counters: {text}"
    );
    assert!(scrape(metrics, "/other").starts_with("HTTP/1.1 404"));
    assert_eq!(node.close().expect("close").aborted, 0);
    let _ = member.kill();
    let _ = member.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads a node's standard error up to the first line containing `what`.
fn wait_for_line(err: &mut impl BufRead, what: &str) -> String {
    let mut line = String::new();
    while !line.contains(what) {
        line.clear();
        assert!(
            err.read_line(&mut line).expect("stderr") > 0,
            "node exited before saying `{what}`"
        );
    }
    line
}

#[test]
fn a_workload_node_serves_metrics_while_it_runs() {
    let dir = std::env::temp_dir().join(format!("viastack-node-wl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let stack = dir.join("two.toml");
    std::fs::write(
        &stack,
        r#"
[layers.dev]
kind = "device"
[layers.rel]
kind = "reliable-fifo"
[qos.q]
layers = ["dev", "rel"]
[channels.data]
qos = "q"
[scenario]
nodes = 2
duration = "4s"
[[scenario.workload]]
channel = "data"
messages = 400
size = 100
interval = "5ms"
"#,
    )
    .expect("write");
    let (a0, a1, metrics) = (free_udp(), free_udp(), free_tcp());
    let node = |id: u32, me, peer, metrics: Option<std::net::SocketAddr>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_viastack"));
        c.arg("node")
            .arg(&stack)
            .args(["--id", &id.to_string(), "--addr", &format!("{me}")])
            .args(["--peer", &format!("{}={peer}", 1 - id)]);
        if let Some(m) = metrics {
            c.args(["--metrics", &m.to_string()]);
        }
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start viastack node")
    };
    let mut n1 = node(1, a1, a0, None);
    let mut n0 = node(0, a0, a1, Some(metrics));
    let mut err = BufReader::new(n0.stderr.take().expect("stderr"));
    wait_for_line(&mut err, "metrics at");
    // Scrape until the workload has carried something (it runs for 4 s).
    let mut text = String::new();
    for _ in 0..1000 {
        text = scrape(metrics, "/metrics");
        let delivered = text
            .lines()
            .find_map(|l| l.strip_prefix("viastack_transport_received_total{node=\"0\"} "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if delivered > 0 {
            break;
        }
        std::thread::yield_now();
    }
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("layer=\"rel\""),
        "per-layer counters while the workload runs: {text}"
    );
    for child in [&mut n0, &mut n1] {
        let (status, out) = finish(child);
        assert!(status.success(), "node failed");
        let summary: serde_json::Value =
            serde_json::from_str(&out).expect("the node's JSON summary");
        assert!(summary["counters"].is_object(), "{summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for `child` to exit; its status and standard output.
fn finish(child: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_string(&mut out).expect("stdout");
    }
    (child.wait().expect("wait"), out)
}

#[test]
fn bad_deployments_are_named_with_their_line() {
    let stack = concat!(env!("CARGO_MANIFEST_DIR"), "/../../stacks/chat.toml");
    let dir = std::env::temp_dir().join(format!("viastack-node-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let deployment = dir.join("deploy.toml");
    std::fs::write(
        &deployment,
        "[nodes]\n0 = \"127.0.0.1:7000\"\n1 = \"127.0.0.1\"\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(["node", stack, "--id", "0", "--deployment"])
        .arg(&deployment)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("deploy.toml:3:") && err.contains("no port"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args([
            "node",
            stack,
            "--id",
            "0",
            "--addr",
            "127.0.0.1:7000",
            "--peer",
            "oops",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ID=HOST:PORT"));
    let _ = std::fs::remove_dir_all(&dir);
}

//! `viastack overlay join|status` (issue 16 §5): four `overlay join` processes on loopback form
//! one overlay of `stacks/overlay-app.toml`. Their status lines (one JSON object per second)
//! must come to agree: every node has neighbours, the neighbour relation is symmetric, exactly
//! one node is leader, and each node received the multicasts the others send with h2hack
//! (`--send-every`, `--service`). `overlay status FILE` shows what a node wrote. Waits are on
//! the processes' output with timeouts, never sleeps.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A base port with `n` consecutive free UDP ports (free a moment ago).
fn base_port(n: u16) -> u16 {
    for _ in 0..50 {
        let probe = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let base = probe.local_addr().expect("addr").port();
        drop(probe);
        if base > 65535 - n {
            continue;
        }
        let all: Result<Vec<UdpSocket>, _> = (0..n)
            .map(|i| UdpSocket::bind(("127.0.0.1", base + i)))
            .collect();
        if all.is_ok() {
            return base;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// The `overlay join` processes, killed (by handle) when the test ends, pass or fail.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn four_processes_form_one_overlay_and_report_it() {
    let n: u16 = 4;
    let base = base_port(n);
    let dir = std::env::temp_dir().join(format!("viastack-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let (tx, rx) = mpsc::channel::<(u16, Value)>();
    let mut procs = Procs(Vec::new());
    // ServiceID of specs/h2hack.scxml: node 0 reports it in its status; the others send on
    // it once they know it (first line of node 0).
    let spawn = |i: u16, service: Option<u64>, procs: &mut Procs| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_viastack"));
        cmd.current_dir(root())
            .args(["overlay", "join", "stacks/overlay-app.toml", "--nodes"])
            .arg(n.to_string())
            .args(["--base-port", &base.to_string(), "--id", &i.to_string()])
            .args(["--duration", "60s", "--settle", "2s", "--status-file"])
            .arg(dir.join(format!("{i}.json")))
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(s) = service {
            cmd.args(["--send-every", "1s", "--service", &s.to_string()]);
        }
        let mut child = cmd.spawn().expect("spawn viastack");
        let out = child.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send((i, v)).is_err() {
                        break;
                    }
                }
            }
        });
        procs.0.push(child);
    };
    spawn(0, None, &mut procs);
    let (_, first) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a status line from node 0");
    let service = first["services"][0]["service_id"]
        .as_u64()
        .expect("the h2hack lane's ServiceID");
    for i in 1..n {
        spawn(i, Some(service), &mut procs);
    }

    let mut latest: BTreeMap<u16, Value> = BTreeMap::new();
    let agreed = |latest: &BTreeMap<u16, Value>| -> bool {
        if latest.len() != n as usize {
            return false;
        }
        let nbrs: BTreeMap<u64, Vec<u64>> = latest
            .values()
            .map(|v| {
                let ns = v["neighbours"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_u64).collect())
                    .unwrap_or_default();
                (v["node"].as_u64().unwrap_or(u64::MAX), ns)
            })
            .collect();
        let symmetric = nbrs.iter().all(|(a, ns)| {
            !ns.is_empty()
                && ns
                    .iter()
                    .all(|b| nbrs.get(b).is_some_and(|m| m.contains(a)))
        });
        let leaders = latest.values().filter(|v| v["leader"] == true).count();
        // Node 0 receives the others' h2hack multicasts; each sender receives the rest's.
        let received = latest.values().all(|v| v["received"].as_u64() >= Some(2));
        symmetric && leaders == 1 && received
    };
    let mut ok = false;
    for _ in 0..600 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok((i, v)) => {
                latest.insert(i, v);
                if agreed(&latest) {
                    ok = true;
                    break;
                }
            }
            Err(_) => break,
        }
    }
    assert!(ok, "the processes did not agree: {latest:#?}");
    for v in latest.values() {
        assert!(v["logical"].is_string(), "{v}");
        assert_eq!(v["topology"], "dt");
        assert_eq!(v["services"][0]["service_id"].as_u64(), Some(service));
    }

    // `overlay status` reads a node's status file.
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .current_dir(root())
        .args(["overlay", "status", "--json"])
        .arg(dir.join("0.json"))
        .output()
        .expect("overlay status");
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["node"], 0);
    assert!(
        v["neighbours"].as_array().is_some_and(|a| !a.is_empty()),
        "{v}"
    );
    let human = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(["overlay", "status"])
        .arg(dir.join("0.json"))
        .output()
        .expect("overlay status");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("neighbours:") && text.contains("leader:"),
        "{text}"
    );
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `overlay rendezvous --listen` on loopback: a node that asks first finds nobody; members
/// register; a second leader is introduced to the first (how partitions meet); a later query
/// names the leaders first. Waits are socket read timeouts, never sleeps.
#[test]
fn the_rendezvous_server_answers_on_loopback() {
    use viastack_overlay::rendezvous::{Member, Message};
    use viastack_overlay::wire::rdv;

    let mut child = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(["overlay", "rendezvous", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn viastack");
    let mut procs = Procs(Vec::new());
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("first line");
    procs.0.push(child);
    assert!(line.starts_with("rendezvous on udp "), "{line}");
    let server: std::net::SocketAddr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();

    let sock = |_: u8| {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    };
    let ask = |s: &UdpSocket, m: Message<std::net::SocketAddr>| {
        let mut b = Vec::new();
        rdv::Repr::from_message(&m).emit_into(&mut b).unwrap();
        s.send_to(&b, server).unwrap();
    };
    let answer = |s: &UdpSocket| -> Vec<Member<std::net::SocketAddr>> {
        let mut buf = [0u8; 2048];
        let (n, _) = s.recv_from(&mut buf).expect("an answer within 5 s");
        match rdv::Repr::parse_bytes(&buf[..n]).unwrap().to_message() {
            Some(Message::Members(v)) => v,
            other => panic!("not a Members answer: {other:?}"),
        }
    };
    let (a, b, c) = (sock(0), sock(1), sock(2));
    let (aa, ba, ca) = (
        a.local_addr().unwrap(),
        b.local_addr().unwrap(),
        c.local_addr().unwrap(),
    );
    ask(&c, Message::Query { node: ca });
    assert_eq!(answer(&c), vec![], "nobody there yet");
    // A leader registering alone hears nothing; a second leader is told of the first.
    ask(
        &a,
        Message::Register {
            leader: true,
            node: aa,
        },
    );
    ask(
        &b,
        Message::Register {
            leader: true,
            node: ba,
        },
    );
    assert_eq!(
        answer(&b),
        vec![Member {
            leader: true,
            node: aa
        }]
    );
    ask(&c, Message::Query { node: ca });
    let m = answer(&c);
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m.iter().all(|m| m.leader && (m.node == aa || m.node == ba)));
    // Garbage is ignored, the server keeps answering.
    c.send_to(b"not rendezvous", server).unwrap();
    ask(&c, Message::Query { node: ca });
    assert_eq!(answer(&c).len(), 2);
    // It reported its member table.
    let mut next = String::new();
    out.read_line(&mut next).unwrap();
    assert_eq!(next.trim(), "members 1 leaders 1");
}

/// Brief h-ovl item 1: `overlay rendezvous STACK` runs the rendezvous server node of
/// `stacks/overlay-rendezvous.toml` (node 0, `rendezvous = 0`, no buddy list anywhere) and
/// three `overlay join` processes of the same stack find each other through it only: their
/// neighbour sets become the triangle of the three members (three points in general position:
/// each neighbours the other two; the server is nobody's neighbour), with one leader, and the
/// server's status counts the three registered members. Waits are on the processes' output
/// with timeouts, never sleeps.
#[test]
fn three_processes_with_no_buddies_form_one_overlay_through_the_rendezvous_process() {
    let n: u16 = 4;
    let base = base_port(n);
    let (tx, rx) = mpsc::channel::<(u16, Value)>();
    let mut procs = Procs(Vec::new());
    for i in 0..n {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_viastack"));
        cmd.current_dir(root())
            .arg("overlay")
            .arg(if i == 0 { "rendezvous" } else { "join" })
            .args(["stacks/overlay-rendezvous.toml", "--nodes"])
            .arg(n.to_string())
            .args(["--base-port", &base.to_string(), "--id", &i.to_string()])
            .args(["--duration", "60s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn viastack");
        let out = child.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send((i, v)).is_err() {
                        break;
                    }
                }
            }
        });
        procs.0.push(child);
    }
    let nbrs = |v: &Value| -> Vec<u64> {
        v["neighbours"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    let mut latest: BTreeMap<u16, Value> = BTreeMap::new();
    let agreed = |latest: &BTreeMap<u16, Value>| -> bool {
        if latest.len() != n as usize {
            return false;
        }
        let triangle = (1..n).all(|i| {
            let want: Vec<u64> = (1..u64::from(n)).filter(|&j| j != u64::from(i)).collect();
            nbrs(&latest[&i]) == want
        });
        let leaders = (1..n).filter(|i| latest[i]["leader"] == true).count();
        triangle && leaders == 1 && latest[&0]["rendezvous_members"] == 3
    };
    let mut ok = false;
    for _ in 0..600 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok((i, v)) => {
                latest.insert(i, v);
                if agreed(&latest) {
                    ok = true;
                    break;
                }
            }
            Err(_) => break,
        }
    }
    assert!(ok, "the processes did not form one overlay: {latest:#?}");
    assert!(nbrs(&latest[&0]).is_empty(), "the server is no member");
    for i in 1..n {
        assert_eq!(latest[&i]["rendezvous_members"], Value::Null);
    }
    drop(procs);
}

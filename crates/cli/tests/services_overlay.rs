//! A services server reachable by overlay nodes on real UDP (issue 16 §4; seed 000 §4.3.2):
//! `viastack services serve DIR --stack STACK --id 0` runs node 0 of an overlay with the specs
//! of DIR; the other nodes (`overlay join STACK`) start with no spec at all (the stack names
//! only the lane's `service_id`), fetch it from the message's source, their neighbours and the
//! server through the stack's device and checksum, verify it and run it — or, when the server
//! holds a spec whose signature does not verify and `trusted_keys` are set, refuse it, count
//! it and drop the message after `fetch_tries`. Loopback, one process per node; waits are on
//! the processes' status lines with a bound, never sleeps.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
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

/// The node processes, killed (by handle) when the test ends, pass or fail.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn viastack(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(args)
        .output()
        .expect("run viastack");
    assert!(out.status.success(), "viastack {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

const NODES: u16 = 4;

/// A fresh directory for one test: `specs/` (the server's DIR) and the stack file, a copy of
/// `stacks/overlay-services.toml` (no `service`: only its ServiceID) with `extra` lines added
/// to its messagestore layer.
fn setup(name: &str, extra: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("viastack-svc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("specs")).expect("tmp dir");
    std::fs::copy(
        root().join("specs/h2hack.scxml"),
        dir.join("specs/h2hack.scxml"),
    )
    .expect("copy spec");
    let stack =
        std::fs::read_to_string(root().join("stacks/overlay-services.toml")).expect("stack file");
    assert!(!stack.contains("\nservice ="), "the stack names no spec");
    let mut stack = stack.replace(
        "kind = \"messagestore\"\n",
        &format!("kind = \"messagestore\"\n{extra}"),
    );
    if !extra.is_empty() {
        // Give up soon: three requests 200 ms apart.
        assert!(
            stack.contains("fetch_tries = 20\n") && stack.contains("fetch_every = \"300ms\"\n")
        );
        stack = stack
            .replace("fetch_tries = 20\n", "fetch_tries = 3\n")
            .replace("fetch_every = \"300ms\"\n", "fetch_every = \"200ms\"\n");
    }
    let file = dir.join("overlay-services.toml");
    std::fs::write(&file, stack).expect("write stack");
    (dir, file)
}

/// Starts the server (node 0) and nodes 1..NODES (`senders` send on ServiceID 1 every
/// 300 ms); their status lines come on the channel.
fn start(dir: &Path, stack: &Path, senders: &[u16]) -> (Procs, mpsc::Receiver<(u16, Value)>) {
    let base = base_port(NODES);
    let (tx, rx) = mpsc::channel::<(u16, Value)>();
    let mut procs = Procs(Vec::new());
    for i in 0..NODES {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_viastack"));
        if i == 0 {
            cmd.args(["services", "serve"])
                .arg(dir.join("specs"))
                .arg("--stack")
                .arg(stack);
        } else {
            cmd.args(["overlay", "join"]).arg(stack);
            if senders.contains(&i) {
                cmd.args(["--service", "1", "--send-every", "300ms"]);
            }
        }
        cmd.args(["--nodes", &NODES.to_string()])
            .args(["--base-port", &base.to_string(), "--id", &i.to_string()])
            .args(["--duration", "90s"])
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
    (procs, rx)
}

/// Reads status lines until `done` holds for the latest of every node (at most 60 s of
/// silence, 600 lines).
fn wait_for(
    rx: &mpsc::Receiver<(u16, Value)>,
    done: impl Fn(&BTreeMap<u16, Value>) -> bool,
) -> (bool, BTreeMap<u16, Value>) {
    let mut latest = BTreeMap::new();
    for _ in 0..600 {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok((i, v)) => {
                latest.insert(i, v);
                if latest.len() == NODES as usize && done(&latest) {
                    return (true, latest);
                }
            }
            Err(_) => break,
        }
    }
    (false, latest)
}

fn loaded(v: &Value) -> Vec<u64> {
    v["services"][0]["loaded"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

fn deploy(v: &Value, what: &str) -> u64 {
    v["deploy"][what].as_u64().unwrap_or(0)
}

/// (a) The spec is only in the server's DIR; node 1 multicasts messages of its ServiceID:
/// every node fetches it (hash checked), runs it, and nodes 2 and 3 (and the server) deliver
/// node 1's messages.
#[test]
fn nodes_fetch_a_spec_from_the_services_server_and_run_it() {
    let (dir, stack) = setup("ok", "");
    let (procs, rx) = start(&dir, &stack, &[1]);
    let (ok, latest) = wait_for(&rx, |l| {
        l.values().all(|v| loaded(v) == [1])
            && (1..NODES).all(|i| deploy(&l[&i], "spec_accepted") == 1)
            && [0, 2, 3]
                .iter()
                .all(|i| l[i]["received"].as_u64() >= Some(3))
    });
    drop(procs);
    assert!(ok, "the nodes did not all run the service: {latest:#?}");
    for (i, v) in &latest {
        assert_eq!(deploy(v, "spec_refused"), 0, "node {i}: {v}");
        assert_eq!(v["services"][0]["service_id"], 1, "node {i}: {v}");
    }
    // The server started with it (fetched nothing) and served it at least once.
    assert_eq!(deploy(&latest[&0], "spec_accepted"), 0);
    assert!(deploy(&latest[&0], "spec_served") >= 1, "{}", latest[&0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (b) The server's spec was changed after it was signed, and the nodes trust only the
/// signer's key: every node refuses it (`spec_refused`), never runs it, and drops its messages
/// after `fetch_tries` (`unknown_service_dropped`); nothing is delivered.
#[test]
fn nodes_refuse_a_tampered_spec_from_the_services_server() {
    let (dir, _) = setup("bad", "");
    let key = dir.join("key");
    viastack(&["keygen", "--out", key.to_str().expect("utf-8")]);
    let spec = dir.join("specs/h2hack.scxml");
    viastack(&[
        "services",
        "sign",
        spec.to_str().expect("utf-8"),
        "--key",
        key.to_str().expect("utf-8"),
    ]);
    let public = viastack(&["services", "pubkey", "--key", key.to_str().expect("utf-8")]);
    // Tampered after signing: still a valid spec (a comment more), but its hash changed.
    let text = std::fs::read_to_string(&spec).expect("spec");
    let tampered = text.replacen("?>\n", "?>\n<!-- tampered -->\n", 1);
    assert_ne!(text, tampered);
    std::fs::write(&spec, tampered).expect("tamper");
    let (_, stack) = setup(
        "bad-stack",
        &format!("trusted_keys = \"{}\"\n", public.trim()),
    );
    let (procs, rx) = start(&dir, &stack, &[1, 2, 3]);
    let (ok, latest) = wait_for(&rx, |l| {
        (1..NODES).all(|i| {
            deploy(&l[&i], "spec_refused") >= 1 && deploy(&l[&i], "unknown_service_dropped") >= 1
        })
    });
    drop(procs);
    assert!(ok, "the nodes did not refuse the spec: {latest:#?}");
    assert!(deploy(&latest[&0], "spec_served") >= 1, "{}", latest[&0]);
    for i in 1..NODES {
        let v = &latest[&i];
        assert!(loaded(v).is_empty(), "node {i} runs the tampered spec: {v}");
        assert_eq!(deploy(v, "spec_accepted"), 0, "node {i}: {v}");
        assert_eq!(v["received"], 0, "node {i}: {v}");
        assert!(deploy(v, "spec_fetch_failed") >= 1, "node {i}: {v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(stack.parent().expect("dir"));
}

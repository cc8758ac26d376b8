//! End-to-end tests of `viastack services` (issue 16 §4): hash, sign and pubkey on files, and a
//! real services server on loopback UDP answering `fetch` by hash — a spec changed after it was
//! signed is refused, a hash the server lacks gets no answer; the shipped `overlay-deploy`
//! stack runs.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use viastack_protocols::specbundle;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn viastack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("viastack-services-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A `services serve DIR` on an ephemeral loopback port, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_viastack"))
            .args(["services", "serve"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        assert!(line.starts_with("serving "), "{line}");
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn hash_sign_pubkey_serve_and_fetch_on_loopback() {
    let dir = scratch("ok");
    let key = dir.join("k");
    ok(&viastack(&["keygen", "--out", key.to_str().unwrap()]));
    let pk = ok(&viastack(&[
        "services",
        "pubkey",
        "--key",
        key.to_str().unwrap(),
    ]));
    let pk = pk.trim().to_string();
    assert_eq!(pk.len(), 64, "{pk}");

    let specs = dir.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let text = std::fs::read(root().join("specs/h2hack.scxml")).unwrap();
    let file = specs.join("h2hack.scxml");
    std::fs::write(&file, &text).unwrap();
    let hash = ok(&viastack(&["services", "hash", file.to_str().unwrap()]));
    let hash = hash.trim().to_string();
    assert_eq!(hash, specbundle::hex(&specbundle::hash(&text)));

    let line = ok(&viastack(&[
        "services",
        "sign",
        file.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]));
    let sig = specbundle::Signature::parse(
        &std::fs::read_to_string(specs.join("h2hack.scxml.sig")).unwrap(),
    )
    .unwrap();
    assert_eq!(sig, specbundle::Signature::parse(&line).unwrap());
    assert_eq!(specbundle::hex(&sig.key), pk);
    // A second spec, unsigned, in the same directory.
    std::fs::copy(
        root().join("specs/dupelim.scxml"),
        specs.join("dupelim.scxml"),
    )
    .unwrap();

    let server = Server::start(&specs);
    let out = dir.join("fetched.scxml");
    ok(&viastack(&[
        "services",
        "fetch",
        &hash,
        "--from",
        &server.addr,
        "--out",
        out.to_str().unwrap(),
        "--trusted-key",
        &pk,
    ]));
    assert_eq!(std::fs::read(&out).unwrap(), text);
    assert!(dir.join("fetched.scxml.sig").exists());

    // The unsigned spec comes without a trusted key, and is refused with one.
    let dupelim = specbundle::hex(&specbundle::hash(
        &std::fs::read(specs.join("dupelim.scxml")).unwrap(),
    ));
    let got = ok(&viastack(&[
        "services",
        "fetch",
        &dupelim,
        "--from",
        &server.addr,
    ]));
    assert!(got.contains("<scxml"), "{got}");
    let o = viastack(&[
        "services",
        "fetch",
        &dupelim,
        "--from",
        &server.addr,
        "--trusted-key",
        &pk,
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unsigned"),
        "{o:?}"
    );

    // A hash the server does not have: no answer.
    let o = viastack(&[
        "services",
        "fetch",
        &"ab".repeat(32),
        "--from",
        &server.addr,
        "--tries",
        "1",
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did not send"),
        "{o:?}"
    );
}

/// A spec changed after it was signed: the server serves it (its hash is of the changed text),
/// and a fetch trusting the signer's key refuses it.
#[test]
fn a_spec_changed_after_signing_is_refused_by_fetch() {
    let dir = scratch("tamper");
    let key = dir.join("k");
    ok(&viastack(&["keygen", "--out", key.to_str().unwrap()]));
    let pk = ok(&viastack(&[
        "services",
        "pubkey",
        "--key",
        key.to_str().unwrap(),
    ]));
    let specs = dir.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let file = specs.join("h2hack.scxml");
    let text = std::fs::read_to_string(root().join("specs/h2hack.scxml")).unwrap();
    std::fs::write(&file, &text).unwrap();
    ok(&viastack(&[
        "services",
        "sign",
        file.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]));
    let changed = text.replace("</scxml>", "<!-- changed -->\n</scxml>");
    std::fs::write(&file, &changed).unwrap();
    let hash = specbundle::hex(&specbundle::hash(changed.as_bytes()));
    let server = Server::start(&specs);
    let o = viastack(&[
        "services",
        "fetch",
        &hash,
        "--from",
        &server.addr,
        "--trusted-key",
        pk.trim(),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("signature does not verify"),
        "{o:?}"
    );
}

/// The shipped `stacks/overlay-deploy.toml`: h2hack known at node 0 only reaches the 23 other
/// nodes, and every multicast reaches every node exactly once.
#[test]
fn the_shipped_deploy_stack_holds() {
    let out = ok(&viastack(&["run", "stacks/overlay-deploy.toml", "--json"]));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["verdict"]["holds"], serde_json::Value::Bool(true), "{r}");
    assert_eq!(r["counters"]["store.spec_accepted"], 23, "{r}");
    assert!(r["counters"]["store.spec_refused"].is_null(), "{r}");
    assert_eq!(r["counters"]["store.to_application"], 24 * 23 * 5, "{r}");
}

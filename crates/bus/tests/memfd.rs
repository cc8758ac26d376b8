//! Same-host transfers in shared memory: a consumer fetching from an owner on a Unix socket
//! gets the value as a sealed memfd passed with SCM_RIGHTS (GET with window 0, PUT without
//! data); when the owner declines (FAIL 2) it streams on the same connection, and a consumer
//! that does not ask streams as before. The value arrives intact in each case.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use viastack_bus::client::{Request, Tool, ToolConfig, ToolStats};
use viastack_bus::interp::{Bus, Config};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::{Arena, Kind};
use viastack_kernel::Instant;

const SCRIPT: &str = r#"
process Main is let P : producer, C : consumer, V : term, R : term in
    rec-connect(P?) . rec-connect(C?) .
    snd-eval(P, make) . rec-value(P, V?) .
    snd-eval(C, consume(V)) . rec-value(C, R?) .
    V := none . snd-terminate(C, done) . snd-terminate(P, done)
endlet
tool producer is { }
tool consumer is { }
toolbus(Main)
"#;

const SIZE: usize = 5_000_000;

fn run(tag: &str, owner_memfd: bool, consumer_memfd: bool) -> ToolStats {
    run_at(tag, owner_memfd, consumer_memfd, false, false)
}

/// `tcp_owner`: the owner serves on TCP (the default), not on a Unix socket.
/// `shared`: the owner makes the value with `Tool::shared_blob` (in a memfd from the start).
fn run_at(
    tag: &str,
    owner_memfd: bool,
    consumer_memfd: bool,
    tcp_owner: bool,
    shared: bool,
) -> ToolStats {
    let dir = std::env::temp_dir().join(format!("viastack-memfd-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut arena = Arena::new();
    let script = Script::parse("memfd.tb", SCRIPT, &mut arena).unwrap();
    let config = Config {
        threshold: 64 << 10,
        ..Config::default()
    };
    let bus = Bus::new(script, arena, config, Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse(&format!(
        "unix:{}",
        dir.join("bus").display()
    )))
    .unwrap();
    let ep = listener.endpoint().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(serve(listener, bus, ServeOptions::default()).unwrap());
    });
    let (ep1, owner_at) = (ep.clone(), format!("unix:{}", dir.join("owner").display()));
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        cfg.serve = Some(if tcp_owner {
            "127.0.0.1:0".to_string()
        } else {
            owner_at
        });
        cfg.memfd = owner_memfd;
        let mut t = Tool::connect(&ep1, cfg).unwrap();
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    let blob = if shared {
                        t.shared_blob(SIZE, |b| {
                            for (i, x) in b.iter_mut().enumerate() {
                                *x = (i % 239) as u8;
                            }
                        })
                        .unwrap()
                    } else {
                        let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 239) as u8).collect();
                        t.arena.blob(bytes)
                    };
                    let v = t.arena.appl("data", vec![blob]);
                    let r = t.put(&v);
                    assert!(r.as_ref_info().is_some());
                    // A shared blob is sealed where it was made (no copy at `put`).
                    assert_eq!(t.stats.in_place_puts, u64::from(shared));
                    t.value(request, r).unwrap();
                }
                Request::Terminate { .. } => break,
                _ => {}
            }
        }
    });
    let mut cfg = ToolConfig::new("consumer");
    cfg.serve = None;
    cfg.memfd = consumer_memfd;
    let mut c = Tool::connect(&ep, cfg).unwrap();
    loop {
        match c.next_request().unwrap() {
            Request::Eval {
                request,
                delivery,
                term,
            } => {
                let v = c.resolve(&term, delivery).unwrap();
                let Kind::Appl { args, .. } = v.kind() else {
                    panic!("{v}")
                };
                let Kind::Appl { args, .. } = args[0].kind() else {
                    panic!("{v}")
                };
                let Kind::Blob(b) = args[0].kind() else {
                    panic!("{v}")
                };
                assert_eq!(b.len(), SIZE);
                assert!(b.iter().enumerate().all(|(i, x)| *x == (i % 239) as u8));
                let ok = c.arena.appl("ok", vec![]);
                c.value(request, ok).unwrap();
            }
            Request::Terminate { .. } => break,
            other => panic!("consumer: {other:?}"),
        }
    }
    producer.join().unwrap();
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    c.stats
}

#[test]
fn same_host_value_comes_as_a_sealed_memfd() {
    let s = run("both", true, true);
    assert_eq!((s.fetches, s.memfd_fetches), (1, 1));
}

/// The default owner serves TCP; on the same host (same boot id) a consumer finds its Unix
/// socket in the location and gets a memfd, without being told to.
#[test]
fn a_tcp_owner_on_the_same_host_hands_over_a_memfd_automatically() {
    let s = run_at("tcp-both", true, true, true, false);
    assert_eq!((s.fetches, s.memfd_fetches, s.local_fetches), (1, 1, 1));
}

/// A value made in shared memory (`Tool::shared_blob`) goes to a same-host consumer as the
/// memfd it was made in (its stream after a gap: the PUT's offset), intact; to a consumer
/// that streams, over TCP from the same bytes.
#[test]
fn a_shared_blob_is_handed_over_in_place() {
    let s = run_at("shared", true, true, true, true);
    assert_eq!((s.fetches, s.memfd_fetches, s.local_fetches), (1, 1, 1));
    let s = run_at("shared-stream", true, false, true, true);
    assert_eq!((s.fetches, s.memfd_fetches), (1, 0));
}

/// A TCP owner without memfd announces no same-host socket: TCP, as across hosts.
#[test]
fn a_tcp_owner_without_memfd_streams_over_tcp() {
    let s = run_at("tcp-owner-off", false, true, true, false);
    assert_eq!((s.fetches, s.memfd_fetches, s.local_fetches), (1, 0, 0));
}

/// Locations with a same-host part: split, and a boot id other than this host's or a socket
/// that is not there leaves the TCP address (the fallback across hosts).
#[test]
fn a_same_host_part_is_split_off_the_location() {
    use viastack_bus::client::split_local;
    assert_eq!(
        split_local("127.0.0.1:5;local=abc@/tmp/x.sock"),
        ("127.0.0.1:5", Some(("abc", "/tmp/x.sock")))
    );
    assert_eq!(
        split_local("tls:h:5;sha256=00ff;local=abc@/s"),
        ("tls:h:5;sha256=00ff", Some(("abc", "/s")))
    );
    assert_eq!(split_local("127.0.0.1:5"), ("127.0.0.1:5", None));
    assert_eq!(split_local("unix:/a;local=abc"), ("unix:/a", None));
}

#[test]
fn an_owner_that_declines_memfd_streams_instead() {
    let s = run("owner-off", false, true);
    assert_eq!((s.fetches, s.memfd_fetches), (1, 0));
}

#[test]
fn a_consumer_that_does_not_ask_streams() {
    let s = run("consumer-off", true, false);
    assert_eq!((s.fetches, s.memfd_fetches), (1, 0));
}

/// Java cannot pass descriptors without native code (docs/BUS.md): a Java consumer of a
/// memfd-capable Rust owner on a Unix socket streams the value instead (a GET with a window,
/// never window 0), and its own values go on streamed to a memfd-asking Rust consumer (the
/// Java owner declines with FAIL 2, or serves TCP). The Java tool is the three-language
/// example's transformer, compiled here with javac; skipped, saying so, without a JDK.
#[test]
fn a_java_consumer_of_a_memfd_capable_rust_owner_gets_the_value_streamed() {
    java_fallback(false);
}

/// The same with the Rust owner serving TCP (the default): its location carries a same-host
/// part (`;local=BOOT_ID@/socket`), which the Java client strips (it cannot receive a memfd),
/// fetching over TCP.
#[test]
fn a_java_consumer_of_a_rust_tcp_owner_with_a_same_host_part_fetches_over_tcp() {
    java_fallback(true);
}

fn java_fallback(tcp_owner: bool) {
    use std::process::{Command, Stdio};
    let have = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("javac") || !have("java") {
        eprintln!("skipped: the Java fallback test needs a JDK (scripts/setup.sh installs it)");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!(
        "viastack-memfd-java-{}-{tcp_owner}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let classes = dir.join("classes");
    let javac = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .args(
            std::fs::read_dir(root.join("clients/java/src/main/java/org/viastack/bus"))
                .unwrap()
                .map(|e| e.unwrap().path()),
        )
        .arg(root.join("examples/bus/Transformer.java"))
        .status()
        .unwrap();
    assert!(javac.success(), "javac failed");

    const SCRIPT3: &str = r#"
process Main is
  let P : producer, J : transformer, C : consumer, V : term, W : term, R : term in
    rec-connect(P?) . rec-connect(J?) . rec-connect(C?) .
    snd-eval(P, make) . rec-value(P, V?) .
    snd-eval(J, transform(V)) . rec-value(J, W?) .
    V := none .
    snd-eval(C, consume(W)) . rec-value(C, R?) .
    W := none .
    snd-terminate(C, done) . snd-terminate(J, done) . snd-terminate(P, done)
  endlet
tool producer is { }
tool transformer is { }
tool consumer is { }
toolbus(Main)
"#;
    let mut arena = Arena::new();
    let script = Script::parse("java-fallback.tb", SCRIPT3, &mut arena).unwrap();
    let config = Config {
        threshold: 64 << 10,
        ..Config::default()
    };
    let bus = Bus::new(script, arena, config, Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse(&format!(
        "unix:{}",
        dir.join("bus").display()
    )))
    .unwrap();
    let ep = listener.endpoint().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(serve(listener, bus, ServeOptions::default()).unwrap());
    });
    let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 239) as u8).collect();
    let (ep1, owner_at, value) = (
        ep.clone(),
        format!("unix:{}", dir.join("owner").display()),
        bytes.clone(),
    );
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        if !tcp_owner {
            cfg.serve = Some(owner_at);
        }
        cfg.memfd = true;
        let mut t = Tool::connect(&ep1, cfg).unwrap();
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    let digest = t.arena.str("unchecked");
                    let blob = t.arena.blob(value.clone());
                    let v = t.arena.appl("data", vec![digest, blob]);
                    let r = t.put(&v);
                    let loc = r.as_ref_info().unwrap().location.clone();
                    if tcp_owner {
                        assert!(loc.starts_with("127.0.0.1:") && loc.contains(";local="));
                    } else {
                        assert!(loc.starts_with("unix:"));
                    }
                    t.value(request, r).unwrap();
                }
                Request::Terminate { .. } => break,
                _ => {}
            }
        }
    });
    let java = Command::new("java")
        .arg("-cp")
        .arg(&classes)
        .arg("Transformer")
        .env("VIASTACK_BUS", &ep)
        .env("VIASTACK_TOOL", "transformer")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cfg = ToolConfig::new("consumer");
    cfg.serve = None;
    cfg.memfd = true;
    let mut c = Tool::connect(&ep, cfg).unwrap();
    loop {
        match c.next_request().unwrap() {
            Request::Eval {
                request,
                delivery,
                term,
            } => {
                let v = c.resolve(&term, delivery).unwrap();
                let (_, args) = v.as_appl().unwrap();
                let (fun, parts) = args[0].as_appl().unwrap();
                assert_eq!(fun, "transformed");
                let out = parts[3].as_blob().unwrap();
                assert_eq!(out.len(), SIZE);
                assert!(out.iter().zip(&bytes).all(|(o, i)| *o == !*i));
                let ok = c.arena.appl("ok", vec![]);
                c.value(request, ok).unwrap();
            }
            Request::Terminate { .. } => break,
            other => panic!("consumer: {other:?}"),
        }
    }
    producer.join().unwrap();
    let out = java.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{log}");
    // The Java tool fetched the memfd-capable owner's value once, by reference, from its Unix
    // socket (streamed: it never asks for a memfd).
    assert!(
        log.contains(&format!("got {SIZE} bytes by reference"))
            && log.contains(if tcp_owner {
                "at 127.0.0.1:"
            } else {
                "at unix:"
            })
            && log.contains("(fetches 1)"),
        "{log}"
    );
    // The Rust consumer fetched the Java tool's value (not over memfd: Java cannot pass one).
    assert_eq!((c.stats.fetches, c.stats.memfd_fetches), (1, 0));
}

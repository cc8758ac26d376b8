//! The bus against tools that misbehave, on real sockets (issue 19 §3, seed 003): a tool with
//! a wrong token is refused at registration; garbage from many connections never crashes the
//! bus; a tool that does not read what the bus sends it is closed (bounded queue, counted)
//! instead of blocking the bus thread.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use viastack_bus::client::{ClientError, Request, Tool, ToolConfig};
use viastack_bus::interp::{Bus, Config, Counters};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::Arena;
use viastack_kernel::Instant;

/// Starts `serve` on loopback TCP; returns its address and a receiver of its counters.
fn start(script: &str, config: Config, opts: ServeOptions) -> (String, mpsc::Receiver<Counters>) {
    let mut arena = Arena::new();
    let script = Script::parse("security.tb", script, &mut arena).unwrap();
    let bus = Bus::new(script, arena, config, Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse("127.0.0.1:0")).unwrap();
    let ep = listener.endpoint().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let c = serve(listener, bus, opts).unwrap();
        let _ = tx.send(c);
    });
    (ep, rx)
}

/// The bus's counters once it has ended (within a minute: a hung bus fails the test).
fn ended(rx: &mpsc::Receiver<Counters>) -> Counters {
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the bus did not end")
}

/// Answers one evaluation with `answer`'s value, then waits for TERMINATE.
fn answer_once(t: &mut Tool, make: impl Fn(&mut Tool) -> viastack_bus::term::Term) {
    loop {
        match t.next_request().unwrap() {
            Request::Eval { request, .. } => {
                let v = make(t);
                t.value(request, v).unwrap();
            }
            Request::Terminate { .. } => return,
            _ => {}
        }
    }
}

const ECHO: &str = r#"
process Main is let C : worker, V : term in
    rec-connect(C?) . snd-eval(C, ping) . rec-value(C, V?) . snd-terminate(C, done)
endlet
tool worker is { }
toolbus(Main)
"#;

#[test]
fn a_wrong_token_is_refused_at_registration_and_counted() {
    let config = Config {
        tokens: vec!["s3cret".into()],
        ..Config::default()
    };
    let (ep, rx) = start(ECHO, config, ServeOptions::default());
    let mut bad = ToolConfig::new("worker");
    bad.token = "guess".into();
    match Tool::connect(&ep, bad) {
        Err(ClientError::Ended(why)) => assert!(why.contains("token"), "{why}"),
        Err(e) => panic!("refused with the wrong error: {e}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
    let mut none = ToolConfig::new("worker");
    none.serve = None;
    assert!(Tool::connect(&ep, none).is_err(), "no token was accepted");
    let mut good = ToolConfig::new("worker");
    good.token = "s3cret".into();
    let mut t = Tool::connect(&ep, good).unwrap();
    answer_once(&mut t, |t| t.arena.appl("pong", vec![]));
    let c = ended(&rx);
    assert_eq!(c.refused_hellos, 2);
}

/// A reference's variable number is its capability: a tool that reaches an owner's listener
/// cannot fetch a value it was never granted by guessing numbers (they are 62 random bits,
/// not 1, 2, 3…), and a connection that keeps guessing is closed.
#[test]
fn variable_numbers_cannot_be_guessed_at_an_owners_listener() {
    use viastack_bus::wire::{FailCode, Frame};
    let (ep, rx) = start(ECHO, Config::default(), ServeOptions::default());
    let mut t = Tool::connect(&ep, ToolConfig::new("worker")).unwrap();
    let big = t.arena.blob(vec![7u8; 4 << 20]);
    let mut vars = Vec::new();
    for _ in 0..2 {
        let r = t.put(&big);
        vars.push(r.as_ref_info().expect("a reference").var);
    }
    assert_ne!(vars[0], vars[1]);
    assert!(
        vars.iter().all(|&v| v > u64::from(u32::MAX)),
        "guessable variable numbers: {vars:?}"
    );
    // A stranger at the owner's listener, trying the numbers a counter would have given.
    // (The TCP address, without the same-host socket's part.)
    let tcp = viastack_bus::client::split_local(t.location())
        .0
        .to_string();
    let mut s = std::net::TcpStream::connect(tcp).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut arena = Arena::new();
    let mut answers = 0;
    for var in 1..=10u64 {
        let get = Frame::Get {
            delivery: 0,
            var,
            offset: 0,
            window: 1 << 20,
        };
        if s.write_all(&get.to_bytes()).is_err() {
            break;
        }
        let frame = match viastack_bus::net::read_frame(&mut s, 1 << 20) {
            Ok(Some(f)) => f,
            _ => break, // closed by the owner
        };
        match Frame::parse(&mut arena, &frame, 1 << 20).unwrap() {
            Frame::Fail { code, .. } => assert_eq!(code, FailCode::UnknownVar),
            other => panic!("a guessed variable {var} was served: {other:?}"),
        }
        answers += 1;
    }
    assert!(
        answers <= 3,
        "the guessing connection was not closed ({answers} answers)"
    );
    answer_once(&mut t, |t| t.arena.appl("pong", vec![]));
    ended(&rx);
}

/// A deterministic generator for the garbage.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn garbage_from_many_connections_never_crashes_the_bus() {
    let (ep, rx) = start(ECHO, Config::default(), ServeOptions::default());
    let kinds = [
        0x01u8, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25,
        0x26, 0x27, 0x7f,
    ];
    let mut rng = Rng(19);
    for conn in 0..120 {
        let Ok(mut s) = Endpoint::parse(&ep).connect() else {
            continue;
        };
        let mut bytes = Vec::new();
        // Half the connections register first, so their garbage reaches every frame handler.
        if conn % 2 == 0 {
            let hello = viastack_bus::wire::Frame::Hello {
                version: viastack_bus::wire::VERSION,
                name: "junk".into(),
                location: if conn % 4 == 0 {
                    "127.0.0.1:1".into()
                } else {
                    String::new()
                },
                token: String::new(),
            };
            bytes.extend(hello.to_bytes());
        }
        for _ in 0..20 {
            let body_len = (rng.next() % 80) as usize;
            let kind = kinds[(rng.next() % kinds.len() as u64) as usize];
            let mut body = rng.bytes(body_len);
            // Some bodies start like a term stream, to go deeper into the decoders.
            if body_len > 24 && rng.next().is_multiple_of(2) {
                let at = 8 + (rng.next() % 9) as usize;
                body[at..at + 4].copy_from_slice(&((body_len - at - 4) as u32).to_be_bytes());
                if at + 7 <= body_len {
                    body[at + 4..at + 7].copy_from_slice(&[0x56, 0x42, 0x01]);
                }
            }
            bytes.extend(((body_len + 1) as u32).to_be_bytes());
            bytes.push(kind);
            bytes.extend(body);
        }
        if conn % 10 == 9 {
            bytes = rng.bytes(300);
        }
        let _ = s.write_all(&bytes);
        if conn % 3 == 0 {
            s.shutdown();
        }
    }
    // The bus still serves a well-behaved tool.
    let mut cfg = ToolConfig::new("worker");
    cfg.serve = None;
    let mut t = Tool::connect(&ep, cfg).unwrap();
    answer_once(&mut t, |t| t.arena.appl("pong", vec![]));
    let c = ended(&rx);
    assert!(c.bad_frames > 0, "{c:?}");
    assert!(c.refused_frames + c.refused_hellos > 0, "{c:?}");
}

const FLOOD: &str = r#"
process Main is let P : producer, C : sink, V : term in
    rec-connect(P?) . rec-connect(C?) .
    snd-eval(P, make) . rec-value(P, V?) .
    (snd-do(C, V) * rec-disconnect(C)) .
    snd-terminate(P, done)
endlet
tool producer is { }
tool sink is { }
toolbus(Main)
"#;

#[test]
fn a_tool_that_does_not_read_is_closed_without_blocking_the_bus() {
    // The bus sends 4 MB frames to a sink that never reads. With blocking writes the bus
    // thread would wait forever on the sink's full socket; with a bounded queue the sink is
    // closed, counted, and the script goes on.
    let opts = ServeOptions {
        max_queued_bytes: 16 << 20,
        ..ServeOptions::default()
    };
    let (ep, rx) = start(FLOOD, Config::default(), opts);
    let ep1 = ep.clone();
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        cfg.serve = None;
        let mut t = Tool::connect(&ep1, cfg).unwrap();
        answer_once(&mut t, |t| {
            let blob = t.arena.blob(vec![7u8; 4 << 20]);
            t.arena.appl("data", vec![blob])
        });
    });
    let mut cfg = ToolConfig::new("sink");
    cfg.serve = None;
    let sink = Tool::connect(&ep, cfg).unwrap();
    let c = ended(&rx);
    producer.join().unwrap();
    assert_eq!(c.slow_readers, 1, "{c:?}");
    drop(sink);
}

fn self_signed(names: &[&str]) -> (rustls::pki_types::CertificateDer<'static>, Vec<u8>) {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    (ck.cert.der().clone(), ck.signing_key.serialize_der())
}

#[test]
fn tls_carries_a_run_and_refuses_an_untrusted_or_plain_tool() {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use viastack_bus::net::{tls_server_config_der, TlsClient};
    let (cert, key) = self_signed(&["localhost"]);
    let server = tls_server_config_der(
        vec![cert.clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
    )
    .unwrap();
    let config = Config {
        tokens: vec!["s3cret".into()],
        ..Config::default()
    };
    let opts = ServeOptions {
        tls: Some(server),
        ..ServeOptions::default()
    };
    let (ep, rx) = start(ECHO, config, opts);

    // A tool that trusts another certificate does not connect.
    let (other, _) = self_signed(&["localhost"]);
    let mut cfg = ToolConfig::new("worker");
    cfg.tls = Some(TlsClient::from_der(vec![other], "localhost").unwrap());
    assert!(
        Tool::connect(&ep, cfg).is_err(),
        "an untrusted certificate was accepted"
    );
    // Nor does one that names the bus differently.
    let mut cfg = ToolConfig::new("worker");
    cfg.tls = Some(TlsClient::from_der(vec![cert.clone()], "bus.example").unwrap());
    assert!(
        Tool::connect(&ep, cfg).is_err(),
        "a wrong name was accepted"
    );
    // A plain-TCP tool's HELLO is not TLS: the bus drops it.
    let mut cfg = ToolConfig::new("worker");
    cfg.serve = None;
    cfg.token = "s3cret".into();
    assert!(Tool::connect(&ep, cfg).is_err(), "plain TCP was accepted");

    let mut cfg = ToolConfig::new("worker");
    cfg.token = "s3cret".into();
    cfg.tls = Some(TlsClient::from_der(vec![cert], "localhost").unwrap());
    let mut t = Tool::connect(&ep, cfg).unwrap();
    // A 1 MB answer crosses the TLS session by value in several records.
    answer_once(&mut t, |t| {
        let blob = t.arena.blob(vec![3u8; 1 << 20]);
        t.arena.appl("data", vec![blob])
    });
    let c = ended(&rx);
    assert_eq!(c.refused_hellos, 0, "{c:?}");
    assert!(c.frames_in >= 2, "{c:?}");
}

const PIPE: &str = r#"
process Main is
  let P : producer, C : consumer, V : term, R : term in
    rec-connect(P?) . rec-connect(C?) .
    snd-eval(P, make) . rec-value(P, V?) .
    snd-eval(C, consume(V)) . rec-value(C, R?) .
    V := none .
    snd-terminate(C, done) . snd-terminate(P, done)
  endlet
tool producer is { }
tool consumer is { }
toolbus(Main)
"#;

/// A listener that completes TLS with its own certificate and answers nothing: an impostor
/// standing where a reference's owner should be.
fn impostor() -> String {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let (cert, key) = self_signed(&["viastack-bus-owner"]);
    let cfg = viastack_bus::net::tls_server_config_der(
        vec![cert],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
    )
    .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let cfg = cfg.clone();
            thread::spawn(move || {
                let conn = rustls::ServerConnection::new(cfg).unwrap();
                let mut s = rustls::StreamOwned::new(conn, s);
                let mut b = [0u8; 64];
                let _ = std::io::Read::read(&mut s, &mut b);
            });
        }
    });
    addr
}

#[test]
fn on_a_tls_bus_values_travel_over_tls_and_a_wrong_owner_certificate_is_refused() {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use viastack_bus::net::{tls_server_config_der, TlsClient};
    use viastack_bus::owner_tls::parse_location;
    use viastack_bus::RefInfo;
    const SIZE: usize = 3_000_000;
    let (cert, key) = self_signed(&["localhost"]);
    let server = tls_server_config_der(
        vec![cert.clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
    )
    .unwrap();
    let opts = ServeOptions {
        tls: Some(server),
        ..ServeOptions::default()
    };
    let (ep, rx) = start(PIPE, Config::default(), opts);
    let tls = TlsClient::from_der(vec![cert], "localhost").unwrap();
    let mut pc = ToolConfig::new("producer");
    pc.tls = Some(tls.clone());
    let ep2 = ep.clone();
    let producer = thread::spawn(move || {
        let mut t = Tool::connect(&ep2, pc).unwrap();
        assert!(
            t.location().starts_with("tls:127.0.0.1:"),
            "{}",
            t.location()
        );
        answer_once(&mut t, |t| {
            let blob = t.arena.blob(vec![5u8; SIZE]);
            let v = t.arena.appl("data", vec![blob]);
            let r = t.put(&v);
            assert!(r.as_ref_info().is_some());
            r
        });
    });
    let mut cc = ToolConfig::new("consumer");
    cc.tls = Some(tls);
    // This test is about TLS: the same-host memfd path (which would be taken, over the
    // owner's Unix socket) is off.
    cc.memfd = false;
    let mut c = Tool::connect(&ep, cc).unwrap();
    loop {
        match c.next_request().unwrap() {
            Request::Eval {
                request,
                delivery,
                term,
            } => {
                let r = term.refs()[0].clone();
                let base = viastack_bus::client::split_local(&r.location).0;
                let (addr, pin) = parse_location(base).unwrap();
                let with_location = |location: String| RefInfo {
                    location: location.as_str().into(),
                    ..r.clone()
                };
                // The owner's address with another pin: its certificate does not match.
                let mut other = pin;
                other[0] ^= 1;
                let hex: String = other.iter().map(|b| format!("{b:02x}")).collect();
                let wrong_pin = with_location(format!("tls:{addr};sha256={hex}"));
                match c.fetch_direct(&wrong_pin, delivery) {
                    Err(ClientError::OwnerUnverified { .. }) => {}
                    other => panic!("a wrong pin was not refused: {other:?}"),
                }
                // An impostor at another address presenting its own certificate under the
                // owner's pin.
                let hex: String = pin.iter().map(|b| format!("{b:02x}")).collect();
                let fake = with_location(format!("tls:{};sha256={hex}", impostor()));
                match c.fetch_direct(&fake, delivery) {
                    Err(ClientError::OwnerUnverified { detail, .. }) => {
                        assert!(detail.contains("certificate"), "{detail}")
                    }
                    other => panic!("an impostor's certificate was accepted: {other:?}"),
                }
                // A plain-TCP location while on a TLS bus.
                let plain = with_location(addr.to_string());
                match c.fetch_direct(&plain, delivery) {
                    Err(ClientError::OwnerUnverified { .. }) => {}
                    other => panic!("a plain-TCP owner was accepted on a TLS bus: {other:?}"),
                }
                assert_eq!(c.stats.unverified_owners, 3);
                assert_eq!(c.stats.fetches, 0);
                // The reference as the bus granted it: fetched over TLS from the real owner.
                let v = c.resolve(&term, delivery).unwrap();
                let (_, args) = v.as_appl().unwrap();
                let (_, inner) = args[0].as_appl().unwrap();
                let b = inner[0].as_blob().unwrap();
                assert!(b.len() == SIZE && b.iter().all(|x| *x == 5));
                let ok = c.arena.appl("ok", vec![]);
                c.value(request, ok).unwrap();
            }
            Request::Terminate { .. } => break,
            other => panic!("consumer: {other:?}"),
        }
    }
    assert_eq!((c.stats.fetches, c.stats.tls_fetches), (1, 1));
    producer.join().unwrap();
    let counters = ended(&rx);
    assert_eq!(counters.refused_hellos, 0, "{counters:?}");
}

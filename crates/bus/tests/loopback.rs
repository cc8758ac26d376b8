//! Two Rust tools on a real `serve` over loopback TCP and over Unix sockets: the producer
//! answers an evaluation with a 20 MB value, which the bus passes to the consumer *by
//! reference* (the frames through the bus carry only location, size and signature); the
//! consumer fetches it from the producer in windowed chunks, once, though it is sent twice; when
//! the script drops the variable the producer receives FIN and frees it; the bus ends with
//! its script. Junk from a third connection is refused without disturbing the run.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::thread;

use viastack_bus::client::{Request, Tool, ToolConfig};
use viastack_bus::interp::{Bus, Config};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::Arena;
use viastack_kernel::Instant;

const SCRIPT: &str = r#"
process Main is let P : producer, C : consumer, V : term, R : term in
    rec-connect(P?) . rec-connect(C?) .
    snd-eval(P, make(20000000)) . rec-value(P, V?) .
    snd-eval(C, consume(V)) . rec-value(C, R?) .
    snd-eval(C, consume(V)) . rec-value(C, R?) .
    V := none .
    snd-terminate(C, done) . snd-terminate(P, done)
endlet
tool producer is { }
tool consumer is { }
toolbus(Main)
"#;

const SIZE: usize = 20_000_000;

fn run(bus_at: &str, serve_at: Option<String>, serve_at2: Option<String>) {
    let mut arena = Arena::new();
    let script = Script::parse("loopback.tb", SCRIPT, &mut arena).unwrap();
    let bus = Bus::new(script, arena, Config::default(), Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse(bus_at)).unwrap();
    let ep = listener.endpoint().to_string();
    let server = thread::spawn(move || serve(listener, bus, ServeOptions::default()));
    // Nothing a tool sends can crash the bus: a frame claiming 4 GiB, then one of length 0,
    // are refused (END, closed) and the run goes on.
    for junk in [[0xffu8, 0xff, 0xff, 0xff], [0, 0, 0, 0]] {
        let mut s = Endpoint::parse(&ep).connect().unwrap();
        s.write_all(&junk).unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        assert!(
            String::from_utf8_lossy(&reply).contains("bad frame"),
            "{reply:?}"
        );
    }

    let ep1 = ep.clone();
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        cfg.serve = serve_at;
        let mut t = Tool::connect(&ep1, cfg).unwrap();
        let mut log = Vec::new();
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, term, .. } => {
                    assert_eq!(term.to_string(), "make(20000000)");
                    let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
                    let blob = t.arena.blob(bytes);
                    let value = t.arena.appl("data", vec![blob]);
                    let sent = t.put(&value);
                    assert!(sent.as_ref_info().is_some(), "20 MB goes by reference");
                    assert_eq!(sent.as_ref_info().unwrap().sig.to_string(), "data(<blob>)");
                    assert_eq!(t.held(), 1);
                    let var = sent.as_ref_info().unwrap().var;
                    t.value(request, sent).unwrap();
                    log.push(format!("value {var}"));
                }
                Request::Fin { var } => {
                    assert_eq!(t.held(), 0, "FIN frees the value");
                    log.push(format!("fin {var}"));
                }
                Request::Terminate { .. } => break,
                other => panic!("producer: {other:?}"),
            }
        }
        log
    });

    let consumer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("consumer");
        // Over TCP: the same-host memfd path is tested in tests/memfd.rs.
        cfg.memfd = false;
        cfg.serve = serve_at2;
        cfg.window = 1 << 20; // forces CREDIT frames: 20 MB through a 1 MB window
        let mut t = Tool::connect(&ep, cfg).unwrap();
        let mut answers = 0;
        loop {
            match t.next_request().unwrap() {
                Request::Eval {
                    request,
                    delivery,
                    term,
                } => {
                    assert_ne!(delivery, 0);
                    assert!(term.to_string().starts_with("consume(@ref("), "{term}");
                    let v = t.resolve(&term, delivery).unwrap();
                    let (_, args) = v.as_appl().unwrap();
                    let (_, inner) = args[0].as_appl().unwrap();
                    let blob = inner[0].as_blob().unwrap();
                    assert_eq!(blob.len(), SIZE);
                    assert!(blob.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
                    let ok = t.arena.appl("ok", vec![]);
                    t.value(request, ok).unwrap();
                    answers += 1;
                }
                Request::Terminate { .. } => break,
                other => panic!("consumer: {other:?}"),
            }
        }
        (answers, t.stats)
    });

    let log = producer.join().unwrap();
    let (answers, stats) = consumer.join().unwrap();
    server.join().unwrap().unwrap();
    assert_eq!(answers, 2);
    assert_eq!(stats.fetches, 1, "fetched at most once per consumer");
    assert_eq!(stats.cache_hits, 1);
    assert!(stats.fetched_bytes > SIZE as u64);
    // The FIN names the variable the reference carried.
    let var = log[0].strip_prefix("value ").unwrap();
    assert_eq!(log, [format!("value {var}"), format!("fin {var}")]);
}

#[test]
fn large_value_by_reference_over_tcp() {
    run(
        "127.0.0.1:0",
        Some("127.0.0.1:0".into()),
        Some("127.0.0.1:0".into()),
    );
}

#[test]
fn large_value_by_reference_over_unix_sockets() {
    let dir = std::env::temp_dir().join(format!("viastack-bus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| format!("unix:{}", dir.join(n).display());
    run(&p("bus.sock"), Some(p("producer.sock")), None);
    let _ = std::fs::remove_dir_all(&dir);
}

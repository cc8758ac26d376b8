//! Passive tools (seed 003 "Sending a value through inter tool communication"): a tool that
//! cannot accept connections still sends large values by reference; a consumer GETs them
//! through the bus, which relays the GET to the owner's connection and the owner's PUT
//! chunks back, under the consumer's window (active <- passive), and two passive tools
//! transfer through the bus the same way (passive - passive). Grants: a tool can GET only a
//! reference the script delivered to it, and can name only references it owns or was given.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use viastack_bus::client::{Request, Tool, ToolConfig};
use viastack_bus::interp::{Bus, Config, Counters};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::{Arena, Kind, RefInfo};
use viastack_bus::wire::{FailCode, Frame};
use viastack_kernel::Instant;

const SCRIPT: &str = r#"
process Main is let P : producer, C : consumer, X : thief, V : term, R : term in
    rec-connect(P?) . rec-connect(C?) . rec-connect(X?) .
    snd-eval(P, make) . rec-value(P, V?) .
    snd-eval(X, steal) . rec-value(X, R?) .
    snd-eval(C, consume(V)) . rec-value(C, R?) .
    V := none .
    snd-terminate(X, done) . snd-terminate(C, done) . snd-terminate(P, done)
endlet
tool producer is { }
tool consumer is { }
tool thief is { }
toolbus(Main)
"#;

const SIZE: usize = 6_000_000;

fn run(consumer_serves: Option<String>) -> (Counters, u64) {
    let mut arena = Arena::new();
    let script = Script::parse("relay.tb", SCRIPT, &mut arena).unwrap();
    let config = Config {
        threshold: 64 << 10,
        ..Config::default()
    };
    let bus = Bus::new(script, arena, config, Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse("127.0.0.1:0")).unwrap();
    let ep = listener.endpoint().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(serve(listener, bus, ServeOptions::default()).unwrap());
    });

    let ep1 = ep.clone();
    let producer = thread::spawn(move || {
        let mut cfg = ToolConfig::new("producer");
        cfg.serve = None; // passive
        cfg.chunk = 64 << 10;
        let mut t = Tool::connect(&ep1, cfg).unwrap();
        let mut fins = 0;
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 241) as u8).collect();
                    let blob = t.arena.blob(bytes);
                    let value = t.arena.appl("data", vec![blob]);
                    let sent = t.put(&value);
                    let r = sent
                        .as_ref_info()
                        .expect("a passive tool's large value goes by reference");
                    assert_eq!(&*r.location, "", "a passive owner has no location");
                    t.value(request, sent).unwrap();
                }
                Request::Fin { .. } => {
                    assert_eq!(t.held(), 0);
                    fins += 1;
                }
                Request::Terminate { .. } => break,
                other => panic!("producer: {other:?}"),
            }
        }
        fins
    });
    let ep2 = ep.clone();
    let thief = thread::spawn(move || {
        let mut cfg = ToolConfig::new("thief");
        cfg.serve = None;
        let mut t = Tool::connect(&ep2, cfg).unwrap();
        let mut fails = Vec::new();
        loop {
            match t.next_request().unwrap() {
                Request::Eval { request, .. } => {
                    // GETs through the bus of values never delivered to it.
                    for delivery in 0..4 {
                        t.send_frame(&Frame::Get {
                            delivery,
                            var: 1,
                            offset: 0,
                            window: 1 << 20,
                        })
                        .unwrap();
                    }
                    // A value naming references it was not given (every plausible owner).
                    let sig = t.arena.appl("data", vec![]);
                    let forged: Vec<_> = (1..5)
                        .map(|owner| {
                            t.arena.reference(RefInfo {
                                owner,
                                var: 1,
                                size: SIZE as u64,
                                location: "".into(),
                                sig: sig.clone(),
                            })
                        })
                        .collect();
                    let forged = t.arena.make(Kind::List(forged.into()));
                    t.value(request, forged).unwrap();
                    for _ in 0..5 {
                        match t.next_request().unwrap() {
                            Request::Fail { code, .. } => fails.push(code),
                            other => panic!("thief: {other:?}"),
                        }
                    }
                    let nothing = t.arena.appl("nothing", vec![]);
                    t.value(request, nothing).unwrap();
                }
                Request::Terminate { .. } => break,
                other => panic!("thief: {other:?}"),
            }
        }
        fails
    });

    let mut cfg = ToolConfig::new("consumer");
    cfg.serve = consumer_serves;
    cfg.window = 256 << 10;
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
                assert!(b.iter().enumerate().all(|(i, x)| *x == (i % 241) as u8));
                let ok = c.arena.appl("ok", vec![]);
                c.value(request, ok).unwrap();
            }
            Request::Terminate { .. } => break,
            other => panic!("consumer: {other:?}"),
        }
    }
    assert_eq!(c.stats.fetches, 1);
    let fails = thief.join().unwrap();
    assert_eq!(fails, vec![FailCode::Refused; 5], "every theft refused");
    let fins = producer.join().unwrap();
    let counters = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    (counters, fins)
}

fn check(c: &Counters, fins: u64) {
    assert_eq!(fins, 1, "the value was freed once");
    assert_eq!(c.relays, 1, "{c:?}");
    assert!(c.relayed_chunks >= (SIZE / (64 << 10)) as u64, "{c:?}");
    assert_eq!(c.refused_relays, 4, "{c:?}");
    assert_eq!(c.refused_grants, 1, "{c:?}");
}

#[test]
fn active_consumer_gets_a_passive_owners_value_through_the_bus() {
    let (c, fins) = run(Some("127.0.0.1:0".into()));
    check(&c, fins);
}

#[test]
fn two_passive_tools_transfer_through_the_bus() {
    let (c, fins) = run(None);
    check(&c, fins);
}

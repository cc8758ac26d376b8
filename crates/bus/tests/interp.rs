//! The bus without sockets: scripts run against tools simulated by frames, on a virtual clock.
//! Each test would fail if its feature broke: message passing binds the receiver's variables,
//! an evaluation reaches the tool and its value comes back into the script, references are
//! counted per binding and per delivery until ACK and FIN reaches the owner at zero, a silent
//! owner loses its lease and the consumer's delivery fails with a typed FAIL, delays wait for
//! the virtual clock, and a run is a function of its seed.
#![allow(clippy::unwrap_used)]

use viastack_bus::interp::{Bus, Config, Output};
use viastack_bus::script::Script;
use viastack_bus::term::{Arena, RefInfo};
use viastack_bus::wire::{FailCode, Frame, VERSION};
use viastack_kernel::{Duration, Instant};

fn bus(src: &str, config: Config) -> Bus {
    let mut arena = Arena::new();
    let script = Script::parse("test.tb", src, &mut arena).unwrap_or_else(|e| panic!("{e}"));
    Bus::new(script, arena, config, Instant::ZERO)
}

fn drain(bus: &mut Bus) -> Vec<Output> {
    std::iter::from_fn(|| bus.poll_output()).collect()
}

fn sent_to(out: &[Output], tool: u64) -> Vec<Frame> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { tool: t, frame } if *t == tool => Some(frame.clone()),
            _ => None,
        })
        .collect()
}

fn connect(bus: &mut Bus, now: Instant, name: &str, location: &str) -> u64 {
    let id = bus.handle_connect(now);
    bus.handle_frame(
        now,
        id,
        Frame::Hello {
            version: VERSION,
            name: name.into(),
            location: location.into(),
            token: String::new(),
        },
    );
    id
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[test]
fn messages_bind_the_receivers_variables() {
    let src = r#"
        process A is snd-msg(hello(42)) . rec-msg(reply(S?)) . snd-note(got(S))
        process B is let N : int in rec-msg(hello(N?)) . snd-msg(reply(add(N, 1))) endlet
        process C is let S : int in subscribe(got(<int>)) . rec-note(got(S?)) . snd-msg(final(S)) endlet
        process D is let F : int in rec-msg(final(F?)) . delta endlet
        toolbus(A, B, C, D)
    "#;
    // A needs S declared: the checker says so.
    let mut arena = Arena::new();
    let e = Script::parse("t.tb", src, &mut arena).unwrap_err();
    assert!(e.msg.contains("S is not declared in process A"), "{e}");
    let src = src
        .replace("process A is", "process A is let S : int in")
        .replace("snd-note(got(S))\n", "snd-note(got(S)) endlet\n");
    let mut b = bus(
        &src,
        Config {
            trace: true,
            ..Config::default()
        },
    );
    let trace: Vec<String> = std::iter::from_fn(|| b.poll_trace()).collect();
    assert!(
        trace.iter().any(|l| l.contains(r#""binds":{"F":"43"}"#)),
        "{trace:#?}"
    );
    // A, B and C ended; D waits forever on delta.
    assert_eq!(b.process_count(), 1);
}

#[test]
fn evaluation_round_trip_and_events() {
    let src = r#"
        process Main is let T : calc, V : int, E : term in
            execute(calc, T?) . snd-eval(T, double(21)) . rec-value(T, V?) .
            rec-event(T, E?) . snd-ack-event(T, E) . snd-do(T, show(V)) . snd-terminate(T, done)
        endlet
        tool calc is { command = "calc-tool" }
        toolbus(Main)
    "#;
    let mut b = bus(src, Config::default());
    let out = drain(&mut b);
    assert_eq!(
        out,
        vec![Output::Launch {
            tool: "calc".into(),
            command: "calc-tool".into()
        }]
    );
    let t = connect(&mut b, ms(1), "calc", "");
    let out = drain(&mut b);
    let frames = sent_to(&out, t);
    assert!(matches!(frames[0], Frame::Reg { tool, .. } if tool == t));
    let Frame::Eval {
        request,
        delivery: 0,
        term,
    } = &frames[1]
    else {
        panic!("{frames:?}")
    };
    assert_eq!(term.to_string(), "double(21)");
    let v = b.arena.int(42);
    b.handle_frame(
        ms(2),
        t,
        Frame::Value {
            request: *request,
            term: v,
        },
    );
    let ev = b.arena.parse("clicked(3)").unwrap();
    b.handle_frame(ms(3), t, Frame::Event { event: 9, term: ev });
    let frames = sent_to(&drain(&mut b), t);
    let names: Vec<_> = frames.iter().map(Frame::name).collect();
    assert_eq!(names, ["ACK_EVENT", "DO", "TERMINATE"]);
    assert!(matches!(&frames[0], Frame::AckEvent { event: 9, .. }));
    assert!(matches!(&frames[1], Frame::Do { term, .. } if term.to_string() == "show(42)"));
    assert_eq!(b.process_count(), 0);
}

fn reference(arena: &mut Arena, owner: u64, var: u64, location: &str) -> viastack_bus::Term {
    let sig = arena.parse("data(<blob>)").unwrap();
    arena.reference(RefInfo {
        owner,
        var,
        size: 50_000_000,
        location: location.into(),
        sig,
    })
}

const PIPE: &str = r#"
    process Main is let P : producer, C : consumer, V : term in
        rec-connect(P?) . rec-connect(C?) .
        snd-eval(P, make) . rec-value(P, V?) .
        snd-eval(C, use(V)) . rec-value(C, ok) .
        V := none . delta
    endlet
    tool producer is { }
    tool consumer is { }
    toolbus(Main)
"#;

#[test]
fn references_are_counted_until_ack_then_fin() {
    let mut b = bus(PIPE, Config::default());
    let p = connect(&mut b, ms(1), "producer", "127.0.0.1:5000");
    let c = connect(&mut b, ms(1), "consumer", "");
    drain(&mut b);
    let r = reference(&mut b.arena, p, 1, "127.0.0.1:5000");
    b.handle_frame(
        ms(2),
        p,
        Frame::Value {
            request: 1,
            term: r,
        },
    );
    assert_eq!(b.ref_count(p, 1), 2, "bound to V and in flight to C");
    let out = drain(&mut b);
    assert!(sent_to(&out, p).is_empty(), "no FIN while bound: {out:?}");
    let frames = sent_to(&out, c);
    let Frame::Eval { delivery, term, .. } = &frames[0] else {
        panic!("{frames:?}")
    };
    assert_ne!(*delivery, 0);
    assert!(term.to_string().starts_with("use(@ref("), "{term}");
    // The script waits for the ACK: C's value is not taken before.
    let ok = b.arena.parse("ok").unwrap();
    b.handle_frame(
        ms(3),
        c,
        Frame::Value {
            request: 1,
            term: ok,
        },
    );
    assert_eq!(b.ref_count(p, 1), 2);
    assert!(sent_to(&drain(&mut b), p).is_empty());
    b.handle_frame(
        ms(4),
        c,
        Frame::Ack {
            delivery: *delivery,
        },
    );
    // ACK released the delivery, rec-value(C, ok) stepped, V := none released the binding.
    assert_eq!(b.ref_count(p, 1), 0);
    let to_p = sent_to(&drain(&mut b), p);
    assert_eq!(to_p, vec![Frame::Fin { var: 1 }]);
    assert_eq!(b.refs_held(), (0, 0));
}

#[test]
fn a_tool_may_not_forge_references() {
    let mut b = bus(PIPE, Config::default());
    let p = connect(&mut b, ms(1), "producer", "127.0.0.1:5000");
    let _c = connect(&mut b, ms(1), "consumer", "");
    drain(&mut b);
    // A reference to someone else's value, never granted.
    let r = reference(&mut b.arena, 77, 1, "10.0.0.1:1");
    b.handle_frame(
        ms(2),
        p,
        Frame::Value {
            request: 1,
            term: r,
        },
    );
    let frames = sent_to(&drain(&mut b), p);
    assert!(
        matches!(
            &frames[0],
            Frame::Fail {
                code: FailCode::Refused,
                ..
            }
        ),
        "{frames:?}"
    );
    assert_eq!(b.counters().refused_frames, 1);
    assert_eq!(b.refs_held(), (0, 0));
}

#[test]
fn silent_owner_loses_its_lease_and_the_transfer_fails() {
    let config = Config {
        lease: Duration::from_secs(2),
        ..Config::default()
    };
    let mut b = bus(PIPE, config);
    let p = connect(&mut b, ms(0), "producer", "127.0.0.1:5000");
    let c = connect(&mut b, ms(0), "consumer", "");
    drain(&mut b);
    let r = reference(&mut b.arena, p, 1, "127.0.0.1:5000");
    b.handle_frame(
        ms(100),
        p,
        Frame::Value {
            request: 1,
            term: r,
        },
    );
    let frames = sent_to(&drain(&mut b), c);
    let Frame::Eval { delivery, .. } = frames[0] else {
        panic!()
    };
    // The consumer keeps its lease; the producer falls silent.
    b.handle_frame(ms(1500), c, Frame::Ping { nonce: 1 });
    assert_eq!(
        b.poll_timeout(ms(1500)),
        Some(ms(2100)),
        "producer's lease ends first"
    );
    b.handle_timeout(ms(2100));
    let out = drain(&mut b);
    assert!(out.contains(&Output::Close { tool: p }));
    let to_c = sent_to(&out, c);
    assert!(
        matches!(&to_c[0], Frame::Fail { delivery: d, code: FailCode::OwnerLost, .. } if *d == delivery),
        "{to_c:?}"
    );
    assert_eq!(b.counters().leases_expired, 1);
    // Nothing is held for the lost owner: the bus's memory stays bounded.
    assert_eq!(b.refs_held(), (0, 0));
}

#[test]
fn delays_and_timeouts_follow_the_virtual_clock() {
    let src = r#"
        process Main is let X : int in
            X := 1 . snd-msg(late) delay(500) . (snd-msg(gone) timeout(100) + tau delay(150)) . X := 2
        endlet
        process Sink is let M : term in rec-msg(late) . rec-msg(gone) delay(120) endlet
        toolbus(Main, Sink)
    "#;
    let mut b = bus(
        src,
        Config {
            trace: true,
            ..Config::default()
        },
    );
    let mut lines: Vec<String> = std::iter::from_fn(|| b.poll_trace()).collect();
    assert_eq!(lines.len(), 1, "only X := 1 at time 0: {lines:#?}");
    assert_eq!(b.poll_timeout(ms(0)), Some(ms(500)));
    b.handle_timeout(ms(200));
    assert_eq!(b.poll_trace(), None, "nothing before the delay");
    b.handle_timeout(ms(500));
    lines.extend(std::iter::from_fn(|| b.poll_trace()));
    assert!(
        lines[1].contains("snd-msg(late)") && lines[1].contains(r#""t_ms":500"#),
        "{lines:#?}"
    );
    // The sink can take 'gone' from 620 ms, after Main's timeout (600 ms): the tau at 650 wins.
    assert_eq!(b.poll_timeout(ms(500)), Some(ms(620)));
    b.handle_timeout(ms(620));
    assert_eq!(b.poll_trace(), None, "'gone' timed out, tau not yet due");
    b.handle_timeout(ms(650));
    lines.extend(std::iter::from_fn(|| b.poll_trace()));
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("gone(") && !l.contains("snd-msg(gone)")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r#""atom":"tau""#) && l.contains(r#""t_ms":650"#)),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(r#""binds":{"X":"2"}"#)),
        "{lines:#?}"
    );
}

#[test]
fn runs_are_a_function_of_the_seed() {
    let src = r#"
        process Gen(N : int) is let M : int in M := N . (snd-msg(v(M)) . M := add(M, 1)) * snd-msg(stop) endlet
        process Sink is let X : term in (rec-msg(v(X?)) . snd-note(X)) * rec-msg(stop) endlet
        toolbus(Gen(0), Gen(100), Sink)
    "#;
    let run = |seed| {
        let mut b = bus(
            src,
            Config {
                trace: true,
                seed,
                step_cap: 200,
                ..Config::default()
            },
        );
        std::iter::from_fn(|| b.poll_trace()).collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn hello_is_checked() {
    let mut b = bus(
        PIPE,
        Config {
            tokens: vec!["k".into()],
            ..Config::default()
        },
    );
    let id = b.handle_connect(ms(0));
    b.handle_frame(
        ms(0),
        id,
        Frame::Hello {
            version: VERSION + 1,
            name: "producer".into(),
            location: String::new(),
            token: "k".into(),
        },
    );
    let out = drain(&mut b);
    assert!(matches!(&sent_to(&out, id)[0], Frame::End { reason } if reason.contains("version")));
    let id = b.handle_connect(ms(0));
    b.handle_frame(
        ms(0),
        id,
        Frame::Hello {
            version: VERSION,
            name: "producer".into(),
            location: String::new(),
            token: "bad".into(),
        },
    );
    let out = drain(&mut b);
    assert!(matches!(&sent_to(&out, id)[0], Frame::End { reason } if reason.contains("token")));
    let id = b.handle_connect(ms(0));
    assert!(b.handle_bytes(ms(0), id, &[0, 0, 0, 0]).is_err());
    assert_eq!(b.counters().refused_hellos, 2);
    assert_eq!(b.counters().bad_frames, 1);
}

const TWO_VALUES: &str = r#"
    process Main is let P : producer, V : term, W : term in
        rec-connect(P?) . snd-eval(P, make) . snd-eval(P, make) .
        rec-value(P, V?) . rec-value(P, W?) . delta
    endlet
    tool producer is { }
    toolbus(Main)
"#;

fn value_frame(term: viastack_bus::Term) -> Vec<u8> {
    Frame::Value { request: 1, term }.to_bytes()
}

#[test]
fn the_bus_memory_limit_refuses_values_beyond_it_typed_and_counted() {
    // Two 600-byte values queued before the script takes them: the second is over 1000 bytes.
    let config = Config {
        max_queued_bytes: 1000,
        ..Config::default()
    };
    let mut b = bus(
        r#"
    process Main is let P : producer, V : term in
        rec-connect(P?) . rec-value(P, V?) delay(1000) . delta
    endlet
    tool producer is { }
    toolbus(Main)
"#,
        config,
    );
    let p = connect(&mut b, ms(1), "producer", "");
    drain(&mut b);
    for i in 0..2u8 {
        let blob = b.arena.blob(vec![i; 600]);
        let bytes = value_frame(blob);
        b.handle_bytes(ms(2), p, &bytes).unwrap();
    }
    let frames = sent_to(&drain(&mut b), p);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let Frame::Fail { code, detail, .. } = &frames[0] else {
        panic!("{frames:?}")
    };
    assert_eq!(*code, FailCode::Refused);
    assert!(detail.contains("memory"), "{detail}");
    assert_eq!(b.counters().refused_memory, 1);
    // Once the script took the first value, the memory is free again.
    b.handle_timeout(ms(2000));
    let blob = b.arena.blob(vec![9; 600]);
    let bytes = value_frame(blob);
    b.handle_bytes(ms(2001), p, &bytes).unwrap();
    assert!(sent_to(&drain(&mut b), p).is_empty());
    assert_eq!(b.counters().refused_memory, 1);
}

#[test]
fn references_per_owner_are_limited_typed_and_counted() {
    let config = Config {
        max_refs_per_tool: 1,
        ..Config::default()
    };
    let mut b = bus(TWO_VALUES, config);
    let p = connect(&mut b, ms(1), "producer", "127.0.0.1:5000");
    drain(&mut b);
    for var in 1..=2 {
        let r = reference(&mut b.arena, p, var, "127.0.0.1:5000");
        b.handle_frame(
            ms(2),
            p,
            Frame::Value {
                request: 1,
                term: r,
            },
        );
    }
    let frames = sent_to(&drain(&mut b), p);
    assert!(
        matches!(
            &frames[..],
            [Frame::Fail {
                code: FailCode::Refused,
                ..
            }]
        ),
        "{frames:?}"
    );
    assert_eq!(b.counters().refused_refs_over_limit, 1);
    assert_eq!(b.ref_count(p, 1), 1);
    assert_eq!(b.ref_count(p, 2), 0);
}

#[test]
fn relayed_gets_are_granted_per_delivery_and_limited_per_value() {
    let config = Config {
        max_relays_per_owner: 1,
        ..Config::default()
    };
    let mut b = bus(PIPE, config);
    let p = connect(&mut b, ms(1), "producer", ""); // passive
    let c = connect(&mut b, ms(1), "consumer", "");
    drain(&mut b);
    let r = reference(&mut b.arena, p, 1, "");
    b.handle_frame(
        ms(2),
        p,
        Frame::Value {
            request: 1,
            term: r,
        },
    );
    let frames = sent_to(&drain(&mut b), c);
    let Frame::Eval { delivery, .. } = frames[0] else {
        panic!("{frames:?}")
    };
    let get = |delivery| Frame::Get {
        delivery,
        var: 1,
        offset: 0,
        window: 1000,
    };
    // The producer may not GET through the bus with the consumer's delivery.
    b.handle_frame(ms(3), p, get(delivery));
    // The consumer's GET is relayed to the owner's connection, as is.
    b.handle_frame(ms(3), c, get(delivery));
    // A second GET of the same value while the first runs: over the limit of 1.
    b.handle_frame(ms(3), c, get(delivery));
    let out = drain(&mut b);
    let to_p = sent_to(&out, p);
    assert!(
        matches!(
            to_p[0],
            Frame::Fail {
                code: FailCode::Refused,
                ..
            }
        ),
        "{to_p:?}"
    );
    assert_eq!(to_p[1], get(delivery));
    let to_c = sent_to(&out, c);
    assert!(
        matches!(
            to_c[..],
            [Frame::Fail {
                code: FailCode::Refused,
                ..
            }]
        ),
        "{to_c:?}"
    );
    assert_eq!(b.counters().refused_relays, 2);
    // The owner's chunks go to the consumer; the CREDIT goes back.
    let chunk = |offset: u64| Frame::Put {
        var: 1,
        offset,
        total: 1000,
        data: vec![5; 500],
    };
    b.handle_frame(ms(4), p, chunk(0));
    b.handle_frame(ms(4), c, Frame::Credit { var: 1, bytes: 500 });
    b.handle_frame(ms(4), p, chunk(500));
    let out = drain(&mut b);
    assert_eq!(sent_to(&out, c), vec![chunk(0), chunk(500)]);
    assert_eq!(sent_to(&out, p), vec![Frame::Credit { var: 1, bytes: 500 }]);
    assert_eq!(b.counters().relays, 1);
    assert_eq!(b.counters().relayed_chunks, 2);
    // A PUT with no relay running is refused.
    b.handle_frame(ms(5), p, chunk(0));
    assert!(matches!(
        sent_to(&drain(&mut b), p)[..],
        [Frame::Fail {
            code: FailCode::Refused,
            ..
        }]
    ));
}

#[test]
fn bytes_of_a_large_frame_arriving_keep_the_senders_lease() {
    let mut b = bus(TWO_VALUES, Config::default()); // lease 10 s
    let p = connect(&mut b, ms(1), "producer", "");
    let q = connect(&mut b, ms(1), "producer", "");
    drain(&mut b);
    // p is receiving a huge frame slowly; q says nothing.
    b.handle_progress(ms(9_000), p);
    b.handle_timeout(ms(15_000));
    assert_eq!(b.counters().leases_expired, 1, "only the silent tool");
    let out = drain(&mut b);
    assert!(out.contains(&Output::Close { tool: q }), "{out:?}");
    assert!(!out.contains(&Output::Close { tool: p }), "{out:?}");
}

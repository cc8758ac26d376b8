//! The bus's memory stays bounded (issue 19 §1 "the bus's memory stays bounded"): the
//! hash-consing arena keeps only the terms someone still holds. Counted, not timed: the number
//! of distinct live terms after many round trips with fresh terms (a counter in every value)
//! stays under a bound that a leak of one term per round trip would pass many times over —
//! in the bus (script steps, and frames that never make the script step) and in the Rust
//! client's arena over a real socket.
#![allow(clippy::unwrap_used)]

use std::thread;

use viastack_bus::client::{Request, Tool, ToolConfig};
use viastack_bus::interp::{Bus, Config, Output};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::term::Arena;
use viastack_bus::wire::{Frame, VERSION};
use viastack_kernel::Instant;

/// Round trips per test: each makes at least four fresh terms.
const N: u64 = 20_000;
/// Live terms allowed at the end: the arena purges when it doubles past 1024.
const BOUND: usize = 5_000;

/// `n` evaluate/value round trips, then the script ends (and `serve` returns).
fn roundtrip_script(n: u64) -> String {
    format!(
        r#"
process Main is let T : echo, K : int, X : term in
  rec-connect(T?) . K := 0 .
  (if less(K, {n}) then snd-eval(T, e(K)) . rec-value(T, X?) . K := add(K, 1) else delta fi) *
  (if less(K, {n}) then delta else snd-terminate(T, done) fi)
endlet
tool echo is {{ }}
toolbus(Main)
"#
    )
}

fn hello(b: &mut Bus, now: Instant, name: &str) -> u64 {
    let t = b.handle_connect(now);
    b.handle_frame(
        now,
        t,
        Frame::Hello {
            version: VERSION,
            name: name.into(),
            location: String::new(),
            token: String::new(),
        },
    );
    t
}

#[test]
fn the_bus_arena_stays_bounded_over_many_round_trips_with_fresh_terms() {
    let mut arena = Arena::new();
    let script = Script::parse("soak.tb", &roundtrip_script(N + 1), &mut arena).unwrap();
    let mut b = Bus::new(script, arena, Config::default(), Instant::ZERO);
    let now = Instant::from_millis(1);
    let t = hello(&mut b, now, "echo");
    let mut peak = 0;
    for i in 0..N {
        let mut req = None;
        while let Some(o) = b.poll_output() {
            if let Output::Send {
                frame: Frame::Eval { request, term, .. },
                ..
            } = o
            {
                req = Some((request, term));
            }
        }
        let (request, term) = req.expect("an evaluation each round trip");
        assert_eq!(term.to_string(), format!("e({i})"));
        // The tool's answer, fresh each time, decoded by the bus from bytes.
        let mut tool = Arena::new();
        let s = tool.str(&format!("fresh-{i}"));
        let v = tool.appl("v", vec![term, s]);
        let bytes = Frame::Value { request, term: v }.to_bytes();
        b.handle_bytes(now, t, &bytes).unwrap();
        peak = peak.max(b.arena.len());
    }
    assert_eq!(b.counters().bad_frames, 0);
    assert!(peak < BOUND, "{peak} live terms after {N} round trips");
}

#[test]
fn frames_that_never_make_the_script_step_do_not_grow_the_arena() {
    // The script never steps again: nothing but the frames' handling may purge.
    let mut arena = Arena::new();
    let script = Script::parse(
        "idle.tb",
        "process Main is delta\ntool t is { }\ntoolbus(Main)\n",
        &mut arena,
    )
    .unwrap();
    let mut b = Bus::new(script, arena, Config::default(), Instant::ZERO);
    let now = Instant::from_millis(1);
    let t = hello(&mut b, now, "t");
    let mut peak = 0;
    for i in 0..N {
        let mut tool = Arena::new();
        let k = tool.int(i as i64);
        let s = tool.str(&format!("fresh-{i}"));
        let term = tool.appl("n", vec![k, s]);
        b.handle_bytes(now, t, &Frame::Note { term }.to_bytes())
            .unwrap();
        peak = peak.max(b.arena.len());
    }
    assert!(peak < BOUND, "{peak} live terms after {N} notes");
}

#[test]
fn the_rust_clients_arena_stays_bounded_over_a_real_socket() {
    let n = 5_000u64;
    let mut arena = Arena::new();
    let script = Script::parse("soak.tb", &roundtrip_script(n), &mut arena).unwrap();
    let bus = Bus::new(script, arena, Config::default(), Instant::ZERO);
    let listener = Listener::bind(&Endpoint::parse("127.0.0.1:0")).unwrap();
    let ep = listener.endpoint().to_string();
    let server = thread::spawn(move || serve(listener, bus, ServeOptions::default()));
    let mut t = Tool::connect(&ep, ToolConfig::new("echo")).unwrap();
    let (mut count, mut peak) = (0u64, 0usize);
    loop {
        match t.next_request().unwrap() {
            Request::Eval { request, term, .. } => {
                count += 1;
                let s = t.arena.str(&format!("fresh-{count}"));
                let v = t.arena.appl("v", vec![term, s]);
                t.value(request, v).unwrap();
                peak = peak.max(t.arena.len());
            }
            Request::Terminate { .. } => break,
            _ => {}
        }
    }
    assert_eq!(count, n);
    assert!(peak < BOUND, "the tool's arena held {peak} terms");
    drop(t);
    let _ = server.join();
}

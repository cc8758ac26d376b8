//! `viastack bench spec`: the SCXML hop-by-hop acknowledgement service (`specs/h2hack.scxml`)
//! compiled to Rust at build time (`viastack_services::h2hack`) and loaded at run time into the
//! store's table, against the same service hand-written in Rust
//! (`viastack_spec::service::h2hack_handwritten`), seed 000 §6 redone: the prior system
//! interpreted the SCXML with a generic engine and XQuery and reached 25–35% of the hand-written
//! throughput with ~89 KB of heap per message.
//!
//! All three run one node (address 1, parent 9, children 2, 3, 4) under the same synthetic load, in
//! one run: message ids in batches of `--concurrent` live instances; per id a payload from the
//! parent, an ACK request from the parent, Timeout_ACK (→ ACK requests to the children), a
//! NACK from child 2 (→ retransmission), ACKs from the three children (→ "done"), a stale
//! auto-delete timer and Timeout_Msg (→ deleted): 7 messages and 3 timer expiries per id.
//! Reports events/s (messages + timers), messages/s and bytes per live instance (measured with
//! the batch fully live, payload excluded) for each, `compiled_vs_handwritten` (events/s;
//! targets: ≥ 0.9, ≤ 1 KiB per instance, ≥ 1 M events/s on one core) and
//! `runtime_vs_handwritten` (alias `table_vs_handwritten`: the specification read from
//! `specs/h2hack.scxml` at run time when the working directory has it; issue 15 target ≥ 0.8),
//! each the ratio of the lanes' medians over alternated rounds with a 95 % interval, plus
//! `load_ms` (load + compile, median of 5) and the path the run-time service runs on.
//!
//! A second service, best-effort ordering (`specs/ordering.scxml`: a `cond` on
//! `_event.data.SequenceNumber`, an `<assign>` to the datamodel — issue 15 §2's last item), has
//! no hand-written reference: its run-time lane (the flat machine with its datamodel) is
//! measured against the same specification compiled to Rust and on the general chart engine
//! (`ordering.runtime_vs_compiled`, `ordering.runtime_vs_engine`). Per id (a quarter of
//! `--messages`): sequence numbers 0, 2, 1 (late: dropped), 3, then the idle timer.

#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::sync::Arc;
use std::time::Instant as WallClock;

use anyhow::anyhow;
use clap::Args;
use serde_json::json;
use viastack_kernel::time::Instant;

use super::stats::{median, ratio_of_medians_ci95};
use viastack_services::{h2hack, ordering};
use viastack_spec::service::h2hack_handwritten::H2hack;
use viastack_spec::service::trace::Input;
use viastack_spec::service::{
    Addr, InstanceKey, Message, Network, NodeInfo, Primitive, Runner, Service, Store, StoreConfig,
};

const H2HACK: &str = include_str!("../../../specs/h2hack.scxml");
const ORDERING: &str = include_str!("../../../specs/ordering.scxml");

/// Options of `viastack bench spec`.
#[derive(Args)]
pub struct SpecArgs {
    /// Message ids (service instances) per measurement.
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    /// Live instances at a time (ids per batch).
    #[arg(long, default_value_t = 1_000)]
    concurrent: u64,
    /// Rounds: each implementation measured once per round, in turn; figures are the
    /// medians of the rounds and ratios come with a paired-bootstrap 95 % interval.
    #[arg(long, default_value_t = 7)]
    repeat: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Only run this implementation, `compiled`, `table` or `handwritten`, for `--repeat`
    /// rounds (for profiling one of them; prints its events/s).
    #[arg(long, hide = true)]
    only: Option<String>,
}

/// Counts what the service does (so nothing is optimised away).
#[derive(Default)]
struct Sink {
    actions: u64,
    check: u64,
}

impl Network for Sink {
    fn perform(&mut self, _now: Instant, key: InstanceKey, p: Primitive<'_>) {
        self.actions += 1;
        self.check = self.check.wrapping_add(key.message);
        if let Primitive::SendControl(m) | Primitive::SendData(m) | Primitive::ToApplication(m) = p
        {
            self.check = self.check.wrapping_add(u64::from(m.message_type));
        }
    }
}

fn node() -> NodeInfo {
    NodeInfo {
        address: Addr(1),
        parent: Addr(9),
        children: vec![Addr(2), Addr(3), Addr(4)],
        neighbours: vec![],
    }
}

/// The load: batches of `concurrent` ids, phase by phase; returns the inputs and the index
/// after which the first batch is fully live (for the memory figure).
fn load(messages: u64, concurrent: u64) -> (Vec<Input>, usize) {
    let payload: Arc<[u8]> = vec![0u8; 1024].into();
    let mut out = Vec::with_capacity(messages as usize * 10);
    let mut t = 0u64;
    let mut peak = 0;
    let mk = |id: u64, ty: u8, src: u64| Message {
        service_id: 1,
        message_id: id,
        message_type: ty,
        delivery_mode: 1,
        hop_limit: 255,
        source: Addr(src),
        previous_hop: Addr(src),
        root: Addr(9),
        payload: (ty == 0x80).then(|| Arc::clone(&payload)),
        ..Message::default()
    };
    let mut first = 1;
    while first <= messages {
        let ids = first..(first + concurrent).min(messages + 1);
        let key = |id| InstanceKey {
            service: 1,
            message: id,
        };
        for phase in 0..10 {
            t += 1;
            let at = Instant::from_micros(t);
            for id in ids.clone() {
                out.push(match phase {
                    0 => Input::Message(at, mk(id, 0x80, 9)),
                    1 => Input::Message(at, mk(id, 3, 9)),
                    2 => Input::Timer(at, key(id), 3),
                    3 => Input::Message(at, mk(id, 1, 2)),
                    4 => Input::Message(at, mk(id, 2, 2)),
                    5 => Input::Message(at, mk(id, 2, 3)),
                    6 => Input::Message(at, mk(id, 2, 4)),
                    7 => Input::Timer(at, key(id), 1),
                    8 => Input::Message(at, mk(id, 2, 4)),
                    _ => Input::Timer(at, key(id), 5),
                });
            }
            if first == 1 && phase == 6 {
                peak = out.len();
            }
        }
        first += concurrent;
    }
    (out, peak)
}

fn drive<R: Runner>(r: &mut R, inputs: &[Input], sink: &mut Sink) -> anyhow::Result<()> {
    for inp in inputs {
        match inp {
            Input::Message(t, m) => r.handle_message(*t, m, sink)?,
            Input::Timer(t, k, id) => r.handle_timer(*t, *k, *id, sink)?,
            Input::Node(_, n) => r.set_node(n.clone()),
        }
    }
    Ok(())
}

struct Figures {
    events_per_s: f64,
    bytes_per_instance: f64,
    actions: u64,
}

fn measure<R: Runner>(
    make: &dyn Fn() -> R,
    inputs: &[Input],
    peak: usize,
    repeat: u32,
) -> anyhow::Result<Figures> {
    // Memory: the first batch fully live.
    let mut r = make();
    r.set_node(node());
    let mut sink = Sink::default();
    drive(&mut r, &inputs[..peak], &mut sink)?;
    let live = r.live().max(1);
    let bytes_per_instance = (r.memory_bytes() as f64 + live as f64 * 0.0) / live as f64;
    let mut best = f64::MAX;
    let mut actions = 0;
    for _ in 0..repeat.max(1) {
        let mut r = make();
        r.set_node(node());
        let mut sink = Sink::default();
        let start = WallClock::now();
        drive(&mut r, inputs, &mut sink)?;
        let secs = start.elapsed().as_secs_f64();
        std::hint::black_box(sink.check);
        if r.live() != 0 {
            return Err(anyhow!("{} instances still live after the load", r.live()));
        }
        best = best.min(secs);
        actions = sink.actions;
    }
    Ok(Figures {
        events_per_s: inputs.len() as f64 / best,
        bytes_per_instance,
        actions,
    })
}

/// The ordering load: per id, messages with sequence numbers 0, 2, 1 (late), 3, then the idle
/// timer (which ends the instance).
fn ordering_load(ids: u64, concurrent: u64) -> (Vec<Input>, usize) {
    let payload: Arc<[u8]> = vec![0u8; 64].into();
    let mut out = Vec::with_capacity(ids as usize * 5);
    let mut t = 0u64;
    let mut peak = 0;
    let mut first = 1;
    while first <= ids {
        let batch = first..(first + concurrent).min(ids + 1);
        for (phase, seq) in [0u64, 2, 1, 3, u64::MAX].into_iter().enumerate() {
            t += 1;
            let at = Instant::from_micros(t);
            for id in batch.clone() {
                out.push(if seq == u64::MAX {
                    Input::Timer(
                        at,
                        InstanceKey {
                            service: 4,
                            message: id,
                        },
                        1,
                    )
                } else {
                    Input::Message(
                        at,
                        Message {
                            service_id: 4,
                            message_id: id,
                            message_type: 0x80,
                            delivery_mode: 3,
                            hop_limit: 255,
                            source: Addr(9),
                            previous_hop: Addr(9),
                            seq,
                            payload: Some(Arc::clone(&payload)),
                            ..Message::default()
                        },
                    )
                });
            }
            if first == 1 && phase == 3 {
                peak = out.len();
            }
        }
        first += concurrent;
    }
    (out, peak)
}

/// Ordering's lanes: compiled, run time (flat machine), engine; their medians' ratios.
fn ordering_figures(args: &SpecArgs) -> anyhow::Result<serde_json::Value> {
    let (svc, _) = Service::load("specs/ordering.scxml", ORDERING).map_err(|e| anyhow!("{e}"))?;
    let path = svc.path().0;
    let (mut general, _) =
        Service::load("specs/ordering.scxml", ORDERING).map_err(|e| anyhow!("{e}"))?;
    general.disable_flat();
    let (svc, general) = (Arc::new(svc), Arc::new(general));
    let (inputs, peak) = ordering_load((args.messages / 4).max(1), args.concurrent.max(1));
    let config = StoreConfig {
        pool: 0,
        capacity: usize::MAX,
    };
    let table = || Store::new(vec![Arc::clone(&svc)], config);
    let engine = || Store::new(vec![Arc::clone(&general)], config);
    let compiled = || ordering::Compiled::with_capacity(usize::MAX);
    let warm = inputs.len().min(50_000);
    measure(&compiled, &inputs[..warm], peak.min(warm), 1)?;
    measure(&table, &inputs[..warm], peak.min(warm), 1)?;
    measure(&engine, &inputs[..warm], peak.min(warm), 1)?;
    let mut rounds = Vec::new();
    for _ in 0..args.repeat.max(1) {
        rounds.push([
            measure(&compiled, &inputs, peak, 1)?,
            measure(&table, &inputs, peak, 1)?,
            measure(&engine, &inputs, peak, 1)?,
        ]);
    }
    let acts: Vec<u64> = (0..3).map(|i| rounds[0][i].actions).collect();
    if acts[0] != acts[1] || acts[1] != acts[2] {
        return Err(anyhow!(
            "ordering: the implementations took different actions: compiled {}, run time {}, engine {}",
            acts[0],
            acts[1],
            acts[2]
        ));
    }
    let eps = |i: usize| -> Vec<f64> { rounds.iter().map(|r| r[i].events_per_s).collect() };
    let med = |i: usize| median(&eps(i));
    let pairs = |a: usize, b: usize| -> Vec<(f64, f64)> {
        rounds
            .iter()
            .map(|r| (r[a].events_per_s, r[b].events_per_s))
            .collect()
    };
    Ok(json!({
        "events": inputs.len(),
        "actions": acts[0],
        "runtime_path": path,
        "compiled_events_per_s": med(0),
        "runtime_events_per_s": med(1),
        "engine_events_per_s": med(2),
        "compiled_bytes_per_instance": rounds[0][0].bytes_per_instance,
        "runtime_bytes_per_instance": rounds[0][1].bytes_per_instance,
        "runtime_vs_compiled": med(1) / med(0),
        "runtime_vs_compiled_ci95": ratio_of_medians_ci95(&pairs(1, 0)),
        "runtime_vs_engine": med(1) / med(2),
        "runtime_vs_engine_ci95": ratio_of_medians_ci95(&pairs(1, 2)),
    }))
}

/// The three implementations, in the order they are measured.
const IMPLEMENTATIONS: [&str; 3] = ["compiled", "table", "handwritten"];

/// The specification's text: `specs/h2hack.scxml` read from the working directory when it is
/// there (the run-time path proper), else the copy built into the binary.
fn spec_text() -> (String, &'static str) {
    match std::fs::read_to_string("specs/h2hack.scxml") {
        Ok(s) => (s, "specs/h2hack.scxml"),
        Err(_) => (H2HACK.to_string(), "built-in copy of specs/h2hack.scxml"),
    }
}

/// Runs the benchmark.
pub fn run(args: &SpecArgs) -> anyhow::Result<()> {
    let (text, origin) = spec_text();
    // load_ms: the whole run-time pipeline (parse, verify, compile the chart and the flat
    // machine), the median of a few loads.
    let mut loads = Vec::new();
    let mut loaded = None;
    for _ in 0..5 {
        let start = WallClock::now();
        let (svc, _warnings) =
            Service::load("specs/h2hack.scxml", &text).map_err(|e| anyhow!("{e}"))?;
        loads.push(start.elapsed().as_secs_f64() * 1e3);
        loaded = Some(svc);
    }
    let svc = loaded.ok_or_else(|| anyhow!("no load"))?;
    let load_ms = median(&loads);
    let (path, fallback) = svc.path();
    let fallback = fallback.map(str::to_string);
    let svc = Arc::new(svc);
    let (inputs, peak) = load(args.messages.max(1), args.concurrent.max(1));
    let table = || {
        Store::new(
            vec![Arc::clone(&svc)],
            StoreConfig {
                pool: 0,
                capacity: usize::MAX,
            },
        )
    };
    let compiled = || h2hack::Compiled::with_capacity(usize::MAX);
    let handwritten = || H2hack::new(1);
    let one = |which: &str, inputs: &[Input], peak: usize, repeat: u32| match which {
        "compiled" => measure(&compiled, inputs, peak, repeat),
        "table" => measure(&table, inputs, peak, repeat),
        _ => measure(&handwritten, inputs, peak, repeat),
    };
    if let Some(which) = args.only.as_deref() {
        if !IMPLEMENTATIONS.contains(&which) {
            return Err(anyhow!(
                "--only {which}: expected one of {}",
                IMPLEMENTATIONS.join(", ")
            ));
        }
        let f = one(which, &inputs, peak, args.repeat)?;
        outln!("{which}: {:.0} events/s", f.events_per_s)?;
        return Ok(());
    }
    // Warm up each (page in, grow maps), then alternate lanes round by round.
    let warm = inputs.len().min(100_000);
    for which in IMPLEMENTATIONS {
        one(which, &inputs[..warm], peak.min(warm), 1)?;
    }
    let mut rounds: Vec<[Figures; 3]> = Vec::new();
    for _ in 0..args.repeat.max(1) {
        rounds.push([
            one(IMPLEMENTATIONS[0], &inputs, peak, 1)?,
            one(IMPLEMENTATIONS[1], &inputs, peak, 1)?,
            one(IMPLEMENTATIONS[2], &inputs, peak, 1)?,
        ]);
    }
    let actions: Vec<u64> = (0..3).map(|i| rounds[0][i].actions).collect();
    if actions[0] != actions[2] || actions[1] != actions[2] {
        return Err(anyhow!(
            "the implementations took different actions: compiled {}, table {}, hand-written {}",
            actions[0],
            actions[1],
            actions[2]
        ));
    }
    let eps = |i: usize| -> Vec<f64> { rounds.iter().map(|r| r[i].events_per_s).collect() };
    let med = |i: usize| median(&eps(i));
    let best = |i: usize| eps(i).into_iter().fold(0.0, f64::max);
    let pairs = |a: usize, b: usize| -> Vec<(f64, f64)> {
        rounds
            .iter()
            .map(|r| (r[a].events_per_s, r[b].events_per_s))
            .collect()
    };
    let ratio = med(0) / med(2);
    let table_ratio = med(1) / med(2);
    let ratio_ci = ratio_of_medians_ci95(&pairs(0, 2));
    let table_ci = ratio_of_medians_ci95(&pairs(1, 2));
    let messages = inputs
        .iter()
        .filter(|i| matches!(i, Input::Message(..)))
        .count() as f64;
    let ord = ordering_figures(args)?;
    if args.json {
        let fig = |i: usize| {
            let m = med(i);
            json!({
                "events_per_s": m,
                "events_per_s_best": best(i),
                "messages_per_s": m * messages / inputs.len() as f64,
                "bytes_per_instance": rounds[0][i].bytes_per_instance,
            })
        };
        let v = json!({
            "service": "h2hack",
            "events": inputs.len(),
            "concurrent": args.concurrent,
            "rounds": rounds.len(),
            "actions": actions[0],
            "compiled": fig(0),
            "table": fig(1),
            "handwritten": fig(2),
            "compiled_vs_handwritten": ratio,
            "compiled_vs_handwritten_ci95": ratio_ci,
            "table_vs_handwritten": table_ratio,
            "runtime_vs_handwritten": table_ratio,
            "runtime_vs_handwritten_ci95": table_ci,
            "load_ms": load_ms,
            "runtime_spec": origin,
            "runtime_path": path,
            "runtime_fallback": fallback,
            "ordering": ord,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        outln!(
            "h2hack: {} events ({} live instances at a time), {} actions, {} rounds",
            inputs.len(),
            args.concurrent,
            actions[0],
            rounds.len()
        )?;
        outln!(
            "{:<12} {:>14} {:>14} {:>12}",
            "",
            "events/s (p50)",
            "best",
            "B/instance"
        )?;
        for (i, name) in IMPLEMENTATIONS.iter().enumerate() {
            outln!(
                "{name:<12} {:>14.0} {:>14.0} {:>12.0}",
                med(i),
                best(i),
                rounds[0][i].bytes_per_instance
            )?;
        }
        outln!(
            "compiled_vs_handwritten {ratio:.3} [{:.3}, {:.3}] (target >= 0.9; <= 1024 B/instance; >= 1e6 events/s)",
            ratio_ci[0], ratio_ci[1]
        )?;
        outln!(
            "runtime_vs_handwritten {table_ratio:.3} [{:.3}, {:.3}] (the specification loaded at run time from {origin}, on the {path} path; target >= 0.8)",
            table_ci[0], table_ci[1]
        )?;
        outln!("load_ms {load_ms:.2} (load + compile; target <= 50)")?;
        let f = |k: &str| ord[k].as_f64().unwrap_or(0.0);
        outln!(
            "ordering ({} events, run time on the {} path): compiled {:.0}, run time {:.0}, engine {:.0} events/s; runtime_vs_compiled {:.3}, runtime_vs_engine {:.3}",
            ord["events"],
            ord["runtime_path"].as_str().unwrap_or("?"),
            f("compiled_events_per_s"),
            f("runtime_events_per_s"),
            f("engine_events_per_s"),
            f("runtime_vs_compiled"),
            f("runtime_vs_engine")
        )?;
    }
    Ok(())
}

//! `viastack bench kernel`: seed 001 §5.2 Table 3 redone.
//!
//! An event bounces between a pinger session at the top of a channel and a bouncer session at
//! the bottom, through N middle layers that are either `transparent` (accept nothing: never
//! called) or `ghost` (accept everything and forward it). Each traversal of the stack counts as
//! one event. The reference is the same bounce through N+2 handlers called directly (a
//! hand-written stack of function calls, no kernel). Reports events/s and ns per event, the
//! ratio of the 10-transparent rate to the 0-layer rate (target ≥ 0.95) and the cost of one
//! ghost layer per event (target ≤ 15 ns).

#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::sync::Arc;
use std::time::Instant as WallClock;

use clap::Args;
use serde_json::{json, Map, Value};
use viastack_kernel::event::{EventTypeDef, EVENT};
use viastack_kernel::layers::{Ghost, Transparent};
use viastack_kernel::{
    Body, Context, Direction, Event, EventType, Instant, Kernel, KernelConfig, Layer, LayerRef,
    Qos, Session,
};

static BENCH_PING: EventTypeDef = EventTypeDef::new("BenchPing", Some(&EVENT));

/// Options of `viastack bench kernel`.
#[derive(Args)]
pub struct KernelArgs {
    /// Measure only this many middle layers (besides the 0-layer reference); default 1,2,3,10.
    #[arg(long)]
    layers: Option<usize>,
    /// Stack traversals per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    /// Measurements per configuration (the fastest is kept).
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Middle {
    Transparent,
    Ghost,
}

/// Bottom of the bench stack: turns every ping around.
struct Bouncer;
impl Session for Bouncer {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        event.set_dir(Direction::Up);
        ctx.go(event);
    }
}

/// Top of the bench stack: counts traversals and sends the ping down again until done.
struct Pinger {
    remaining: u64,
}
impl Session for Pinger {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if self.remaining > 0 {
            self.remaining -= 1;
            event.set_dir(Direction::Down);
            ctx.go(event);
        }
    }
}

struct End {
    name: &'static str,
}
impl Layer for End {
    fn name(&self) -> &str {
        self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![BENCH_PING.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        if self.name == "bouncer" {
            Box::new(Bouncer)
        } else {
            Box::new(Pinger { remaining: 0 })
        }
    }
}

/// Seconds for `events` traversals through the kernel with `n` middle layers.
fn kernel_run(middle: Middle, n: usize, events: u64) -> f64 {
    let mut layers: Vec<LayerRef> = vec![Arc::new(End { name: "bouncer" })];
    for i in 0..n {
        layers.push(match middle {
            Middle::Transparent => Arc::new(Transparent::new(format!("transparent{i}"))),
            Middle::Ghost => Arc::new(Ghost::new(format!("ghost{i}"))),
        });
    }
    layers.push(Arc::new(End { name: "pinger" }));
    let qos = match Qos::new("bench", layers) {
        Ok(q) => q,
        Err(e) => unreachable!("bench QoS is valid: {e}"),
    };
    let mut k = Kernel::new(KernelConfig {
        step_cap: u64::MAX,
        ..KernelConfig::default()
    });
    let ch = k.create_channel("bench", &qos);
    if let Err(e) = k.start_channel(ch, Instant::ZERO) {
        unreachable!("bench channel starts: {e}");
    }
    let top = k.channel_sessions(ch)[n + 1].unwrap_or(viastack_kernel::SessionId(0));
    if let Some(p) = k.session_mut::<Pinger>(top) {
        // The injected ping is the first downward traversal; each bounce back is one more.
        p.remaining = events.saturating_sub(1) / 2;
    }
    let start = WallClock::now();
    let ping = Event::new(BENCH_PING.id(), Direction::Down, ch, Body::Empty);
    if let Err(e) = k.inject(Instant::ZERO, ping) {
        unreachable!("bench channel is open: {e}");
    }
    start.elapsed().as_secs_f64()
}

/// The hand-written reference: a stack of directly called handlers.
trait Handler {
    fn handle(&mut self, ev: &mut DirectEvent) -> bool;
}
struct DirectEvent {
    up: bool,
}
struct DirectGhost {
    seen: u64,
}
impl Handler for DirectGhost {
    fn handle(&mut self, _ev: &mut DirectEvent) -> bool {
        self.seen += 1;
        true
    }
}
struct DirectEnd {
    bottom: bool,
    remaining: u64,
}
impl Handler for DirectEnd {
    fn handle(&mut self, ev: &mut DirectEvent) -> bool {
        if self.bottom {
            ev.up = true;
            true
        } else if self.remaining > 0 {
            self.remaining -= 1;
            ev.up = false;
            true
        } else {
            false
        }
    }
}

fn direct_run(n: usize, events: u64) -> f64 {
    let mut stack: Vec<Box<dyn Handler>> = vec![Box::new(DirectEnd {
        bottom: true,
        remaining: 0,
    })];
    for _ in 0..n {
        stack.push(Box::new(DirectGhost { seen: 0 }));
    }
    stack.push(Box::new(DirectEnd {
        bottom: false,
        remaining: events.saturating_sub(1) / 2,
    }));
    let start = WallClock::now();
    let mut ev = DirectEvent { up: false };
    let mut pos = stack.len() - 1;
    loop {
        // Move one step in the event's direction, then let that handler see it.
        pos = if ev.up { pos + 1 } else { pos - 1 };
        if !std::hint::black_box(&mut stack[pos]).handle(&mut ev) {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::hint::black_box(&stack);
    elapsed
}

struct Measured {
    name: String,
    layers: usize,
    secs: f64,
    events: u64,
}

impl Measured {
    fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.secs
    }
    fn ns_per_event(&self) -> f64 {
        self.secs * 1e9 / self.events as f64
    }
}

/// Runs the kernel benchmark and prints the result.
pub fn run(args: &KernelArgs) -> anyhow::Result<()> {
    let counts: Vec<usize> = match args.layers {
        Some(n) => vec![0, n],
        None => vec![0, 1, 2, 3, 10],
    };
    let widest = counts.iter().copied().max().unwrap_or(0);
    let events = args.events.max(2) | 1;
    // Every configuration, measured round-robin so that machine noise (2 shared cores) hits
    // them alike; each keeps its fastest run.
    let mut configs: Vec<(String, usize, Option<Middle>)> = Vec::new();
    for &n in &counts {
        for (label, middle) in [
            ("transparent", Middle::Transparent),
            ("ghost", Middle::Ghost),
        ] {
            if n == 0 && middle == Middle::Ghost {
                continue; // identical to transparent_0
            }
            configs.push((format!("{label}_{n}"), n, Some(middle)));
        }
        configs.push((format!("direct_{n}"), n, None));
    }
    let measure = |n: usize, middle: Option<Middle>| match middle {
        Some(m) => kernel_run(m, n, events),
        None => direct_run(n, events),
    };
    let mut best = vec![f64::INFINITY; configs.len()];
    for round in 0..=args.repeat.max(1) {
        for (i, (_, n, middle)) in configs.iter().enumerate() {
            let secs = measure(*n, *middle);
            if round > 0 {
                // Round 0 warms caches and the allocator.
                best[i] = best[i].min(secs);
            }
        }
    }
    let rows: Vec<Measured> = configs
        .into_iter()
        .zip(best)
        .map(|((name, layers, _), secs)| Measured {
            name,
            layers,
            secs,
            events,
        })
        .collect();
    let find = |name: &str| rows.iter().find(|r| r.name == name);
    let base = find("transparent_0").map_or(f64::NAN, Measured::events_per_sec);
    let base_ns = find("transparent_0").map_or(f64::NAN, Measured::ns_per_event);
    let transparent_ratio =
        find(&format!("transparent_{widest}")).map_or(f64::NAN, |r| r.events_per_sec() / base);
    let ghost_per_layer = find(&format!("ghost_{widest}")).map_or(f64::NAN, |r| {
        (r.ns_per_event() - base_ns) / widest.max(1) as f64
    });
    let direct_per_layer = match (find(&format!("direct_{widest}")), find("direct_0")) {
        (Some(w), Some(z)) => (w.ns_per_event() - z.ns_per_event()) / widest.max(1) as f64,
        _ => f64::NAN,
    };

    if args.json {
        let mut obj = Map::new();
        for r in &rows {
            obj.insert(
                r.name.clone(),
                json!({
                    "layers": r.layers,
                    "events": r.events,
                    "events_per_sec": r.events_per_sec(),
                    "ns_per_event": r.ns_per_event(),
                }),
            );
        }
        obj.insert(
            format!("transparent{widest}_vs_0"),
            json!(transparent_ratio),
        );
        obj.insert("ghost_ns_per_layer".into(), json!(ghost_per_layer));
        obj.insert("direct_ns_per_layer".into(), json!(direct_per_layer));
        outln!("{}", serde_json::to_string_pretty(&Value::Object(obj))?)?;
    } else {
        outln!(
            "{:<16} {:>7} {:>16} {:>12}",
            "configuration",
            "layers",
            "events/s",
            "ns/event"
        )?;
        for r in &rows {
            outln!(
                "{:<16} {:>7} {:>16.0} {:>12.2}",
                r.name,
                r.layers,
                r.events_per_sec(),
                r.ns_per_event()
            )?;
        }
        outln!()?;
        outln!("transparent{widest}_vs_0     {transparent_ratio:.3}   (target >= 0.95)")?;
        outln!("ghost_ns_per_layer    {ghost_per_layer:.2} ns (target <= 15)")?;
        outln!("direct_ns_per_layer   {direct_per_layer:.2} ns (hand-written reference)")?;
    }
    Ok(())
}

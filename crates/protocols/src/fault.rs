//! Fault injection: `drop`, `delay`, `duplicate`, `corrupt` and `reorder` layers that do to
//! sendables what a bad network does, so that the same faults can be injected on real sockets as
//! in the simulator (seed 004's "random drop" component, generalised; smoltcp's
//! `phy/fault_injector.rs` is the model).
//!
//! Each layer acts on sendables going in its configured [`Faulty`] direction (down by default:
//! what this node sends) and passes everything else on untouched. Randomness comes only from
//! the kernel's seeded generator (`ctx.rng()`) and time only from kernel timers, so a simulated
//! run with fault layers is as reproducible as one with simulated link faults.
//!
//! | kind | what it does to a message, with probability `rate` | counter |
//! | --- | --- | --- |
//! | `drop` | drops it | `<layer>.dropped` |
//! | `delay` | holds it for `delay` + uniform(0..=`jitter`), then releases it | `<layer>.delayed` |
//! | `duplicate` | forwards it and a copy | `<layer>.duplicated` |
//! | `corrupt` | flips 1–3 random bits of the bytes it has at that point (an empty message passes, `<layer>.empty`) | `<layer>.corrupted` |
//! | `reorder` | holds it for `hold` while later messages pass, then releases it | `<layer>.reordered` |
//!
//! Placement matters: a fault layer acts on the bytes it sees. `corrupt` above an `encrypt` or a
//! checksum layer corrupts the plaintext *before* it is protected (and the corruption is
//! delivered); below them it models a corrupting network. `duplicate` below `dedup` is removed
//! by it; above it each copy gets an id of its own.
//!
//! Held messages (`delay`, `reorder`): at most `max_held` at once per session; a message that
//! would exceed it is dropped and counted (`<layer>.overflow`), so a fault layer never grows
//! without bound. Each held message has a kernel timer; when a timer fires every message whose
//! release time has come is forwarded, earliest first (ties in arrival order). A channel that
//! closes drops its held messages (`<layer>.flushed`).
//!
//! No header: fault layers put nothing on the wire.

use std::collections::BTreeMap;

use rand::Rng;

use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE};
use viastack_kernel::{
    Body, Context, Direction, Duration, Event, EventType, Instant, Layer, Session,
};

/// Which sendables a fault layer acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Faulty {
    /// Going down: what this node sends (the default).
    Down,
    /// Going up: what this node receives.
    Up,
    /// Both.
    Both,
}

impl Faulty {
    /// Parses `"down"`, `"up"` or `"both"`.
    pub fn parse(s: &str) -> Option<Faulty> {
        match s {
            "down" => Some(Faulty::Down),
            "up" => Some(Faulty::Up),
            "both" => Some(Faulty::Both),
            _ => None,
        }
    }

    fn covers(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Faulty::Both, _) | (Faulty::Down, Direction::Down) | (Faulty::Up, Direction::Up)
        )
    }
}

/// What a fault layer does to the messages it picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Drop them.
    Drop,
    /// Hold them for `delay` plus a uniform extra in `0..=jitter`.
    Delay {
        /// Fixed delay.
        delay: Duration,
        /// Largest extra delay.
        jitter: Duration,
    },
    /// Forward them and one copy each.
    Duplicate,
    /// Flip 1–3 random bits.
    Corrupt,
    /// Hold them for `hold` while the others pass.
    Reorder {
        /// How long a picked message is held back.
        hold: Duration,
    },
}

/// Parameters of a fault layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// The fault.
    pub fault: Fault,
    /// Probability (0..=1) that a message is picked; clamped.
    pub rate: f64,
    /// Which sendables are exposed to the fault.
    pub direction: Faulty,
    /// Messages held at most at once (`delay`, `reorder`).
    pub max_held: usize,
}

/// Messages a delaying layer holds at most by default: 1024, the order of a Linux qdisc's
/// default queue length (`txqueuelen` 1000), so that a fault layer queues no more than an
/// interface would.
pub const DEFAULT_MAX_HELD: usize = 1024;

/// A fault-injection layer.
#[derive(Debug, Clone)]
pub struct FaultLayer {
    name: String,
    config: Config,
}

impl FaultLayer {
    /// A fault layer named `name`.
    pub fn new(name: impl Into<String>, config: Config) -> Self {
        FaultLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for FaultLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`. Copies
    /// made by `duplicate` are of sendables it was handed, so it declares no Γ of its own.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(FaultSession {
            config: self.config,
            held: BTreeMap::new(),
            arrivals: 0,
        })
    }
}

/// Session of [`FaultLayer`].
pub struct FaultSession {
    config: Config,
    /// Held messages by (release time, arrival number).
    held: BTreeMap<(Instant, u64), Event>,
    arrivals: u64,
}

impl std::fmt::Debug for FaultSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultSession")
            .field("config", &self.config)
            .field("held", &self.held.len())
            .finish()
    }
}

impl FaultSession {
    /// Messages held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn picked(&self, ctx: &mut Context<'_>) -> bool {
        let rate = self.config.rate;
        if rate <= 0.0 || rate.is_nan() {
            return false;
        }
        if rate >= 1.0 {
            return true;
        }
        ctx.rng().gen::<f64>() < rate
    }

    fn hold(&mut self, event: Event, delay: Duration, ctx: &mut Context<'_>) -> bool {
        if self.held.len() >= self.config.max_held {
            ctx.count("overflow");
            return false;
        }
        let at = ctx.now() + delay;
        self.arrivals += 1;
        self.held.insert((at, self.arrivals), event);
        ctx.set_timer_at(at, 0);
        true
    }

    fn release_due(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            ctx.go(entry.remove());
        }
    }

    fn inject(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        match self.config.fault {
            Fault::Drop => {
                ctx.count("dropped");
            }
            Fault::Delay { delay, jitter } => {
                let extra = if jitter.is_zero() {
                    Duration::ZERO
                } else {
                    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
                    Duration::from_nanos(ctx.rng().gen_range(0..=nanos))
                };
                if self.hold(event, delay.saturating_add(extra), ctx) {
                    ctx.count("delayed");
                }
            }
            Fault::Reorder { hold } => {
                if self.hold(event, hold, ctx) {
                    ctx.count("reordered");
                }
            }
            Fault::Duplicate => {
                let copy = event.sendable_ref().map(|s| {
                    Event::new(
                        event.ty(),
                        event.dir(),
                        event.channel(),
                        Body::Sendable(Box::new(s.clone())),
                    )
                });
                ctx.go(event);
                if let Some(copy) = copy {
                    ctx.count("duplicated");
                    ctx.go(copy);
                }
            }
            Fault::Corrupt => {
                let bits = ctx.rng().gen_range(1..=3u32);
                let Some(s) = event.sendable_mut() else {
                    return;
                };
                let bytes = s.message.as_mut_slice();
                if bytes.is_empty() {
                    ctx.count("empty");
                } else {
                    for _ in 0..bits {
                        let i = ctx.rng().gen_range(0..bytes.len());
                        let b = ctx.rng().gen_range(0..8u32);
                        bytes[i] ^= 1 << b;
                    }
                    ctx.count("corrupted");
                }
                ctx.go(event);
            }
        }
    }
}

impl Session for FaultSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if let Body::Timer(_) = event.body {
            self.release_due(ctx);
            return;
        }
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            let before = self.held.len();
            self.held.retain(|_, e| e.channel() != channel);
            let flushed = before - self.held.len();
            if flushed > 0 {
                ctx.count_n("flushed", flushed as u64);
            }
            ctx.go(event);
            return;
        }
        if event.sendable_ref().is_some()
            && self.config.direction.covers(event.dir())
            && self.picked(ctx)
        {
            self.inject(event, ctx);
            return;
        }
        ctx.go(event);
    }
}

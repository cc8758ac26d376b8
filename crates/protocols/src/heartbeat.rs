//! `heartbeat`: a heartbeat failure detector, meant to be ONE session shared by several channels
//! (the "diamond" of seed 001 §2.1, Figure 1), so that every channel learns of a failure at the
//! same point of its event stream.
//!
//! # Role
//!
//! Every `interval` the session sends a heartbeat to every other node of the scenario (nodes
//! `0..nodes`, given at build time) down ONE channel: the first channel it was bound to that
//! started (the lowest channel id, which agrees across nodes built from one stack file). It
//! also sends one as soon as that channel starts, so a restarted node is heard at once. A peer
//! not heard from for `timeout` is suspected; a suspected peer heard again is alive.
//!
//! Only heartbeats count as life: data passing through says nothing about the sender's
//! incarnation, and a late copy of an old data packet (a reordering link) would otherwise
//! refresh a node that has crashed. A heartbeat counts only if it is newer than every
//! heartbeat already heard from that incarnation (its `seq` is higher), so duplicates and
//! reordered copies do not refresh anything.
//!
//! # Notices
//!
//! [`SUSPECT`](crate::events::SUSPECT) and [`ALIVE`](crate::events::ALIVE) go UP, each on EVERY
//! channel the session is bound to (`ctx.my_channels()`, in channel-id order), one peer at a
//! time, all emitted in the same `handle` call. The kernel's scheduler is one FIFO queue, so
//! each channel receives the same notices in the same order, and no other event of this node
//! comes between the copies of one notice at the application unless a layer above holds it.
//!
//! Rules, for a peer `p` (in ascending node order on each check):
//! - a periodic tick every `interval` sends the heartbeats, then suspects every trusted peer
//!   not heard from for at least `timeout`: `Suspect(p)` on every channel. A crash at time
//!   `c` is therefore suspected by time `c + L + timeout + interval` at every live node, where
//!   `L` bounds one-way latency (the last heartbeat before the crash is heard by `c + L`);
//! - a valid heartbeat from a suspected peer: `Alive(p)` on every channel;
//! - a heartbeat with a new epoch from a peer already heard (it restarted): counted
//!   `peer_restarted`; if the peer was not suspected (it restarted within the timeout), the
//!   failure is reported anyway, `Suspect(p)` then `Alive(p)`, so a restart is never silent.
//!
//! At start every peer is trusted as if heard at the start time: a node that never comes up is
//! suspected `timeout` (plus at most one `interval`) after this session started.
//!
//! # Wire format (network byte order)
//!
//! Every sendable the session passes down carries a one-byte `kind` in front of the upper
//! layers' bytes, so heartbeats and data can share a channel:
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 1 | `kind` | `0x00` data (the upper layers' bytes follow), `0x01` heartbeat, version 1 |
//!
//! A heartbeat (`kind = 0x01`) continues with (13 bytes in all; bytes after them are ignored,
//! room for later fields):
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 1 | 4 | `epoch` | the sender's incarnation: random, non-zero, drawn when its session starts |
//! | 5 | 8 | `seq` | heartbeat round of that incarnation, from 0 (the same for every peer) |
//!
//! Heartbeats travel as [`HEARTBEAT`] events (a `Sendable` subtype) and are consumed here:
//! they never reach the layers above or the application.
//!
//! # Counters
//!
//! `heartbeat.sent` (heartbeat datagrams sent), `heartbeat.truncated` (shorter than its
//! header), `heartbeat.unknown_kind` (a `kind` other than 0 or 1), `heartbeat.bad_epoch` (epoch
//! 0), `heartbeat.from_self`, `heartbeat.unknown_peer` (a node outside `0..nodes`),
//! `heartbeat.stale` (a heartbeat not newer than one already heard), `heartbeat.stale_epoch`
//! (from one of the peer's last [`RETIRED_EPOCHS`] incarnations), `heartbeat.peer_restarted`,
//! `heartbeat.suspected`, `heartbeat.alive` (notices raised, once per peer, not per channel),
//! `heartbeat.local_stall` (a tick came more than two intervals after the previous one).
//!
//! # This node's own stalls
//!
//! A tick that comes more than two intervals after the previous one means this node was not
//! running (stopped, starved of CPU, a paused virtual machine). Before checking, every trusted
//! peer's silence is shortened by the stall ([`crate::stall`]): a node that wakes up does not
//! suspect peers it could not listen to. A peer that crashed during the stall is suspected one
//! `timeout` after the node resumes.
//!
//! # Memory
//!
//! One fixed-size entry per node of the scenario; nothing grows with traffic.
//!
//! # Limits
//!
//! - Heartbeats go down the first bound channel. If that channel closes, the session stops
//!   sending until the next event it handles on another open channel, and moves there; peers
//!   must close it too (as nodes built from one stack file do) or they stop hearing this node.
//! - Without a checksum below it, a corrupted epoch looks like a restart (as in `fifo`): run it
//!   over a checksum layer on links that corrupt.
//! - A heartbeat delayed by more than `timeout` after its sender crashed (a reordering link)
//!   can follow the suspicion with an `Alive`: `Alive` means "heard from since suspected".

use rand::RngCore;

use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_INIT, INBOUND, PERIODIC_TIMER, SENDABLE,
};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Instant,
    Layer, Message, NodeId, Sendable, Session, TimerId, Truncated,
};

use crate::events::{self, ALIVE, SUSPECT};
use crate::stall::{discount, TickGap};

/// A heartbeat going down (a `Sendable` subtype, generated by this layer).
pub static HEARTBEAT: EventTypeDef = EventTypeDef::new("Heartbeat", Some(&SENDABLE));

/// `kind` of a data packet: the upper layers' bytes follow.
pub const KIND_DATA: u8 = 0x00;
/// `kind` of a heartbeat (version 1).
pub const KIND_HEARTBEAT: u8 = 0x01;
/// Bytes of a heartbeat, `kind` included.
pub const HEARTBEAT_LEN: usize = 1 + 4 + 8;
/// Incarnations of a peer remembered after it restarted, so its late heartbeats are recognised.
pub const RETIRED_EPOCHS: usize = 4;

/// Timer token of the periodic tick.
const TICK: u64 = 1;

/// A heartbeat's fields after `kind` (DESIGN.md §6.3: a parsed representation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatRepr {
    /// The sender's incarnation (non-zero).
    pub epoch: u32,
    /// The heartbeat round.
    pub seq: u64,
}

impl HeartbeatRepr {
    /// Pops the fields following `kind` from `message`.
    ///
    /// # Errors
    /// [`Truncated`] when the message is shorter than the fields.
    pub fn parse(message: &mut Message) -> Result<Self, Truncated> {
        let epoch = message.pop_u32()?;
        let seq = message.pop_u64()?;
        Ok(HeartbeatRepr { epoch, seq })
    }

    /// A complete heartbeat, `kind` included.
    pub fn emit(&self) -> Message {
        let mut m = Message::with_headroom(64, &[]);
        m.push_u64(self.seq);
        m.push_u32(self.epoch);
        m.push_u8(KIND_HEARTBEAT);
        m
    }
}

/// Timing of the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Time between two heartbeats to each peer.
    pub interval: Duration,
    /// Silence after which a peer is suspected.
    pub timeout: Duration,
}

impl Default for Config {
    /// `interval` 100 ms, `timeout` 500 ms: see the stack-file kind (`heartbeat`) for sources.
    fn default() -> Self {
        Config {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(500),
        }
    }
}

/// The `heartbeat` layer, built for one node of a scenario of `nodes` nodes.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    name: String,
    node: NodeId,
    nodes: u32,
    config: Config,
}

impl Heartbeat {
    /// A detector named `name` on node `node` watching nodes `0..nodes` (except itself).
    pub fn new(name: impl Into<String>, node: NodeId, nodes: u32, config: Config) -> Self {
        Heartbeat {
            name: name.into(),
            node,
            nodes,
            config,
        }
    }
}

impl Layer for Heartbeat {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_INIT.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![HEARTBEAT.id(), SUSPECT.id(), ALIVE.id()]
    }
    /// Data passes through untouched (heartbeats are its own): the promise below holds.
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(HeartbeatSession::new(self.node, self.nodes, self.config))
    }
}

/// What the detector believes of one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// Heard from (or trusted since the start) at `last_heard`.
    Trusted { last_heard: Instant },
    /// Suspected; not heard from since.
    Suspected,
}

/// One peer: its incarnation, the newest heartbeat heard, and the verdict.
#[derive(Debug, Clone, Copy)]
struct Peer {
    /// 0 until a heartbeat is heard.
    epoch: u32,
    retired: [u32; RETIRED_EPOCHS],
    /// Newest heartbeat round heard of `epoch`.
    newest: Option<u64>,
    liveness: Liveness,
}

/// Whether the periodic tick runs, and on which channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ticker {
    /// Not started (no channel started yet) or stopped (its channel closed).
    Idle,
    /// Ticking on `channel`; heartbeats go down it.
    Running { timer: TimerId, channel: ChannelId },
}

/// Session of [`Heartbeat`]: one per node, normally shared by every channel.
#[derive(Debug)]
pub struct HeartbeatSession {
    node: NodeId,
    config: Config,
    epoch: u32,
    seq: u64,
    ticker: Ticker,
    /// Late ticks: this node's own stalls, not held against its peers.
    gap: TickGap,
    /// Indexed by node id; this node's own entry is unused.
    peers: Vec<Peer>,
}

impl HeartbeatSession {
    fn new(node: NodeId, nodes: u32, config: Config) -> Self {
        let peer = Peer {
            epoch: 0,
            retired: [0; RETIRED_EPOCHS],
            newest: None,
            liveness: Liveness::Trusted {
                last_heard: Instant::ZERO,
            },
        };
        HeartbeatSession {
            node,
            config,
            epoch: 0,
            seq: 0,
            ticker: Ticker::Idle,
            gap: TickGap::new(config.interval),
            peers: vec![peer; nodes as usize],
        }
    }

    /// The peers currently suspected, ascending.
    pub fn suspected(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.liveness == Liveness::Suspected)
            .map(|(i, _)| NodeId(i as u32))
            .collect()
    }

    /// This session's incarnation (0 until it starts).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Starts ticking on the current channel (the first one to start, or the next one after
    /// the heartbeat channel closed).
    fn start(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        if self.epoch == 0 {
            // The kernel's generator and the time: a restarted node, whose generator starts
            // over, still draws a new epoch.
            while self.epoch == 0 {
                let x = ctx.rng().next_u64() ^ now.as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
                self.epoch = (x ^ (x >> 32)) as u32;
            }
            for p in &mut self.peers {
                p.liveness = Liveness::Trusted { last_heard: now };
            }
        }
        let timer = ctx.set_periodic(self.config.interval, TICK);
        self.gap.armed(now);
        self.ticker = Ticker::Running {
            timer,
            channel: ctx.channel(),
        };
        self.send_heartbeats(ctx);
    }

    fn send_heartbeats(&mut self, ctx: &mut Context<'_>) {
        let Ticker::Running { channel, .. } = self.ticker else {
            return;
        };
        let hb = HeartbeatRepr {
            epoch: self.epoch,
            seq: self.seq,
        };
        self.seq = self.seq.wrapping_add(1);
        for p in 0..self.peers.len() as u32 {
            if p == self.node.0 {
                continue;
            }
            let s = Sendable::new(self.node, Dest::Node(NodeId(p)), hb.emit());
            ctx.go(Event::sendable(HEARTBEAT.id(), Direction::Down, channel, s));
            ctx.count("sent");
        }
    }

    /// A tick that came late means this node was not running (stopped, starved of CPU): the
    /// silence of its peers during that time is not theirs ([`crate::stall`]). Counted
    /// `local_stall`.
    fn forgive_own_stall(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let stalled = self.gap.tick(now);
        if stalled.is_zero() {
            return;
        }
        ctx.count("local_stall");
        for p in &mut self.peers {
            if let Liveness::Trusted { last_heard } = &mut p.liveness {
                *last_heard = discount(*last_heard, stalled, now);
            }
        }
    }

    /// Suspects every trusted peer silent for at least `timeout`.
    fn check(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        for i in 0..self.peers.len() {
            if i == self.node.0 as usize {
                continue;
            }
            if let Liveness::Trusted { last_heard } = self.peers[i].liveness {
                if now.saturating_duration_since(last_heard) >= self.config.timeout {
                    self.peers[i].liveness = Liveness::Suspected;
                    ctx.count("suspected");
                    announce(&SUSPECT, NodeId(i as u32), ctx);
                }
            }
        }
    }

    /// A heartbeat from `from`.
    fn heard(&mut self, from: NodeId, hb: HeartbeatRepr, ctx: &mut Context<'_>) {
        if from == self.node {
            ctx.count("from_self");
            return;
        }
        if hb.epoch == 0 {
            ctx.count("bad_epoch");
            return;
        }
        let now = ctx.now();
        let Some(peer) = self.peers.get_mut(from.0 as usize) else {
            ctx.count("unknown_peer");
            return;
        };
        let mut restarted = false;
        if hb.epoch != peer.epoch {
            if peer.retired.contains(&hb.epoch) {
                ctx.count("stale_epoch");
                return;
            }
            if peer.epoch != 0 {
                restarted = true;
                peer.retired.rotate_right(1);
                peer.retired[0] = peer.epoch;
            }
            peer.epoch = hb.epoch;
            peer.newest = None;
        }
        if peer.newest.is_some_and(|n| hb.seq <= n) {
            ctx.count("stale");
            return;
        }
        peer.newest = Some(hb.seq);
        let was = peer.liveness;
        peer.liveness = Liveness::Trusted { last_heard: now };
        if restarted {
            ctx.count("peer_restarted");
        }
        match was {
            Liveness::Suspected => {}
            Liveness::Trusted { .. } if restarted => {
                // Restarted within the timeout: the failure still happened; report it.
                ctx.count("suspected");
                announce(&SUSPECT, from, ctx);
            }
            Liveness::Trusted { .. } => return,
        }
        ctx.count("alive");
        announce(&ALIVE, from, ctx);
    }
}

/// `def` about `peer` up every channel the session is bound to, in channel-id order.
fn announce(def: &'static EventTypeDef, peer: NodeId, ctx: &mut Context<'_>) {
    for channel in ctx.my_channels() {
        ctx.go(events::notice(def, channel, peer));
    }
}

impl Session for HeartbeatSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == PERIODIC_TIMER.id() {
            if let (Body::Timer(t), Ticker::Running { timer, .. }) = (&event.body, self.ticker) {
                if t.token == TICK && t.id == timer {
                    self.send_heartbeats(ctx);
                    self.forgive_own_stall(ctx);
                    self.check(ctx);
                }
            }
            return;
        }
        if ty == CHANNEL_INIT.id() {
            if self.ticker == Ticker::Idle {
                self.start(ctx);
            }
            ctx.go(event);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            if let Ticker::Running { timer, channel } = self.ticker {
                if channel == event.channel() {
                    ctx.cancel_timer(timer);
                    self.ticker = Ticker::Idle;
                }
            }
            ctx.go(event);
            return;
        }
        // The heartbeat channel closed: move to the channel of this event (see Limits).
        if self.ticker == Ticker::Idle && self.epoch != 0 && ctx.is_bound(ctx.channel()) {
            self.start(ctx);
        }
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => {
                s.message.push_u8(KIND_DATA);
                ctx.go(event);
            }
            Direction::Up => match s.message.pop_u8() {
                Ok(KIND_DATA) => ctx.go(event),
                Ok(KIND_HEARTBEAT) => {
                    let from = s.source;
                    match HeartbeatRepr::parse(&mut s.message) {
                        Ok(hb) => self.heard(from, hb, ctx),
                        Err(_) => ctx.count("truncated"),
                    }
                }
                Ok(_) => ctx.count("unknown_kind"),
                Err(_) => ctx.count("truncated"),
            },
        }
    }
}

//! `dvmrp`: DVMRP routing as a stack layer (issue 17 §1, the routing composite protocol of seed
//! 004: "Neighbor Discovery" and "Route Exchange"; draft-ietf-idmr-dvmrp-v3). The protocol
//! itself is the sans-IO [`viastack_mcast::dvmrp::Dvmrp`]; this layer gives it interfaces,
//! timers and a node's global memory.
//!
//! # Interfaces
//!
//! A router has one channel per interface, each a QoS with a device at its bottom and `dvmrp`
//! above it, all channels bound to **one** named `dvmrp` session (`bind = { r = "routing" }`).
//! The session's k-th channel in file order is interface k, and its device must use port k
//! (the simulator's interface number k: `stacks/mcast-net15.toml` shows the pattern). With a
//! `[topology]`, the node has as many interfaces as links (channels beyond are unused) and
//! interface k's network is `10.x.y.0/24` of its link (`viastack_mcast::Prefix::of_link`);
//! without one (a full mesh), channel k stands for one shared segment, network `of_link(k)`.
//! A node whose `[topology]` role is `host` runs no routing: the session stays silent.
//!
//! # Behaviour
//!
//! DVMRP messages arriving from below are consumed; everything else (IGMP, multicast data:
//! `viastack_mcast::node::classify`) passes up to the `igmp` and `mcast-forward` layers;
//! sendables from above pass down untouched. Probes and reports go out as link-local
//! broadcasts (`Dest::Broadcast` on the interface's channel), prunes, grafts and graft acks to
//! their one neighbour. The session also runs **pruning and grafting**
//! ([`viastack_mcast::prune::Pruner`]), told by the layers above through `MCAST_NOTE` events
//! (crate::mcast) when data is unwanted or the group table changed. The session starts when its first
//! channel starts (after a zero-delay timer, once every channel of the file has started) and
//! keeps one kernel timer at the protocol's next deadline. Its generation id comes from the
//! kernel's seeded generator, which differs at every restart.
//!
//! # Global memory
//!
//! The session creates its node's [`GlobalMemory`] (all five objects) as a
//! [`crate::mcast::SharedMemory`] and hands it up every interface channel in an `MCAST_MEMORY`
//! event when it starts; tests and the run report read it through [`DvmrpSession::memory`].
//!
//! # Counters
//!
//! Under the layer's name: `probes_sent`, `reports_sent`, `flash_updates`, `malformed`,
//! `not_adjacent`, `bad_interface`, `neighbors_lost`, `routes_expired`, `prunes_sent`,
//! `prunes_received`, `grafts_sent`, `grafts_received`, `graft_acks_received`,
//! `prune_retransmits`, `graft_retransmits`.

use rand::RngCore;
use viastack_kernel::event::{CHANNEL_INIT, INBOUND, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Instant, Layer, Message,
    Sendable, Session, TimerId,
};
use viastack_mcast::dvmrp::{Config, Dvmrp, Interface, Stats, Timers};
use viastack_mcast::node::{classify, Kind};
use viastack_mcast::prune::{self, Pruner};
use viastack_mcast::{node_addr, GlobalMemory, Prefix};

use crate::mcast::{custom_body, custom_event, lock, Note, SharedMemory, MCAST_MEMORY, MCAST_NOTE};

/// The layer's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DvmrpConfig {
    /// Multiplies every RFC timer (1.0: the draft's values).
    pub time_scale: f64,
    /// Every interface's metric (1: hop count).
    pub metric: u8,
    /// With a topology: the link of each interface. `None`: full mesh.
    pub links: Option<Vec<u32>>,
    /// Whether this node routes (a host does not).
    pub router: bool,
}

impl Default for DvmrpConfig {
    fn default() -> Self {
        DvmrpConfig {
            time_scale: 1.0,
            metric: 1,
            links: None,
            router: true,
        }
    }
}

/// The `dvmrp` layer of one node.
#[derive(Debug, Clone)]
pub struct DvmrpLayer {
    name: String,
    config: DvmrpConfig,
}

impl DvmrpLayer {
    /// The layer named `name`.
    pub fn new(name: impl Into<String>, config: DvmrpConfig) -> Self {
        DvmrpLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for DvmrpLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_INIT.id(), MCAST_NOTE.id()]
    }
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// Routing traffic is best effort; above it nothing is promised.
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(DvmrpSession {
            config: self.config.clone(),
            channels: Vec::new(),
            core: None,
            pruner: None,
            mem: None,
            timer: None,
            reported: Stats::default(),
            reported_prune: prune::Stats::default(),
        })
    }
}

/// Session of [`DvmrpLayer`]: one per node, bound into every interface channel.
#[derive(Debug)]
pub struct DvmrpSession {
    config: DvmrpConfig,
    /// The interface channels, by interface number.
    channels: Vec<ChannelId>,
    core: Option<Dvmrp>,
    pruner: Option<Pruner>,
    mem: Option<SharedMemory>,
    timer: Option<(TimerId, Instant)>,
    /// Counters already added to the kernel's.
    reported: Stats,
    reported_prune: prune::Stats,
}

/// The timer token of the start timer (the protocol's own timer uses 1).
const START: u64 = 0;
const TICK: u64 = 1;

impl DvmrpSession {
    /// The node's global memory, once routing has started.
    pub fn memory(&self) -> Option<SharedMemory> {
        self.mem.clone()
    }

    /// The protocol's counters, once started.
    pub fn stats(&self) -> Option<&Stats> {
        self.core.as_ref().map(Dvmrp::stats)
    }

    fn start(&mut self, ctx: &mut Context<'_>) {
        if self.core.is_some() || !self.config.router {
            return;
        }
        let now = ctx.now();
        let node = ctx.node();
        let addr = node_addr(u16::try_from(node.0).unwrap_or(u16::MAX));
        let links: Vec<u32> = match &self.config.links {
            Some(l) => l.iter().copied().take(self.channels.len()).collect(),
            None => (0..self.channels.len())
                .map(|k| u32::try_from(k).unwrap_or(u32::MAX))
                .collect(),
        };
        self.channels.truncate(links.len());
        let interfaces = links
            .iter()
            .map(|&l| Interface {
                prefix: Prefix::of_link(u16::try_from(l).unwrap_or(u16::MAX)),
                metric: self.config.metric,
            })
            .collect();
        let cfg = Config {
            addr,
            gen_id: ctx.rng().next_u32(),
            interfaces,
            timers: Timers::rfc().scaled(self.config.time_scale),
        };
        let mut mem = GlobalMemory::new(addr);
        self.core = Some(Dvmrp::new(cfg, now, &mut mem));
        self.pruner = Some(Pruner::new(
            prune::Timers::rfc().scaled(self.config.time_scale),
            &mut mem,
        ));
        let mem: SharedMemory = std::sync::Arc::new(std::sync::Mutex::new(mem));
        // Only where a layer takes it (a routing-only stack has none: nothing reaches the
        // application).
        let takers: Vec<ChannelId> = self
            .channels
            .iter()
            .copied()
            .filter(|&ch| {
                ctx.channel_qos(ch)
                    .is_some_and(|q| !q.route(MCAST_MEMORY.id()).is_empty())
            })
            .collect();
        for ch in takers {
            ctx.go(custom_event(
                MCAST_MEMORY.id(),
                Direction::Up,
                ch,
                mem.clone(),
            ));
        }
        self.mem = Some(mem);
        self.flush(ctx);
    }

    /// Sends what the protocol wants sent, adds its counters, and re-arms the timer.
    fn flush(&mut self, ctx: &mut Context<'_>) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let node = ctx.node();
        let mut outs: Vec<_> = std::iter::from_fn(|| core.poll_transmit()).collect();
        if let Some(p) = self.pruner.as_mut() {
            outs.extend(std::iter::from_fn(|| p.poll_transmit()));
        }
        for o in outs {
            let Some(&channel) = self.channels.get(usize::from(o.iface)) else {
                continue;
            };
            let dest = o.to.map_or(Dest::Broadcast, |a| {
                Dest::Node(viastack_kernel::NodeId(a.0 & 0xffff))
            });
            let s = Sendable::new(node, dest, Message::from_wire(o.bytes));
            ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, channel, s));
        }
        if let Some(p) = self.pruner.as_ref() {
            let now = p.stats().clone();
            let was = std::mem::replace(&mut self.reported_prune, now.clone());
            for (name, a, b) in [
                ("prunes_sent", was.prunes_sent, now.prunes_sent),
                ("prunes_received", was.prunes_received, now.prunes_received),
                ("grafts_sent", was.grafts_sent, now.grafts_sent),
                ("grafts_received", was.grafts_received, now.grafts_received),
                (
                    "graft_acks_received",
                    was.graft_acks_received,
                    now.graft_acks_received,
                ),
                (
                    "prune_retransmits",
                    was.prune_retransmits,
                    now.prune_retransmits,
                ),
                (
                    "graft_retransmits",
                    was.graft_retransmits,
                    now.graft_retransmits,
                ),
            ] {
                if b > a {
                    ctx.count_n(name, b - a);
                }
            }
        }
        let now = core.stats().clone();
        let was = std::mem::replace(&mut self.reported, now.clone());
        for (name, a, b) in [
            ("probes_sent", was.probes_sent, now.probes_sent),
            ("reports_sent", was.reports_sent, now.reports_sent),
            ("flash_updates", was.flash_updates, now.flash_updates),
            ("malformed", was.malformed, now.malformed),
            ("not_adjacent", was.not_adjacent, now.not_adjacent),
            ("bad_interface", was.bad_interface, now.bad_interface),
            ("neighbors_lost", was.neighbors_lost, now.neighbors_lost),
            ("routes_expired", was.routes_expired, now.routes_expired),
        ] {
            if b > a {
                ctx.count_n(name, b - a);
            }
        }
        let mut want = core.poll_timeout();
        if let (Some(p), Some(m)) = (self.pruner.as_ref(), self.mem.as_ref()) {
            if let Some(t) = p.poll_timeout(&lock(m)) {
                want = Some(want.map_or(t, |w| w.min(t)));
            }
        }
        if self.timer.map(|(_, t)| t) == want {
            return;
        }
        if let Some((id, _)) = self.timer.take() {
            ctx.cancel_timer(id);
        }
        if let Some(t) = want {
            let t = t.max(ctx.now());
            self.timer = Some((ctx.set_timer_at(t, TICK), t));
        }
    }
}

impl Session for DvmrpSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            let Body::Timer(t) = &event.body else { return };
            if t.token == START {
                self.start(ctx);
                return;
            }
            if self.timer.map(|(id, _)| id) != Some(t.id) {
                return;
            }
            self.timer = None;
            let now = ctx.now();
            if let (Some(core), Some(m)) = (self.core.as_mut(), self.mem.as_ref()) {
                let mut mem = lock(m);
                if core.poll_timeout().is_some_and(|t| t <= now) {
                    core.handle_timeout(now, &mut mem);
                }
                if let Some(p) = self.pruner.as_mut() {
                    p.handle_timeout(now, &mut mem);
                }
            }
            self.flush(ctx);
            return;
        }
        if ty == MCAST_NOTE.id() {
            let now = ctx.now();
            if let (Some(p), Some(m), Some(note)) = (
                self.pruner.as_mut(),
                self.mem.as_ref(),
                custom_body::<Note>(&event),
            ) {
                let mut mem = lock(m);
                match note {
                    Note::Unwanted { source, group } => {
                        p.data_unwanted(now, source, group, &mut mem)
                    }
                    Note::GroupsChanged => p.sync(now, &mut mem),
                }
            }
            self.flush(ctx);
            return;
        }
        if ty == CHANNEL_INIT.id() {
            let ch = event.channel();
            if self.core.is_none() && !self.channels.contains(&ch) {
                self.channels.push(ch);
                self.channels.sort();
                if self.channels.len() == 1 && self.config.router {
                    // Every channel of the file starts at this instant: start once they have.
                    ctx.set_timer(viastack_kernel::Duration::ZERO, START);
                }
            }
            ctx.go(event);
            return;
        }
        let dir = event.dir();
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => ctx.go(event),
            Direction::Up => {
                if classify(s.message.as_slice()) != Kind::Dvmrp {
                    ctx.go(event);
                    return;
                }
                let from = node_addr(u16::try_from(s.source.0).unwrap_or(u16::MAX));
                let bytes = std::mem::take(&mut s.message).into_vec();
                let iface = self
                    .channels
                    .iter()
                    .position(|&c| c == channel)
                    .and_then(|i| u16::try_from(i).ok());
                if let (Some(core), Some(m), Some(iface)) =
                    (self.core.as_mut(), self.mem.as_ref(), iface)
                {
                    let now = ctx.now();
                    let mut mem = lock(m);
                    core.handle_datagram(now, iface, from, &bytes, &mut mem);
                    if let Some(p) = self.pruner.as_mut() {
                        p.handle_datagram(now, iface, from, &bytes, &mut mem);
                    }
                }
                self.flush(ctx);
            }
        }
    }
}

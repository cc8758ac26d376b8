//! `igmp` and `mcast-forward`: seed 004's group-management and data components as stack layers
//! (issue 17 §1), and what the multicast layers of one node share: the node's global memory
//! and the events they exchange (seed 004, "Inter-stack Communication – Global Memory").
//!
//! # The stack of one interface channel
//!
//! `[interface, checksum, dvmrp, igmp, mcast-forward]`, each of the three multicast layers a
//! named session bound into every interface channel of the node (`stacks/mcast-net15.toml`).
//! Datagrams go up through all three; each consumes its own protocol's ([`classify`]) and
//! passes the rest up.
//!
//! # Global memory
//!
//! The node's [`GlobalMemory`] is one object behind a mutex ([`SharedMemory`], the seed's
//! semaphore-protected shared memory); `dvmrp` creates it when routing starts and hands it up
//! every interface channel in an [`MCAST_MEMORY`] event, which `igmp` (it writes the group
//! table) and `mcast-forward` (it reads the source tree, group and prune tables) keep. Each
//! component reads and writes only through the objects' functions.
//!
//! # Notes between components
//!
//! What one component must tell another at once travels down the channel as an [`MCAST_NOTE`]
//! event to `dvmrp`'s pruning and grafting: forwarding's "nobody wants (S, G)" (prune), and
//! group management's "the group table changed" (a new member grafts).
//!
//! # Join and leave
//!
//! The application (or `[[scenario.group]]`) sends an [`MCAST_GROUP`] event down a host's
//! interface channel with a [`GroupCommand`]; the host's `igmp` session joins or leaves, and
//! passes multicast data up only for the groups it has joined. A host's `mcast-forward` turns
//! the application's messages into multicast data for its `group` and delivers received data's
//! payload, with the source host as the sender.
//!
//! # Counters
//!
//! `igmp`: `queries_sent`, `reports_sent`, `reports_suppressed`, `leaves_sent`,
//! `igmp_malformed`, `not_member`. `mcast-forward`: `data_received`, `data_copies`,
//! `rpf_failed`, `ttl_expired`, `data_unwanted`, `data_malformed`, `data_sent`,
//! `data_delivered`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::RngCore;
use viastack_kernel::event::{EventTypeDef, CHANNEL_EVENT, CHANNEL_INIT, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Instant,
    Layer, Message, NodeId, Sendable, Session, TimerId,
};
use viastack_mcast::forward::{DataHeader, Forwarder, DEFAULT_TTL, HEADER_LEN};
use viastack_mcast::igmp;
use viastack_mcast::node::{classify, host_addr, Kind};
use viastack_mcast::{node_addr, Addr, GlobalMemory, Prefix};

/// A node's global memory, shared by its multicast layers.
pub type SharedMemory = Arc<Mutex<GlobalMemory>>;

/// The guard of a node's global memory (a poisoned lock is still usable: every write keeps
/// the objects' invariants before it returns).
pub fn lock(m: &SharedMemory) -> MutexGuard<'_, GlobalMemory> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Up every interface channel when routing starts: the node's [`SharedMemory`] (body
/// `Custom(SharedMemory)`).
pub static MCAST_MEMORY: EventTypeDef = EventTypeDef::new("McastMemory", Some(&CHANNEL_EVENT));

/// Down to `dvmrp`: a [`Note`] from forwarding or group management.
pub static MCAST_NOTE: EventTypeDef = EventTypeDef::new("McastNote", Some(&CHANNEL_EVENT));

/// Down a host's channel: a [`GroupCommand`] of the application.
pub static MCAST_GROUP: EventTypeDef = EventTypeDef::new("McastGroup", Some(&CHANNEL_EVENT));

/// Up a host's channel: another host on the link joined or left a group (its IGMP report or
/// leave was heard; body `Custom(LinkMember)`). A source's `mcast-reliable` counts such a
/// host as a receiver before it has reported stability.
pub static MCAST_LINK_MEMBER: EventTypeDef =
    EventTypeDef::new("McastLinkMember", Some(&CHANNEL_EVENT));

/// What a host's `igmp` heard another host on its link say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkMember {
    /// The host that spoke.
    pub host: Addr,
    /// The group it reported or left.
    pub group: Addr,
    /// A report (`true`) or a leave (`false`).
    pub joined: bool,
}

/// What forwarding or group management tells pruning and grafting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// (S, G) data arrived from the upstream and nobody downstream wants it.
    Unwanted {
        /// The source network.
        source: Prefix,
        /// The group.
        group: Addr,
    },
    /// The group table changed.
    GroupsChanged,
}

/// The application's join or leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupCommand {
    /// Join the group.
    Join(Addr),
    /// Leave the group.
    Leave(Addr),
}

/// An event carrying `value` as its custom body.
pub fn custom_event<T: std::any::Any + Send>(
    ty: EventType,
    dir: Direction,
    channel: ChannelId,
    value: T,
) -> Event {
    Event::new(ty, dir, channel, Body::Custom(Box::new(value)))
}

/// The custom body of `event`, if it is a `T`.
pub fn custom_body<T: std::any::Any + Clone>(event: &Event) -> Option<T> {
    match &event.body {
        Body::Custom(b) => b.downcast_ref::<T>().cloned(),
        _ => None,
    }
}

/// The address of a simulated node: a router's `10.255.x.y`, a host's address on its first
/// link.
pub(crate) fn addr_of(id: NodeId) -> Addr {
    node_addr(u16::try_from(id.0).unwrap_or(u16::MAX))
}

/// Configuration of the `igmp` and `mcast-forward` layers.
#[derive(Debug, Clone, PartialEq)]
pub struct McastConfig {
    /// Multiplies every RFC timer.
    pub time_scale: f64,
    /// Whether the node is a router (else a host).
    pub router: bool,
    /// With a topology: the links of the node's interfaces.
    pub links: Option<Vec<u32>>,
    /// `mcast-forward` on a host: the group its application's messages go to.
    pub group: Addr,
}

impl Default for McastConfig {
    fn default() -> Self {
        McastConfig {
            time_scale: 1.0,
            router: true,
            links: None,
            group: Addr(0xef01_0101),
        }
    }
}

/// The channels of a session bound into every interface channel, by interface number.
#[derive(Debug, Default)]
pub(crate) struct Interfaces {
    channels: Vec<ChannelId>,
}

impl Interfaces {
    pub(crate) fn add(&mut self, ch: ChannelId) {
        if !self.channels.contains(&ch) {
            self.channels.push(ch);
            self.channels.sort();
        }
    }
    pub(crate) fn index(&self, ch: ChannelId) -> Option<u16> {
        self.channels
            .iter()
            .position(|&c| c == ch)
            .and_then(|i| u16::try_from(i).ok())
    }
    pub(crate) fn get(&self, iface: u16) -> Option<ChannelId> {
        self.channels.get(usize::from(iface)).copied()
    }
}

/// The `igmp` layer.
#[derive(Debug, Clone)]
pub struct IgmpLayer {
    name: String,
    config: McastConfig,
}

impl IgmpLayer {
    /// The layer named `name`.
    pub fn new(name: impl Into<String>, config: McastConfig) -> Self {
        IgmpLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for IgmpLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            CHANNEL_INIT.id(),
            MCAST_MEMORY.id(),
            MCAST_GROUP.id(),
        ]
    }
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(IgmpSession {
            config: self.config.clone(),
            ifaces: Interfaces::default(),
            mem: None,
            router: None,
            host: None,
            timer: None,
            reported: igmp::Stats::default(),
        })
    }
}

/// Session of [`IgmpLayer`]: one per node, bound into every interface channel.
#[derive(Debug)]
pub struct IgmpSession {
    config: McastConfig,
    ifaces: Interfaces,
    mem: Option<SharedMemory>,
    router: Option<igmp::Router>,
    host: Option<igmp::Host>,
    timer: Option<(TimerId, Instant)>,
    reported: igmp::Stats,
}

const START: u64 = 0;
const TICK: u64 = 1;

impl IgmpSession {
    /// The groups a host session has joined.
    pub fn joined(&self) -> Vec<Addr> {
        self.host
            .as_ref()
            .map(|h| h.groups().map(|(&g, _)| g).collect())
            .unwrap_or_default()
    }

    fn timers(&self) -> igmp::Timers {
        igmp::Timers::rfc().scaled(self.config.time_scale)
    }

    fn iface_count(&self) -> u16 {
        let n = self
            .config
            .links
            .as_ref()
            .map_or(self.ifaces.channels.len(), |l| {
                l.len().min(self.ifaces.channels.len())
            });
        u16::try_from(n).unwrap_or(u16::MAX)
    }

    fn flush(&mut self, ctx: &mut Context<'_>) {
        let node = ctx.node();
        let mut outs = Vec::new();
        if let Some(r) = self.router.as_mut() {
            outs.extend(std::iter::from_fn(|| r.poll_transmit()));
        }
        if let Some(h) = self.host.as_mut() {
            outs.extend(std::iter::from_fn(|| h.poll_transmit()));
        }
        for o in outs {
            if let Some(ch) = self.ifaces.get(o.iface) {
                let s = Sendable::new(node, Dest::Broadcast, Message::from_wire(o.bytes));
                ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, ch, s));
            }
        }
        let now = self
            .router
            .as_ref()
            .map(igmp::Router::stats)
            .or(self.host.as_ref().map(igmp::Host::stats))
            .cloned()
            .unwrap_or_default();
        let was = std::mem::replace(&mut self.reported, now.clone());
        for (name, a, b) in [
            (
                "queries_sent",
                was.general_queries + was.group_queries,
                now.general_queries + now.group_queries,
            ),
            ("reports_sent", was.reports_sent, now.reports_sent),
            (
                "reports_suppressed",
                was.reports_suppressed,
                now.reports_suppressed,
            ),
            ("leaves_sent", was.leaves_sent, now.leaves_sent),
            ("igmp_malformed", was.malformed, now.malformed),
        ] {
            if b > a {
                ctx.count_n(name, b - a);
            }
        }
        let want = match (&self.router, &self.host, &self.mem) {
            (Some(r), _, Some(m)) => r.poll_timeout(&lock(m)),
            (_, Some(h), _) => h.poll_timeout(),
            _ => None,
        };
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

    fn note(&self, ctx: &mut Context<'_>, channel: ChannelId) {
        ctx.go(custom_event(
            MCAST_NOTE.id(),
            Direction::Down,
            channel,
            Note::GroupsChanged,
        ));
    }
}

impl Session for IgmpSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == CHANNEL_INIT.id() {
            self.ifaces.add(event.channel());
            if self.ifaces.channels.len() == 1 && !self.config.router {
                ctx.set_timer(Duration::ZERO, START);
            }
            ctx.go(event);
            return;
        }
        if ty == TIMER.id() {
            let Body::Timer(t) = &event.body else { return };
            if t.token == START {
                if self.host.is_none() {
                    let seed = ctx.rng().next_u64();
                    self.host = Some(igmp::Host::new(self.timers(), seed));
                }
                return;
            }
            if self.timer.map(|(id, _)| id) != Some(t.id) {
                return;
            }
            self.timer = None;
            let now = ctx.now();
            if let (Some(r), Some(m)) = (self.router.as_mut(), self.mem.as_ref()) {
                r.handle_timeout(now, &mut lock(m));
            }
            if let Some(h) = self.host.as_mut() {
                h.handle_timeout(now);
            }
            self.flush(ctx);
            return;
        }
        if ty == MCAST_MEMORY.id() {
            if self.mem.is_none() && self.config.router {
                if let Some(m) = custom_body::<SharedMemory>(&event) {
                    let now = ctx.now();
                    let addr = addr_of(ctx.node());
                    let router = igmp::Router::new(
                        addr,
                        self.iface_count(),
                        self.timers(),
                        now,
                        &mut lock(&m),
                    );
                    self.router = Some(router);
                    self.mem = Some(m);
                    self.flush(ctx);
                }
            }
            ctx.go(event);
            return;
        }
        if ty == MCAST_GROUP.id() {
            let now = ctx.now();
            if let (Some(h), Some(cmd)) = (self.host.as_mut(), custom_body::<GroupCommand>(&event))
            {
                match cmd {
                    GroupCommand::Join(g) => {
                        h.join(now, g);
                    }
                    GroupCommand::Leave(g) => h.leave(now, g),
                }
                self.flush(ctx);
            }
            return;
        }
        let channel = event.channel();
        if event.dir() == Direction::Down {
            ctx.go(event);
            return;
        }
        let Some(s) = event.sendable_ref() else {
            ctx.go(event);
            return;
        };
        let bytes = s.message.as_slice();
        match classify(bytes) {
            Kind::Igmp => {
                let now = ctx.now();
                let from = addr_of(s.source);
                let iface = self.ifaces.index(channel);
                if let (Some(r), Some(m), Some(i)) =
                    (self.router.as_mut(), self.mem.as_ref(), iface)
                {
                    r.handle_datagram(now, i, from, bytes, &mut lock(m));
                    self.note(ctx, channel);
                } else if let Some(h) = self.host.as_mut() {
                    h.handle_datagram(now, bytes);
                    let heard = match igmp::wire::Repr::parse(bytes) {
                        Ok(igmp::wire::Repr::Report { group, .. }) => Some((group, true)),
                        Ok(igmp::wire::Repr::Leave { group }) => Some((group, false)),
                        _ => None,
                    };
                    if let Some((group, joined)) = heard {
                        let member = LinkMember {
                            host: from,
                            group,
                            joined,
                        };
                        let ty = MCAST_LINK_MEMBER.id();
                        ctx.go(custom_event(ty, Direction::Up, channel, member));
                    }
                }
                self.flush(ctx);
            }
            Kind::Data if self.host.is_some() => {
                let member = DataHeader::parse(bytes)
                    .is_ok_and(|h| self.host.as_ref().is_some_and(|x| x.is_member(h.group)));
                if member {
                    ctx.go(event);
                } else {
                    ctx.count("not_member");
                }
            }
            _ => ctx.go(event),
        }
    }
}

/// The `mcast-forward` layer.
#[derive(Debug, Clone)]
pub struct McastForwardLayer {
    name: String,
    config: McastConfig,
}

impl McastForwardLayer {
    /// The layer named `name`.
    pub fn new(name: impl Into<String>, config: McastConfig) -> Self {
        McastForwardLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for McastForwardLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_INIT.id(), MCAST_MEMORY.id()]
    }
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(McastForwardSession {
            config: self.config.clone(),
            ifaces: Interfaces::default(),
            mem: None,
            forward: Forwarder::new(),
            reported: viastack_mcast::forward::Stats::default(),
            seq: 0,
        })
    }
}

/// Session of [`McastForwardLayer`].
#[derive(Debug)]
pub struct McastForwardSession {
    config: McastConfig,
    ifaces: Interfaces,
    mem: Option<SharedMemory>,
    forward: Forwarder,
    reported: viastack_mcast::forward::Stats,
    seq: u32,
}

impl McastForwardSession {
    /// The forwarding counters.
    pub fn stats(&self) -> &viastack_mcast::forward::Stats {
        self.forward.stats()
    }

    fn own_addr(&self, node: NodeId) -> Addr {
        let link = self
            .config
            .links
            .as_ref()
            .and_then(|l| l.first().copied())
            .unwrap_or(0);
        host_addr(
            u16::try_from(link).unwrap_or(u16::MAX),
            u16::try_from(node.0).unwrap_or(u16::MAX),
        )
    }

    fn count(&mut self, ctx: &mut Context<'_>) {
        let now = self.forward.stats().clone();
        let was = std::mem::replace(&mut self.reported, now.clone());
        for (name, a, b) in [
            ("data_received", was.received, now.received),
            ("data_copies", was.copies, now.copies),
            ("rpf_failed", was.rpf_failed, now.rpf_failed),
            ("ttl_expired", was.ttl_expired, now.ttl_expired),
            ("data_unwanted", was.unwanted, now.unwanted),
            ("data_malformed", was.malformed, now.malformed),
        ] {
            if b > a {
                ctx.count_n(name, b - a);
            }
        }
    }
}

impl Session for McastForwardSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == CHANNEL_INIT.id() {
            self.ifaces.add(event.channel());
            ctx.go(event);
            return;
        }
        if ty == MCAST_MEMORY.id() {
            if self.mem.is_none() {
                self.mem = custom_body::<SharedMemory>(&event);
            }
            return;
        }
        let channel = event.channel();
        let dir = event.dir();
        let node = ctx.node();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match (dir, self.config.router) {
            // A host's application multicasts to the configured group.
            (Direction::Down, false) => {
                let h = DataHeader {
                    ttl: DEFAULT_TTL,
                    source: self.own_addr(node),
                    group: self.config.group,
                    seq: self.seq,
                };
                self.seq = self.seq.wrapping_add(1);
                match h.to_vec(s.message.as_slice()) {
                    Ok(bytes) => {
                        s.message = Message::from_wire(bytes);
                        s.dest = Dest::Broadcast;
                        ctx.count("data_sent");
                        ctx.go(event);
                    }
                    Err(_) => ctx.count("data_malformed"),
                }
            }
            (Direction::Down, true) => ctx.go(event),
            (Direction::Up, false) => {
                let bytes = s.message.as_slice();
                match DataHeader::parse(bytes) {
                    Ok(h) => {
                        let payload = bytes.get(HEADER_LEN..).unwrap_or_default().to_vec();
                        s.message = Message::from_wire(payload);
                        // The source host's node id (host addresses end in node + 1).
                        s.source = NodeId((h.source.0 & 0xff).saturating_sub(1));
                        ctx.count("data_delivered");
                        ctx.go(event);
                    }
                    Err(_) => ctx.count("data_malformed"),
                }
            }
            (Direction::Up, true) => {
                let bytes = s.message.as_slice();
                if classify(bytes) != Kind::Data {
                    ctx.go(event);
                    return;
                }
                let (Some(mem), Some(iface)) = (self.mem.as_ref(), self.ifaces.index(channel))
                else {
                    ctx.count("data_before_routing");
                    return;
                };
                let v = self.forward.handle_data(
                    ctx.now(),
                    iface,
                    addr_of(s.source),
                    bytes,
                    &lock(mem),
                );
                for i in v.out {
                    if let Some(ch) = self.ifaces.get(i) {
                        let copy = Sendable::new(
                            node,
                            Dest::Broadcast,
                            Message::from_wire(v.bytes.clone()),
                        );
                        ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, ch, copy));
                    }
                }
                if let Some((source, group)) = v.unwanted {
                    ctx.go(custom_event(
                        MCAST_NOTE.id(),
                        Direction::Down,
                        channel,
                        Note::Unwanted { source, group },
                    ));
                }
                self.count(ctx);
            }
        }
    }
}

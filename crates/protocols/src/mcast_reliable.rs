//! `mcast-reliable` and `mcast-order`: seed 004's Reliable Multicast and In-order Multicast
//! components of the data composite protocol as stack layers (issue 17 §1), over the protocol
//! core of [`viastack_mcast::reliable`] (read its module doc for the design: NACKs with random
//! back-off and suppression, repair from the nearest upstream holder, bounded buffers,
//! stability-based garbage collection, reported loss).
//!
//! # Where they sit
//!
//! `[interface, checksum, dvmrp, igmp, mcast-reliable, mcast-order, mcast-forward]`, each a
//! named session per node bound into every interface channel (`stacks/mcast-reliable.toml`).
//! `mcast-reliable` is below forwarding so that on a router it sees every data packet from the
//! upstream (it caches it, then passes it up to be forwarded) and answers the NACKs and
//! stability reports of the children itself; it reads the source tree and the prune and group
//! tables of the node's global memory (the `McastMemory` event) to find its upstream and the
//! child interfaces a session message goes to. On a host it is the source's send buffer (it
//! adds the 8-byte reliable header to the data packets the `mcast-forward` layer makes, or
//! refuses them with a `SendRefused` notice naming the message when the buffer is full) and
//! the receiver (duplicates dropped, gaps NACKed, the reliable header taken off before the data
//! goes up). It learns the application's joins and leaves from the `McastGroup` events going
//! down to `igmp`.
//!
//! `mcast-order` (optional: leave it out for delivery as soon as a packet arrives) holds a
//! host's packets of each (source, group) until those before them have been delivered. It
//! starts each stream where `mcast-reliable` says ([`MCAST_STREAM`]) and moves past what
//! `mcast-reliable` reports lost ([`MCAST_UNRECOVERABLE`], then passed on to the application).
//!
//! # Counters
//!
//! `mcast-reliable`: `rel_sent`, `rel_refused`, `rel_delivered`, `rel_duplicates`,
//! `rel_beyond_window`, `nacks_sent`, `nacks_suppressed`, `nacks_forwarded`, `repairs_sent`,
//! `repairs_from_cache`, `stability_reports`, `sessions_sent`, `freed_stable`, `cache_evicted`,
//! `unrecoverable`, `skipped_while_away`, `membership_refreshes` (a router counted a joined host's
//! stability report as its IGMP membership, [`viastack_mcast::reliable::Repairer::refresh_membership`]),
//! `held_for_members` (a source kept stability where it was for a host of its link whose IGMP
//! report it heard but which had not reported yet: [`viastack_mcast::reliable::Sender::member_heard`],
//! told by `igmp` through [`crate::mcast::MCAST_LINK_MEMBER`]), `link_members_dropped` (more than
//! 4,096 (group, host) pairs heard on the link),
//! `rel_malformed`, `send_buffer_peak` and `cache_peak`
//! (the most packets a source's send buffer or a router's repair cache held, summed over the
//! nodes). `mcast-order`: `order_held`,
//! `order_stale`, `order_overflow`.

use std::collections::BTreeMap;

use rand::RngCore;
use viastack_kernel::event::{EventTypeDef, CHANNEL_EVENT, CHANNEL_INIT, SENDABLE, TIMER};
use viastack_kernel::{
    Body, Context, Delivery, Dest, Direction, Event, EventType, Instant, Layer, Message, NodeId,
    Sendable, Session, TimerId,
};
use viastack_mcast::forward::DataHeader;
use viastack_mcast::reliable::{self, Control, RData, Receiver, Refused, Repairer, Sender};
use viastack_mcast::serial::{InOrder, Offer};
use viastack_mcast::Addr;

use crate::events::{failure, SEND_REFUSED};
use crate::mcast::{
    addr_of, custom_body, custom_event, lock, GroupCommand, Interfaces, LinkMember, McastConfig,
    SharedMemory, MCAST_GROUP, MCAST_LINK_MEMBER, MCAST_MEMORY,
};

/// Most (group, host) pairs a host remembers from the IGMP messages heard on its link.
const MAX_LINK_MEMBERS: usize = 4096;

/// Up a host's channel from `mcast-reliable` to `mcast-order`: where a stream starts, or that
/// it moved past packets sent while the host was not a member (body `Custom(StreamNote)`).
pub static MCAST_STREAM: EventTypeDef = EventTypeDef::new("McastStream", Some(&CHANNEL_EVENT));

/// Up to the application: packets of a stream that can no longer be repaired (body
/// `Custom(StreamNote::Unrecoverable)`).
pub static MCAST_UNRECOVERABLE: EventTypeDef =
    EventTypeDef::new("McastUnrecoverable", Some(&CHANNEL_EVENT));

/// What `mcast-reliable` tells the layers above about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamNote {
    /// The stream starts at `next`.
    Start {
        /// Source host.
        source: Addr,
        /// Group.
        group: Addr,
        /// First packet.
        next: u32,
    },
    /// The stream moves on to `to` (packets sent while not a member, or lost).
    Skip {
        /// Source host.
        source: Addr,
        /// Group.
        group: Addr,
        /// The new position.
        to: u32,
    },
    /// Packets `from..to`, `missing` of them not held, cannot be repaired.
    Unrecoverable {
        /// Source host.
        source: Addr,
        /// Group.
        group: Addr,
        /// First lost.
        from: u32,
        /// After the last.
        to: u32,
        /// How many were missing.
        missing: u32,
    },
}

/// Configuration of `mcast-reliable`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReliableConfig {
    /// Role and topology.
    pub mcast: McastConfig,
    /// Timers (already scaled) and capacities.
    pub rel: reliable::Config,
    /// Planted bug for checker tests: routers and the source answer no NACK.
    pub no_repair: bool,
}

/// The `mcast-reliable` layer.
#[derive(Debug, Clone)]
pub struct McastReliableLayer {
    name: String,
    config: ReliableConfig,
}

impl McastReliableLayer {
    /// The layer named `name`.
    pub fn new(name: impl Into<String>, config: ReliableConfig) -> Self {
        McastReliableLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for McastReliableLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            CHANNEL_INIT.id(),
            MCAST_MEMORY.id(),
            MCAST_GROUP.id(),
            MCAST_LINK_MEMBER.id(),
        ]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![MCAST_STREAM.id(), MCAST_UNRECOVERABLE.id()]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: true,
            fifo: below.fifo,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(McastReliableSession {
            config: self.config.clone(),
            ifaces: Interfaces::default(),
            mem: None,
            repairer: self
                .config
                .mcast
                .router
                .then(|| Repairer::new(self.config.rel)),
            sender: None,
            receiver: None,
            link_members: BTreeMap::new(),
            timer: None,
            reported: reliable::Stats::default(),
        })
    }
}

/// Session of [`McastReliableLayer`]: one per node, bound into every interface channel.
#[derive(Debug)]
pub struct McastReliableSession {
    config: ReliableConfig,
    ifaces: Interfaces,
    mem: Option<SharedMemory>,
    repairer: Option<Repairer>,
    sender: Option<Sender>,
    receiver: Option<Receiver>,
    /// Hosts on this host's link that joined a group, (group, host) → since when (their IGMP
    /// reports, heard by `igmp`): a source here counts them as receivers before they report.
    link_members: BTreeMap<(Addr, Addr), Instant>,
    timer: Option<(TimerId, Instant)>,
    reported: reliable::Stats,
}

const TICK: u64 = 1;

fn sum(a: &reliable::Stats, b: &reliable::Stats) -> reliable::Stats {
    reliable::Stats {
        sent: a.sent + b.sent,
        refused: a.refused + b.refused,
        delivered: a.delivered + b.delivered,
        duplicates: a.duplicates + b.duplicates,
        beyond_window: a.beyond_window + b.beyond_window,
        nacks_sent: a.nacks_sent + b.nacks_sent,
        nacks_suppressed: a.nacks_suppressed + b.nacks_suppressed,
        nacks_forwarded: a.nacks_forwarded + b.nacks_forwarded,
        repairs: a.repairs + b.repairs,
        repairs_from_cache: a.repairs_from_cache + b.repairs_from_cache,
        reports_sent: a.reports_sent + b.reports_sent,
        sessions_sent: a.sessions_sent + b.sessions_sent,
        freed_stable: a.freed_stable + b.freed_stable,
        evicted: a.evicted + b.evicted,
        unrecoverable: a.unrecoverable + b.unrecoverable,
        skipped: a.skipped + b.skipped,
        membership_refreshes: a.membership_refreshes + b.membership_refreshes,
        held_for_members: a.held_for_members + b.held_for_members,
        malformed: a.malformed + b.malformed,
        peak: a.peak.max(b.peak),
    }
}

impl McastReliableSession {
    /// The counters of the node's roles, summed.
    pub fn stats(&self) -> reliable::Stats {
        let mut s = reliable::Stats::default();
        if let Some(r) = &self.repairer {
            s = sum(&s, r.stats());
        }
        if let Some(r) = &self.sender {
            s = sum(&s, r.stats());
        }
        if let Some(r) = &self.receiver {
            s = sum(&s, r.stats());
        }
        s
    }

    fn receiver(&mut self, ctx: &mut Context<'_>) -> &mut Receiver {
        let cfg = self.config.rel;
        self.receiver
            .get_or_insert_with(|| Receiver::new(cfg, ctx.rng().next_u64()))
    }

    fn flush(&mut self, ctx: &mut Context<'_>) {
        let node = ctx.node();
        let mut outs = Vec::new();
        if let Some(r) = self.repairer.as_mut() {
            outs.extend(std::iter::from_fn(|| r.poll_transmit()));
        }
        if let Some(r) = self.sender.as_mut() {
            outs.extend(std::iter::from_fn(|| r.poll_transmit()));
        }
        if let Some(r) = self.receiver.as_mut() {
            outs.extend(std::iter::from_fn(|| r.poll_transmit()));
        }
        for o in outs {
            if let Some(ch) = self.ifaces.get(o.iface) {
                let s = Sendable::new(node, Dest::Broadcast, Message::from_wire(o.bytes));
                ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, ch, s));
            }
        }
        self.notes(ctx);
        self.count(ctx);
        let want = [
            self.repairer.as_ref().and_then(Repairer::poll_timeout),
            self.sender.as_ref().and_then(Sender::poll_timeout),
            self.receiver.as_ref().and_then(Receiver::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
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

    /// The receiver's notes, up the host's channel.
    fn notes(&mut self, ctx: &mut Context<'_>) {
        let mut notes = Vec::new();
        if let Some(r) = self.receiver.as_mut() {
            notes.extend(std::iter::from_fn(|| r.poll_event()));
        }
        if let Some(ch) = self.ifaces.get(0) {
            for n in notes {
                let (ty, note) = match n {
                    reliable::Event::Start {
                        source,
                        group,
                        next,
                    } => (
                        MCAST_STREAM.id(),
                        StreamNote::Start {
                            source,
                            group,
                            next,
                        },
                    ),
                    reliable::Event::Skipped { source, group, to } => {
                        (MCAST_STREAM.id(), StreamNote::Skip { source, group, to })
                    }
                    reliable::Event::Unrecoverable {
                        source,
                        group,
                        from,
                        to,
                        missing,
                    } => (
                        MCAST_UNRECOVERABLE.id(),
                        StreamNote::Unrecoverable {
                            source,
                            group,
                            from,
                            to,
                            missing,
                        },
                    ),
                };
                ctx.go(custom_event(ty, Direction::Up, ch, note));
            }
        }
    }

    fn count(&mut self, ctx: &mut Context<'_>) {
        let now = self.stats();
        let was = std::mem::replace(&mut self.reported, now.clone());
        for (name, a, b) in [
            ("rel_sent", was.sent, now.sent),
            ("rel_refused", was.refused, now.refused),
            ("rel_delivered", was.delivered, now.delivered),
            ("rel_duplicates", was.duplicates, now.duplicates),
            ("rel_beyond_window", was.beyond_window, now.beyond_window),
            ("nacks_sent", was.nacks_sent, now.nacks_sent),
            (
                "nacks_suppressed",
                was.nacks_suppressed,
                now.nacks_suppressed,
            ),
            ("nacks_forwarded", was.nacks_forwarded, now.nacks_forwarded),
            ("repairs_sent", was.repairs, now.repairs),
            (
                "repairs_from_cache",
                was.repairs_from_cache,
                now.repairs_from_cache,
            ),
            ("stability_reports", was.reports_sent, now.reports_sent),
            ("sessions_sent", was.sessions_sent, now.sessions_sent),
            ("freed_stable", was.freed_stable, now.freed_stable),
            ("cache_evicted", was.evicted, now.evicted),
            ("unrecoverable", was.unrecoverable, now.unrecoverable),
            ("skipped_while_away", was.skipped, now.skipped),
            (
                "membership_refreshes",
                was.membership_refreshes,
                now.membership_refreshes,
            ),
            (
                "held_for_members",
                was.held_for_members,
                now.held_for_members,
            ),
            ("rel_malformed", was.malformed, now.malformed),
        ] {
            if b > a {
                ctx.count_n(name, b - a);
            }
        }
        // A node is a router (repair cache) or a host (send buffer): its peak occupancy.
        let peak = if self.repairer.is_some() {
            "cache_peak"
        } else {
            "send_buffer_peak"
        };
        for (name, a, b) in [(peak, was.peak, now.peak)] {
            if b > a {
                ctx.count_n(name, b - a);
            }
        }
    }

    fn host_up(&mut self, event: Event, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let Some(s) = event.sendable_ref() else {
            ctx.go(event);
            return;
        };
        let from = addr_of(s.source);
        let bytes = s.message.as_slice();
        match bytes.first() {
            Some(&viastack_mcast::forward::TYPE_DATA) => match RData::parse(bytes) {
                Ok(r) => {
                    if self
                        .sender
                        .as_ref()
                        .is_some_and(|x| x.addr() == r.data.source)
                    {
                        return; // our own packet, reflected
                    }
                    let deliver = self.receiver(ctx).handle_data(now, &r);
                    // A new stream's start goes up before its first packet.
                    self.notes(ctx);
                    if deliver {
                        let plain = RData::unwrap(bytes);
                        let mut event = event;
                        if let Some(s) = event.sendable_mut() {
                            s.message = Message::from_wire(plain);
                        }
                        ctx.go(event);
                    }
                }
                Err(_) => ctx.count("rel_malformed"),
            },
            Some(&(reliable::TYPE_NACK | reliable::TYPE_STABLE | reliable::TYPE_SESSION)) => {
                match Control::parse(bytes) {
                    Ok(c) => {
                        if let Some(snd) = self.sender.as_mut() {
                            if !self.config.no_repair {
                                snd.handle(now, from, &c);
                            }
                        }
                        self.receiver(ctx).handle(now, &c);
                    }
                    Err(_) => ctx.count("rel_malformed"),
                }
            }
            _ => ctx.go(event),
        }
    }

    /// A host on the link joined or left a group: remembered, and told to the source.
    fn link_member(&mut self, m: LinkMember, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let key = (m.group, m.host);
        if !m.joined {
            self.link_members.remove(&key);
        } else if self.link_members.len() < MAX_LINK_MEMBERS || self.link_members.contains_key(&key)
        {
            self.link_members.entry(key).or_insert(now);
        } else {
            ctx.count("link_members_dropped");
        }
        if let Some(s) = self.sender.as_mut().filter(|s| s.group() == m.group) {
            if m.joined {
                s.member_heard(m.host, now);
            } else {
                s.member_left(m.host);
            }
        }
    }

    fn router_up(&mut self, event: Event, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let channel = event.channel();
        let Some(s) = event.sendable_ref() else {
            ctx.go(event);
            return;
        };
        let (Some(mem), Some(iface), Some(rep)) = (
            self.mem.as_ref(),
            self.ifaces.index(channel),
            self.repairer.as_mut(),
        ) else {
            ctx.go(event);
            return;
        };
        let bytes = s.message.as_slice();
        match bytes.first() {
            Some(&viastack_mcast::forward::TYPE_DATA) => {
                rep.handle_data(now, iface, bytes, &lock(mem));
                ctx.go(event);
            }
            Some(&(reliable::TYPE_NACK | reliable::TYPE_STABLE | reliable::TYPE_SESSION)) => {
                match Control::parse(bytes) {
                    Ok(c) => {
                        let nack = matches!(c, Control::Nack { .. });
                        if !(nack && self.config.no_repair) {
                            let from = addr_of(s.source);
                            let mut m = lock(mem);
                            rep.refresh_membership(now, iface, from, &c, &mut m);
                            rep.handle(now, iface, from, &c, &m);
                        }
                    }
                    Err(_) => ctx.count("rel_malformed"),
                }
            }
            _ => ctx.go(event),
        }
    }
}

impl Session for McastReliableSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == CHANNEL_INIT.id() {
            self.ifaces.add(event.channel());
            ctx.go(event);
            return;
        }
        if ty == TIMER.id() {
            let Body::Timer(t) = &event.body else { return };
            if self.timer.map(|(id, _)| id) != Some(t.id) {
                return;
            }
            self.timer = None;
            let now = ctx.now();
            if let (Some(r), Some(m)) = (self.repairer.as_mut(), self.mem.as_ref()) {
                r.handle_timeout(now, &lock(m));
            }
            if let Some(r) = self.sender.as_mut() {
                r.handle_timeout(now);
            }
            if let Some(r) = self.receiver.as_mut() {
                r.handle_timeout(now);
            }
            self.flush(ctx);
            return;
        }
        if ty == MCAST_MEMORY.id() {
            if self.mem.is_none() {
                self.mem = custom_body::<SharedMemory>(&event);
            }
            ctx.go(event);
            return;
        }
        if ty == MCAST_LINK_MEMBER.id() {
            if let Some(m) = custom_body::<LinkMember>(&event) {
                self.link_member(m, ctx);
            }
            return;
        }
        if ty == MCAST_GROUP.id() {
            if !self.config.mcast.router {
                match custom_body::<GroupCommand>(&event) {
                    Some(GroupCommand::Join(g)) => self.receiver(ctx).join(g),
                    Some(GroupCommand::Leave(g)) => self.receiver(ctx).leave(g),
                    None => {}
                }
            }
            ctx.go(event);
            return;
        }
        let router = self.config.mcast.router;
        match (event.dir(), router) {
            (Direction::Up, true) => self.router_up(event, ctx),
            (Direction::Up, false) => self.host_up(event, ctx),
            (Direction::Down, true) => {
                ctx.go(event);
                return;
            }
            (Direction::Down, false) => {
                let channel = event.channel();
                let now = ctx.now();
                let Some(s) = event.sendable_mut() else {
                    ctx.go(event);
                    return;
                };
                let bytes = s.message.as_slice();
                let Ok(h) = DataHeader::parse(bytes) else {
                    ctx.go(event);
                    return;
                };
                let cfg = self.config.rel;
                let members = &self.link_members;
                let snd = self.sender.get_or_insert_with(|| {
                    let mut snd = Sender::new(cfg, h.source, h.group);
                    for (&(_, host), &since) in
                        members.range((h.group, Addr(0))..=(h.group, Addr(u32::MAX)))
                    {
                        snd.member_heard(host, since);
                    }
                    snd
                });
                match snd.send(now, bytes) {
                    Ok(b) => {
                        s.message = Message::from_wire(b);
                        ctx.go(event);
                    }
                    Err(Refused::Full(_)) => {
                        let tag = s.tag;
                        ctx.go(failure(&SEND_REFUSED, channel, NodeId(u32::MAX), [tag]));
                    }
                    Err(Refused::Malformed) => ctx.count("rel_malformed"),
                }
            }
        }
        self.flush(ctx);
    }

    fn unsettled(&self) -> usize {
        self.sender.as_ref().map_or(0, Sender::buffered)
    }
}

/// The `mcast-order` layer.
#[derive(Debug, Clone)]
pub struct McastOrderLayer {
    name: String,
    router: bool,
    capacity: usize,
}

impl McastOrderLayer {
    /// The layer named `name`; on a host it holds at most `capacity` packets per stream.
    pub fn new(name: impl Into<String>, router: bool, capacity: usize) -> Self {
        McastOrderLayer {
            name: name.into(),
            router,
            capacity,
        }
    }
}

impl Layer for McastOrderLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), MCAST_STREAM.id(), MCAST_UNRECOVERABLE.id()]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: below.reliable,
            fifo: true,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(McastOrderSession {
            router: self.router,
            capacity: self.capacity,
            streams: BTreeMap::new(),
        })
    }
}

/// Session of [`McastOrderLayer`]: one wrap-safe in-order buffer per (source, group) stream
/// ([`viastack_mcast::serial::InOrder`], RFC 1982 comparisons).
#[derive(Debug)]
pub struct McastOrderSession {
    router: bool,
    capacity: usize,
    streams: BTreeMap<(Addr, Addr), InOrder<Event>>,
}

impl McastOrderSession {
    fn move_to(&mut self, source: Addr, group: Addr, to: u32, ctx: &mut Context<'_>) {
        let st = self
            .streams
            .entry((source, group))
            .or_insert_with(|| InOrder::new(to));
        for e in st.move_to(to) {
            ctx.go(e);
        }
    }
}

impl Session for McastOrderSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if self.router || event.dir() == Direction::Down {
            ctx.go(event);
            return;
        }
        let ty = event.ty();
        if ty == MCAST_STREAM.id() || ty == MCAST_UNRECOVERABLE.id() {
            match custom_body::<StreamNote>(&event) {
                Some(StreamNote::Start {
                    source,
                    group,
                    next,
                }) => {
                    self.streams
                        .entry((source, group))
                        .or_insert_with(|| InOrder::new(next));
                }
                Some(StreamNote::Skip { source, group, to })
                | Some(StreamNote::Unrecoverable {
                    source, group, to, ..
                }) => self.move_to(source, group, to, ctx),
                None => {}
            }
            if ty == MCAST_UNRECOVERABLE.id() {
                ctx.go(event);
            }
            return;
        }
        let Some(h) = event
            .sendable_ref()
            .and_then(|s| DataHeader::parse(s.message.as_slice()).ok())
        else {
            ctx.go(event);
            return;
        };
        let st = self
            .streams
            .entry((h.source, h.group))
            .or_insert_with(|| InOrder::new(h.seq));
        match st.offer(h.seq, event, self.capacity) {
            Offer::Stale => ctx.count("order_stale"),
            Offer::Deliver(events) => {
                for e in events {
                    ctx.go(e);
                }
            }
            Offer::Held => ctx.count("order_held"),
            Offer::Overflow(event) => {
                // Bounded: rather than grow or lose it, hand it up out of order (counted).
                ctx.count("order_overflow");
                ctx.go(event);
            }
        }
    }
}

/// The [`StreamNote`] an event carries, if any.
pub fn stream_note(event: &Event) -> Option<StreamNote> {
    custom_body::<StreamNote>(event)
}

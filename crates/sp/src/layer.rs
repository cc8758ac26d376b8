//! `sp`: SP as a kernel layer over a device (stack files, the simulator, `run --net`).
//!
//! Each channel has its own [`Endpoint`] keyed by [`NodeId`]: a message going down to
//! `Dest::Node(peer)` opens (once) an SP connection to that peer and is sent as one SP message
//! (priority 0); datagrams coming up from the device are SP packets, and whole messages leave
//! the top in order. The device's datagram carries exactly one SP packet, so the SP header is
//! the first thing above the device's own header (documented in `docs/WIRE.md`).
//!
//! Notices: a connection that fails (CONN/ACK/RETRANS/ECHO timers exhausted, refused, reset)
//! or that the peer closes with messages of ours unacknowledged raises `PeerUnreachable` for
//! its peer (`events::PEER_UNREACHABLE`), naming by their tags the messages the connection
//! reported dropped (never sent, or sent and not acknowledged: these may or may not have been
//! delivered); a refused message (too large, queue full) raises `SendRefused` with its tag.
//! The layer keeps each outgoing connection's tags from its oldest unacknowledged message on.
//! In RELIABLE mode (the default) the layer promises reliable FIFO delivery to the layers
//! above ([`Layer::delivery`]).
//!
//! Settling: those held tags are what the session reports as
//! [`unsettled`](Session::unsettled) — messages queued in a connection and not yet sent, or
//! sent and not yet acknowledged (in the other modes, not yet forgotten: a non-RELIABLE message
//! leaves once sent and its retransmission horizon has passed). A driver waits for them
//! before closing (a node's linger) and holds back new messages while too many are unsettled.
//! When the channel closes, each connection's held messages are reported as `SendAborted`
//! (`events::SEND_ABORTED`) naming their tags, as `reliable-fifo` does: the peer may or may
//! not have them, and they are not sent again (`sp.closed_pending` counts them).
//!
//! Counters: `sp.broadcast` (a broadcast: SP is point to point, dropped), `sp.refused`,
//! `sp.closed_pending` (messages unsettled when their channel closed, reported aborted),
//! `sp.unreachable` (with its reason: `sp.failed_connect`, `sp.failed_ack`,
//! `sp.failed_retransmit`, `sp.failed_echo`, `sp.failed_end`, `sp.failed_cntrl`, `sp.reset`,
//! `sp.rejected`), `sp.dropped` (messages a non-RELIABLE receiver gave up), `sp.bad_packet`
//! (datagrams the endpoint refused: truncated, bad TOTAL_LEN, type or checksum),
//! `sp.unknown_connection` (DEST_ID names no connection: answered with a reset),
//! `sp.wrong_peer` (DEST_ID's connection has another peer), and the connections' own:
//! `sp.inconsistent` (packets contradicting their connection: block length, TBLOCK, sequence
//! range, source id), `sp.duplicate` (blocks received twice), `sp.over_window` (blocks of a
//! peer that ignores the advertised window, refused), `sp.retransmit` (blocks sent again),
//! `sp.nack_sent`, `sp.fec_repair` (blocks rebuilt from parity), `sp.congestion_reduction`
//! (congestion window halved or dropped), `sp.ce_received` (data marked congestion
//! experienced), `sp.reordered` (NACKed blocks that turned up by themselves). An abusive or
//! broken peer shows in these (DESIGN.md §4.9).
//!
//! Memory: one endpoint per channel, one connection per peer and direction; each bounded by
//! [`Config`] (send buffer, receive window). A closed connection is forgotten once its events
//! are out; its counters stay in the totals.

use std::collections::{HashMap, VecDeque};

use viastack_kernel::event::{Body, Sendable, CHANNEL_CLOSE, INBOUND, SENDABLE, TIMER};
use viastack_kernel::{
    ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Instant, Layer, Message,
    NodeId, Session, Tag,
};
use viastack_protocols::events::{failure, PEER_UNREACHABLE, SEND_ABORTED, SEND_REFUSED};

use crate::connection::{Config, DropReason, Event as SpEvent, FailReason, Reliability};
use crate::endpoint::{ConnectionHandle, ConnectionTotals, Endpoint, EndpointStats};

/// The `sp` layer.
#[derive(Debug, Clone)]
pub struct SpLayer {
    name: String,
    config: Config,
}

impl SpLayer {
    /// An SP layer named `name` whose connections use `config`.
    pub fn new(name: impl Into<String>, config: Config) -> Self {
        SpLayer {
            name: name.into(),
            config,
        }
    }
}

impl Layer for SpLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            PEER_UNREACHABLE.id(),
            SEND_REFUSED.id(),
            SEND_ABORTED.id(),
        ]
    }
    /// RELIABLE connections deliver every message once and in order, or report it; the other
    /// modes may give messages up (seed 002 §3.2).
    fn delivery(&self, _below: Delivery) -> Delivery {
        if self.config.reliability == Reliability::Reliable {
            Delivery::RELIABLE_FIFO
        } else {
            Delivery::NONE
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(SpSession {
            config: self.config.clone(),
            channels: HashMap::new(),
            buf: Vec::new(),
        })
    }
}

/// The tags of one outgoing connection's messages not yet acknowledged, in send order (the
/// layer sends every message at priority 0, so messages take their numbers in send order).
#[derive(Debug, Default)]
struct Unacknowledged {
    /// The connection's peer.
    peer: NodeId,
    /// The number of the first message in `tags`.
    first: u64,
    tags: VecDeque<Tag>,
}

impl Unacknowledged {
    /// Forgets the messages numbered below `first`: acknowledged.
    fn acknowledged_below(&mut self, first: u64) {
        while self.first < first && self.tags.pop_front().is_some() {
            self.first += 1;
        }
    }

    /// The tag of message `seq`, if held.
    fn tag(&self, seq: u64) -> Option<Tag> {
        let i = seq.checked_sub(self.first)?;
        self.tags.get(usize::try_from(i).ok()?).copied()
    }
}

struct ChannelState {
    endpoint: Endpoint<NodeId>,
    outgoing: HashMap<NodeId, ConnectionHandle>,
    unacknowledged: HashMap<ConnectionHandle, Unacknowledged>,
    timer: Option<(viastack_kernel::TimerId, Instant)>,
    /// What the counters were last reported at.
    reported: (EndpointStats, ConnectionTotals),
}

impl ChannelState {
    /// Counts what the endpoint and its connections dropped, refused or repaired since the
    /// last report.
    fn report_counters(&mut self, ctx: &mut Context<'_>) {
        let e = self.endpoint.stats().clone();
        let c = self.endpoint.connection_totals();
        let (pe, pc) = &self.reported;
        for (name, now, before) in [
            ("bad_packet", e.bad_packets(), pe.bad_packets()),
            (
                "unknown_connection",
                e.unknown_connection,
                pe.unknown_connection,
            ),
            ("wrong_peer", e.wrong_peer, pe.wrong_peer),
            ("inconsistent", c.inconsistent, pc.inconsistent),
            ("duplicate", c.duplicates, pc.duplicates),
            ("over_window", c.over_window, pc.over_window),
            ("retransmit", c.retransmits, pc.retransmits),
            ("nack_sent", c.nacks_sent, pc.nacks_sent),
            ("fec_repair", c.fec_repairs, pc.fec_repairs),
            (
                "congestion_reduction",
                c.congestion_reductions,
                pc.congestion_reductions,
            ),
            ("ce_received", c.ce_received, pc.ce_received),
            ("reordered", c.reordered, pc.reordered),
        ] {
            if now > before {
                ctx.count_n(name, now - before);
            }
        }
        self.reported = (e, c);
    }
}

/// Session of [`SpLayer`].
pub struct SpSession {
    config: Config,
    channels: HashMap<ChannelId, ChannelState>,
    buf: Vec<u8>,
}

/// Room left in front of an SP packet for the headers below it (the device's tag).
const HEADROOM: usize = 32;

impl SpSession {
    fn state(&mut self, channel: ChannelId) -> &mut ChannelState {
        let config = self.config.clone();
        self.channels
            .entry(channel)
            .or_insert_with(|| ChannelState {
                endpoint: Endpoint::new(config, true),
                outgoing: HashMap::new(),
                unacknowledged: HashMap::new(),
                timer: None,
                reported: Default::default(),
            })
    }

    fn send(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let Dest::Node(peer) = s.dest else {
            ctx.count("broadcast");
            return;
        };
        let tag = s.tag;
        let data = std::mem::take(&mut s.message).into_vec();
        let now = ctx.now();
        let st = self.state(channel);
        let h = match st.outgoing.get(&peer) {
            Some(h) if st.endpoint.connection(*h).is_some_and(|c| !c.is_closed()) => *h,
            _ => match st.endpoint.connect(now, peer) {
                Some(h) => {
                    st.outgoing.insert(peer, h);
                    h
                }
                None => {
                    ctx.count("refused");
                    ctx.go(failure(&SEND_REFUSED, channel, peer, [tag]));
                    return;
                }
            },
        };
        let sent = st.endpoint.connection_mut(h).and_then(|c| {
            // A connection's first message finds none in flight or queued: it takes the
            // number `first_unacknowledged` gives, and the later ones follow in send order.
            let seq = c.first_unacknowledged();
            c.send_message(data, 0).ok().map(|()| seq)
        });
        match sent {
            Some(seq) => {
                let u = st
                    .unacknowledged
                    .entry(h)
                    .or_insert_with(|| Unacknowledged {
                        peer,
                        first: seq,
                        tags: VecDeque::new(),
                    });
                u.tags.push_back(tag);
            }
            None => {
                ctx.count("refused");
                ctx.go(failure(&SEND_REFUSED, channel, peer, [tag]));
            }
        }
        self.pump(channel, ctx);
    }

    fn receive(&mut self, event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let Some(s) = event.sendable_ref() else {
            return;
        };
        let now = ctx.now();
        self.state(channel)
            .endpoint
            .handle_datagram(now, s.source, s.message.as_slice());
        self.pump(channel, ctx);
    }

    /// Sends what the endpoint has ready, delivers what it completed, re-arms its timer.
    fn pump(&mut self, channel: ChannelId, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let Some(st) = self.channels.get_mut(&channel) else {
            return;
        };
        loop {
            self.buf.clear();
            let Some((to, _)) = st.endpoint.poll_transmit(now, &mut self.buf) else {
                break;
            };
            ctx.go(Event::sendable(
                SENDABLE.id(),
                Direction::Down,
                channel,
                Sendable::new(
                    ctx.node(),
                    Dest::Node(to),
                    Message::with_headroom(HEADROOM, &self.buf),
                ),
            ));
        }
        let mut failed: Vec<Tag> = Vec::new();
        while let Some(ev) = st.endpoint.poll_event() {
            match ev.event {
                SpEvent::Message { data, .. } => ctx.go(Event::sendable(
                    SENDABLE.id(),
                    Direction::Up,
                    channel,
                    Sendable::new(ev.peer, Dest::Node(ctx.node()), Message::from_wire(data)),
                )),
                SpEvent::Failed { .. } | SpEvent::Rejected => {
                    ctx.count("unreachable");
                    ctx.count(match ev.event {
                        SpEvent::Failed { reason } => match reason {
                            FailReason::ConnectTimeout => "failed_connect",
                            FailReason::EndTimeout => "failed_end",
                            FailReason::AckTimeout => "failed_ack",
                            FailReason::RetransmitExhausted => "failed_retransmit",
                            FailReason::EchoTimeout => "failed_echo",
                            FailReason::CntrlTimeout => "failed_cntrl",
                            FailReason::Reset => "reset",
                        },
                        _ => "rejected",
                    });
                    if st.outgoing.get(&ev.peer) == Some(&ev.handle) {
                        st.outgoing.remove(&ev.peer);
                    }
                    st.unacknowledged.remove(&ev.handle);
                    let tags = std::mem::take(&mut failed);
                    ctx.go(failure(&PEER_UNREACHABLE, channel, ev.peer, tags));
                }
                SpEvent::Closed { .. } => {
                    if st.outgoing.get(&ev.peer) == Some(&ev.handle) {
                        st.outgoing.remove(&ev.peer);
                    }
                    st.unacknowledged.remove(&ev.handle);
                    if !failed.is_empty() {
                        // The peer closed with messages of ours it had not acknowledged.
                        let tags = std::mem::take(&mut failed);
                        ctx.go(failure(&PEER_UNREACHABLE, channel, ev.peer, tags));
                    }
                }
                SpEvent::Dropped {
                    seq,
                    reason: DropReason::NotSent | DropReason::Unacknowledged,
                } => {
                    // One of ours, reported just before the connection's end.
                    if let Some(t) = st.unacknowledged.get(&ev.handle).and_then(|u| u.tag(seq)) {
                        failed.push(t);
                    }
                }
                SpEvent::Dropped { .. } => ctx.count("dropped"),
                _ => {}
            }
        }
        for (h, u) in &mut st.unacknowledged {
            if let Some(c) = st.endpoint.connection(*h) {
                u.acknowledged_below(c.first_unacknowledged());
            }
        }
        while st.endpoint.accept().is_some() {}
        // Events may have produced answers (a reopened window).
        loop {
            self.buf.clear();
            let Some((to, _)) = st.endpoint.poll_transmit(now, &mut self.buf) else {
                break;
            };
            ctx.go(Event::sendable(
                SENDABLE.id(),
                Direction::Down,
                channel,
                Sendable::new(
                    ctx.node(),
                    Dest::Node(to),
                    Message::with_headroom(HEADROOM, &self.buf),
                ),
            ));
        }
        st.report_counters(ctx);
        let next = st.endpoint.poll_timeout();
        if st.timer.map(|(_, at)| at) != next {
            if let Some((id, _)) = st.timer.take() {
                ctx.cancel_timer(id);
            }
            if let Some(at) = next {
                st.timer = Some((ctx.set_timer_at(at, u64::from(channel.0)), at));
            }
        }
    }
}

impl Session for SpSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == TIMER.id() {
            if let Body::Timer(t) = &event.body {
                let channel = ChannelId(t.token as u32);
                let now = ctx.now();
                if let Some(st) = self.channels.get_mut(&channel) {
                    if st.timer.is_some_and(|(id, _)| id == t.id) {
                        st.timer = None;
                    }
                    st.endpoint.handle_timeout(now);
                }
                self.pump(channel, ctx);
            }
            return;
        }
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            if let Some(st) = self.channels.remove(&channel) {
                if let Some((id, _)) = st.timer {
                    ctx.cancel_timer(id);
                }
                // What the channel still holds is reported, never dropped silently: the peer
                // may or may not have it (as `reliable-fifo` does on close). Connections in
                // handle order, so the notices come out the same on every run.
                let mut held: Vec<_> = st
                    .unacknowledged
                    .into_iter()
                    .filter(|(_, u)| !u.tags.is_empty())
                    .collect();
                held.sort_unstable_by_key(|(h, _)| *h);
                let mut pending = 0;
                for (_, u) in held {
                    pending += u.tags.len();
                    ctx.go(failure(&SEND_ABORTED, channel, u.peer, u.tags));
                }
                ctx.count_n("closed_pending", pending as u64);
            }
            ctx.go(event);
            return;
        }
        if event.sendable_ref().is_none() {
            ctx.go(event);
            return;
        }
        match event.dir() {
            Direction::Down => self.send(event, ctx),
            Direction::Up => self.receive(event, ctx),
        }
    }

    /// Messages of every outgoing connection queued or in flight, not yet acknowledged (see
    /// the module documentation, "Settling").
    fn unsettled(&self) -> usize {
        self.channels
            .values()
            .flat_map(|st| st.unacknowledged.values())
            .map(|u| u.tags.len())
            .sum()
    }
}

//! `reliable-fifo`: point-to-point reliable FIFO delivery per (channel, peer) over a device
//! that loses, duplicates, reorders and delays datagrams. Every message is delivered exactly
//! once and in send order, or the sender's application is told it will not be
//! (`PeerUnreachable`, `SendRefused`): nothing is lost silently (DESIGN.md §4.7).
//!
//! # Mechanisms
//!
//! - **Sequence numbers** per (channel, destination), 64-bit (never wrap), in a stream
//!   identified by a random non-zero **epoch**.
//! - **Cumulative ACKs with SACK blocks** (RFC 2018): the receiver reports the next sequence
//!   number it expects and up to 4 runs it holds above it; the sender never retransmits a
//!   SACKed segment except after a timeout, and retransmits at once the holes below the highest
//!   SACKed one (the idea of RFC 6675).
//! - **NACKs**: a segment that opens a new gap is answered at once with the list of holes, so
//!   a loss is usually repaired one round trip after it is noticed, not after a timeout.
//!   A hole is retransmitted again only if its last copy left more than one SRTT ago.
//! - **Retransmission timer** from measured RTT ([`rtt`]: RFC 6298, Jacobson/Karels, min/max
//!   RTO, exponential backoff), sampled under **Karn's rule** (only segments sent once). On
//!   expiry the earliest unacknowledged segment is retransmitted, the RTO doubled, and the rest
//!   of the window is resent as ACKs come back (go-back-N paced from one segment, doubling —
//!   see [`sender`]).
//! - **Sliding window with flow control**: at most `min(send_window, advertised window)`
//!   segments beyond the cumulative ACK are in flight; the receiver advertises
//!   `receive_window` segments, which it is able to buffer.
//! - **Duplicate suppression and in-order delivery** through a reorder ring bounded by
//!   `receive_window` slots and `reorder_bytes` bytes ([`receiver`]).
//! - **Delayed ACKs**: every `ack_every` segments holding `ack_bytes` bytes, or after
//!   `ack_delay`; immediate for duplicates, out-of-order segments and gap fills (RFC 5681
//!   §4.2). **Piggybacking**: a DATA segment leaving for a peer carries the ACK due to it
//!   (an ACK+DATA segment), so request/response traffic sends no ACK of its own.
//! - **Closing**: when a channel closes, what it still holds to send is reported
//!   ([`SEND_ABORTED`], counted `closed_pending`), and what it received but has not yet
//!   acknowledged is acknowledged at once (as TCP's FIN carries its ACK), so a peer whose
//!   last message arrived just before the close does not retransmit it into the void.
//! - **Giving up**: after `max_retries` timeouts without the cumulative ACK advancing, the
//!   session sends a [`PEER_UNREACHABLE`] notice up for that (channel, peer), drops the
//!   peer's pending messages (counted `reliable-fifo.dropped_unreachable`) and resets the send
//!   side with a new epoch: later messages to that peer start a fresh stream, so a peer that
//!   comes back is heard again. The receive side is kept (resetting it could deliver a
//!   message twice).
//! - **Giving up on suspicion** (`give_up_on_suspect`, off by default): a `Suspect` notice
//!   for a peer passing up this channel from a failure detector below gives up on that peer
//!   at once, exactly as `max_retries` would (`given_up_on_suspect`), so a channel that shares
//!   its detector with others learns of a crash when they do, not minutes later.
//! - **Full send buffer**: a message to a peer that already has `send_buffer` messages queued
//!   or in flight is refused: dropped, counted (`refused`) and reported with a
//!   [`SEND_REFUSED`] notice for that peer. `PeerUnreachable` is not reused: the peer may be
//!   perfectly alive, only slower than the application.
//! - **Incarnations: restarts on either side.** Each receiving state (per channel and peer)
//!   draws a random non-zero **incarnation**, carried by its ACKs; a DATA segment names the
//!   incarnation it is addressed to (`to`, 0 while the sender knows none). A receiver delivers
//!   only segments addressed to itself; any other is answered with an *introduction* (an ACK
//!   of that stream acknowledging nothing, counted `unintroduced` / `other_incarnation`) and
//!   never delivered, because what it carries may already have been delivered by a previous
//!   incarnation. A sender that knows no incarnation keeps at most [`sender::PROBES`] segments
//!   in flight; the introduction makes it resend them addressed (`introduced`). A sender that
//!   hears a *different* incarnation knows the peer restarted (`peer_restarts`): the messages
//!   it had transmitted may or may not have been delivered by the old incarnation, so, as a
//!   TCP reset does, it reports them to the application with a [`PEER_RESTARTED`] notice
//!   (`dropped_restarted`) instead of resending them blindly, and moves the untransmitted
//!   ones to a new epoch addressed to the new incarnation. A restarted *sender* starts a new
//!   epoch from 0: the receiver retires the old one (`peer_restarted`, buffered segments
//!   counted `reset_dropped`; DATA of the last 4 retired epochs is `stale_epoch`). A DATA
//!   segment claiming a stream start (`first`) its receiver never acknowledged is
//!   `inconsistent` and changes nothing. A new epoch from a peer is also a hint that it
//!   restarted: if nothing is held for it, the send side starts a new stream that knows no
//!   incarnation (`readdressed`), so its next messages are introduced, not reported. Notices carry the [`Tag`](viastack_kernel::Tag)s of the messages they
//!   concern. No handshake is needed: the first exchange introduces the peers.
//! - `Dest::Broadcast` is out of scope: counted (`broadcast`) and dropped.
//!
//! # Wire format (network byte order)
//!
//! Every segment starts with a type byte: version (high nibble, 2) and kind (low nibble).
//!
//! DATA (`0x21`), 25 bytes, followed by the message:
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 1 | type `0x21` |
//! | 1 | 4 | epoch: the sender's stream incarnation for (channel, destination), non-zero |
//! | 5 | 4 | to: the receiver incarnation addressed, 0 while the sender knows none |
//! | 9 | 8 | seq: sequence number, from 0 in each epoch |
//! | 17 | 8 | first: the sender's oldest unacknowledged sequence number, ≤ seq |
//!
//! ACK (`0x22`) and NACK (`0x23`), 22 + 8·n bytes, nothing after; ACK+DATA (`0x24`): an ACK
//! whose type byte is `0x24`, followed by a whole DATA segment (the ACK is for the stream the
//! receiver of this datagram sends; the DATA belongs to the sender's stream):
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 1 | type `0x22` (ACK) or `0x23` (NACK) |
//! | 1 | 4 | epoch of the acknowledged stream (echoed) |
//! | 5 | 4 | incarnation of the acknowledging receiver, non-zero |
//! | 9 | 8 | cum: every sequence number below it was received |
//! | 17 | 4 | window: segments from cum on the receiver accepts |
//! | 21 | 1 | n: ranges that follow, ≤ 8 (a sender writes ≤ 4) |
//! | 22 + 8i | 4 | range i: offset of its first sequence number from cum |
//! | 26 + 8i | 4 | range i: length (≥ 1) |
//!
//! An ACK's ranges are runs received above cum (SACK blocks: offset ≥ 1); a NACK's are runs
//! missing from cum on. Ranges are ascending and separated by at least one sequence number.
//!
//! Receiving, these are dropped and counted: `truncated` (short header), `unknown_type`,
//! `malformed` (epoch 0, first > seq, an ACK's incarnation 0, more than 8 ranges, an empty, overflowing, unordered or
//! overlapping range, trailing bytes after an ACK), `stale_epoch` (DATA from a retired epoch),
//! `duplicate`, `beyond_window`, `reorder_full` (reorder ring out of bytes), `stale_ack` (for
//! another epoch), `bad_ack` (acknowledges what was never sent), `old_ack` (overtaken).
//! Other counters: `retransmits` (timeouts), `fast_retransmits` (NACK/SACK repairs),
//! `acks_sent`, `nacks_sent`, `acks_piggybacked`, `unreachable`, `refused`, `broadcast`,
//! `closed_pending`, and for incarnations `unintroduced`, `other_incarnation`, `introductions`,
//! `introduced`, `inconsistent`, `peer_restarts`, `dropped_restarted`, `peer_restarted`,
//! `reset_dropped`, `readdressed`, `acks_at_close` (ACKs owed, sent when the channel closes),
//! `given_up_on_suspect`.
//!
//! # Memory
//!
//! Per (channel, peer): at most `send_buffer` messages in the send ring and `receive_window`
//! slots holding at most `reorder_bytes` bytes in the reorder ring, whatever arrives. Peers
//! are bounded by the channels times the nodes the device can name.
//!
//! # Timers
//!
//! Two per peer, as data ([`Timer`], encoded with the peer in the token): the retransmission
//! timer and the delayed-ACK timer. Each peer keeps its deadlines; the kernel timer is only a
//! wake-up: when one fires early, for a peer that no longer exists, or after its deadline was
//! cleared, it is re-armed or ignored, so a stale timer is harmless.

pub mod receiver;
pub mod rtt;
pub mod sender;
pub mod wire;

use rand::RngCore;

use fnv::FnvHashMap;
use viastack_kernel::event::{CHANNEL_CLOSE, FLUSH, INBOUND, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Instant,
    Layer, NodeId, Session, TimerId,
};

use crate::events::{
    failure, notice_peer, PEER_RESTARTED, PEER_UNREACHABLE, SEND_ABORTED, SEND_REFUSED, SUSPECT,
};
use receiver::{Receiver, Reply};
use sender::{AckOutcome, Sender};
use wire::Packet;

/// Parameters of [`ReliableFifo`] (the defaults cite their sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Messages queued or in flight per peer before new ones are refused. Default 1024:
    /// 1.4 MB at the fragment layer's default MTU, 22 messages of 64 KiB.
    pub send_buffer: usize,
    /// Segments in flight per peer at most. Default 128 (≈ 180 KB at a 1400-byte MTU, about
    /// Linux's default TCP receive buffer of 128 KiB, `tcp_rmem`).
    pub send_window: u32,
    /// Segments the receiver accepts beyond its cumulative ACK (advertised). Default 128, as
    /// `send_window`.
    pub receive_window: u32,
    /// Bytes the reorder ring may hold per peer. Default 4 MiB.
    pub reorder_bytes: usize,
    /// RTO before the first RTT sample. Default 1 s (RFC 6298 §2.1).
    pub rto_initial: Duration,
    /// Smallest RTO. Default 200 ms (Linux `TCP_RTO_MIN`; RFC 6298 §2.4 recommends 1 s for
    /// the Internet, but allows less).
    pub rto_min: Duration,
    /// Largest RTO. Default 60 s (RFC 6298 §2.5).
    pub rto_max: Duration,
    /// Timeouts without progress before the peer is reported unreachable. Default 15 (Linux
    /// `tcp_retries2`, RFC 1122 §4.2.3.5's R2).
    pub max_retries: u32,
    /// In-order segments acknowledged at once. Default 2 (RFC 5681 §4.2, RFC 1122 §4.2.3.2).
    pub ack_every: u32,
    /// ... once they also hold this many bytes. Default 2,944: two full-sized segments (RFC
    /// 5681 §4.2 "at least every second full-sized segment"; 1,472 bytes of UDP payload on a
    /// 1,500-byte MTU). Smaller segments wait for `ack_delay` or a DATA segment to carry the
    /// ACK, up to 8 × `ack_every` of them.
    pub ack_bytes: usize,
    /// Longest delay of an ACK. Default 40 ms (Linux `TCP_DELACK_MIN`; RFC 5681 §4.2: under
    /// 500 ms).
    pub ack_delay: Duration,
    /// Give up on a peer as soon as a failure detector below reports it `Suspect` on this
    /// channel, instead of after `max_retries` timeouts. Default off: the reliable layer alone
    /// decides, as TCP does.
    pub give_up_on_suspect: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            send_buffer: 1024,
            send_window: 128,
            receive_window: 128,
            reorder_bytes: 4 << 20,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            max_retries: 15,
            ack_every: 2,
            ack_bytes: 2 * 1472,
            ack_delay: Duration::from_millis(40),
            give_up_on_suspect: false,
        }
    }
}

/// The `reliable-fifo` layer.
#[derive(Debug, Clone)]
pub struct ReliableFifo {
    name: String,
    config: Config,
}

impl ReliableFifo {
    /// A reliable-fifo layer named `name`.
    pub fn new(name: impl Into<String>, mut config: Config) -> Self {
        config.send_window = config.send_window.max(1);
        config.receive_window = config.receive_window.max(1);
        config.send_buffer = config.send_buffer.max(1);
        config.ack_every = config.ack_every.max(1);
        ReliableFifo {
            name: name.into(),
            config,
        }
    }
}

impl Layer for ReliableFifo {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        let mut accepts = vec![SENDABLE.id(), CHANNEL_CLOSE.id()];
        if self.config.give_up_on_suspect {
            accepts.push(SUSPECT.id());
        }
        accepts
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// ACKs and NACKs (sendables), and the notices.
    fn provides(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            PEER_UNREACHABLE.id(),
            SEND_REFUSED.id(),
            PEER_RESTARTED.id(),
            SEND_ABORTED.id(),
        ]
    }
    /// Whatever the path below loses, duplicates or reorders: exactly once, in order, or
    /// reported.
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::RELIABLE_FIFO
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(ReliableSession::new(self.config))
    }
}

/// Which (channel, peer) a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    pub channel: ChannelId,
    pub peer: NodeId,
}

/// The session's timers, encoded in the kernel timer's token with the peer (the channel is
/// the timer's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Retransmission timer of the stream to a peer.
    Retransmit(NodeId),
    /// Delayed ACK to a peer.
    Ack(NodeId),
}

impl Timer {
    /// The token.
    pub fn encode(self) -> u64 {
        match self {
            Timer::Retransmit(n) => 1 << 32 | u64::from(n.0),
            Timer::Ack(n) => 2 << 32 | u64::from(n.0),
        }
    }

    /// The timer a token stands for (None for a token this session never made).
    pub fn decode(token: u64) -> Option<Timer> {
        let node = NodeId(token as u32);
        match token >> 32 {
            1 => Some(Timer::Retransmit(node)),
            2 => Some(Timer::Ack(node)),
            _ => None,
        }
    }
}

/// Everything about one (channel, peer).
#[derive(Debug)]
struct Peer {
    tx: Sender,
    rx: Receiver,
    rto_timer: Option<(TimerId, Instant)>,
    ack_timer: Option<(TimerId, Instant)>,
}

/// Session of [`ReliableFifo`].
#[derive(Debug)]
pub struct ReliableSession {
    config: Config,
    peers: FnvHashMap<(ChannelId, NodeId), Peer>,
    /// Peers owed an ACK at the next `Flush`, per channel.
    acks_owed: Vec<(ChannelId, NodeId)>,
}

/// Arms `slot` for `deadline` unless a timer due no later is pending.
fn arm(
    slot: &mut Option<(TimerId, Instant)>,
    deadline: Instant,
    token: u64,
    ctx: &mut Context<'_>,
) {
    match *slot {
        Some((_, at)) if at <= deadline => {}
        _ => {
            if let Some((id, _)) = slot.take() {
                ctx.cancel_timer(id);
            }
            *slot = Some((ctx.set_timer_at(deadline, token), deadline));
        }
    }
}

/// A fresh non-zero epoch, other than `old`, from the kernel's generator and the time (a
/// restarted node's generator starts over; its clock does not, in a simulation).
fn draw_epoch(old: u32, ctx: &mut Context<'_>) -> u32 {
    loop {
        let x = ctx.rng().next_u64() ^ ctx.now().as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let e = (x ^ (x >> 32)) as u32;
        if e != 0 && e != old {
            return e;
        }
    }
}

impl ReliableSession {
    /// A session with `config`.
    pub fn new(config: Config) -> Self {
        ReliableSession {
            config,
            peers: FnvHashMap::default(),
            acks_owed: Vec::new(),
        }
    }

    /// Messages held for `peer` on `channel` (queued or unacknowledged).
    pub fn pending(&self, channel: ChannelId, peer: NodeId) -> usize {
        self.peers.get(&(channel, peer)).map_or(0, |p| p.tx.len())
    }

    /// Bytes buffered out of order from `peer` on `channel`.
    pub fn reorder_bytes(&self, channel: ChannelId, peer: NodeId) -> usize {
        self.peers
            .get(&(channel, peer))
            .map_or(0, |p| p.rx.buffered_bytes())
    }

    /// Slots of the reorder ring for `peer` on `channel` (at most `receive_window`).
    pub fn reorder_slots(&self, channel: ChannelId, peer: NodeId) -> usize {
        self.peers
            .get(&(channel, peer))
            .map_or(0, |p| p.rx.buffered_slots())
    }

    /// The smoothed RTT to `peer` on `channel`, once measured.
    pub fn srtt(&self, channel: ChannelId, peer: NodeId) -> Option<Duration> {
        self.peers
            .get(&(channel, peer))
            .and_then(|p| p.tx.rtt().srtt())
    }

    fn peer<'a>(
        peers: &'a mut FnvHashMap<(ChannelId, NodeId), Peer>,
        cfg: &Config,
        link: Link,
        ctx: &mut Context<'_>,
    ) -> &'a mut Peer {
        peers
            .entry((link.channel, link.peer))
            .or_insert_with(|| Peer {
                tx: Sender::new(0, 0, cfg),
                rx: Receiver::new(draw_epoch(0, ctx)),
                rto_timer: None,
                ack_timer: None,
            })
    }

    fn send(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let ty = event.ty();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let Dest::Node(peer) = s.dest else {
            ctx.count("broadcast");
            return;
        };
        let link = Link { channel, peer };
        let cfg = self.config;
        let p = Self::peer(&mut self.peers, &cfg, link, ctx);
        if p.tx.len() >= cfg.send_buffer {
            ctx.count("refused");
            ctx.go(failure(&SEND_REFUSED, channel, peer, [s.tag]));
            return;
        }
        if p.tx.epoch == 0 {
            p.tx.epoch = draw_epoch(0, ctx);
        }
        p.tx.push(ty, s.tag, std::mem::take(&mut s.message));
        p.tx.pump(&cfg, link, &mut p.rx, ctx);
        Self::arm_rto(p, link, ctx);
    }

    fn arm_rto(p: &mut Peer, link: Link, ctx: &mut Context<'_>) {
        if let Some(d) = p.tx.rto_deadline {
            arm(
                &mut p.rto_timer,
                d,
                Timer::Retransmit(link.peer).encode(),
                ctx,
            );
        }
    }

    fn receive(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let packet = match Packet::parse(&mut s.message) {
            Ok(p) => p,
            Err(e) => {
                ctx.count(e.counter());
                return;
            }
        };
        let link = Link {
            channel,
            peer: s.source,
        };
        let cfg = self.config;
        let p = Self::peer(&mut self.peers, &cfg, link, ctx);
        let (ack, data) = match packet {
            Packet::Data(d) => (None, Some(d)),
            Packet::Ack(ack) => (Some(ack), None),
            Packet::AckData(ack, d) => (Some(ack), Some(d)),
        };
        if let Some(ack) = ack {
            if let AckOutcome::PeerRestarted { incarnation } =
                p.tx.on_ack(&ack, &cfg, link, &mut p.rx, ctx)
            {
                Self::restart_stream(p, incarnation, &cfg, link, ctx);
            }
            Self::arm_rto(p, link, ctx);
        }
        if let Some(d) = data {
            Self::on_data(p, d, event, &cfg, link, &mut self.acks_owed, ctx);
        }
    }

    /// The peer answered as a new incarnation: what was transmitted to the previous one is
    /// reported (it may or may not have been delivered) and not sent again; what never left
    /// goes out on a new stream, addressed to the new incarnation.
    fn restart_stream(
        p: &mut Peer,
        incarnation: u32,
        cfg: &Config,
        link: Link,
        ctx: &mut Context<'_>,
    ) {
        let epoch = draw_epoch(p.tx.epoch, ctx);
        let old = std::mem::replace(&mut p.tx, Sender::new(epoch, incarnation, cfg));
        let (failed, next) = old.restart(epoch, incarnation, cfg);
        p.tx = next;
        ctx.count("peer_restarts");
        ctx.count_n("dropped_restarted", failed.len() as u64);
        if let Some((id, _)) = p.rto_timer.take() {
            ctx.cancel_timer(id);
        }
        ctx.go(failure(&PEER_RESTARTED, link.channel, link.peer, failed));
        p.tx.pump(cfg, link, &mut p.rx, ctx);
    }

    /// The peer's sender started a new stream: most likely the peer restarted, and its new
    /// incarnation will not accept what this side addresses to the old one. An idle send side
    /// forgets the incarnation and starts a new stream, so its next messages introduce
    /// themselves instead of reaching a stranger and coming back as `PeerRestarted`. (A peer
    /// that only reset its stream answers with the same incarnation: nothing is lost either
    /// way. A busy send side keeps its stream: the ACKs will tell.)
    fn readdress(p: &mut Peer, cfg: &Config, ctx: &mut Context<'_>) {
        if p.tx.len() == 0 && p.tx.peer_incarnation() != 0 {
            let epoch = draw_epoch(p.tx.epoch, ctx);
            p.tx = Sender::new(epoch, 0, cfg);
            ctx.count("readdressed");
        }
    }

    fn on_data(
        p: &mut Peer,
        d: wire::Data,
        event: Event,
        cfg: &Config,
        link: Link,
        owed: &mut Vec<(ChannelId, NodeId)>,
        ctx: &mut Context<'_>,
    ) {
        let heard = p.rx.epoch();
        let reply = p.rx.on_data(d, event, cfg, ctx);
        if heard != 0 && p.rx.epoch() != heard {
            Self::readdress(p, cfg, ctx);
        }
        match reply {
            Reply::Introduce { epoch, cum } => p.rx.introduce(epoch, cum, cfg, link, ctx),
            Reply::Later => {
                if let Some(d) = p.rx.ack_deadline {
                    arm(&mut p.ack_timer, d, Timer::Ack(link.peer).encode(), ctx);
                }
            }
            Reply::Ack => {
                // Owed at the end of this input: one ACK for everything it brought.
                if !p.rx.ack_due {
                    p.rx.ack_due = true;
                    owed.push((link.channel, link.peer));
                    ctx.request_flush();
                }
            }
            Reply::Nack => p.rx.reply(true, cfg, link, ctx),
        }
    }

    /// The kernel's `Flush` on `channel`: sends the ACKs owed (unless DATA carried them).
    fn flush(&mut self, channel: ChannelId, ctx: &mut Context<'_>) {
        let cfg = self.config;
        let mut i = 0;
        while i < self.acks_owed.len() {
            let (c, peer) = self.acks_owed[i];
            if c != channel {
                i += 1;
                continue;
            }
            self.acks_owed.swap_remove(i);
            if let Some(p) = self.peers.get_mut(&(c, peer)) {
                if p.rx.ack_due {
                    p.rx.reply(false, &cfg, Link { channel, peer }, ctx);
                }
            }
        }
    }

    fn timer(&mut self, channel: ChannelId, fired: TimerId, token: u64, ctx: &mut Context<'_>) {
        let Some(timer) = Timer::decode(token) else {
            return;
        };
        let (Timer::Retransmit(peer) | Timer::Ack(peer)) = timer;
        let link = Link { channel, peer };
        let cfg = self.config;
        let Some(p) = self.peers.get_mut(&(channel, peer)) else {
            return; // the peer's state is gone: a stale timer
        };
        let now = ctx.now();
        match timer {
            Timer::Ack(_) => {
                if p.ack_timer.is_some_and(|(id, _)| id == fired) {
                    p.ack_timer = None;
                }
                match p.rx.ack_deadline {
                    Some(d) if d <= now => p.rx.reply(false, &cfg, link, ctx),
                    Some(d) => arm(&mut p.ack_timer, d, token, ctx),
                    None => {}
                }
            }
            Timer::Retransmit(_) => {
                if p.rto_timer.is_some_and(|(id, _)| id == fired) {
                    p.rto_timer = None;
                }
                match p.tx.rto_deadline {
                    Some(d) if d <= now => {
                        if p.tx.on_timeout(&cfg, link, &mut p.rx, ctx) {
                            Self::arm_rto(p, link, ctx);
                        } else {
                            self.give_up(link, ctx);
                        }
                    }
                    Some(d) => arm(&mut p.rto_timer, d, token, ctx),
                    None => {}
                }
            }
        }
    }

    /// `max_retries` timeouts without progress: report, drop the pending messages, reset the
    /// send side under a new epoch.
    fn give_up(&mut self, link: Link, ctx: &mut Context<'_>) {
        let cfg = self.config;
        let Some(p) = self.peers.get_mut(&(link.channel, link.peer)) else {
            return;
        };
        ctx.count("unreachable");
        ctx.count_n("dropped_unreachable", p.tx.len() as u64);
        let tags: Vec<_> = p.tx.tags().collect();
        let epoch = draw_epoch(p.tx.epoch, ctx);
        // The receiver's incarnation is kept: if it restarted meanwhile, it will say so.
        p.tx = Sender::new(epoch, p.tx.peer_incarnation(), &cfg);
        if let Some((id, _)) = p.rto_timer.take() {
            ctx.cancel_timer(id);
        }
        ctx.go(failure(&PEER_UNREACHABLE, link.channel, link.peer, tags));
    }
}

impl Session for ReliableSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == TIMER.id() {
            if let Body::Timer(t) = event.body {
                self.timer(event.channel(), t.id, t.token, ctx);
            }
            return;
        }
        if event.ty() == FLUSH.id() {
            self.flush(event.channel(), ctx);
            return;
        }
        if event.ty() == SUSPECT.id() {
            // Only accepted with `give_up_on_suspect`: the detector below speaks for the peer.
            if let Some(peer) = notice_peer(&event) {
                let link = Link {
                    channel: event.channel(),
                    peer,
                };
                if self
                    .peers
                    .get(&(link.channel, peer))
                    .is_some_and(|p| p.tx.len() > 0)
                {
                    ctx.count("given_up_on_suspect");
                    self.give_up(link, ctx);
                }
            }
            ctx.go(event);
            return;
        }
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            self.acks_owed.retain(|(c, _)| *c != channel);
            // What arrived and waits for a delayed ACK is acknowledged now, as TCP's FIN
            // carries its ACK: the peer's last messages before this close would otherwise
            // stay unacknowledged, and the peer would retransmit them into the void and linger
            // (a request answered just before the answering node closes).
            let cfg = self.config;
            for ((c, peer), p) in &mut self.peers {
                if *c == channel && p.rx.owes_ack() {
                    p.rx.reply(
                        false,
                        &cfg,
                        Link {
                            channel,
                            peer: *peer,
                        },
                        ctx,
                    );
                    ctx.count("acks_at_close");
                }
            }
            // What the channel still holds is reported, never dropped silently: the peer may
            // or may not have it, as with a TCP reset.
            let mut pending = 0;
            for ((c, peer), p) in &self.peers {
                if *c == channel && p.tx.len() > 0 {
                    pending += p.tx.len();
                    ctx.go(failure(&SEND_ABORTED, channel, *peer, p.tx.tags()));
                }
            }
            ctx.count_n("closed_pending", pending as u64);
            self.peers.retain(|(c, _), _| *c != channel);
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

    /// Messages queued or in flight to any peer, not yet acknowledged.
    fn unsettled(&self) -> usize {
        self.peers.values().map(|p| p.tx.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_tokens_roundtrip_and_unknown_ones_are_ignored() {
        for t in [
            Timer::Retransmit(NodeId(0)),
            Timer::Ack(NodeId(u32::MAX)),
            Timer::Retransmit(NodeId(77)),
        ] {
            assert_eq!(Timer::decode(t.encode()), Some(t));
        }
        assert_eq!(Timer::decode(0), None);
        assert_eq!(Timer::decode(9 << 32), None);
    }
}

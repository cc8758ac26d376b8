//! `vsync`: group membership with a coordinator, reliable group multicast with NAKs and
//! stability-based garbage collection, and virtual synchrony by a flush at every view change —
//! the heavy-weight group of seed 001 §2.1 (the virtual-synchrony group that light-weight
//! groups map onto), as one sans-IO kernel layer above a shared failure detector.
//!
//! # Model
//!
//! A *member* is one incarnation of a node ([`Member`]: node + random epoch drawn at start; a
//! restarted node is a new member). A *view* is a list of members, ascending by node, with an
//! id ([`ViewId`]: a counter and the coordinator that proposed it). Every member starts alone
//! in its own view (counter 0) and is merged into the others' view.
//!
//! # Membership
//!
//! The *acting coordinator* of a view is its first member that is neither confirmed suspected,
//! nor left, nor superseded (a newer epoch of its node was heard), nor known to have departed
//! to another view. On each `tick` it compares the view with what it should be: the view minus
//! those members, plus the members of *foreign views* announced by coordinators whose node is
//! higher than its own (merge after a partition heals: coordinators send [`Pdu::Beacon`]s every
//! `beacon` to the nodes outside their view, and the lowest coordinator merges the others).
//!
//! A suspicion comes from the failure detector below (`Suspect`/`Alive` notices, normally a
//! `heartbeat` session shared by every channel) and is **confirmed** only after it has lasted
//! `confirm` without an `Alive`: a member is excluded on a confirmed suspicion only.
//!
//! A member that has *gone elsewhere* is left out too: silent in this view (no status) for
//! `2 × flush_timeout` while its node was seen in another view since — it gossiped that view's
//! status (it gave up a flush and went back), or another coordinator's beacon listed it (it
//! went on without this member). Silence alone is not enough: a member that did not run for a
//! while (stopped, starved of CPU) is the failure detector's to judge with its own timeout
//! (issue 18: a member resumed 1 s after the others was excluded after 800 ms although the
//! detector waited 2 s).
//!
//! # View change: the flush (virtual synchrony)
//!
//! 1. The coordinator sends `Flush(proposal, members)` with a counter above every counter it
//!    has seen; a member accepts a proposal whose counter is above everything it accepted
//!    (else it answers `FlushNo` with the counter to beat): it stops sending (application
//!    messages wait in a bounded queue), stops delivering, and answers `FlushOk` with its
//!    current view and its *digest* (per sender, the messages received without a gap).
//! 2. With every `FlushOk` in, the coordinator computes, per old view, the *cut* — per sender
//!    the highest number any surviving member of that old view holds, and who holds it — and
//!    sends `NewView(view, members, cuts)`. Members that do not answer within
//!    `flush_timeout` are left out of the next proposal.
//! 3. A member fetches what it lacks up to the cut of its old view (NAKs to the holders),
//!    delivers it, discards the rest, and installs the view: a [`VIEW`] notice goes up *after*
//!    the old view's last message. Members that go from view V to view W together therefore
//!    deliver the same messages in V (a member delivered at most its digest, the cut is the
//!    maximum of the digests, and every survivor delivers up to the cut).
//!
//! With every `FlushOk` in, a coordinator whose proposal left out a member of the current
//! view on a suspicion since withdrawn (an `Alive` came: its heartbeats were only lost) does
//! not install the view without it but proposes anew with it (counted `vsync.flush_renewed`):
//! the member would otherwise leave the view for nothing and come back by a merge ≈ 1 s
//! later (issue 18: under 20 % loss, ten heartbeats lost in a row on one link excluded a live
//! member 4 s after the last fault, past the liveness bound). A member suspected again during
//! the new flush is left out of it as before.
//!
//! A member stuck in a flush for `2 × flush_timeout` returns to its old view (its coordinator
//! died): it may then not install that proposal any more, which is safe — only members that
//! install the same two views in a row are bound by virtual synchrony.
//!
//! # Reliable multicast within a view
//!
//! Each member numbers its messages in the view from 1, sends one copy to every other member,
//! and delivers its own at once (self-delivery). Receivers deliver each sender's messages in
//! order. Every `tick` each member gossips a `Status` (its digest) to the view, and also
//! after every `capacity / 4` messages it accepted from others (so a sender faster than the
//! tick is not refused while its buffer waits for the tick to become stable); a member that
//! learns that someone holds messages it lacks sends a `Nak` to the sender — or to any holder
//! if the sender is suspected. A message is *stable* once every member's status covers it,
//! and is then dropped. Buffers are bounded by `capacity` per sender: a sender whose own
//! unstable messages reach `capacity` (a slow or dead member holds stability back) refuses the
//! application's message with a `SendRefused` notice (counted `vsync.refused`) and names the
//! laggard in a [`SLOW_MEMBER`] notice (once per member and view), and receivers
//! drop messages more than `capacity` ahead of what they delivered. Memory never grows with
//! the traffic. A layer above that cannot keep up (`total-order`'s buffers overflowed) sends
//! [`REJOIN`] down: this member leaves the view (a `Leave`: the others exclude it and go on)
//! and starts again alone as a new member (a new epoch), merged back like a joiner.
//!
//! # Primary partition
//!
//! With `primary = "majority"`, a view is *primary* when it holds more than half of the
//! scenario's nodes; members of other views keep their membership up to date but neither
//! send nor deliver (messages wait in the queue). With `"none"` every partition goes on.
//!
//! # Wire
//!
//! [`crate::wire::Pdu`], docs/WIRE.md "Group communication". Counters: `vsync.sent`,
//! `vsync.delivered`, `vsync.retransmitted`, `vsync.naks`, `vsync.duplicate`, `vsync.beyond_window`,
//! `vsync.other_view`, `vsync.not_member`, `vsync.malformed`, `vsync.views`, `vsync.flushes`,
//! `vsync.flush_abandoned`, `vsync.flush_renewed`, `vsync.refused`, `vsync.queued`, `vsync.stable_dropped`,
//! `vsync.superseded`, `vsync.view_control` (datagrams of the flush: `Flush`, `FlushOk`,
//! `FlushNo`, `NewView`), `vsync.local_stall` (a tick more than two periods late: this member
//! was not running; the others' silence meanwhile and its own flush deadlines are moved on by
//! the stall, [`viastack_protocols::stall`], so a member that wakes up does not leave everyone
//! out as silent).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::RngCore;
use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_EVENT, CHANNEL_INIT, INBOUND, PERIODIC_TIMER, SENDABLE,
};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Instant,
    Layer, Message, NodeId, Sendable, Session, Tag, TimerId,
};
use viastack_protocols::events::{self, ALIVE, SEND_REFUSED, SUSPECT};
use viastack_protocols::stall::{discount, TickGap};

use crate::wire::{Cut, Member, Pdu, ViewId};

/// A packet this layer generates (a `Sendable` subtype).
pub static GROUP_PACKET: EventTypeDef = EventTypeDef::new("GroupPacket", Some(&SENDABLE));
/// A view installed: goes up after the last message of the previous view. Body: [`ViewNotice`].
pub static VIEW: EventTypeDef = EventTypeDef::new("View", Some(&CHANNEL_EVENT));

/// The group stopped sending for a flush: layers above hold their messages until the next
/// [`VIEW`] (or [`UNBLOCK`]). No body.
pub static BLOCK: EventTypeDef = EventTypeDef::new("Block", Some(&CHANNEL_EVENT));
/// The flush announced by [`BLOCK`] was given up: the current view goes on. No body.
pub static UNBLOCK: EventTypeDef = EventTypeDef::new("Unblock", Some(&CHANNEL_EVENT));

/// A member holds this member's buffer: its status lags by `capacity` messages, so this
/// member refuses to send more (a [`PeerNotice`](viastack_protocols::events::PeerNotice)
/// naming the laggard; once per member and view).
pub static SLOW_MEMBER: EventTypeDef = EventTypeDef::new("SlowMember", Some(&CHANNEL_EVENT));

/// Down from a layer above: this member can no longer keep the current view's guarantees (its
/// `total-order` buffers overflowed: a slow member), so it leaves the view (a `Leave` to the
/// others, who exclude it) and starts again alone as a new member (a new epoch), which the
/// group merges back like any joiner (counted `vsync.rejoined`). No body.
pub static REJOIN: EventTypeDef = EventTypeDef::new("Rejoin", Some(&CHANNEL_EVENT));

/// The body of a [`VIEW`] notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewNotice {
    /// The view's id.
    pub id: ViewId,
    /// Its members, ascending by node.
    pub members: Vec<Member>,
    /// Whether it is a primary view (always, unless `primary = "majority"`).
    pub primary: bool,
}

/// The view in `event`, if it is a [`VIEW`] notice.
pub fn view_notice(event: &Event) -> Option<&ViewNotice> {
    if event.ty() == VIEW.id() {
        event.custom::<ViewNotice>()
    } else {
        None
    }
}

/// Which views may carry traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Primary {
    /// Every view (partitionable operation).
    #[default]
    None,
    /// Views with more than half of the scenario's nodes.
    Majority,
}

/// Parameters of the layer (defaults: see the stack-file kind `vsync` for their sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Gossip, NAK and coordinator period.
    pub tick: Duration,
    /// How long a suspicion must last before the member is excluded.
    pub confirm: Duration,
    /// How long a coordinator waits for `FlushOk`s.
    pub flush_timeout: Duration,
    /// Period of a coordinator's beacons to nodes outside its view.
    pub beacon: Duration,
    /// Messages buffered per sender (unstable, or received ahead of delivery).
    pub capacity: usize,
    /// Primary-partition behaviour.
    pub primary: Primary,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            tick: Duration::from_millis(20),
            confirm: Duration::from_millis(100),
            flush_timeout: Duration::from_millis(400),
            beacon: Duration::from_millis(200),
            capacity: 1024,
            primary: Primary::None,
        }
    }
}

/// The `vsync` layer, built for node `node` of a scenario of `nodes` nodes.
#[derive(Debug, Clone)]
pub struct Vsync {
    name: String,
    node: NodeId,
    nodes: u32,
    config: Config,
}

impl Vsync {
    /// A layer named `name`.
    pub fn new(name: impl Into<String>, node: NodeId, nodes: u32, config: Config) -> Self {
        Vsync {
            name: name.into(),
            node,
            nodes,
            config,
        }
    }
}

impl Layer for Vsync {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            CHANNEL_INIT.id(),
            CHANNEL_CLOSE.id(),
            SUSPECT.id(),
            ALIVE.id(),
            REJOIN.id(),
        ]
    }
    /// A network below, and a failure detector (`heartbeat`).
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id(), SUSPECT.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![
            GROUP_PACKET.id(),
            VIEW.id(),
            BLOCK.id(),
            UNBLOCK.id(),
            SLOW_MEMBER.id(),
            SEND_REFUSED.id(),
        ]
    }
    /// FIFO per sender within a view; not "reliable" in the point-to-point sense: a member
    /// excluded from the view does not get the messages of the views it is not in.
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery {
            reliable: false,
            fifo: true,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(VsyncSession::new(self.node, self.nodes, self.config))
    }
}

/// One sender's messages in a view.
#[derive(Debug, Default)]
struct SenderLog {
    /// Delivered to the application, 1..=delivered.
    delivered: u64,
    /// Received without a gap, 1..=received.
    received: u64,
    /// Highest number known to exist (from statuses and arrivals).
    known: u64,
    /// Messages held (received, not yet stable), by number.
    held: BTreeMap<u64, Message>,
}

/// A view's messages.
#[derive(Debug)]
struct Store {
    view: ViewId,
    members: Vec<Member>,
    logs: Vec<SenderLog>,
    /// Per member, the last digest it gossiped in this view.
    statuses: Vec<Option<Vec<u64>>>,
    /// Per member, when it was last heard in this view (its status; the install time at first).
    heard: Vec<Instant>,
    /// Per member, when its node was last seen in another view (it gossiped that view's
    /// status: it gave up a flush and went back; or another view's beacon listed it: it went
    /// on without this member): "silent here" then means "gone elsewhere", not "not running".
    elsewhere: Vec<Option<Instant>>,
}

impl Store {
    fn new(view: ViewId, members: Vec<Member>, now: Instant) -> Self {
        let n = members.len();
        Store {
            view,
            members,
            logs: (0..n).map(|_| SenderLog::default()).collect(),
            statuses: vec![None; n],
            heard: vec![now; n],
            elsewhere: vec![None; n],
        }
    }
    fn index(&self, m: Member) -> Option<usize> {
        self.members.iter().position(|&x| x == m)
    }
    fn index_of_node(&self, n: NodeId) -> Option<usize> {
        self.members.iter().position(|x| x.node == n)
    }
    fn digest(&self) -> Vec<u64> {
        self.logs.iter().map(|l| l.received).collect()
    }
}

/// Where a member stands in the view-change protocol.
#[derive(Debug)]
enum Phase {
    /// Sending and delivering in the current view.
    Normal,
    /// Accepted `proposal`; not sending, not delivering.
    Flushing { proposal: ViewId, since: Instant },
    /// Got the `NewView`: delivering up to the cut, then installing.
    Installing {
        view: ViewId,
        members: Vec<Member>,
        upto: Vec<u64>,
        holders: Vec<NodeId>,
        since: Instant,
    },
}

/// A coordinator's view change in progress.
#[derive(Debug)]
struct Proposal {
    id: ViewId,
    members: Vec<Member>,
    oks: BTreeMap<Member, (ViewId, Vec<u64>)>,
    started: Instant,
}

/// A view announced by another coordinator.
#[derive(Debug)]
struct Foreign {
    members: Vec<Member>,
    heard: Instant,
}

/// The coordinator's last `NewView`, sent again to members not yet heard in the view.
#[derive(Debug)]
struct Announce {
    pdu: Pdu,
    heard: BTreeSet<Member>,
    until: Instant,
}

/// Timer token of the tick.
const TICK: u64 = 1;
/// Most messages one NAK asks for or one answer sends.
const NAK_BATCH: u64 = 64;
/// Epochs of a node remembered after it restarted.
const RETIRED: usize = 4;

/// Session of [`Vsync`].
#[derive(Debug)]
pub struct VsyncSession {
    node: NodeId,
    nodes: u32,
    config: Config,
    me: Member,
    channel: ChannelId,
    ticker: Option<TimerId>,
    closed: bool,
    store: Store,
    /// The previous view's store, kept to answer NAKs of members still installing.
    prev: Option<Store>,
    phase: Phase,
    /// Highest view counter accepted or installed.
    accepted: u64,
    /// Application messages waiting for a view that may carry them.
    queue: VecDeque<(Message, Tag)>,
    suspects: BTreeMap<NodeId, Instant>,
    left: BTreeSet<Member>,
    departed: BTreeSet<Member>,
    /// Members reported slow in this view.
    slow: BTreeSet<Member>,
    epochs: BTreeMap<NodeId, (u32, [u32; RETIRED])>,
    proposal: Option<Proposal>,
    unresponsive: BTreeSet<Member>,
    foreign: BTreeMap<NodeId, Foreign>,
    announce: Option<Announce>,
    next_beacon: Instant,
    /// Messages accepted from others since this member last gossiped its status: at a
    /// quarter of `capacity` it gossips at once rather than at the next tick, so a fast
    /// sender's buffer becomes stable before it fills.
    since_status: usize,
    /// Late ticks: this member's own stalls, not held against the others.
    gap: TickGap,
}

impl VsyncSession {
    fn new(node: NodeId, nodes: u32, config: Config) -> Self {
        let me = Member { node, epoch: 1 };
        let view = ViewId {
            counter: 0,
            coord: me,
        };
        VsyncSession {
            node,
            nodes,
            config,
            me,
            channel: ChannelId::NONE,
            ticker: None,
            closed: false,
            store: Store::new(view, vec![me], Instant::ZERO),
            prev: None,
            phase: Phase::Normal,
            accepted: 0,
            queue: VecDeque::new(),
            suspects: BTreeMap::new(),
            left: BTreeSet::new(),
            departed: BTreeSet::new(),
            slow: BTreeSet::new(),
            epochs: BTreeMap::new(),
            proposal: None,
            unresponsive: BTreeSet::new(),
            foreign: BTreeMap::new(),
            announce: None,
            next_beacon: Instant::ZERO,
            since_status: 0,
            gap: TickGap::new(config.tick),
        }
    }

    /// The installed view's id and members.
    pub fn view(&self) -> (ViewId, &[Member]) {
        (self.store.view, &self.store.members)
    }

    /// This session's member identity.
    pub fn member(&self) -> Member {
        self.me
    }

    /// Messages held in buffers (every sender, current and previous view) and queued.
    pub fn buffered(&self) -> usize {
        let held = |s: &Store| s.logs.iter().map(|l| l.held.len()).sum::<usize>();
        held(&self.store) + self.prev.as_ref().map_or(0, held) + self.queue.len()
    }

    /// Gives up a flush: back to the current view, sending and delivering again.
    fn unflush(&mut self, ctx: &mut Context<'_>) {
        self.phase = Phase::Normal;
        ctx.go(Event::new(
            UNBLOCK.id(),
            Direction::Up,
            self.channel,
            Body::Empty,
        ));
        self.deliver_ready(ctx);
        self.drain_queue(ctx);
    }

    fn primary(&self, members: usize) -> bool {
        match self.config.primary {
            Primary::None => true,
            Primary::Majority => members * 2 > self.nodes as usize,
        }
    }

    /// A fresh random epoch (never 0, never the current one).
    fn new_epoch(&self, ctx: &mut Context<'_>) -> u32 {
        let now = ctx.now();
        let mut epoch = 0;
        while epoch == 0 || epoch == self.me.epoch {
            let x = ctx.rng().next_u64() ^ now.as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
            epoch = (x ^ (x >> 32)) as u32;
        }
        epoch
    }

    fn start(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let epoch = self.new_epoch(ctx);
        self.me = Member {
            node: self.node,
            epoch,
        };
        self.channel = ctx.channel();
        let view = ViewId {
            counter: 0,
            coord: self.me,
        };
        self.store = Store::new(view, vec![self.me], now);
        self.ticker = Some(ctx.set_periodic(self.config.tick, TICK));
        self.gap.armed(now);
        self.next_beacon = now;
        self.notify_view(ctx);
        self.announce_view(ctx);
    }

    /// The installed view goes up as a [`VIEW`] notice.
    fn notify_view(&mut self, ctx: &mut Context<'_>) {
        let members = self.store.members.clone();
        let primary = self.primary(members.len());
        ctx.go(Event::new(
            VIEW.id(),
            Direction::Up,
            self.channel,
            Body::Custom(Box::new(ViewNotice {
                id: self.store.view,
                members,
                primary,
            })),
        ));
    }

    fn send(&self, to: NodeId, pdu: &Pdu, payload: Option<&Message>, ctx: &mut Context<'_>) {
        if matches!(
            pdu,
            Pdu::Flush { .. } | Pdu::FlushOk { .. } | Pdu::FlushNo { .. } | Pdu::NewView { .. }
        ) {
            // The view-change protocol's own datagrams (bench group's LWG figure).
            ctx.count("view_control");
        }
        let header = pdu.emit();
        let mut m = match payload {
            Some(p) => p.clone(),
            None => Message::with_headroom(16, &[]),
        };
        m.push(&header);
        let s = Sendable::new(self.node, Dest::Node(to), m);
        ctx.go(Event::sendable(
            GROUP_PACKET.id(),
            Direction::Down,
            self.channel,
            s,
        ));
    }

    fn confirmed(&self, node: NodeId, now: Instant) -> bool {
        self.suspects
            .get(&node)
            .is_some_and(|&since| now.saturating_duration_since(since) >= self.config.confirm)
    }

    fn superseded(&self, m: Member) -> bool {
        self.epochs
            .get(&m.node)
            .is_some_and(|(e, retired)| *e != m.epoch && retired.contains(&m.epoch))
    }

    /// Whether `m` should stay in (or enter) a view this member proposes.
    fn viable(&self, m: Member, now: Instant) -> bool {
        m == self.me
            || !(self.confirmed(m.node, now)
                || self.left.contains(&m)
                || self.departed.contains(&m)
                || self.unresponsive.contains(&m)
                || self.superseded(m))
    }

    /// Learns `m`'s epoch from a packet it sent.
    fn heard_from(&mut self, m: Member, ctx: &mut Context<'_>) {
        if m.node == self.node {
            return;
        }
        let e = self.epochs.entry(m.node).or_insert((m.epoch, [0; RETIRED]));
        if e.0 != m.epoch && !e.1.contains(&m.epoch) {
            e.1.rotate_right(1);
            e.1[0] = e.0;
            e.0 = m.epoch;
            ctx.count("superseded");
        }
    }

    // ---------------------------------------------------------------- application sends

    fn app_send(&mut self, message: Message, tag: Tag, ctx: &mut Context<'_>) {
        if self.closed {
            return;
        }
        let ready = matches!(self.phase, Phase::Normal) && self.primary(self.store.members.len());
        if ready && self.queue.is_empty() {
            self.multicast(message, tag, ctx);
        } else if self.queue.len() < self.config.capacity {
            ctx.count("queued");
            self.queue.push_back((message, tag));
        } else {
            self.refuse(tag, ctx);
        }
    }

    fn refuse(&mut self, tag: Tag, ctx: &mut Context<'_>) {
        ctx.count("refused");
        ctx.go(events::failure(
            &SEND_REFUSED,
            self.channel,
            self.node,
            [tag],
        ));
    }

    /// Sends what waited, if the view may carry it.
    fn drain_queue(&mut self, ctx: &mut Context<'_>) {
        if !matches!(self.phase, Phase::Normal) || !self.primary(self.store.members.len()) {
            return;
        }
        while let Some((m, tag)) = self.queue.pop_front() {
            self.multicast(m, tag, ctx);
        }
    }

    fn multicast(&mut self, message: Message, tag: Tag, ctx: &mut Context<'_>) {
        let Some(i) = self.store.index(self.me) else {
            return;
        };
        if self.store.logs[i].held.len() >= self.config.capacity {
            // Stability lags: a slow or dead member holds the buffer (reported, not grown).
            let laggard = (0..self.store.members.len())
                .filter(|&j| j != i)
                .min_by_key(|&j| self.store.statuses[j].as_ref().map_or(0, |d| d[i]));
            if let Some(j) = laggard {
                let m = self.store.members[j];
                if self.slow.insert(m) {
                    ctx.count("slow_member");
                    ctx.go(events::notice(&SLOW_MEMBER, self.channel, m.node));
                }
            }
            self.refuse(tag, ctx);
            return;
        }
        let log = &mut self.store.logs[i];
        let seq = log.received + 1;
        log.received = seq;
        log.known = seq;
        log.held.insert(seq, message.clone());
        let pdu = Pdu::Data {
            view: self.store.view,
            origin: self.me,
            seq,
        };
        let mut sent = 0;
        for k in 0..self.store.members.len() {
            let m = self.store.members[k];
            if m != self.me {
                self.send(m.node, &pdu, Some(&message), ctx);
                sent += 1;
            }
        }
        ctx.count_n("sent", sent);
        self.deliver_ready(ctx);
    }

    // ---------------------------------------------------------------- delivery

    /// Delivers each sender's messages in order, as far as the phase allows.
    fn deliver_ready(&mut self, ctx: &mut Context<'_>) {
        let limits: Option<Vec<u64>> = match &self.phase {
            Phase::Normal => None,
            Phase::Flushing { .. } => return,
            Phase::Installing { upto, .. } => Some(upto.clone()),
        };
        let mut delivered = 0;
        for i in 0..self.store.logs.len() {
            let origin = self.store.members[i].node;
            loop {
                let log = &mut self.store.logs[i];
                let next = log.delivered + 1;
                if next > log.received || limits.as_ref().is_some_and(|l| next > l[i]) {
                    break;
                }
                let Some(m) = log.held.get(&next) else {
                    break;
                };
                let m = m.clone();
                log.delivered = next;
                delivered += 1;
                let s = Sendable::new(origin, Dest::Node(self.node), m);
                ctx.go(Event::sendable(
                    SENDABLE.id(),
                    Direction::Up,
                    self.channel,
                    s,
                ));
            }
        }
        if delivered > 0 {
            ctx.count_n("delivered", delivered);
        }
    }

    fn on_data(
        &mut self,
        view: ViewId,
        origin: Member,
        seq: u64,
        m: Message,
        ctx: &mut Context<'_>,
    ) {
        if view != self.store.view {
            ctx.count("other_view");
            return;
        }
        let Some(i) = self.store.index(origin) else {
            ctx.count("not_member");
            return;
        };
        let cap = self.config.capacity as u64;
        let log = &mut self.store.logs[i];
        if seq <= log.received || log.held.contains_key(&seq) {
            ctx.count("duplicate");
            return;
        }
        if seq > log.delivered.saturating_add(cap) {
            ctx.count("beyond_window");
            return;
        }
        log.held.insert(seq, m);
        log.known = log.known.max(seq);
        while log.held.contains_key(&(log.received + 1)) {
            log.received += 1;
        }
        self.deliver_ready(ctx);
        self.since_status += 1;
        if self.since_status >= (self.config.capacity / 4).max(1) {
            ctx.count("early_status");
            self.gossip(ctx);
        }
        self.try_install(ctx);
    }

    fn on_status(&mut self, view: ViewId, from: Member, digest: Vec<u64>, ctx: &mut Context<'_>) {
        if let Some(a) = &mut self.announce {
            if let Pdu::NewView { view: v, .. } = &a.pdu {
                if *v == view {
                    a.heard.insert(from);
                }
            }
        }
        if view != self.store.view {
            if let Some(j) = self.store.index_of_node(from.node) {
                self.store.elsewhere[j] = Some(ctx.now());
            }
            return;
        }
        let Some(j) = self.store.index(from) else {
            ctx.count("not_member");
            return;
        };
        if digest.len() != self.store.members.len() {
            ctx.count("malformed");
            return;
        }
        for (log, &d) in self.store.logs.iter_mut().zip(&digest) {
            log.known = log.known.max(d);
        }
        self.store.statuses[j] = Some(digest);
        self.store.heard[j] = ctx.now();
        self.collect_stable(ctx);
    }

    /// Drops messages every member has received (and this one delivered).
    fn collect_stable(&mut self, ctx: &mut Context<'_>) {
        let me = self.store.index(self.me);
        let n = self.store.members.len();
        for i in 0..n {
            let mut stable = self.store.logs[i].delivered;
            for j in 0..n {
                if Some(j) == me {
                    continue;
                }
                match &self.store.statuses[j] {
                    Some(d) => stable = stable.min(d[i]),
                    None => stable = 0,
                }
            }
            let log = &mut self.store.logs[i];
            while let Some((&k, _)) = log.held.first_key_value() {
                if k > stable {
                    break;
                }
                log.held.pop_first();
                ctx.count("stable_dropped");
            }
        }
    }

    fn on_nak(
        &mut self,
        view: ViewId,
        origin: NodeId,
        first: u64,
        last: u64,
        to: NodeId,
        ctx: &mut Context<'_>,
    ) {
        ctx.count("naks");
        let store = if self.store.view == view {
            &self.store
        } else if let Some(p) = self.prev.as_ref().filter(|p| p.view == view) {
            p
        } else {
            ctx.count("other_view");
            return;
        };
        let Some(i) = store.index_of_node(origin) else {
            return;
        };
        let member = store.members[i];
        let last = last.min(first.saturating_add(NAK_BATCH - 1));
        let mut out = Vec::new();
        for (&seq, m) in store.logs[i].held.range(first..=last) {
            out.push((
                Pdu::Data {
                    view,
                    origin: member,
                    seq,
                },
                m.clone(),
            ));
        }
        for (pdu, m) in out {
            self.send(to, &pdu, Some(&m), ctx);
            ctx.count("retransmitted");
        }
    }

    /// Asks for what this member lacks: below the cut while installing, else what others
    /// are known to hold.
    fn send_naks(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        let mut naks = Vec::new();
        for (i, log) in self.store.logs.iter().enumerate() {
            let (want, holder) = match &self.phase {
                Phase::Installing { upto, holders, .. } => (upto[i], Some(holders[i])),
                _ => (log.known, None),
            };
            if want <= log.received {
                continue;
            }
            let origin = self.store.members[i];
            let target = if let Some(h) = holder.filter(|h| *h != self.node) {
                Some(h)
            } else if origin != self.me && !self.suspects.contains_key(&origin.node) {
                Some(origin.node)
            } else {
                // Any member whose status says it holds the next one.
                self.store
                    .statuses
                    .iter()
                    .enumerate()
                    .find(|(j, d)| {
                        d.as_ref().is_some_and(|d| d[i] > log.received)
                            && self.store.members[*j] != self.me
                            && !self.confirmed(self.store.members[*j].node, now)
                    })
                    .map(|(j, _)| self.store.members[j].node)
            };
            if let Some(t) = target {
                let first = log.received + 1;
                naks.push((
                    t,
                    Pdu::Nak {
                        view: self.store.view,
                        origin: origin.node,
                        first,
                        last: want.min(first + NAK_BATCH - 1),
                    },
                ));
            }
        }
        for (t, pdu) in naks {
            self.send(t, &pdu, None, ctx);
        }
    }

    // ---------------------------------------------------------------- view change

    /// Whom this member takes for the acting coordinator of its view.
    fn acting_coordinator(&self, now: Instant) -> Option<Member> {
        self.store
            .members
            .iter()
            .copied()
            .find(|&m| self.viable(m, now))
    }

    /// What the view should be, if this member is its acting coordinator.
    fn desired(&self, now: Instant) -> Vec<Member> {
        let mut by_node: BTreeMap<NodeId, Member> = BTreeMap::new();
        for &m in &self.store.members {
            if self.viable(m, now) {
                by_node.insert(m.node, m);
            }
        }
        let recent = |f: &Foreign| now.saturating_duration_since(f.heard) <= self.config.beacon * 3;
        let lower = self
            .foreign
            .iter()
            .any(|(n, f)| *n < self.node && recent(f));
        if !lower {
            for f in self.foreign.values().filter(|f| recent(f)) {
                for &m in &f.members {
                    if !self.viable(m, now) || self.suspects.contains_key(&m.node) {
                        continue;
                    }
                    // A node listed with another epoch: keep the one heard from last.
                    let newest = self.epochs.get(&m.node).map(|e| e.0);
                    match by_node.get(&m.node) {
                        Some(have) if *have == m => {}
                        Some(_) if newest != Some(m.epoch) => {}
                        _ => {
                            by_node.insert(m.node, m);
                        }
                    }
                }
            }
        }
        by_node.into_values().collect()
    }

    fn coordinate(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        if let Some(p) = &self.proposal {
            if now.saturating_duration_since(p.started) < self.config.flush_timeout {
                let pdu = Pdu::Flush {
                    proposal: p.id,
                    members: p.members.clone(),
                };
                let missing: Vec<Member> = p
                    .members
                    .iter()
                    .copied()
                    .filter(|m| !p.oks.contains_key(m))
                    .collect();
                for m in missing {
                    self.send(m.node, &pdu, None, ctx);
                }
                return;
            }
            // Timed out: leave the silent members out of the next proposal.
            let silent: Vec<Member> = p
                .members
                .iter()
                .copied()
                .filter(|m| !p.oks.contains_key(m))
                .collect();
            self.unresponsive.extend(silent);
            self.proposal = None;
            ctx.count("flush_abandoned");
            if matches!(self.phase, Phase::Flushing { .. }) {
                self.unflush(ctx);
            }
        }
        if !matches!(self.phase, Phase::Normal) {
            return;
        }
        if self.acting_coordinator(now) != Some(self.me) {
            return;
        }
        let desired = self.desired(now);
        if desired != self.store.members {
            self.propose(desired, ctx);
        } else if now >= self.next_beacon {
            self.next_beacon = now + self.config.beacon;
            self.announce_view(ctx);
        }
    }

    /// Beacons to every node outside the view.
    fn announce_view(&mut self, ctx: &mut Context<'_>) {
        let pdu = Pdu::Beacon {
            view: self.store.view,
            members: self.store.members.clone(),
        };
        for n in 0..self.nodes {
            let n = NodeId(n);
            if self.store.index_of_node(n).is_none() {
                self.send(n, &pdu, None, ctx);
            }
        }
    }

    fn propose(&mut self, members: Vec<Member>, ctx: &mut Context<'_>) {
        let counter = self.accepted.max(self.store.view.counter) + 1;
        let id = ViewId {
            counter,
            coord: self.me,
        };
        ctx.count("flushes");
        self.proposal = Some(Proposal {
            id,
            members: members.clone(),
            oks: BTreeMap::new(),
            started: ctx.now(),
        });
        let pdu = Pdu::Flush {
            proposal: id,
            members: members.clone(),
        };
        for m in &members {
            if *m != self.me {
                self.send(m.node, &pdu, None, ctx);
            }
        }
        self.on_flush(id, members, ctx);
    }

    fn on_flush(&mut self, proposal: ViewId, members: Vec<Member>, ctx: &mut Context<'_>) {
        if self.closed || !members.contains(&self.me) {
            return;
        }
        let to = proposal.coord;
        let already = matches!(&self.phase, Phase::Flushing { proposal: p, .. } if *p == proposal);
        if !already && proposal.counter <= self.accepted.max(self.store.view.counter) {
            let pdu = Pdu::FlushNo {
                proposal,
                from: self.me,
                accepted: self.accepted.max(self.store.view.counter),
            };
            self.reply(to, pdu, ctx);
            return;
        }
        if !already {
            if matches!(self.phase, Phase::Installing { .. }) {
                // Already installing a view: answering would report a digest past what it may
                // deliver. The coordinator retries or leaves it out.
                return;
            }
            if self.proposal.as_ref().is_some_and(|p| p.id != proposal) {
                self.proposal = None; // a higher proposal wins
            }
            self.accepted = proposal.counter;
            if matches!(self.phase, Phase::Normal) {
                ctx.go(Event::new(
                    BLOCK.id(),
                    Direction::Up,
                    self.channel,
                    Body::Empty,
                ));
            }
            self.phase = Phase::Flushing {
                proposal,
                since: ctx.now(),
            };
        }
        let pdu = Pdu::FlushOk {
            proposal,
            from: self.me,
            old: self.store.view,
            digest: self.store.digest(),
        };
        self.reply(to, pdu, ctx);
    }

    /// Sends `pdu` to `to`, or handles it here if `to` is this member.
    fn reply(&mut self, to: Member, pdu: Pdu, ctx: &mut Context<'_>) {
        if to == self.me {
            self.handle_pdu(self.me, pdu, None, ctx);
        } else {
            self.send(to.node, &pdu, None, ctx);
        }
    }

    fn on_flush_ok(
        &mut self,
        proposal: ViewId,
        from: Member,
        old: ViewId,
        digest: Vec<u64>,
        ctx: &mut Context<'_>,
    ) {
        let Some(p) = &mut self.proposal else {
            return;
        };
        if p.id != proposal || !p.members.contains(&from) {
            return;
        }
        p.oks.insert(from, (old, digest));
        if p.oks.len() < p.members.len() {
            return;
        }
        // A member of the current view left out of this proposal on a suspicion that has
        // since been withdrawn (`Alive`: its heartbeats were only lost, e.g. ten in a row on a
        // link with 20 % loss) is wanted again: propose anew with it rather than install a
        // view without it, which it would leave only by a merge ≈ 1 s later — a view change
        // for nothing, and a liveness miss (issue 18, `lwg_move` total order, seed 533).
        let proposed = p.members.clone();
        let now = ctx.now();
        let desired = self.desired(now);
        if desired
            .iter()
            .any(|m| self.store.members.contains(m) && !proposed.contains(m))
        {
            self.proposal = None;
            ctx.count("flush_renewed");
            self.propose(desired, ctx);
            return;
        }
        let Some(p) = &mut self.proposal else {
            return;
        };
        // Every member answered: compute one cut per old view.
        let mut cuts: BTreeMap<ViewId, Cut> = BTreeMap::new();
        for (m, (old, digest)) in &p.oks {
            let c = cuts.entry(*old).or_insert_with(|| Cut {
                old: *old,
                upto: vec![0; digest.len()],
                holders: vec![m.node; digest.len()],
            });
            if c.upto.len() != digest.len() {
                continue; // impossible for one view: its members agree on its size
            }
            for (k, &d) in digest.iter().enumerate() {
                if d > c.upto[k] {
                    c.upto[k] = d;
                    c.holders[k] = m.node;
                }
            }
        }
        let pdu = Pdu::NewView {
            view: p.id,
            members: p.members.clone(),
            cuts: cuts.into_values().collect(),
        };
        let members = p.members.clone();
        self.proposal = None;
        for m in &members {
            if *m != self.me {
                self.send(m.node, &pdu, None, ctx);
            }
        }
        self.announce = Some(Announce {
            pdu: pdu.clone(),
            heard: BTreeSet::from([self.me]),
            until: ctx.now() + self.config.flush_timeout * 2,
        });
        self.handle_pdu(self.me, pdu, None, ctx);
    }

    fn on_flush_no(&mut self, proposal: ViewId, accepted: u64, ctx: &mut Context<'_>) {
        if self.proposal.as_ref().is_some_and(|p| p.id == proposal) {
            self.accepted = self.accepted.max(accepted);
            self.proposal = None;
            ctx.count("flush_abandoned");
            if matches!(&self.phase, Phase::Flushing { proposal: p, .. } if *p == proposal) {
                self.unflush(ctx);
            }
        }
    }

    fn on_new_view(
        &mut self,
        view: ViewId,
        members: Vec<Member>,
        cuts: Vec<Cut>,
        ctx: &mut Context<'_>,
    ) {
        if self.closed || !members.contains(&self.me) || view == self.store.view {
            return;
        }
        let expected = match &self.phase {
            Phase::Flushing { proposal, .. } => *proposal == view,
            // A flush this member gave up on: it may still install if it delivered nothing
            // past the cut of its view (checked below).
            Phase::Normal => view.counter > self.accepted.max(self.store.view.counter),
            Phase::Installing { .. } => false,
        };
        if !expected {
            return;
        }
        let Some(cut) = cuts.into_iter().find(|c| c.old == self.store.view) else {
            return;
        };
        if cut.upto.len() != self.store.members.len()
            || self
                .store
                .logs
                .iter()
                .zip(&cut.upto)
                .any(|(l, &u)| l.delivered > u)
        {
            ctx.count("new_view_refused");
            return;
        }
        self.accepted = self.accepted.max(view.counter);
        if matches!(self.phase, Phase::Normal) {
            ctx.go(Event::new(
                BLOCK.id(),
                Direction::Up,
                self.channel,
                Body::Empty,
            ));
        }
        self.phase = Phase::Installing {
            view,
            members,
            upto: cut.upto,
            holders: cut.holders,
            since: ctx.now(),
        };
        self.deliver_ready(ctx);
        self.try_install(ctx);
        if matches!(self.phase, Phase::Installing { .. }) {
            self.send_naks(ctx);
        }
    }

    /// Installs the view being installed once every message up to the cut is delivered.
    fn try_install(&mut self, ctx: &mut Context<'_>) {
        let Phase::Installing { upto, .. } = &self.phase else {
            return;
        };
        if self
            .store
            .logs
            .iter()
            .zip(upto)
            .any(|(l, &u)| l.delivered < u)
        {
            return;
        }
        let Phase::Installing { view, members, .. } =
            std::mem::replace(&mut self.phase, Phase::Normal)
        else {
            return;
        };
        ctx.count("views");
        let old = std::mem::replace(
            &mut self.store,
            Store::new(view, members.clone(), ctx.now()),
        );
        self.prev = Some(old);
        self.accepted = self.accepted.max(view.counter);
        self.departed.clear();
        self.slow.clear();
        self.unresponsive.clear();
        self.foreign.clear();
        self.left.retain(|m| members.contains(m));
        self.notify_view(ctx);
        self.gossip(ctx);
        self.drain_queue(ctx);
    }

    fn gossip(&mut self, ctx: &mut Context<'_>) {
        self.since_status = 0;
        let pdu = Pdu::Status {
            view: self.store.view,
            from: self.me,
            digest: self.store.digest(),
        };
        for m in self.store.members.clone() {
            if m != self.me {
                self.send(m.node, &pdu, None, ctx);
            }
        }
    }

    fn on_beacon(&mut self, view: ViewId, members: Vec<Member>, ctx: &mut Context<'_>) {
        if view == self.store.view || members.contains(&self.me) {
            return;
        }
        for m in &members {
            if self.store.index(*m).is_some() {
                self.departed.insert(*m);
            } else {
                // A member left out after a flush it never answered (a partition cut it off
                // mid-flush) is heard again, in a view of its own: it may be merged again.
                // `unresponsive` is otherwise cleared only by installing a view, which a
                // coordinator alone in its view never does — it would never merge it (issue 18).
                self.unresponsive.remove(m);
                // Another incarnation of a member's node is in that view: the member, if
                // silent here, has gone (see the silent-member rule in `on_tick`).
                if let Some(j) = self.store.index_of_node(m.node) {
                    self.store.elsewhere[j] = Some(ctx.now());
                }
            }
        }
        self.foreign.insert(
            view.coord.node,
            Foreign {
                members,
                heard: ctx.now(),
            },
        );
    }

    /// A tick that came late means this member was not running (stopped, starved of CPU): the
    /// others' silence meanwhile is not theirs, and its own flush deadlines did not run
    /// ([`viastack_protocols::stall`]). Counted `local_stall`.
    fn forgive_own_stall(&mut self, now: Instant, ctx: &mut Context<'_>) {
        let stalled = self.gap.tick(now);
        if stalled.is_zero() {
            return;
        }
        ctx.count("local_stall");
        for h in &mut self.store.heard {
            *h = discount(*h, stalled, now);
        }
        if let Phase::Flushing { since, .. } | Phase::Installing { since, .. } = &mut self.phase {
            *since = discount(*since, stalled, now);
        }
        if let Some(p) = &mut self.proposal {
            p.started = discount(p.started, stalled, now);
        }
        if let Some(a) = &mut self.announce {
            a.until = a.until.saturating_add(stalled);
        }
        for f in self.foreign.values_mut() {
            f.heard = discount(f.heard, stalled, now);
        }
    }

    fn on_tick(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now();
        self.forgive_own_stall(now, ctx);
        match &self.phase {
            Phase::Flushing { since, .. } | Phase::Installing { since, .. }
                if now.saturating_duration_since(*since) >= self.config.flush_timeout * 2 =>
            {
                ctx.count("flush_abandoned");
                self.unflush(ctx);
            }
            _ => {}
        }
        if matches!(self.phase, Phase::Normal) {
            // A member silent in this view for long whose node was seen in another view since
            // (its status, or a beacon listing it) has gone elsewhere: leave it out. A member
            // silent altogether is the failure detector's to judge, with its own timeout: a
            // member that merely ran late (stopped or starved longer than this rule's
            // 2 × `flush_timeout`, but within the detector's timeout) is not excluded
            // (issue 18). A restart is also seen by its new epoch (`superseded`).
            for j in 0..self.store.members.len() {
                let m = self.store.members[j];
                let heard = self.store.heard[j];
                if m != self.me
                    && now.saturating_duration_since(heard) >= self.config.flush_timeout * 2
                    && self.store.elsewhere[j].is_some_and(|t| t >= heard)
                    && self.departed.insert(m)
                {
                    ctx.count("silent_member");
                }
            }
        }
        self.gossip(ctx);
        self.send_naks(ctx);
        if let Some(a) = &self.announce {
            let view = pdu_view(&a.pdu);
            if self.store.view.counter > view.counter {
                self.announce = None;
            } else if now >= a.until {
                // Members never heard in the view are left out of the next one: they gave up
                // the flush (and are outside, where beacons reach them and merge them back).
                if self.store.view == view {
                    if let Pdu::NewView { members, .. } = &a.pdu {
                        let silent = members.iter().filter(|m| !a.heard.contains(m));
                        self.unresponsive.extend(silent);
                    }
                }
                self.announce = None;
            } else if let Pdu::NewView { members, .. } = &a.pdu {
                let missing: Vec<Member> = members
                    .iter()
                    .copied()
                    .filter(|m| !a.heard.contains(m))
                    .collect();
                let pdu = a.pdu.clone();
                for m in missing {
                    self.send(m.node, &pdu, None, ctx);
                }
            }
        }
        self.coordinate(ctx);
    }

    fn handle_pdu(
        &mut self,
        sender: Member,
        pdu: Pdu,
        payload: Option<Message>,
        ctx: &mut Context<'_>,
    ) {
        match pdu {
            Pdu::Data { view, origin, seq } => {
                if let Some(m) = payload {
                    self.on_data(view, origin, seq, m, ctx);
                }
            }
            Pdu::Status { view, from, digest } => self.on_status(view, from, digest, ctx),
            Pdu::Nak {
                view,
                origin,
                first,
                last,
            } => self.on_nak(view, origin, first, last, sender.node, ctx),
            Pdu::Flush { proposal, members } => self.on_flush(proposal, members, ctx),
            Pdu::FlushOk {
                proposal,
                from,
                old,
                digest,
            } => self.on_flush_ok(proposal, from, old, digest, ctx),
            Pdu::FlushNo {
                proposal, accepted, ..
            } => self.on_flush_no(proposal, accepted, ctx),
            Pdu::NewView {
                view,
                members,
                cuts,
            } => self.on_new_view(view, members, cuts, ctx),
            Pdu::Beacon { view, members } => self.on_beacon(view, members, ctx),
            Pdu::Leave { from, .. } => {
                self.left.insert(from);
            }
        }
    }

    fn on_packet(&mut self, source: NodeId, mut m: Message, ctx: &mut Context<'_>) {
        let (pdu, len) = match Pdu::parse(m.as_slice()) {
            Ok(x) => x,
            Err(_) => {
                ctx.count("malformed");
                return;
            }
        };
        if m.pop(len).is_err() {
            ctx.count("malformed");
            return;
        }
        // The member that sent it, where the packet says (NAKs name no member).
        let from = match &pdu {
            Pdu::Status { from, .. }
            | Pdu::FlushOk { from, .. }
            | Pdu::FlushNo { from, .. }
            | Pdu::Leave { from, .. } => Some(*from),
            Pdu::Beacon { view, .. } => Some(view.coord),
            Pdu::Data { origin, .. } if origin.node == source => Some(*origin),
            _ => None,
        };
        if let Some(f) = from {
            if f.node != source {
                ctx.count("malformed");
                return;
            }
            self.heard_from(f, ctx);
        }
        let sender = from.unwrap_or(Member {
            node: source,
            epoch: 1,
        });
        self.handle_pdu(sender, pdu, Some(m), ctx);
    }

    /// [`REJOIN`]: leaves the view (the others exclude this member on its `Leave`) and starts
    /// again alone as a new member, in a view whose counter is above every one accepted; the
    /// group merges it back (beacons). What the old view still held is not delivered here:
    /// the layer above asked because it cannot deliver it consistently.
    fn rejoin(&mut self, ctx: &mut Context<'_>) {
        if self.closed || self.ticker.is_none() {
            return;
        }
        ctx.count("rejoined");
        let pdu = Pdu::Leave {
            view: self.store.view,
            from: self.me,
        };
        for m in self.store.members.clone() {
            if m != self.me {
                self.send(m.node, &pdu, None, ctx);
            }
        }
        let now = ctx.now();
        let epoch = self.new_epoch(ctx);
        self.me = Member {
            node: self.node,
            epoch,
        };
        let counter = self.accepted.max(self.store.view.counter) + 1;
        self.accepted = counter;
        let view = ViewId {
            counter,
            coord: self.me,
        };
        self.store = Store::new(view, vec![self.me], now);
        self.prev = None;
        self.phase = Phase::Normal;
        self.proposal = None;
        self.announce = None;
        self.slow.clear();
        self.unresponsive.clear();
        self.next_beacon = now;
        self.notify_view(ctx);
        self.announce_view(ctx);
        self.drain_queue(ctx);
    }

    fn close(&mut self, ctx: &mut Context<'_>) {
        if self.closed {
            return;
        }
        let pdu = Pdu::Leave {
            view: self.store.view,
            from: self.me,
        };
        for m in self.store.members.clone() {
            if m != self.me {
                self.send(m.node, &pdu, None, ctx);
            }
        }
        self.closed = true;
        if let Some(t) = self.ticker.take() {
            ctx.cancel_timer(t);
        }
    }
}

fn pdu_view(p: &Pdu) -> ViewId {
    match p {
        Pdu::NewView { view, .. } => *view,
        _ => ViewId {
            counter: u64::MAX,
            coord: Member {
                node: NodeId(u32::MAX),
                epoch: 0,
            },
        },
    }
}

impl Session for VsyncSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == PERIODIC_TIMER.id() {
            if let (Body::Timer(t), Some(timer)) = (&event.body, self.ticker) {
                if t.token == TICK && t.id == timer && !self.closed {
                    self.on_tick(ctx);
                }
            }
            return;
        }
        if ty == CHANNEL_INIT.id() {
            if self.ticker.is_none() && !self.closed {
                self.start(ctx);
            }
            ctx.go(event);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            if event.channel() == self.channel {
                self.close(ctx);
            }
            ctx.go(event);
            return;
        }
        if ty == REJOIN.id() {
            self.rejoin(ctx);
            return;
        }
        if ty == SUSPECT.id() || ty == ALIVE.id() {
            if let Some(peer) = events::notice_peer(&event) {
                if ty == SUSPECT.id() {
                    self.suspects.entry(peer).or_insert(ctx.now());
                } else {
                    self.suspects.remove(&peer);
                }
            }
            ctx.go(event);
            return;
        }
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => {
                let tag = s.tag;
                let m = std::mem::take(&mut s.message);
                self.app_send(m, tag, ctx);
            }
            Direction::Up => {
                let source = s.source;
                let m = std::mem::take(&mut s.message);
                if !self.closed {
                    self.on_packet(source, m, ctx);
                }
            }
        }
    }
}

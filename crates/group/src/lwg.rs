//! `lwg`: light-weight groups (seed 001 §2.1, Rodrigues, Guo, Sargento, van Renesse and
//! Birman's light-weight groups) — many user groups, one channel each, mapped onto one heavy
//! virtual-synchrony group (`vsync`, optionally with `total-order` or `causal-order` on it).
//! It also realizes seed 001 §1's *order across channels*: over a shared `total-order`
//! session the messages of every light channel are delivered in one total order.
//!
//! # Binding
//!
//! One `lwg` session is bound explicitly into every light channel (`bind = { lwg = "the-lwg" }`
//! in a stack file); its [`auto_bind`](Session::auto_bind) fills the rest of each new channel
//! with the sessions it already shares a channel with (the heavy group's `vsync`, the failure
//! detector, the device): automatic binding. A shared `vsync` session carries every channel's
//! traffic on the channel it started on (the *carrier*); `lwg` puts each message back on its
//! light group's channel at the receiver.
//!
//! # Protocol
//!
//! A light group's id is the FNV-1a 32 hash of its channel's name. An application message of
//! channel `c` goes down with a `Data { group }` header ([`LwgPdu`]). At every heavy view
//! (a `View` from `vsync`, consumed here) each member multicasts `Joined { view, groups }`,
//! the light groups it has open (once its channels are open: a zero-delay timer, so the
//! channels a node opens together are announced together). A member's first `Joined` of a
//! view counts. The *light view* of group `g` in heavy view `V` has id `V` and the members of
//! `V` whose `Joined` lists `g`, and the installing member itself (its id is `V`'s counter and coordinator node, with the
//! coordinator's epoch mixed with the members: [`light_view_id`]); it is installed (a `View` notice up `g`'s channel) when every
//! member of `V` has announced, or at the end of `V` (the next heavy `View`) with the
//! announcements received — by virtual synchrony of the heavy group, the members that go on
//! from `V` to the same next view received the same announcements, so they install the same
//! light views; members that split during `V` may install different memberships, which are
//! different light views (a light view is its heavy view and its members).
//! A heavy view that carries no messages (not primary under `primary = "majority"`) gets its
//! light views at once, with all its members: there is nothing to agree on in it (and a
//! channel opened during such a view gets its light view when it opens: a restarted member
//! alone in a minority installs one on every channel, issue 18's majority seed 756).
//! Messages of `V` that arrive before the light views are installed wait, in arrival order,
//! and are delivered at installation; a light group's messages are delivered only at members
//! of its light view. So each light group has views of its own (agreement, virtual synchrony,
//! no creation or duplication follow from the heavy group's) and, over `total-order`, the
//! installation point and every delivery are at the same place of the one total order at
//! every member: the order holds across channels.
//!
//! # Mapping light groups to heavy groups
//!
//! One `lwg` session has one heavy group: the `vsync` session its first channel got. The
//! mapping of light groups to heavy groups is therefore the binding: channels bound to `lwg`
//! session `x` ride `x`'s heavy group, channels bound to `y` another one. A channel opened
//! while a heavy view is current joins its light group at the next heavy view (counted
//! `lwg.joined_late`). Not done yet: Rodrigues et al.'s switch, moving an open light group from
//! one heavy group to another without closing it; scenarios do not script opening and closing
//! channels at run time either. The intended design: one `lwg` session bound over several
//! heavy groups (per-heavy-group state, a heavy group known by the session just below `lwg` in
//! the channel); a `Switch { group, to }` multicast on the old heavy group; each light member
//! that delivers it stops sending the group there (its messages wait) and multicasts a
//! `Flushed { group }` after its last one (FIFO per sender); with every light member's
//! `Flushed` in — or at the old heavy group's next view, where virtual synchrony makes the
//! survivors agree on the `Switch` and the messages before it — the light view ends and a new
//! one (the old members in the new heavy view, its id marked as a switch view) begins on the
//! new heavy group; messages of the group that arrive there first wait, and are dropped if the
//! new heavy group changes view before the switch completes (their sender's light view was
//! another one).
//!
//! # Wire and counters
//!
//! [`crate::wire::LwgPdu`], docs/WIRE.md. Counters: `lwg.announced`, `lwg.installed` (light
//! views), `lwg.delivered`, `lwg.held` (waited for installation), `lwg.foreign` (a group this
//! member is not in), `lwg.stale_joined`, `lwg.malformed`, `lwg.held_over` (beyond the
//! `capacity` bound, dropped), `lwg.joined_late` (a channel opened after this view's `Joined`),
//! `lwg.announce_datagrams` (datagrams of the `Joined` announcements: one per other member).

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_EVENT, CHANNEL_INIT, SENDABLE, TIMER,
};
use viastack_kernel::{
    AutoBind, Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType,
    Layer, Message, NodeId, Sendable, Session,
};

use viastack_protocols::events::{self, SEND_REFUSED};

use crate::vsync::{view_notice, ViewNotice, VIEW};
use crate::wire::{LwgPdu, Member, ViewId};

/// A `Joined` announcement this layer generates (a `Sendable` subtype).
pub static LWG_JOINED: EventTypeDef = EventTypeDef::new("LwgJoined", Some(&SENDABLE));

/// A notice up a light channel the `lwg` session refused (its body an [`LwgError`]).
pub static LWG_REFUSED: EventTypeDef = EventTypeDef::new("LwgRefused", Some(&CHANNEL_EVENT));

const ANNOUNCE: u64 = 0x4c57_4701;

/// Why the `lwg` session refused a channel or a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LwgError {
    /// Two channels of one `lwg` session have names with the same light-group id (FNV-1a 32):
    /// their messages would mix, so the second one is refused (counted `lwg.id_collision`).
    #[error("light group id {id:#010x} of channel `{channel}` is already channel `{holder}`'s")]
    IdCollision {
        /// The colliding id.
        id: u32,
        /// The refused channel's name.
        channel: String,
        /// The name of the channel that has the id.
        holder: String,
    },
}

/// The id of the light group of channel `name`: FNV-1a 32.
pub fn group_id(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The id of a light view: its heavy view's counter and coordinator node, and the
/// coordinator's epoch mixed with the light members (FNV-1a 32 over them), so members that
/// installed different light memberships in one heavy view (they went on to different views,
/// and received different announcements) installed different light views.
pub fn light_view_id(heavy: ViewId, members: &[Member]) -> ViewId {
    let mut h: u32 = 0x811c_9dc5;
    for m in members {
        for b in m
            .node
            .0
            .to_be_bytes()
            .into_iter()
            .chain(m.epoch.to_be_bytes())
        {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    let epoch = match heavy.coord.epoch ^ h {
        0 => 1,
        e => e,
    };
    ViewId {
        counter: heavy.counter,
        coord: Member {
            node: heavy.coord.node,
            epoch,
        },
    }
}

/// The `lwg` layer.
#[derive(Debug, Clone)]
pub struct Lwg {
    name: String,
    node: NodeId,
    capacity: usize,
}

impl Lwg {
    /// A layer named `name` on node `node`, holding at most `capacity` messages waiting for
    /// their light view.
    pub fn new(name: impl Into<String>, node: NodeId, capacity: usize) -> Self {
        Lwg {
            name: name.into(),
            node,
            capacity: capacity.max(1),
        }
    }
}

impl Layer for Lwg {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            VIEW.id(),
            CHANNEL_INIT.id(),
            CHANNEL_CLOSE.id(),
            TIMER.id(),
        ]
    }
    /// A group below that announces views (`vsync`).
    fn requires(&self) -> Vec<EventType> {
        vec![VIEW.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![
            LWG_JOINED.id(),
            VIEW.id(),
            LWG_REFUSED.id(),
            SEND_REFUSED.id(),
        ]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(LwgSession {
            node: self.node,
            capacity: self.capacity,
            groups: BTreeMap::new(),
            heavy: None,
            carrier: ChannelId::NONE,
            joined: BTreeMap::new(),
            announced: false,
            installed: false,
            light: BTreeMap::new(),
            held: VecDeque::new(),
            timer: false,
            refused: Vec::new(),
        })
    }
}

/// Session of [`Lwg`].
#[derive(Debug)]
pub struct LwgSession {
    node: NodeId,
    capacity: usize,
    /// The light groups open here: id → channel.
    groups: BTreeMap<u32, ChannelId>,
    /// The current heavy view.
    heavy: Option<ViewNotice>,
    /// The channel the heavy view came up on (the shared `vsync`'s).
    carrier: ChannelId,
    /// Each member's first announcement in the current heavy view.
    joined: BTreeMap<NodeId, Vec<u32>>,
    /// This member announced in the current heavy view.
    announced: bool,
    /// The light views of the current heavy view are installed.
    installed: bool,
    /// The light groups this member is in, in the current heavy view, with their members.
    light: BTreeMap<u32, Vec<Member>>,
    /// Messages waiting for the light views, in arrival order.
    held: VecDeque<(u32, Event)>,
    /// An announce timer is pending.
    timer: bool,
    /// Channels refused (their light-group id collides with an open channel's).
    refused: Vec<ChannelId>,
}

impl LwgSession {
    /// Installs the light views of the current heavy view, then delivers what waited.
    fn install(&mut self, ctx: &mut Context<'_>) {
        self.installed = true;
        let Some(heavy) = &self.heavy else {
            return;
        };
        let heavy = heavy.clone();
        let groups: Vec<(u32, ChannelId)> = self.groups.iter().map(|(&g, &c)| (g, c)).collect();
        for (g, ch) in groups {
            self.install_group(&heavy, g, ch, ctx);
        }
        while let Some((g, ev)) = self.held.pop_front() {
            self.deliver(g, ev, ctx);
        }
    }

    /// Installs light group `g`'s view of `heavy`: the members that announced `g`, and this
    /// one, which has `g` open (its own announcement is missing only when the view ended
    /// before it came back, e.g. a view that may not carry messages under
    /// `primary = "majority"`).
    fn install_group(&mut self, heavy: &ViewNotice, g: u32, ch: ChannelId, ctx: &mut Context<'_>) {
        let members: Vec<Member> = heavy
            .members
            .iter()
            .filter(|m| {
                m.node == self.node || self.joined.get(&m.node).is_some_and(|gs| gs.contains(&g))
            })
            .copied()
            .collect();
        self.light.insert(g, members.clone());
        ctx.count("installed");
        ctx.go(Event::new(
            VIEW.id(),
            Direction::Up,
            ch,
            Body::Custom(Box::new(ViewNotice {
                id: light_view_id(heavy.id, &members),
                members,
                primary: heavy.primary,
            })),
        ));
    }

    fn deliver(&mut self, g: u32, mut ev: Event, ctx: &mut Context<'_>) {
        match (self.light.contains_key(&g), self.groups.get(&g)) {
            (true, Some(&ch)) => {
                ctx.count("delivered");
                ev.set_channel(ch);
                ctx.go(ev);
            }
            _ => ctx.count("foreign"),
        }
    }

    fn all_joined(&self) -> bool {
        self.heavy
            .as_ref()
            .is_some_and(|h| h.members.iter().all(|m| self.joined.contains_key(&m.node)))
    }

    fn announce(&mut self, ctx: &mut Context<'_>) {
        let Some(heavy) = &self.heavy else {
            return;
        };
        if self.announced {
            return;
        }
        self.announced = true;
        let pdu = LwgPdu::Joined {
            view: heavy.id,
            groups: self.groups.keys().copied().collect(),
        };
        ctx.count("announced");
        // One datagram per other member (bench group's LWG figure).
        ctx.count_n(
            "announce_datagrams",
            heavy.members.len().saturating_sub(1) as u64,
        );
        let m = Message::with_headroom(96, &pdu.emit());
        ctx.go(Event::sendable(
            LWG_JOINED.id(),
            Direction::Down,
            self.carrier,
            Sendable::new(self.node, Dest::Broadcast, m),
        ));
    }

    fn schedule_announce(&mut self, ctx: &mut Context<'_>) {
        if !self.timer {
            self.timer = true;
            ctx.set_timer(Duration::ZERO, ANNOUNCE);
        }
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event).cloned() else {
            ctx.go(event);
            return;
        };
        // The end of the old heavy view: its light views with what was announced in it.
        if self.heavy.is_some() && !self.installed {
            self.install(ctx);
        }
        self.heavy = Some(v);
        self.carrier = event.channel();
        self.joined.clear();
        self.light.clear();
        self.announced = false;
        self.installed = false;
        self.schedule_announce(ctx);
        if self.heavy.as_ref().is_some_and(|h| !h.primary) {
            // A view that carries no messages (`primary = "majority"`, a minority): nothing
            // to agree on, so its light views are its members, installed at once.
            if let Some(h) = &self.heavy {
                let all: Vec<u32> = self.groups.keys().copied().collect();
                for m in &h.members {
                    self.joined.insert(m.node, all.clone());
                }
            }
            self.install(ctx);
        }
    }

    fn on_up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        let source = s.source;
        let (pdu, len) = match LwgPdu::parse(s.message.as_slice()) {
            Ok(x) => x,
            Err(_) => {
                ctx.count("malformed");
                return;
            }
        };
        if s.message.pop(len).is_err() {
            ctx.count("malformed");
            return;
        }
        match pdu {
            LwgPdu::Data { group } => {
                if self.installed {
                    self.deliver(group, event, ctx);
                } else if self.held.len() < self.capacity {
                    ctx.count("held");
                    self.held.push_back((group, event));
                } else {
                    ctx.count("held_over");
                }
            }
            LwgPdu::Joined { view, groups } => {
                if self.heavy.as_ref().map(|h| h.id) != Some(view) {
                    ctx.count("stale_joined");
                    return;
                }
                self.joined.entry(source).or_insert(groups);
                if !self.installed && self.all_joined() {
                    self.install(ctx);
                }
            }
        }
    }
}

impl Session for LwgSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            if let Body::Timer(t) = &event.body {
                if t.token == ANNOUNCE {
                    self.timer = false;
                    self.announce(ctx);
                }
            }
            return;
        }
        if ty == VIEW.id() {
            self.on_view(event, ctx);
            return;
        }
        if ty == CHANNEL_INIT.id() {
            let ch = event.channel();
            if let Some(name) = ctx.channel_name(ch).map(str::to_owned) {
                let g = group_id(&name);
                if let Some(&holder) = self.groups.get(&g).filter(|&&c| c != ch) {
                    // Two names, one id: refuse the second channel, or their messages mix.
                    ctx.count("id_collision");
                    self.refused.push(ch);
                    let error = LwgError::IdCollision {
                        id: g,
                        channel: name,
                        holder: ctx.channel_name(holder).unwrap_or("?").to_owned(),
                    };
                    ctx.go(event);
                    ctx.go(Event::new(
                        LWG_REFUSED.id(),
                        Direction::Up,
                        ch,
                        Body::Custom(Box::new(error)),
                    ));
                    return;
                }
                self.groups.insert(g, ch);
                let minority = self.heavy.clone().filter(|h| !h.primary && self.installed);
                if let Some(h) = minority {
                    // A channel opened in a view that carries no messages (a restarted member
                    // alone under `primary = "majority"`): its light view at once, with the
                    // heavy view's members, as the others' were — nothing to agree on, and
                    // its announcement would wait for a primary view.
                    for m in &h.members {
                        self.joined.entry(m.node).or_default().push(g);
                    }
                    self.install_group(&h, g, ch, ctx);
                } else if self.announced {
                    ctx.count("joined_late");
                } else if self.heavy.is_some() {
                    self.schedule_announce(ctx);
                }
            }
            ctx.go(event);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            let ch = event.channel();
            self.groups.retain(|_, c| *c != ch);
            self.refused.retain(|c| *c != ch);
            ctx.go(event);
            return;
        }
        let ch = event.channel();
        match (event.dir(), event.sendable_mut()) {
            (Direction::Down, Some(s)) if self.refused.contains(&ch) => {
                ctx.count("refused");
                let tag = s.tag;
                ctx.go(events::failure(&SEND_REFUSED, ch, self.node, [tag]));
            }
            (Direction::Down, Some(s)) => {
                let group = self
                    .groups
                    .iter()
                    .find(|(_, c)| **c == ch)
                    .map(|(g, _)| *g)
                    .or_else(|| ctx.channel_name(ch).map(group_id))
                    .unwrap_or(0);
                s.message.push(&LwgPdu::Data { group }.emit());
                ctx.go(event);
            }
            (Direction::Up, Some(_)) => self.on_up(event, ctx),
            _ => ctx.go(event),
        }
    }

    /// Fills the new channel's empty slots with the sessions this one already shares a
    /// channel with: the heavy group and everything below it (automatic binding).
    fn auto_bind(&mut self, request: &mut AutoBind<'_>) {
        request.bind_companions();
    }
}

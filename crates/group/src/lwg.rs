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
//! One `lwg` session may ride several heavy groups: a channel's heavy group is the session
//! just below `lwg` in it ([`Context::session_below`]), and the session keeps its state (view,
//! announcements, light views, held messages) per heavy group. The mapping starts as the
//! binding: channels whose stack has `vsync` session `x` below `lwg` ride `x`'s heavy group
//! (two QoS with different lower layers, e.g. two devices on two ports, give two heavy groups
//! under one `lwg` session; channels bound to another `lwg` session ride another mapping). A
//! channel opened while a heavy view is current joins its light group at the next heavy view
//! (counted `lwg.joined_late`). The heavy group of each packet is looked up (`session_below`)
//! per packet rather than cached: callgrind of stacks/lwg.toml's run
//! (`lwg_random shipped_lwg_stack_holds`, 446.0 M instructions) counts 8,445 calls costing
//! 532 k instructions (0.12 % of the run, 3.4 % of the `lwg` session's own 15.5 M).
//!
//! The mapping changes at run time (Rodrigues et al.'s switch): an [`LWG_MOVE`] command down
//! light channel `a` ([`move_command`]; `[[scenario.move]]` in a stack file,
//! `Channel::move_light_group` on the embedding API) moves `a`'s light group to the heavy
//! group of light channel `d`:
//!
//! 1. the asked member multicasts `Switch { group, to, generation }` on the old heavy group
//!    (`lwg.switch_sent`; refused with an [`LWG_REFUSED`] notice carrying
//!    [`LwgError::MoveRefused`], `lwg.move_refused`, when the group already rides `d`'s heavy
//!    group, is moving, or its heavy view carries no messages);
//! 2. each member that delivers it (`lwg.switched`) stops sending the group there (its sends
//!    wait, `lwg.pending`) and multicasts `Flushed { group }` after its last message of the
//!    group (FIFO per sender); it delivers each sender's messages up to that sender's
//!    `Flushed` in the old light view. With every old light member's `Flushed` in, the old
//!    light view ends (`lwg.moved`). A view change of the old heavy group before that does
//!    not end the move: the messages and `Flushed` still queued at their senders come in the
//!    next view, whose light view of the group is installed as usual, and there every member
//!    sends `Switch` (for a member that missed it) and `Flushed` again;
//! 3. on the new heavy group, the member multicasts `Moved { view, group, generation, open }`
//!    in its current heavy view; every other member of that view answers with its own
//!    `Moved` — `open` when the group rides this heavy group there (it is in the switch view),
//!    not `open` when it does not have the group, and only at the end of its own move when
//!    the group is still on another heavy group. The *switch view* is installed when every
//!    member's `Moved` is in, or at the end of that heavy view with those received (virtual
//!    synchrony of the new heavy group: members that go on together received the same ones):
//!    the members that said `open`, its id the heavy view's marked as a switch view, with the
//!    largest generation (`lwg.switch_installed`). Messages of a member after its `Moved` wait
//!    for the switch view (a member that sent `Moved` sends nothing of the group before its
//!    switch view is installed, then what waited);
//! 4. later heavy views of the new heavy group list the group in their `Joined` as usual.
//!
//! Light view ids carry the group's *generation* (its move count) above the heavy counter
//! (bit 40 and up, [`light_view_id_at`]), so each member's light views keep increasing across
//! moves; once a group moved, announcements carry generations (`JoinedAt`) and a light view
//! takes the largest announced, so its members agree on its id. A member that missed a move (cut off, or restarted: its channel starts on its
//! configured heavy group) announces the group in a `Joined` on the old heavy group; members
//! that moved it away pull it with a `Switch` (`lwg.pulled`, once per heavy view), so the
//! light group becomes one again. Which side is the straggler is told by the generations
//! announced (`JoinedAt`; a plain `Joined` is generation 0): a member pulls a sender whose
//! generation is below its own — so after a move back to the configured heavy group (A→B→A),
//! a member cut off on B at generation 1 is pulled by those at generation 2 — or equal to its
//! own when its heavy group ranks first (the smallest light-group id configured on it: the two
//! sides of a partition moved the group as often, to different heavy groups); a `Switch` at a
//! generation not above a member's own is stale and ignored (`lwg.stale_switch`), so a
//! straggler's pull does not drag members that are ahead of it, and two members never pull
//! each other. Under `primary = "majority"` a move asked in a minority view is refused (no message
//! may go there); in the majority it proceeds, and the minority's members are pulled after the
//! heal (issue 18; crates/group/tests/lwg_move_refused.rs, crates/scenario/tests/lwg_move.rs).
//!
//! A `Switch` from a member of this member's own light view of the group on that heavy group
//! is the group's own move, never a pull (a puller is not in the light view: its group rides
//! elsewhere), so it is followed whatever its generation (`lwg.switch_raised` when it is not
//! above this member's, at a generation above it), and a move carried into a later heavy view
//! sends its `Switch` again above the generation that view's light members agreed on. Without
//! this, a member whose generation was raised after the `Switch` went out (a straggler pulled
//! into the heavy group meanwhile: its switch view takes a generation above the members'
//! own) ignored it as stale and never sent its `Flushed`, and the asker, waiting for it,
//! held its sends of the group for ever (issue 18, seed 919 of the move-back run with a
//! partition: 16 messages of the asker never delivered anywhere).
//!
//! Order across a move: over `total-order` on each heavy group, a light channel keeps one
//! total order across its move (its old light view's messages in the old heavy group's order,
//! the switch view's in the new one's; virtual synchrony separates the two). Channels on
//! different heavy groups share no order, so order across channels holds per heavy group: a
//! moved group is ordered with its old heavy group's channels up to the switch and with its
//! new one's after it. A stack file that asks `expect = "cross-channel-order"` (one order over
//! every channel) together with a `[[scenario.move]]` is refused at the move's line.
//!
//! Light-group ids are the FNV-1a 32 hash of channel names, so two names may share one: the
//! session refuses the second channel of such a pair (an [`LWG_REFUSED`] notice carrying
//! [`LwgError::IdCollision`], counted `lwg.id_collision`; its sends are refused with
//! `SendRefused`, `lwg.refused`) rather than mix their messages.
//!
//! # Wire and counters
//!
//! [`crate::wire::LwgPdu`], docs/WIRE.md. Counters: `lwg.announced`, `lwg.installed` (light
//! views), `lwg.delivered`, `lwg.held` (waited for installation), `lwg.foreign` (a group this
//! member is not in), `lwg.stale_joined`, `lwg.malformed`, `lwg.held_over` (beyond the
//! `capacity` bound, dropped), `lwg.joined_late` (a channel opened after this view's `Joined`),
//! `lwg.announce_datagrams` (datagrams of the `Joined` announcements: one per other member);
//! moves: `lwg.switch_sent`, `lwg.switched`, `lwg.moved`, `lwg.switch_installed`,
//! `lwg.pending` (sends waiting for the end of a move), `lwg.pending_over` (beyond `capacity`:
//! refused), `lwg.stale_moved`, `lwg.switch_ignored`, `lwg.stale_switch`, `lwg.switch_unknown`, `lwg.pulled`,
//! `lwg.move_refused`, `lwg.switch_raised` (a move followed or sent again above its
//! `Switch`'s generation); collisions: `lwg.id_collision`, `lwg.refused`.

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_EVENT, CHANNEL_INIT, SENDABLE, TIMER,
};
use viastack_kernel::{
    AutoBind, Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType,
    Layer, Message, NodeId, Sendable, Session, SessionId,
};

use viastack_protocols::events::{self, SEND_REFUSED};

use crate::vsync::{view_notice, ViewNotice, VIEW};
use crate::wire::{LwgPdu, Member, ViewId};

/// A `Joined` announcement this layer generates (a `Sendable` subtype).
pub static LWG_JOINED: EventTypeDef = EventTypeDef::new("LwgJoined", Some(&SENDABLE));

/// A notice up a light channel the `lwg` session refused (its body an [`LwgError`]).
pub static LWG_REFUSED: EventTypeDef = EventTypeDef::new("LwgRefused", Some(&CHANNEL_EVENT));

/// A command down a light channel: move its light group to another heavy group (body a
/// [`MoveCommand`]; [`move_command`] builds it).
pub static LWG_MOVE: EventTypeDef = EventTypeDef::new("LwgMove", Some(&CHANNEL_EVENT));

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
    /// A move command the session cannot carry out (counted `lwg.move_refused`).
    #[error("light channel `{channel}` cannot move to `{to}`'s heavy group: {reason}")]
    MoveRefused {
        /// The light channel asked to move.
        channel: String,
        /// The destination light channel.
        to: String,
        /// Why not.
        reason: &'static str,
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

/// The id of the light view of a group at `generation` (its move count) in heavy view `heavy`:
/// [`light_view_id`] with the generation above the heavy counter (bits 40 and up), so a light
/// group's views keep increasing across moves; a switch view (`switch`) is salted apart from
/// the heavy view's ordinary light view with the same members.
pub fn light_view_id_at(
    heavy: ViewId,
    generation: u32,
    members: &[Member],
    switch: bool,
) -> ViewId {
    let mut id = light_view_id(heavy, members);
    id.counter = id.counter.wrapping_add(u64::from(generation) << 40);
    if switch {
        id.coord.epoch = match id.coord.epoch ^ 0x5357_4954 {
            0 => 1,
            e => e,
        };
    }
    id
}

/// A move command: an [`LWG_MOVE`] event down a light channel, its body this, moves the
/// channel's light group to the heavy group of light channel `to` (bound to the same `lwg`
/// session) at every member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveCommand {
    /// A light channel on the destination heavy group.
    pub to: String,
}

/// The command event moving light channel `channel`'s group to `to`'s heavy group.
pub fn move_command(channel: ChannelId, to: impl Into<String>) -> Event {
    Event::new(
        LWG_MOVE.id(),
        Direction::Down,
        channel,
        Body::Custom(Box::new(MoveCommand { to: to.into() })),
    )
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
            LWG_MOVE.id(),
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
            heavies: BTreeMap::new(),
            refused: Vec::new(),
        })
    }
}

/// A light group open here.
#[derive(Debug)]
struct Group {
    /// Its channel.
    ch: ChannelId,
    /// The heavy group it rides now (the session below `lwg` on the channels of that group).
    home: SessionId,
    /// The heavy group its channel was opened on (its configured one).
    origin: SessionId,
    /// The channel its messages go down (its own, or one of its home heavy group's).
    via: ChannelId,
    /// Its move count (light view ids carry it).
    generation: u32,
    /// The light group named as destination by its last move (to pull stragglers).
    moved_to: Option<u32>,
    /// Moving away from `home`: the switch delivered, waiting for the `Flushed`.
    moving: Option<Moving>,
    /// Moved, waiting for a light view on the new heavy group: sends wait in `pending`.
    waiting: bool,
    /// Sends waiting for the end of a move.
    pending: VecDeque<Event>,
    /// The counter of the last light view installed (views keep increasing across moves).
    last_counter: u64,
}

#[derive(Debug)]
struct Moving {
    /// The destination heavy group and a channel down to it.
    to: SessionId,
    via: ChannelId,
    /// The light group named as destination.
    to_group: u32,
    /// The generation once moved.
    generation: u32,
    /// The light members of the old view (whose `Flushed` end it).
    members: Vec<NodeId>,
}

/// A switch view being formed on a heavy group (in its current view).
#[derive(Debug, Default)]
struct Switching {
    /// Each member's first `Moved`: (generation, open).
    moved: BTreeMap<NodeId, (u32, bool)>,
    /// This member sent its `Moved`.
    sent: bool,
    /// The switch view is installed.
    installed: bool,
    /// Messages of members that moved, waiting for the switch view.
    held: VecDeque<Event>,
}

/// Per heavy group state.
#[derive(Debug)]
struct Heavy {
    /// The current heavy view.
    view: Option<ViewNotice>,
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
    /// Packets waiting for the light views, in arrival order.
    held: VecDeque<(NodeId, LwgPdu, Event)>,
    /// An announce timer is pending.
    timer: bool,
    /// `Flushed` senders per light group in the current view.
    flushed: BTreeMap<u32, Vec<NodeId>>,
    /// Switch views being formed in the current view.
    switches: BTreeMap<u32, Switching>,
    /// Light groups whose stragglers were pulled in the current view, with the generation
    /// of the `Switch` sent.
    pulled: BTreeMap<u32, u32>,
    /// Light groups announced by others in the current view before the light views were
    /// installed, with the announcers' generations (stragglers judged at installation).
    candidates: Vec<(u32, u32)>,
    /// The largest generation announced per light group in the current view.
    generations: BTreeMap<u32, u32>,
}

impl Default for Heavy {
    fn default() -> Self {
        Heavy {
            view: None,
            carrier: ChannelId::NONE,
            joined: BTreeMap::new(),
            announced: false,
            installed: false,
            light: BTreeMap::new(),
            held: VecDeque::new(),
            timer: false,
            flushed: BTreeMap::new(),
            switches: BTreeMap::new(),
            pulled: BTreeMap::new(),
            candidates: Vec::new(),
            generations: BTreeMap::new(),
        }
    }
}

/// Session of [`Lwg`].
#[derive(Debug)]
pub struct LwgSession {
    node: NodeId,
    capacity: usize,
    /// The light groups open here, by id.
    groups: BTreeMap<u32, Group>,
    /// The heavy groups, by the session below `lwg` on their channels.
    heavies: BTreeMap<SessionId, Heavy>,
    /// Channels refused (their light-group id collides with an open channel's).
    refused: Vec<ChannelId>,
}

fn below(ctx: &Context<'_>, ch: ChannelId) -> SessionId {
    ctx.session_below(ch).unwrap_or(SessionId::KERNEL)
}

impl LwgSession {
    /// The light groups open here (ids), for tests and tools.
    pub fn groups(&self) -> Vec<u32> {
        self.groups.keys().copied().collect()
    }

    /// Sends `pdu` down heavy group `h`'s carrier.
    fn send_control(&mut self, h: SessionId, pdu: &LwgPdu, ctx: &mut Context<'_>) {
        let Some(heavy) = self.heavies.get(&h) else {
            return;
        };
        let m = Message::with_headroom(96, &pdu.emit());
        ctx.go(Event::sendable(
            LWG_JOINED.id(),
            Direction::Down,
            heavy.carrier,
            Sendable::new(self.node, Dest::Broadcast, m),
        ));
    }

    /// Installs the light views of heavy group `h`'s current view, then handles what waited.
    fn install(&mut self, h: SessionId, ctx: &mut Context<'_>) {
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        heavy.installed = true;
        let Some(view) = heavy.view.clone() else {
            return;
        };
        let switching: Vec<u32> = heavy
            .switches
            .iter()
            .filter(|(_, s)| s.sent)
            .map(|(&g, _)| g)
            .collect();
        let groups: Vec<u32> = self
            .groups
            .iter()
            .filter(|(g, grp)| grp.home == h && !switching.contains(g))
            .map(|(&g, _)| g)
            .collect();
        for g in groups {
            self.install_group(h, &view, g, ctx);
        }
        while let Some((source, pdu, ev)) = self
            .heavies
            .get_mut(&h)
            .and_then(|heavy| heavy.held.pop_front())
        {
            self.dispatch(h, source, pdu, ev, ctx);
        }
        let candidates = self
            .heavies
            .get_mut(&h)
            .map(|heavy| std::mem::take(&mut heavy.candidates))
            .unwrap_or_default();
        if !candidates.is_empty() {
            self.pull_stragglers(h, &candidates, ctx);
        }
    }

    /// Installs light group `g`'s view of `view` (heavy group `h`): the members that announced
    /// `g`, and this one, which has `g` open (its own announcement is missing only when the
    /// view ended before it came back, e.g. a view that may not carry messages under
    /// `primary = "majority"`).
    fn install_group(&mut self, h: SessionId, view: &ViewNotice, g: u32, ctx: &mut Context<'_>) {
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        let Some(grp) = self.groups.get_mut(&g) else {
            return;
        };
        let members: Vec<Member> = view
            .members
            .iter()
            .filter(|m| {
                m.node == self.node || heavy.joined.get(&m.node).is_some_and(|gs| gs.contains(&g))
            })
            .copied()
            .collect();
        heavy.light.insert(g, members.clone());
        // The generation the members announced (they agree on the announcements).
        if let Some(&generation) = heavy.generations.get(&g) {
            grp.generation = grp.generation.max(generation);
        }
        ctx.count("installed");
        let id = light_view_id_at(view.id, grp.generation, &members, false);
        grp.last_counter = grp.last_counter.max(id.counter);
        ctx.go(Event::new(
            VIEW.id(),
            Direction::Up,
            grp.ch,
            Body::Custom(Box::new(ViewNotice {
                id,
                members,
                primary: view.primary,
            })),
        ));
        if let Some(moving) = &mut grp.moving {
            // A move that began in an earlier view: this view's light members flush again
            // (a member that missed the `Switch` gets it again), at a generation above the
            // one they agree on now (a member pulled in meanwhile may have raised it).
            if moving.generation <= grp.generation {
                ctx.count("switch_raised");
                moving.generation = grp.generation.saturating_add(1);
            }
            moving.members = view
                .members
                .iter()
                .filter(|m| {
                    m.node == self.node
                        || heavy.joined.get(&m.node).is_some_and(|gs| gs.contains(&g))
                })
                .map(|m| m.node)
                .collect();
            let switch = LwgPdu::Switch {
                group: g,
                to: moving.to_group,
                generation: moving.generation,
            };
            self.send_control(h, &switch, ctx);
            self.send_control(h, &LwgPdu::Flushed { group: g }, ctx);
            self.check_flushed(g, ctx);
            return;
        }
        self.release(g, ctx);
    }

    /// Sends what waited of light group `g` (after a move), once it has a light view on its
    /// new heavy group.
    fn release(&mut self, g: u32, ctx: &mut Context<'_>) {
        let Some(grp) = self.groups.get_mut(&g) else {
            return;
        };
        grp.waiting = false;
        let via = grp.via;
        let pending = std::mem::take(&mut grp.pending);
        for mut ev in pending {
            if let Some(s) = ev.sendable_mut() {
                s.message.push(&LwgPdu::Data { group: g }.emit());
            }
            ev.set_channel(via);
            ctx.go(ev);
        }
    }

    /// Delivers `ev` of light group `g` received on heavy group `h`, if this member is in the
    /// group's light view there.
    fn deliver(&mut self, h: SessionId, g: u32, mut ev: Event, ctx: &mut Context<'_>) {
        let in_view = self
            .heavies
            .get(&h)
            .is_some_and(|heavy| heavy.light.contains_key(&g));
        match self.groups.get(&g) {
            Some(grp) if in_view && grp.home == h => {
                ctx.count("delivered");
                ev.set_channel(grp.ch);
                ctx.go(ev);
            }
            _ => ctx.count("foreign"),
        }
    }

    fn all_joined(&self, h: SessionId) -> bool {
        self.heavies.get(&h).is_some_and(|heavy| {
            heavy
                .view
                .as_ref()
                .is_some_and(|v| v.members.iter().all(|m| heavy.joined.contains_key(&m.node)))
        })
    }

    fn announce(&mut self, h: SessionId, ctx: &mut Context<'_>) {
        let groups: Vec<(u32, u32)> = self
            .groups
            .iter()
            .filter(|(_, grp)| grp.home == h)
            .map(|(&g, grp)| (g, grp.generation))
            .collect();
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        let Some(view) = &heavy.view else {
            return;
        };
        if heavy.announced {
            return;
        }
        heavy.announced = true;
        let pdu = if groups.iter().any(|&(_, generation)| generation > 0) {
            LwgPdu::JoinedAt {
                view: view.id,
                groups,
            }
        } else {
            LwgPdu::Joined {
                view: view.id,
                groups: groups.into_iter().map(|(g, _)| g).collect(),
            }
        };
        ctx.count("announced");
        // One datagram per other member (bench group's LWG figure).
        ctx.count_n(
            "announce_datagrams",
            view.members.len().saturating_sub(1) as u64,
        );
        self.send_control(h, &pdu, ctx);
    }

    fn schedule_announce(&mut self, h: SessionId, ctx: &mut Context<'_>) {
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        if !heavy.timer {
            heavy.timer = true;
            ctx.set_timer(Duration::ZERO, (ANNOUNCE << 32) | u64::from(h.0));
        }
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event).cloned() else {
            ctx.go(event);
            return;
        };
        let h = below(ctx, event.channel());
        let heavy = self.heavies.entry(h).or_default();
        // The end of the old heavy view: its light views with what was announced in it, the
        // switch views formed in it, and the moves away from it (virtual synchrony: the
        // members that go on agree on the `Switch`, the messages before it and the `Moved`).
        if heavy.view.is_some() && !heavy.installed {
            self.install(h, ctx);
        }
        let forming: Vec<u32> = self.heavies.get(&h).map_or(Vec::new(), |heavy| {
            heavy
                .switches
                .iter()
                .filter(|(_, s)| s.sent && !s.installed)
                .map(|(&g, _)| g)
                .collect()
        });
        for g in forming {
            self.install_switch(h, g, ctx);
        }
        // A move away from `h` not complete goes on in the next view: the `Flushed` (and the
        // messages before them) still queued at their senders come in it; at its light view
        // the `Switch` and this member's `Flushed` go again (install_group).
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        heavy.view = Some(v);
        heavy.carrier = event.channel();
        heavy.joined.clear();
        heavy.light.clear();
        heavy.held.clear();
        heavy.flushed.clear();
        heavy.switches.clear();
        heavy.pulled.clear();
        heavy.candidates.clear();
        heavy.generations.clear();
        heavy.announced = false;
        heavy.installed = false;
        let primary = heavy.view.as_ref().is_some_and(|v| v.primary);
        self.schedule_announce(h, ctx);
        if !primary {
            // A view that carries no messages (`primary = "majority"`, a minority): nothing
            // to agree on, so its light views are its members, installed at once.
            let all: Vec<u32> = self
                .groups
                .iter()
                .filter(|(_, grp)| grp.home == h)
                .map(|(&g, _)| g)
                .collect();
            if let Some(heavy) = self.heavies.get_mut(&h) {
                if let Some(view) = &heavy.view {
                    for m in &view.members {
                        heavy.joined.insert(m.node, all.clone());
                    }
                }
            }
            self.install(h, ctx);
        }
    }

    /// A packet of heavy group `h` whose light views are installed.
    fn dispatch(
        &mut self,
        h: SessionId,
        source: NodeId,
        pdu: LwgPdu,
        ev: Event,
        ctx: &mut Context<'_>,
    ) {
        match pdu {
            LwgPdu::Data { group } => {
                let heavy = self.heavies.entry(h).or_default();
                if let Some(sw) = heavy
                    .switches
                    .get_mut(&group)
                    .filter(|sw| !sw.installed && sw.moved.contains_key(&source))
                {
                    // Sent in the switch view being formed.
                    if sw.held.len() < self.capacity {
                        ctx.count("held");
                        sw.held.push_back(ev);
                    } else {
                        ctx.count("held_over");
                    }
                    return;
                }
                self.deliver(h, group, ev, ctx);
            }
            LwgPdu::Switch {
                group,
                to,
                generation,
            } => self.on_switch(h, source, group, to, generation, ctx),
            LwgPdu::Flushed { group } => {
                let heavy = self.heavies.entry(h).or_default();
                let f = heavy.flushed.entry(group).or_default();
                if !f.contains(&source) {
                    f.push(source);
                }
                self.check_flushed(group, ctx);
            }
            LwgPdu::Moved {
                view,
                group,
                generation,
                open,
            } => self.on_moved(h, source, view, group, generation, open, ctx),
            LwgPdu::Joined { .. } | LwgPdu::JoinedAt { .. } => {}
        }
    }

    /// A `Switch` delivered on heavy group `h`: light group `group` moves to the heavy group
    /// of light group `to`.
    fn on_switch(
        &mut self,
        h: SessionId,
        source: NodeId,
        g: u32,
        to: u32,
        generation: u32,
        ctx: &mut Context<'_>,
    ) {
        let dest = match self.groups.get(&to) {
            Some(t) => (t.home, t.via),
            None => {
                ctx.count("switch_unknown");
                return;
            }
        };
        let members: Vec<NodeId> = self
            .heavies
            .get(&h)
            .and_then(|heavy| heavy.light.get(&g))
            .map_or(vec![self.node], |ms| ms.iter().map(|m| m.node).collect());
        // From a member of this member's light view of `g` on `h` (this one included): a move
        // of the group itself (its asker, or a mover sending it again at a view change), never
        // a straggler's pull (a puller's group rides another heavy group, so it did not
        // announce the group here and is not in the light view). Every member of the light
        // view must flush for it — the movers wait for each one's `Flushed` — so its
        // generation is no reason to ignore it: members may have raised theirs since it was
        // sent (a straggler pulled into this heavy group meanwhile: its switch view; issue
        // 18's seed 919, where the asker then waited for ever and its sends with it).
        let peer = members.contains(&source);
        let Some(grp) = self.groups.get_mut(&g) else {
            ctx.count("foreign");
            return;
        };
        if grp.home != h || grp.moving.is_some() || dest.0 == h {
            ctx.count("switch_ignored");
            return;
        }
        if generation <= grp.generation {
            if !peer {
                // A pull from a member behind this one (itself cut off from a later move).
                ctx.count("stale_switch");
                return;
            }
            // A peer's move sent before this member's generation was raised: followed, at a
            // generation above this member's.
            ctx.count("switch_raised");
        }
        ctx.count("switched");
        grp.moving = Some(Moving {
            to: dest.0,
            via: dest.1,
            to_group: to,
            generation: generation.max(grp.generation + 1),
            members,
        });
        // After this member's last message of the group on `h` (FIFO per sender).
        self.send_control(h, &LwgPdu::Flushed { group: g }, ctx);
        self.check_flushed(g, ctx);
    }

    /// Completes light group `g`'s move when every member of its old light view has flushed.
    fn check_flushed(&mut self, g: u32, ctx: &mut Context<'_>) {
        let Some(grp) = self.groups.get(&g) else {
            return;
        };
        let Some(moving) = &grp.moving else {
            return;
        };
        let flushed = self
            .heavies
            .get(&grp.home)
            .and_then(|heavy| heavy.flushed.get(&g));
        if moving
            .members
            .iter()
            .all(|m| flushed.is_some_and(|f| f.contains(m)))
        {
            self.complete(g, ctx);
        }
    }

    /// Ends light group `g`'s light view on its old heavy group and starts its switch view on
    /// the new one.
    fn complete(&mut self, g: u32, ctx: &mut Context<'_>) {
        let Some(grp) = self.groups.get_mut(&g) else {
            return;
        };
        let Some(moving) = grp.moving.take() else {
            return;
        };
        let old = grp.home;
        grp.home = moving.to;
        grp.via = moving.via;
        grp.generation = moving.generation;
        grp.moved_to = Some(moving.to_group);
        grp.waiting = true;
        let generation = grp.generation;
        ctx.count("moved");
        if let Some(heavy) = self.heavies.get_mut(&old) {
            heavy.light.remove(&g);
        }
        let d = moving.to;
        let Some(heavy) = self.heavies.get_mut(&d) else {
            // No view yet on the new heavy group: its first view's announcement lists `g`.
            return;
        };
        let Some(view) = heavy.view.as_ref().filter(|v| v.primary) else {
            return;
        };
        let view = view.id;
        let sw = heavy.switches.entry(g).or_default();
        if sw.sent {
            return;
        }
        sw.sent = true;
        self.send_control(
            d,
            &LwgPdu::Moved {
                view,
                group: g,
                generation,
                open: true,
            },
            ctx,
        );
    }

    /// A `Moved` delivered on heavy group `h`.
    #[allow(clippy::too_many_arguments)]
    fn on_moved(
        &mut self,
        h: SessionId,
        source: NodeId,
        view: ViewId,
        g: u32,
        generation: u32,
        open: bool,
        ctx: &mut Context<'_>,
    ) {
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        if heavy.view.as_ref().map(|v| v.id) != Some(view) {
            ctx.count("stale_moved");
            return;
        }
        let sw = heavy.switches.entry(g).or_default();
        sw.moved.entry(source).or_insert((generation, open));
        if !sw.sent {
            // Answer: in the switch view if the group rides this heavy group here and is not
            // moving; out of it if the group is not open here; later (at the end of its own
            // move) if it is still on another heavy group.
            let answer = match self.groups.get(&g) {
                None => Some((0, false)),
                Some(grp) if grp.home == h && grp.moving.is_none() => {
                    Some((grp.generation + 1, true))
                }
                Some(_) => None,
            };
            if let Some((generation, open)) = answer {
                sw.sent = true;
                self.send_control(
                    h,
                    &LwgPdu::Moved {
                        view,
                        group: g,
                        generation,
                        open,
                    },
                    ctx,
                );
            }
        }
        let ready = self.heavies.get(&h).is_some_and(|heavy| {
            heavy.switches.get(&g).is_some_and(|sw| {
                sw.sent
                    && !sw.installed
                    && heavy
                        .view
                        .as_ref()
                        .is_some_and(|v| v.members.iter().all(|m| sw.moved.contains_key(&m.node)))
            })
        });
        if ready {
            self.install_switch(h, g, ctx);
        }
    }

    /// Installs light group `g`'s switch view on heavy group `h`: the members of its view that
    /// said they are in it.
    fn install_switch(&mut self, h: SessionId, g: u32, ctx: &mut Context<'_>) {
        let Some(heavy) = self.heavies.get_mut(&h) else {
            return;
        };
        let Some(view) = heavy.view.clone() else {
            return;
        };
        let Some(sw) = heavy.switches.get_mut(&g) else {
            return;
        };
        sw.installed = true;
        let held = std::mem::take(&mut sw.held);
        let members: Vec<Member> = view
            .members
            .iter()
            .filter(|m| m.node == self.node || sw.moved.get(&m.node).is_some_and(|x| x.1))
            .copied()
            .collect();
        let generation = sw
            .moved
            .values()
            .filter(|x| x.1)
            .map(|x| x.0)
            .max()
            .unwrap_or(0);
        let Some(grp) = self.groups.get_mut(&g).filter(|grp| grp.home == h) else {
            return;
        };
        grp.generation = grp.generation.max(generation);
        let mut id = light_view_id_at(view.id, grp.generation, &members, true);
        if id.counter <= grp.last_counter {
            // This member's own `Moved` missed the heavy view (it is not in the others'
            // switch view, so the id is its own anyway): keep its views increasing.
            grp.generation = u32::try_from(grp.last_counter >> 40)
                .unwrap_or(u32::MAX)
                .saturating_add(1);
            id = light_view_id_at(view.id, grp.generation, &members, true);
        }
        grp.last_counter = grp.last_counter.max(id.counter);
        heavy.light.insert(g, members.clone());
        ctx.count("switch_installed");
        ctx.go(Event::new(
            VIEW.id(),
            Direction::Up,
            grp.ch,
            Body::Custom(Box::new(ViewNotice {
                id,
                members,
                primary: view.primary,
            })),
        ));
        for ev in held {
            self.deliver(h, g, ev, ctx);
        }
        self.release(g, ctx);
    }

    /// A `Joined` on heavy group `h` lists light groups (with the generations the sender has
    /// them at) that moved away from `h` here: the sender missed their move (it was cut off,
    /// or restarted); pull it with a `Switch`. The sender is the straggler when its generation
    /// is below this member's (it missed a move this member made: the first move away from the
    /// configured heavy group, or a later one, e.g. a move back), or equal to it while this
    /// member's heavy group outranks `h` ([`Self::rank`]: two sides of a partition moved the
    /// group as often, to different heavy groups) — never the other way round, so two members
    /// never pull each other; and not when a member of `h` announced the group at a generation
    /// that is not behind (this member is behind too: judged once the view's announcements are
    /// in, at the light views' installation). The `Switch` carries a generation above
    /// every one announced on `h`, so members not behind ignore it (`lwg.stale_switch`).
    fn pull_stragglers(&mut self, h: SessionId, groups: &[(u32, u32)], ctx: &mut Context<'_>) {
        for &(g, theirs) in groups {
            let Some(grp) = self.groups.get(&g) else {
                continue;
            };
            let Some(to) = grp.moved_to else {
                continue;
            };
            let (mine, home) = (grp.generation, grp.home);
            if home == h || grp.moving.is_some() {
                continue;
            }
            // Which of two heavy groups wins at equal generations (two sides of a partition
            // moved the group as often, to different heavy groups).
            let wins = self.rank(home) < self.rank(h);
            let behind = |e: u32| e < mine || (e == mine && wins);
            let Some(heavy) = self.heavies.get_mut(&h) else {
                continue;
            };
            let announced = heavy.generations.get(&g).copied().unwrap_or(0).max(theirs);
            if !behind(theirs) || !behind(announced) {
                // Not behind, or a member of `h` is not behind this one: this one is behind
                // too (cut off from a later move), and it is that member's to pull.
                continue;
            }
            // Above the generation of every member of `h` announced so far.
            let generation = mine.max(announced + 1);
            if heavy.pulled.get(&g).is_some_and(|&sent| sent >= generation)
                || !heavy.view.as_ref().is_some_and(|v| v.primary)
            {
                continue;
            }
            heavy.pulled.insert(g, generation);
            ctx.count("pulled");
            self.send_control(
                h,
                &LwgPdu::Switch {
                    group: g,
                    to,
                    generation,
                },
                ctx,
            );
        }
    }

    /// The rank of heavy group `h`, the same at every member (each opens the same channels on
    /// the same heavy groups): the smallest light-group id configured on it.
    fn rank(&self, h: SessionId) -> u32 {
        self.groups
            .iter()
            .filter(|(_, grp)| grp.origin == h)
            .map(|(&g, _)| g)
            .min()
            .unwrap_or(u32::MAX)
    }

    fn on_up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let h = below(ctx, event.channel());
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
        let heavy = self.heavies.entry(h).or_default();
        // The groups a `Joined` lists, with the sender's generations (0 without them).
        let mut announced: Vec<(u32, u32)> = Vec::new();
        let pdu = match pdu {
            LwgPdu::Joined { view, groups } => {
                announced = groups.iter().map(|&g| (g, 0)).collect();
                LwgPdu::Joined { view, groups }
            }
            LwgPdu::JoinedAt { view, groups } => {
                announced.clone_from(&groups);
                if heavy.view.as_ref().map(|v| v.id) == Some(view)
                    && !heavy.joined.contains_key(&source)
                {
                    for &(g, generation) in &groups {
                        let e = heavy.generations.entry(g).or_default();
                        *e = (*e).max(generation);
                    }
                }
                LwgPdu::Joined {
                    view,
                    groups: groups.into_iter().map(|(g, _)| g).collect(),
                }
            }
            pdu => pdu,
        };
        match pdu {
            LwgPdu::Joined { view, groups } => {
                if heavy.view.as_ref().map(|v| v.id) != Some(view) {
                    ctx.count("stale_joined");
                    return;
                }
                let Some(heavy) = self.heavies.get_mut(&h) else {
                    return;
                };
                if source != self.node {
                    if heavy.installed {
                        self.pull_stragglers(h, &announced, ctx);
                    } else {
                        // Judged once every announcement of the view is in (at the light
                        // views' installation): one that says this member is behind too may
                        // come later.
                        heavy.candidates.extend(announced);
                    }
                }
                let Some(heavy) = self.heavies.get_mut(&h) else {
                    return;
                };
                heavy.joined.entry(source).or_insert(groups);
                if !heavy.installed && self.all_joined(h) {
                    self.install(h, ctx);
                }
            }
            pdu if heavy.installed => self.dispatch(h, source, pdu, event, ctx),
            pdu => {
                if heavy.held.len() < self.capacity {
                    ctx.count("held");
                    heavy.held.push_back((source, pdu, event));
                } else {
                    ctx.count("held_over");
                }
            }
        }
    }

    /// A move command down light channel `ch`.
    fn on_move(&mut self, event: &Event, ctx: &mut Context<'_>) {
        let ch = event.channel();
        let Some(cmd) = event.custom::<MoveCommand>() else {
            return;
        };
        let to = group_id(&cmd.to);
        let g = self
            .groups
            .iter()
            .find(|(_, grp)| grp.ch == ch)
            .map(|(&g, _)| g);
        let reason = match (g.and_then(|g| self.groups.get(&g)), self.groups.get(&to)) {
            (None, _) => Some("the channel is not a light group of this lwg session"),
            (_, None) => Some("the destination is not a light channel of this lwg session"),
            (Some(grp), Some(t)) if grp.home == t.home => {
                Some("the group already rides the destination's heavy group")
            }
            (Some(grp), _) if grp.moving.is_some() || grp.waiting => Some("the group is moving"),
            (Some(grp), _)
                if !self
                    .heavies
                    .get(&grp.home)
                    .and_then(|h| h.view.as_ref())
                    .is_some_and(|v| v.primary) =>
            {
                Some("the group's heavy group has no view that carries messages")
            }
            _ => None,
        };
        if let Some(reason) = reason {
            ctx.count("move_refused");
            let error = LwgError::MoveRefused {
                channel: ctx.channel_name(ch).unwrap_or("?").to_owned(),
                to: cmd.to.clone(),
                reason,
            };
            ctx.go(Event::new(
                LWG_REFUSED.id(),
                Direction::Up,
                ch,
                Body::Custom(Box::new(error)),
            ));
            return;
        }
        let Some((g, grp)) = g.and_then(|g| self.groups.get(&g).map(|grp| (g, grp))) else {
            return;
        };
        let pdu = LwgPdu::Switch {
            group: g,
            to,
            generation: grp.generation + 1,
        };
        ctx.count("switch_sent");
        self.send_control(grp.home, &pdu, ctx);
    }

    fn on_init(&mut self, event: Event, ctx: &mut Context<'_>) {
        let ch = event.channel();
        let Some(name) = ctx.channel_name(ch).map(str::to_owned) else {
            ctx.go(event);
            return;
        };
        let g = group_id(&name);
        if let Some(holder) = self.groups.get(&g).map(|grp| grp.ch).filter(|&c| c != ch) {
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
        let h = below(ctx, ch);
        self.groups.insert(
            g,
            Group {
                ch,
                home: h,
                origin: h,
                via: ch,
                generation: 0,
                moved_to: None,
                moving: None,
                waiting: false,
                pending: VecDeque::new(),
                last_counter: 0,
            },
        );
        let heavy = self.heavies.entry(h).or_default();
        let minority = heavy.view.clone().filter(|v| !v.primary && heavy.installed);
        if let Some(v) = minority {
            // A channel opened in a view that carries no messages (a restarted member
            // alone under `primary = "majority"`): its light view at once, with the
            // heavy view's members, as the others' were — nothing to agree on, and
            // its announcement would wait for a primary view.
            for m in &v.members {
                heavy.joined.entry(m.node).or_default().push(g);
            }
            self.install_group(h, &v, g, ctx);
        } else if heavy.announced {
            ctx.count("joined_late");
        } else if heavy.view.is_some() {
            self.schedule_announce(h, ctx);
        }
        ctx.go(event);
    }
}

impl Session for LwgSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            if let Body::Timer(t) = &event.body {
                if t.token >> 32 == ANNOUNCE {
                    let h = SessionId((t.token & 0xffff_ffff) as u32);
                    if let Some(heavy) = self.heavies.get_mut(&h) {
                        heavy.timer = false;
                    }
                    self.announce(h, ctx);
                }
            }
            return;
        }
        if ty == VIEW.id() {
            self.on_view(event, ctx);
            return;
        }
        if ty == LWG_MOVE.id() {
            self.on_move(&event, ctx);
            return;
        }
        if ty == CHANNEL_INIT.id() {
            self.on_init(event, ctx);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            let ch = event.channel();
            self.groups.retain(|_, grp| grp.ch != ch);
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
                let found = self
                    .groups
                    .iter_mut()
                    .find(|(_, grp)| grp.ch == ch)
                    .map(|(&g, grp)| (g, grp));
                match found {
                    Some((g, grp)) if grp.moving.is_some() || grp.waiting => {
                        // Moving: sent on the new heavy group once the group has a view there.
                        if grp.pending.len() < self.capacity {
                            ctx.count("pending");
                            grp.pending.push_back(event);
                        } else {
                            ctx.count("pending_over");
                            let tag = s.tag;
                            ctx.go(events::failure(&SEND_REFUSED, ch, self.node, [tag]));
                        }
                        let _ = g;
                    }
                    Some((g, grp)) => {
                        let via = grp.via;
                        s.message.push(&LwgPdu::Data { group: g }.emit());
                        if via != ch {
                            event.set_channel(via);
                        }
                        ctx.go(event);
                    }
                    None => {
                        let group = ctx.channel_name(ch).map_or(0, group_id);
                        s.message.push(&LwgPdu::Data { group }.emit());
                        ctx.go(event);
                    }
                }
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

//! Events and the open event-type hierarchy (seed 001 §3.3, §4).
//!
//! Appia's events are Java classes; a layer that accepts a class receives its subclasses. Rust has
//! no inheritance, so viastack keeps the hierarchy as data: every [`EventType`] is registered
//! once, process-wide, with a name and an optional parent. Kernel, protocols and applications
//! declare their types as statics ([`EventTypeDef`]) that register lazily on first use, or at run
//! time with [`EventType::define`]. Subtype tests are only needed when routes are computed (at QoS
//! and channel creation), never on the dispatch path.
//!
//! An [`Event`] carries its type, its [`Direction`], the [`ChannelId`] it flows on and a
//! [`Body`]. The kernel keeps the event's position on its channel's route privately, so a session
//! forwards an event with `ctx.go(event)` without knowing where it is.

use std::any::Any;
use std::fmt;
use std::sync::{OnceLock, PoisonError, RwLock};

use crate::addr::{Dest, NodeId};
use crate::message::Message;

/// A registered event type: a small index into the process-wide registry.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventType(u32);

struct TypeInfo {
    name: &'static str,
    parent: Option<EventType>,
}

static REGISTRY: RwLock<Vec<TypeInfo>> = RwLock::new(Vec::new());

/// Why a run-time event type definition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefineError {
    /// The name is taken by a type with another parent.
    #[error("event type `{name}` already exists with parent `{existing}`")]
    Conflict {
        /// The requested name.
        name: String,
        /// The parent it already has.
        existing: String,
    },
}

impl EventType {
    /// Defines (or finds) the type `name` with the given parent. Defining the same name with the
    /// same parent twice returns the same type.
    ///
    /// # Errors
    /// [`DefineError::Conflict`] when `name` exists with a different parent.
    pub fn define(name: &str, parent: Option<EventType>) -> Result<EventType, DefineError> {
        let mut reg = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(pos) = reg.iter().position(|t| t.name == name) {
            let existing = &reg[pos];
            if existing.parent == parent {
                return Ok(EventType(pos as u32));
            }
            let existing = existing
                .parent
                .map_or("(none)".to_string(), |p| reg[p.index()].name.to_string());
            return Err(DefineError::Conflict {
                name: name.to_string(),
                existing,
            });
        }
        // Names of run-time types live for the whole process, as Java classes do.
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        reg.push(TypeInfo { name, parent });
        Ok(EventType((reg.len() - 1) as u32))
    }

    /// Looks a type up by name.
    pub fn by_name(name: &str) -> Option<EventType> {
        ensure_builtins();
        let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        reg.iter()
            .position(|t| t.name == name)
            .map(|i| EventType(i as u32))
    }

    /// The type with registry index `index` (indices are dense; see [`EventType::count`]).
    pub(crate) fn from_index(index: usize) -> EventType {
        EventType(index as u32)
    }

    /// The type's index in the registry (dense, starting at 0).
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The type's name.
    pub fn name(self) -> &'static str {
        let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        reg.get(self.index()).map_or("?", |t| t.name)
    }

    /// The type's parent, if any.
    pub fn parent(self) -> Option<EventType> {
        let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        reg.get(self.index()).and_then(|t| t.parent)
    }

    /// Whether `self` is `ancestor` or one of its descendants.
    pub fn is_a(self, ancestor: EventType) -> bool {
        let reg = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        let mut cur = Some(self);
        while let Some(t) = cur {
            if t == ancestor {
                return true;
            }
            cur = reg.get(t.index()).and_then(|i| i.parent);
        }
        false
    }

    /// Number of types registered so far.
    pub fn count() -> usize {
        REGISTRY
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Every registered type, in registration order.
    pub fn all() -> Vec<EventType> {
        ensure_builtins();
        (0..Self::count() as u32).map(EventType).collect()
    }
}

impl fmt::Debug for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A statically declared event type that registers itself on first use.
///
/// ```
/// use viastack_kernel::event::{EventTypeDef, SENDABLE};
/// pub static MY_ACK: EventTypeDef = EventTypeDef::new("MyAck", Some(&SENDABLE));
/// assert!(MY_ACK.id().is_a(SENDABLE.id()));
/// ```
pub struct EventTypeDef {
    name: &'static str,
    parent: Option<&'static EventTypeDef>,
    id: OnceLock<EventType>,
}

impl EventTypeDef {
    /// Declares a type named `name` under `parent`.
    pub const fn new(name: &'static str, parent: Option<&'static EventTypeDef>) -> Self {
        EventTypeDef {
            name,
            parent,
            id: OnceLock::new(),
        }
    }

    /// The registered type (registering it and its ancestors on first call).
    ///
    /// # Panics
    /// If another type with this name but a different parent was defined at run time first —
    /// a programming error in the declaring crate, not something input can cause.
    pub fn id(&'static self) -> EventType {
        *self.id.get_or_init(|| {
            let parent = self.parent.map(|p| p.id());
            match EventType::define(self.name, parent) {
                Ok(t) => t,
                Err(e) => panic!("static event type declaration conflicts: {e}"),
            }
        })
    }
}

/// The root of the hierarchy.
pub static EVENT: EventTypeDef = EventTypeDef::new("Event", None);
/// Requests to and notifications from the kernel about a channel (Appia `ChannelEvent`).
pub static CHANNEL_EVENT: EventTypeDef = EventTypeDef::new("ChannelEvent", Some(&EVENT));
/// A channel has all its sessions bound and starts; flows up from the bottom.
pub static CHANNEL_INIT: EventTypeDef = EventTypeDef::new("ChannelInit", Some(&CHANNEL_EVENT));
/// A channel is closing; flows up from the bottom, after which the channel refuses events.
pub static CHANNEL_CLOSE: EventTypeDef = EventTypeDef::new("ChannelClose", Some(&CHANNEL_EVENT));
/// A one-shot timer expired; delivered to the session that set it.
pub static TIMER: EventTypeDef = EventTypeDef::new("Timer", Some(&CHANNEL_EVENT));
/// A periodic timer expired; delivered to the session that set it.
pub static PERIODIC_TIMER: EventTypeDef = EventTypeDef::new("PeriodicTimer", Some(&CHANNEL_EVENT));
/// Carries an event to one end of the stack, where the kernel launches it back the other way.
pub static ECHO: EventTypeDef = EventTypeDef::new("Echo", Some(&CHANNEL_EVENT));
/// Asks the sessions it passes to describe their state (each appends a line).
pub static DEBUG: EventTypeDef = EventTypeDef::new("Debug", Some(&CHANNEL_EVENT));
/// "The driver's batch of input is done": handed straight to each session that asked for it
/// with [`Context::request_flush`](crate::Context::request_flush), once the kernel has run out
/// of work after a driver call (or after [`Kernel::end_batch`](crate::Kernel::end_batch)). A
/// session that holds messages back to pack them together (`bundle`) sends them then, so
/// nothing waits for a timer or for more traffic (no Nagle). Never routed.
pub static FLUSH: EventTypeDef = EventTypeDef::new("Flush", Some(&CHANNEL_EVENT));
/// Events that travel over the network: source, destination and a [`Message`].
pub static SENDABLE: EventTypeDef = EventTypeDef::new("Sendable", Some(&EVENT));
/// A datagram handed by a driver to a device session; the device turns it into a `Sendable`.
pub static DATAGRAM: EventTypeDef = EventTypeDef::new("Datagram", Some(&SENDABLE));
/// A sendable that arrived from the network: a transport (a device, the bottom of a stack that
/// reaches a network) launches every received message up as one. A layer that needs a path to
/// the network *requires* it, and only a transport *provides* it, so the Ψ ⊆ Γ check refuses a
/// QoS without one: a layer that merely generates sendables of its own (heartbeats, ACKs)
/// does not connect anything to a network (issue 13 §2).
pub static INBOUND: EventTypeDef = EventTypeDef::new("Inbound", Some(&SENDABLE));

/// Registers the kernel's own types so they exist (and appear in route tables) before any use.
pub fn ensure_builtins() {
    for def in [
        &EVENT,
        &CHANNEL_EVENT,
        &CHANNEL_INIT,
        &CHANNEL_CLOSE,
        &TIMER,
        &PERIODIC_TIMER,
        &ECHO,
        &DEBUG,
        &SENDABLE,
        &DATAGRAM,
        &INBOUND,
        &FLUSH,
    ] {
        def.id();
    }
}

/// The kernel-provided types: every QoS provides them, whatever its layers (the channel itself
/// generates init/close, timers, echo turnaround and debug requests).
pub fn kernel_provided() -> Vec<EventType> {
    vec![
        CHANNEL_INIT.id(),
        CHANNEL_CLOSE.id(),
        TIMER.id(),
        PERIODIC_TIMER.id(),
        ECHO.id(),
        DEBUG.id(),
    ]
}

/// Which way an event flows: `Up` towards the application, `Down` towards the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Towards the top of the stack (the application).
    Up,
    /// Towards the bottom of the stack (the device).
    Down,
}

impl Direction {
    /// The other direction.
    pub fn reverse(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
        }
    }
}

/// A channel of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(pub u32);

impl ChannelId {
    /// No channel: for events delivered straight to a session (datagrams from a driver).
    pub const NONE: ChannelId = ChannelId(u32::MAX);
}

/// An application's name for a message it sends. Every event a stack makes of that message on
/// the sending node (its fragments, its retransmissions) carries the tag; it never travels on
/// the wire. A layer that gives up on messages names them by their tags in the notice it sends
/// up (`SendFailure` in the protocol library), so the application learns the fate of each
/// message it sent, not only that "something" to a peer failed (DESIGN.md §4.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u64);

impl Tag {
    /// No tag: control traffic a layer makes itself (ACKs, heartbeats), and everything received.
    pub const NONE: Tag = Tag(0);
}

/// Data of network events: who sent it, where it goes, and the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sendable {
    /// The node that sent it (filled by the device on receive).
    pub source: NodeId,
    /// Where it goes.
    pub dest: Dest,
    /// Headers and payload.
    pub message: Message,
    /// The sending application's name for the message ([`Tag::NONE`] when it gave none, and on
    /// every message received).
    pub tag: Tag,
}

impl Sendable {
    /// A sendable from `source` to `dest`, untagged.
    pub fn new(source: NodeId, dest: Dest, message: Message) -> Self {
        Sendable {
            source,
            dest,
            message,
            tag: Tag::NONE,
        }
    }

    /// This sendable with `tag`.
    pub fn with_tag(mut self, tag: Tag) -> Self {
        self.tag = tag;
        self
    }
}

/// Identifies one timer of one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u64);

/// Data of an expired timer: which one, and the context the setter gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerFired {
    /// The timer.
    pub id: TimerId,
    /// The setter's context (typically its own timer enum, encoded).
    pub token: u64,
}

/// What an event carries, beyond its type, direction and channel.
pub enum Body {
    /// Nothing.
    Empty,
    /// A network event (boxed: it keeps every event small, so forwarding one is cheap).
    Sendable(Box<Sendable>),
    /// An expired timer.
    Timer(TimerFired),
    /// The event an echo carries.
    Echo(Box<Event>),
    /// Lines appended by the sessions a debug event visited.
    Debug(Vec<String>),
    /// Anything else an application or protocol defines.
    Custom(Box<dyn Any + Send>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Sendable(s) => f.debug_tuple("Sendable").field(s).finish(),
            Body::Timer(t) => f.debug_tuple("Timer").field(t).finish(),
            Body::Echo(e) => f.debug_tuple("Echo").field(e).finish(),
            Body::Debug(lines) => f.debug_tuple("Debug").field(lines).finish(),
            Body::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// An event's direction and its position on its channel's route, packed into one machine word:
/// the position itself when the event goes `Up`, its bitwise complement (a negative number) when
/// it goes `Down`.
///
/// Why one word, and why this encoding: the event is moved by value (a copy in 16-byte chunks
/// plus a final 8-byte one) at every hop. If a chunk was written by two stores (the copy and a
/// narrower field update), the next load of that chunk cannot be forwarded from the store buffer
/// and stalls. So the word is the event's last 8 bytes, copied as a chunk of its own, and every
/// update rewrites all of it: turning an event around complements the word (with a flag bit the
/// compiler narrows `set_dir` to a one-byte store, measured at +1.4 ns per turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place(i64);

impl Place {
    /// Position sentinel: the event was just created and has no place on a route yet.
    const NEW: i64 = i64::MAX;

    #[inline]
    fn new(dir: Direction) -> Place {
        Place(Place::NEW).with_dir(dir)
    }

    #[inline]
    pub(crate) fn dir(self) -> Direction {
        if self.0 < 0 {
            Direction::Down
        } else {
            Direction::Up
        }
    }

    #[inline]
    fn with_dir(self, dir: Direction) -> Place {
        if self.dir() == dir {
            self
        } else {
            Place(!self.0)
        }
    }

    /// The index on the route of the session the event was last scheduled for; `None` while new.
    #[inline]
    pub(crate) fn hop(self) -> Option<i64> {
        let hop = self.0 ^ (self.0 >> 63);
        (hop != Place::NEW).then_some(hop)
    }

    /// This place with position `hop` (a route index: not negative), same direction.
    #[inline]
    pub(crate) fn at(self, hop: i64) -> Place {
        debug_assert!(hop >= 0);
        Place(hop ^ (self.0 >> 63))
    }

    /// This place made new again (same direction).
    #[inline]
    pub(crate) fn renewed(self) -> Place {
        self.at(Place::NEW)
    }
}

/// One event: type, direction, channel, body, and (privately) its place on the route.
///
/// `repr(C)` pins the field order: [`Place`] must stay the last 8 bytes (40 in all).
#[repr(C)]
pub struct Event {
    /// The data.
    pub body: Body,
    ty: EventType,
    channel: ChannelId,
    pub(crate) place: Place,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("ty", &self.ty)
            .field("dir", &self.dir())
            .field("channel", &self.channel)
            .field("hop", &self.place.hop().unwrap_or(i64::MIN))
            .field("body", &self.body)
            .finish()
    }
}

impl Event {
    /// What an empty slot holding events by value contains (never dispatched).
    pub(crate) const VACANT: Event = Event {
        body: Body::Empty,
        ty: EventType(0),
        channel: ChannelId::NONE,
        place: Place(Place::NEW),
    };

    /// A new event. It starts next to the session that passes it to `ctx.go`, or at the edge of
    /// the stack when injected from outside.
    pub fn new(ty: EventType, dir: Direction, channel: ChannelId, body: Body) -> Self {
        Event {
            body,
            ty,
            channel,
            place: Place::new(dir),
        }
    }

    /// A new network event of type `ty` (a `Sendable` or a subtype).
    pub fn sendable(ty: EventType, dir: Direction, channel: ChannelId, sendable: Sendable) -> Self {
        Event::new(ty, dir, channel, Body::Sendable(Box::new(sendable)))
    }

    /// The event's type.
    pub fn ty(&self) -> EventType {
        self.ty
    }

    /// The direction it flows.
    pub fn dir(&self) -> Direction {
        self.place.dir()
    }

    /// The channel it flows on.
    pub fn channel(&self) -> ChannelId {
        self.channel
    }

    /// Turns the event around (or sets its direction); it continues from where it is.
    pub fn set_dir(&mut self, dir: Direction) {
        self.place = self.place.with_dir(dir);
    }

    /// Moves the event to another channel; it restarts next to the session that forwards it.
    pub fn set_channel(&mut self, channel: ChannelId) {
        self.channel = channel;
        self.place = self.place.renewed();
    }

    /// The sendable data, if this is a network event.
    pub fn sendable_ref(&self) -> Option<&Sendable> {
        match &self.body {
            Body::Sendable(s) => Some(&**s),
            _ => None,
        }
    }

    /// The sendable data, mutably.
    pub fn sendable_mut(&mut self) -> Option<&mut Sendable> {
        match &mut self.body {
            Body::Sendable(s) => Some(&mut **s),
            _ => None,
        }
    }

    /// The custom body downcast to `T`.
    pub fn custom<T: Any>(&self) -> Option<&T> {
        match &self.body {
            Body::Custom(b) => b.downcast_ref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PARENT_T: EventTypeDef = EventTypeDef::new("TestParent", Some(&SENDABLE));
    static CHILD_T: EventTypeDef = EventTypeDef::new("TestChild", Some(&PARENT_T));

    #[test]
    fn events_stay_small() {
        // Forwarding moves the event by value at every hop.
        assert!(
            std::mem::size_of::<Event>() <= 40,
            "{}",
            std::mem::size_of::<Event>()
        );
    }

    #[test]
    fn place_keeps_direction_and_position_apart() {
        for dir in [Direction::Up, Direction::Down] {
            let new = Place::new(dir);
            assert_eq!((new.dir(), new.hop()), (dir, None));
            for hop in [0, 1, 7, 65_535] {
                let at = new.at(hop);
                assert_eq!((at.dir(), at.hop()), (dir, Some(hop)));
                let turned = at.with_dir(dir.reverse());
                assert_eq!((turned.dir(), turned.hop()), (dir.reverse(), Some(hop)));
                assert_eq!(turned.with_dir(dir.reverse()), turned);
                let renewed = turned.renewed();
                assert_eq!((renewed.dir(), renewed.hop()), (dir.reverse(), None));
            }
        }
    }

    #[test]
    fn hierarchy_is_open_and_transitive() {
        let child = CHILD_T.id();
        assert!(child.is_a(PARENT_T.id()));
        assert!(child.is_a(SENDABLE.id()));
        assert!(child.is_a(EVENT.id()));
        assert!(!child.is_a(CHANNEL_EVENT.id()));
        assert!(!PARENT_T.id().is_a(child));
        assert_eq!(child.parent(), Some(PARENT_T.id()));
        assert_eq!(child.name(), "TestChild");
        assert_eq!(EventType::by_name("TestChild"), Some(child));
    }

    #[test]
    fn runtime_definition_is_idempotent_and_checks_parent() {
        let a = EventType::define("RtDefined", Some(DEBUG.id())).unwrap();
        let b = EventType::define("RtDefined", Some(DEBUG.id())).unwrap();
        assert_eq!(a, b);
        let err = EventType::define("RtDefined", Some(TIMER.id())).unwrap_err();
        assert!(err.to_string().contains("Debug"), "{err}");
    }
}

//! The kernel: session arena, channels, the FIFO event scheduler, timers and the driver
//! interface (seed 001 §4 "Protocol execution", "Event scheduling"; DESIGN.md §4.1, §6.9).
//!
//! # Driver contract (sans-IO, in the style of quinn-proto)
//! A driver owns IO and time. It feeds the kernel through `handle_*(now, …)` calls — an
//! injected event, a datagram for a device session, a timeout — and after each call drains
//! [`Kernel::poll_output`] (datagrams to transmit, events that left the top of a channel) and
//! asks [`Kernel::poll_timeout`] when to call [`Kernel::handle_timeout`] next. Every `handle_*`
//! runs the event queue until it is empty (or until the step cap, after which `poll_timeout`
//! returns `now` so the driver comes straight back).
//!
//! # Scheduling
//! One FIFO queue per kernel, shared by all its channels: a session's events reach the next
//! session in the order they were sent, and execution is single-threaded and deterministic.
//! Code on other threads injects events through an [`Injector`], drained by
//! [`Kernel::handle_injected`].
//!
//! # Routing
//! `ctx.go(event)` moves an event one step along its channel's precomputed route for its type:
//! the next session above (`Up`) or below (`Down`) that accepts it. A new event starts next to
//! the session that sends it. An event that passes the top of a channel is handed to the
//! driver ([`Output::Deliver`]); one that passes the bottom is dropped and counted, except
//! `Echo`, whose carried event is launched back up (and vice versa at the top).

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::{Arc, PoisonError, RwLock};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::addr::{Dest, NodeId};
use crate::channel::{check_slot, AutoBind, BindError, BindMode, Channel, ChannelState, Hop};
use crate::event::{
    Body, ChannelId, Direction, Event, Sendable, TimerFired, TimerId, CHANNEL_CLOSE, CHANNEL_INIT,
    DATAGRAM, FLUSH, PERIODIC_TIMER, TIMER,
};
use crate::layer::{Delivery, LayerRef, Session, SessionId};
use crate::message::Message;
use crate::qos::Qos;
use crate::time::{Duration, Instant};
use crate::timer::{TimerEntry, Timers};

/// Kernel settings.
#[derive(Clone, Debug)]
pub struct KernelConfig {
    /// The node this kernel runs on.
    pub node: NodeId,
    /// Seed of the kernel's random number generator (handed to sessions through the context).
    pub seed: u64,
    /// Most events processed by one `handle_*` call before it yields (a livelock guard).
    pub step_cap: u64,
    /// The kernel's clock at creation: what `ctx.now()` reads until the driver's first call.
    /// A node (re)built later than the driver's epoch (a restart) must start at that time, or
    /// sessions starting their channels would see time zero (timers set in the past, epochs
    /// derived from a stale clock).
    pub start: Instant,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            node: NodeId(0),
            seed: 0,
            step_cap: 10_000_000,
            start: Instant::ZERO,
        }
    }
}

/// A datagram a device session asks the driver to send.
#[derive(Debug)]
pub struct Transmit {
    /// The device session.
    pub device: SessionId,
    /// The device's port (which device of the destination node receives it).
    pub port: u16,
    /// Where to.
    pub dest: Dest,
    /// The bytes.
    pub message: Message,
}

/// What the kernel hands its driver.
#[derive(Debug)]
pub enum Output {
    /// Send a datagram.
    Transmit(Transmit),
    /// An event passed the top of its channel: it is for the application.
    Deliver(Event),
}

/// Why an event could not be injected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// No such channel.
    #[error("no channel {0}")]
    UnknownChannel(u32),
    /// The channel has not started or is closed.
    #[error("channel `{name}` is not open ({state:?})")]
    NotOpen {
        /// The channel.
        name: String,
        /// Its state.
        state: ChannelState,
    },
    /// The kernel is gone (its driver stopped).
    #[error("the kernel is gone")]
    KernelGone,
}

/// Why a channel operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// No such channel.
    #[error("no channel {0}")]
    UnknownChannel(u32),
    /// The channel is not in the state the operation needs.
    #[error("channel `{name}` is {state:?}")]
    WrongState {
        /// The channel.
        name: String,
        /// Its state.
        state: ChannelState,
    },
    /// Binding failed.
    #[error(transparent)]
    Bind(#[from] BindError),
}

/// An event and the session it goes to next (resolved when it was sent, so the dispatch loop
/// does no lookups).
struct Work {
    session: SessionId,
    event: Event,
}

struct Injected {
    channel: ChannelId,
    event: Event,
}

type Waker = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct InjectShared {
    open: RwLock<Vec<bool>>,
    waker: RwLock<Option<Waker>>,
}

/// A thread-safe handle for injecting events into a kernel's channels from outside (an
/// application thread, a driver's reader thread). Events are queued until the kernel's driver
/// calls [`Kernel::handle_injected`]; the optional waker set with [`Kernel::set_waker`] tells it.
#[derive(Clone)]
pub struct Injector {
    tx: mpsc::Sender<Injected>,
    shared: Arc<InjectShared>,
}

impl Injector {
    /// Queues `event` for `channel`. Down events start at the top of the channel, up events at
    /// the bottom.
    ///
    /// # Errors
    /// [`InjectError::NotOpen`] if the channel is not open (not started, or closed),
    /// [`InjectError::UnknownChannel`], [`InjectError::KernelGone`]. An event that races with a
    /// close (accepted here, channel closed before the kernel drains it) is dropped and counted
    /// as `kernel.dropped_closed_channel`.
    pub fn inject(&self, channel: ChannelId, event: Event) -> Result<(), InjectError> {
        {
            let open = self
                .shared
                .open
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            match open.get(channel.0 as usize) {
                None => return Err(InjectError::UnknownChannel(channel.0)),
                Some(false) => {
                    return Err(InjectError::NotOpen {
                        name: format!("#{}", channel.0),
                        state: ChannelState::Closed,
                    })
                }
                Some(true) => {}
            }
        }
        self.tx
            .send(Injected { channel, event })
            .map_err(|_| InjectError::KernelGone)?;
        let waker = self
            .shared
            .waker
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(w) = waker {
            w();
        }
        Ok(())
    }
}

/// Everything but the session arena, so a session can be called with a context over it.
struct Core {
    node: NodeId,
    now: Instant,
    channels: Vec<Channel>,
    /// The session of the oldest pending work item when it is the only one: the fast slot, which
    /// skips the queue on the hot path (one session forwarding to the next).
    fast: Option<SessionId>,
    /// The fast slot's event (`Event::VACANT` while the slot is empty). Kept apart from the
    /// session so that it is only ever copied as a whole `Event`, in the same chunks on the way
    /// in and out; see `Kernel::run`.
    fast_event: Event,
    queue: VecDeque<Work>,
    timers: Timers,
    outputs: VecDeque<Output>,
    /// Hashed with foldhash, not SipHash: layers count per message (issue 18's profile had
    /// SipHash at 8 % of a group member's instructions); no untrusted keys reach it.
    counters: HashMap<(SessionId, &'static str), u64, foldhash::fast::FixedState>,
    rng: ChaCha8Rng,
    /// Sessions waiting for a `Flush`, with the channel to hand it on, in request order.
    flush_requests: Vec<(SessionId, ChannelId)>,
    /// Open [`Kernel::begin_batch`] calls: flushes wait until the last one ends.
    batch_depth: u32,
}

impl Core {
    fn count(&mut self, who: SessionId, what: &'static str, n: u64) {
        let c = self.counters.entry((who, what)).or_insert(0);
        *c = c.saturating_add(n);
    }

    /// Moves `ev` one step along its route. `origin` is the slot the event starts next to when
    /// it is new (the sending session's slot, -1 below the bottom, or the layer count above the
    /// top); `None` means "the slot of `sender` in the event's channel".
    ///
    /// Kept out of line: one small shared function with a short prologue measured faster than
    /// inlining it into every `Context::go` caller (ghost hop 10.7-11.6 ns against 11.5-13.2 ns,
    /// although inlined it ran fewer instructions).
    #[inline(never)]
    fn route(&mut self, mut ev: Event, sender: SessionId, origin: Option<i32>) {
        // Hot path: an event already on its route moves to the next session of an open channel
        // (four bounds/state checks and three loads). Everything else (new events, the ends of
        // the route, closed channels, routes not mapped yet) takes the general path, which
        // decides again from scratch; splitting it off took the ghost hop from 11.1-12.0 to
        // 10.7-11.6 ns and the 0-layer event from 11.9 to 10.8 ns (best of 6 interleaved runs).
        if let Some(hop) = ev.place.hop() {
            let next = match ev.dir() {
                Direction::Up => hop + 1,
                Direction::Down => hop - 1,
            };
            let hop = self
                .channels
                .get(ev.channel().0 as usize)
                .filter(|ch| ch.state == ChannelState::Open)
                .and_then(|ch| ch.routes.get(ev.ty().index()))
                .and_then(|route| route.get(usize::try_from(next).ok()?));
            if let Some(&Hop { session, .. }) = hop {
                ev.place = ev.place.at(next);
                self.schedule(session, ev);
                return;
            }
        }
        self.route_general(ev, sender, origin);
    }

    /// [`Core::route`] for every case.
    #[inline(never)]
    fn route_general(&mut self, mut ev: Event, sender: SessionId, origin: Option<i32>) {
        let Some(ch) = self.channels.get_mut(ev.channel().0 as usize) else {
            self.count(SessionId::KERNEL, "dropped_no_channel", 1);
            return;
        };
        if ch.state != ChannelState::Open {
            self.count(SessionId::KERNEL, "dropped_closed_channel", 1);
            return;
        }
        let (next, len, session) = {
            let next: i64 = if let Some(hop) = ev.place.hop() {
                match ev.dir() {
                    Direction::Up => hop + 1,
                    Direction::Down => hop - 1,
                }
            } else {
                let from = match origin {
                    Some(o) => o,
                    None => match ch.slot_of(sender) {
                        Some(s) => i32::from(s),
                        None => {
                            self.count(SessionId::KERNEL, "dropped_sender_not_bound", 1);
                            return;
                        }
                    },
                };
                let route = ch.route(ev.ty());
                let below = route
                    .iter()
                    .take_while(|h| i32::from(h.slot) < from)
                    .count() as i64;
                match ev.dir() {
                    Direction::Down => below - 1,
                    Direction::Up => {
                        below
                            + route
                                .get(below as usize)
                                .map_or(0, |h| i64::from(i32::from(h.slot) == from))
                    }
                }
            };
            let route = ch.route(ev.ty());
            let session = usize::try_from(next)
                .ok()
                .and_then(|i| route.get(i))
                .map(|h| h.session);
            (next, route.len() as i64, session)
        };
        match session {
            Some(session) => {
                ev.place = ev.place.at(next);
                self.schedule(session, ev);
            }
            None if next < 0 => self.fell_off_bottom(ev),
            None => {
                debug_assert!(next >= len);
                self.fell_off_top(ev);
            }
        }
    }

    /// Queues work, keeping FIFO order: the fast slot is used only when nothing older waits.
    #[inline]
    fn schedule(&mut self, session: SessionId, event: Event) {
        if self.fast.is_none() && self.queue.is_empty() {
            self.fast = Some(session);
            // The slot holds `Event::VACANT`: nothing to drop (skips a drop-glue call per hop).
            let vacant = std::mem::replace(&mut self.fast_event, event);
            debug_assert!(matches!(vacant.body, Body::Empty));
            std::mem::forget(vacant);
        } else {
            self.queue.push_back(Work { session, event });
        }
    }

    #[inline]
    fn is_idle(&self) -> bool {
        self.fast.is_none() && self.queue.is_empty()
    }

    fn fell_off_bottom(&mut self, ev: Event) {
        let channel = ev.channel();
        match ev.body {
            Body::Echo(mut inner) => {
                inner.set_channel(channel);
                inner.set_dir(Direction::Up);
                self.route(*inner, SessionId::KERNEL, Some(-1));
            }
            _ => self.count(SessionId::KERNEL, "fell_off_bottom", 1),
        }
    }

    fn fell_off_top(&mut self, ev: Event) {
        let channel = ev.channel();
        match ev.body {
            Body::Echo(mut inner) => {
                let top = self
                    .channels
                    .get(channel.0 as usize)
                    .map_or(0, |c| c.slots.len() as i32);
                inner.set_channel(channel);
                inner.set_dir(Direction::Down);
                self.route(*inner, SessionId::KERNEL, Some(top));
            }
            _ => self.outputs.push_back(Output::Deliver(ev)),
        }
    }

    /// Launches an event from outside the stack: down events at the top, up events at the
    /// bottom.
    fn launch(&mut self, mut ev: Event) {
        ev.place = ev.place.renewed();
        let origin = match ev.dir() {
            Direction::Up => -1,
            Direction::Down => self
                .channels
                .get(ev.channel().0 as usize)
                .map_or(0, |c| c.slots.len() as i32),
        };
        self.route(ev, SessionId::KERNEL, Some(origin));
    }
}

/// What a session sees while it handles an event: the time, the event's channel, and the
/// means to forward and create events, set timers, transmit (devices) and count.
pub struct Context<'k> {
    session: SessionId,
    channel: ChannelId,
    core: &'k mut Core,
}

impl Context<'_> {
    /// The current time (as given by the driver).
    pub fn now(&self) -> Instant {
        self.core.now
    }

    /// The node this kernel runs on.
    pub fn node(&self) -> NodeId {
        self.core.node
    }

    /// The session being called.
    pub fn session_id(&self) -> SessionId {
        self.session
    }

    /// The channel of the event being handled (`ChannelId::NONE` for direct deliveries).
    pub fn channel(&self) -> ChannelId {
        self.channel
    }

    /// Forwards `event` one step along its channel's route: an event the session received
    /// continues in its direction; a new event starts next to this session.
    pub fn go(&mut self, event: Event) {
        self.core.route(event, self.session, None);
    }

    /// Sets a one-shot timer `delay` from now on the current channel; it comes back to this
    /// session as a `Timer` event carrying `token`.
    pub fn set_timer(&mut self, delay: Duration, token: u64) -> TimerId {
        let at = self.core.now + delay;
        self.set_timer_at(at, token)
    }

    /// Sets a one-shot timer for `deadline`.
    pub fn set_timer_at(&mut self, deadline: Instant, token: u64) -> TimerId {
        let entry = TimerEntry {
            session: self.session,
            channel: self.channel,
            token,
            period: None,
        };
        self.core.timers.set(deadline, entry)
    }

    /// Sets a periodic timer firing every `period` (first after one period); a zero period
    /// fires once.
    pub fn set_periodic(&mut self, period: Duration, token: u64) -> TimerId {
        let entry = TimerEntry {
            session: self.session,
            channel: self.channel,
            token,
            period: Some(period),
        };
        let at = self.core.now + period;
        self.core.timers.set(at, entry)
    }

    /// Cancels a timer; returns whether it was pending. Cancelling twice is harmless.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.core.timers.cancel(id)
    }

    /// Hands a datagram to the driver (device sessions only).
    pub fn transmit(&mut self, port: u16, dest: Dest, message: Message) {
        self.core.outputs.push_back(Output::Transmit(Transmit {
            device: self.session,
            port,
            dest,
            message,
        }));
    }

    /// Asks for a `Flush` event on the current channel once the kernel has no more work for
    /// the driver's current input (see [`FLUSH`](crate::event::FLUSH)). Asking again before it
    /// comes is harmless: one `Flush` per session and channel.
    pub fn request_flush(&mut self) {
        let request = (self.session, self.channel);
        if !self.core.flush_requests.contains(&request) {
            self.core.flush_requests.push(request);
        }
    }

    /// Adds one to this session's counter `what` (drops with reason, retransmissions, …).
    pub fn count(&mut self, what: &'static str) {
        self.core.count(self.session, what, 1);
    }

    /// Adds `n` to this session's counter `what`.
    pub fn count_n(&mut self, what: &'static str, n: u64) {
        self.core.count(self.session, what, n);
    }

    /// The kernel's seeded random number generator.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.core.rng
    }

    /// Channels this session is bound to, in creation order.
    pub fn my_channels(&self) -> Vec<ChannelId> {
        self.core
            .channels
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state == ChannelState::Open && c.slot_of(self.session).is_some())
            .map(|(i, _)| ChannelId(i as u32))
            .collect()
    }

    /// Whether this session is bound to `channel` and the channel is open.
    pub fn is_bound(&self, channel: ChannelId) -> bool {
        self.core
            .channels
            .get(channel.0 as usize)
            .is_some_and(|c| c.state == ChannelState::Open && c.slot_of(self.session).is_some())
    }

    /// A channel's name.
    pub fn channel_name(&self, channel: ChannelId) -> Option<&str> {
        self.core
            .channels
            .get(channel.0 as usize)
            .map(|c| c.name.as_str())
    }

    /// What the layers below this session promise on the current channel (the event's):
    /// [`Delivery::NONE`] when the session is not bound to it.
    pub fn delivery_below(&self) -> Delivery {
        self.core
            .channels
            .get(self.channel.0 as usize)
            .and_then(|c| {
                let slot = c.slot_of(self.session)?;
                Some(c.qos.delivery_below(usize::from(slot)))
            })
            .unwrap_or(Delivery::NONE)
    }

    /// The session bound just below this one in `channel` (channel introspection, seed 001
    /// §3.2): `None` when this session is not bound there, is at the bottom, or the slot below
    /// is empty. What a session shared by channels over different lower sessions (`lwg` over
    /// several heavy groups) tells them apart by.
    pub fn session_below(&self, channel: ChannelId) -> Option<SessionId> {
        let c = self.core.channels.get(channel.0 as usize)?;
        let slot = usize::from(c.slot_of(self.session)?);
        *c.slots.get(slot.checked_sub(1)?)?
    }

    /// A channel's QoS (to learn its layers: channel-aware sessions, seed 001 §3.2).
    pub fn channel_qos(&self, channel: ChannelId) -> Option<&Arc<Qos>> {
        self.core.channels.get(channel.0 as usize).map(|c| &c.qos)
    }
}

/// The protocol kernel of one node: sessions, channels, scheduler, timers.
pub struct Kernel {
    layers: Vec<LayerRef>,
    sessions: Vec<Box<dyn Session>>,
    core: Core,
    step_cap: u64,
    inbox: mpsc::Receiver<Injected>,
    injector: Injector,
}

impl Kernel {
    /// A kernel with no sessions and no channels.
    pub fn new(config: KernelConfig) -> Self {
        let (tx, inbox) = mpsc::channel();
        Kernel {
            layers: Vec::new(),
            sessions: Vec::new(),
            core: Core {
                node: config.node,
                now: config.start,
                channels: Vec::new(),
                fast: None,
                fast_event: Event::VACANT,
                queue: VecDeque::new(),
                timers: Timers::default(),
                outputs: VecDeque::new(),
                counters: HashMap::default(),
                rng: ChaCha8Rng::seed_from_u64(config.seed),
                flush_requests: Vec::new(),
                batch_depth: 0,
            },
            step_cap: config.step_cap.max(1),
            inbox,
            injector: Injector {
                tx,
                shared: Arc::default(),
            },
        }
    }

    /// The node this kernel runs on.
    pub fn node(&self) -> NodeId {
        self.core.node
    }

    /// The time of the last `handle_*` call.
    pub fn now(&self) -> Instant {
        self.core.now
    }

    /// Creates a session of `layer` (for explicit binding or sharing between channels).
    pub fn create_session(&mut self, layer: &LayerRef) -> SessionId {
        let session = layer.create_session();
        self.add_session(layer, session)
    }

    /// Adds a session built by hand (for sessions whose constructor takes arguments).
    pub fn add_session(&mut self, layer: &LayerRef, session: Box<dyn Session>) -> SessionId {
        self.layers.push(Arc::clone(layer));
        self.sessions.push(session);
        SessionId((self.sessions.len() - 1) as u32)
    }

    /// The layer of a session.
    pub fn session_layer(&self, id: SessionId) -> Option<&LayerRef> {
        self.layers.get(id.0 as usize)
    }

    /// A session's state, if it is a `T`.
    pub fn session<T: Session>(&self, id: SessionId) -> Option<&T> {
        let s: &dyn Session = self.sessions.get(id.0 as usize)?.as_ref();
        (s as &dyn Any).downcast_ref()
    }

    /// A session's state, mutably, if it is a `T`.
    pub fn session_mut<T: Session>(&mut self, id: SessionId) -> Option<&mut T> {
        let s: &mut dyn Session = self.sessions.get_mut(id.0 as usize)?.as_mut();
        (s as &mut dyn Any).downcast_mut()
    }

    /// Creates an unbound channel of `qos`; bind its slots with [`Kernel::cursor`], then call
    /// [`Kernel::start_channel`].
    pub fn create_channel(&mut self, name: impl Into<String>, qos: &Arc<Qos>) -> ChannelId {
        self.core
            .channels
            .push(Channel::new(name.into(), Arc::clone(qos)));
        let mut open = self
            .injector
            .shared
            .open
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        open.push(false);
        ChannelId((self.core.channels.len() - 1) as u32)
    }

    /// A cursor over a channel's slots for explicit binding (starts at the bottom).
    ///
    /// # Errors
    /// [`BindError::UnknownChannel`].
    pub fn cursor(&mut self, channel: ChannelId) -> Result<ChannelCursor<'_>, BindError> {
        if self.core.channels.get(channel.0 as usize).is_none() {
            return Err(BindError::UnknownChannel(channel.0));
        }
        Ok(ChannelCursor {
            kernel: self,
            channel: channel.0 as usize,
            pos: 0,
        })
    }

    /// Completes binding (automatic, then default) and starts the channel: routes are mapped to
    /// sessions and `ChannelInit` flows up from the bottom.
    ///
    /// # Errors
    /// [`ChannelError::WrongState`] unless the channel is still binding.
    pub fn start_channel(&mut self, channel: ChannelId, now: Instant) -> Result<(), ChannelError> {
        self.core.now = self.core.now.max(now);
        let idx = channel.0 as usize;
        let ch = self
            .core
            .channels
            .get(idx)
            .ok_or(ChannelError::UnknownChannel(channel.0))?;
        if ch.state != ChannelState::Binding {
            return Err(ChannelError::WrongState {
                name: ch.name.clone(),
                state: ch.state,
            });
        }
        // Automatic binding: invite every bound session (including ones bound during the pass).
        let mut asked = Vec::new();
        while let Some(sid) = self.core.channels[idx]
            .slots
            .iter()
            .flatten()
            .copied()
            .find(|s| !asked.contains(s))
        {
            asked.push(sid);
            let companions = self.companions_of(sid, idx);
            let ch = &mut self.core.channels[idx];
            let mut request = AutoBind {
                channel_name: &ch.name,
                qos: &ch.qos,
                slots: &mut ch.slots,
                modes: &mut ch.modes,
                session_layers: &self.layers,
                companions,
            };
            if let Some(s) = self.sessions.get_mut(sid.0 as usize) {
                s.auto_bind(&mut request);
            }
        }
        // Default binding: a new session for every slot still empty.
        let qos = Arc::clone(&self.core.channels[idx].qos);
        for (slot, layer) in qos.layers().iter().enumerate() {
            if self.core.channels[idx].slots[slot].is_none() {
                let sid = self.create_session(layer);
                self.core.channels[idx].slots[slot] = Some(sid);
                self.core.channels[idx].modes[slot] = BindMode::Default;
            }
        }
        let ch = &mut self.core.channels[idx];
        ch.map_routes();
        ch.state = ChannelState::Open;
        self.set_open(idx, true);
        tracing::debug!(channel = %self.core.channels[idx].name, "channel started");
        let init = Event::new(CHANNEL_INIT.id(), Direction::Up, channel, Body::Empty);
        self.core.launch(init);
        self.run();
        Ok(())
    }

    fn set_open(&self, idx: usize, open: bool) {
        let mut flags = self
            .injector
            .shared
            .open
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = flags.get_mut(idx) {
            *f = open;
        }
    }

    /// Closes a channel: `ChannelClose` flows up from the bottom and is processed (with
    /// everything it causes), then the channel refuses events and its timers are cancelled.
    ///
    /// # Errors
    /// [`ChannelError::WrongState`] unless the channel is open.
    pub fn close_channel(&mut self, channel: ChannelId, now: Instant) -> Result<(), ChannelError> {
        self.core.now = self.core.now.max(now);
        let idx = channel.0 as usize;
        let ch = self
            .core
            .channels
            .get(idx)
            .ok_or(ChannelError::UnknownChannel(channel.0))?;
        if ch.state != ChannelState::Open {
            return Err(ChannelError::WrongState {
                name: ch.name.clone(),
                state: ch.state,
            });
        }
        self.set_open(idx, false);
        let close = Event::new(CHANNEL_CLOSE.id(), Direction::Up, channel, Body::Empty);
        self.core.launch(close);
        self.run();
        self.core.channels[idx].state = ChannelState::Closed;
        self.core.timers.cancel_channel(channel);
        Ok(())
    }

    /// A channel's state.
    pub fn channel_state(&self, channel: ChannelId) -> Option<ChannelState> {
        self.core.channels.get(channel.0 as usize).map(|c| c.state)
    }

    /// The channel named `name` (the first, if several share it).
    pub fn channel_by_name(&self, name: &str) -> Option<ChannelId> {
        self.core
            .channels
            .iter()
            .position(|c| c.name == name)
            .map(|i| ChannelId(i as u32))
    }

    /// A channel's QoS.
    pub fn channel_qos(&self, channel: ChannelId) -> Option<&Arc<Qos>> {
        self.core.channels.get(channel.0 as usize).map(|c| &c.qos)
    }

    /// What a channel promises its application ([`Qos::delivery_below`] its top).
    pub fn channel_delivery(&self, channel: ChannelId) -> Option<Delivery> {
        self.channel_qos(channel)
            .map(|q| q.delivery_below(q.layers().len()))
    }

    /// The sessions bound to a channel's slots, bottom first.
    pub fn channel_sessions(&self, channel: ChannelId) -> Vec<Option<SessionId>> {
        self.core
            .channels
            .get(channel.0 as usize)
            .map(|c| c.slots.clone())
            .unwrap_or_default()
    }

    /// How each slot of `channel` got its session, bottom first.
    pub fn channel_bind_modes(&self, channel: ChannelId) -> Vec<BindMode> {
        self.core
            .channels
            .get(channel.0 as usize)
            .map(|c| c.modes.clone())
            .unwrap_or_default()
    }

    /// The sessions `session` shares a channel other than `except` with, in channel order,
    /// bottom first, without repeats (itself excluded).
    fn companions_of(&self, session: SessionId, except: usize) -> Vec<SessionId> {
        let mut out = Vec::new();
        for (i, ch) in self.core.channels.iter().enumerate() {
            if i == except || !ch.slots.contains(&Some(session)) {
                continue;
            }
            for s in ch.slots.iter().flatten() {
                if *s != session && !out.contains(s) {
                    out.push(*s);
                }
            }
        }
        out
    }

    /// The sessions an event of type `ty` visits on `channel`, bottom first.
    pub fn route(&mut self, channel: ChannelId, ty: crate::event::EventType) -> Vec<SessionId> {
        self.core
            .channels
            .get_mut(channel.0 as usize)
            .map(|c| c.route(ty).iter().map(|h| h.session).collect())
            .unwrap_or_default()
    }

    /// A handle for injecting events from other threads.
    pub fn injector(&self) -> Injector {
        self.injector.clone()
    }

    /// Sets a function the injector calls after queueing an event (to wake the driver).
    pub fn set_waker(&self, waker: impl Fn() + Send + Sync + 'static) {
        *self
            .injector
            .shared
            .waker
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(waker));
    }

    /// Injects an event from the driver's own thread: down events start at the top of the
    /// channel, up events at the bottom. Runs the queue.
    ///
    /// # Errors
    /// [`InjectError::NotOpen`] if the channel has not started or is closed (the event is not
    /// lost silently), [`InjectError::UnknownChannel`].
    pub fn inject(&mut self, now: Instant, event: Event) -> Result<(), InjectError> {
        self.core.now = self.core.now.max(now);
        let ch = self
            .core
            .channels
            .get(event.channel().0 as usize)
            .ok_or(InjectError::UnknownChannel(event.channel().0))?;
        if ch.state != ChannelState::Open {
            return Err(InjectError::NotOpen {
                name: ch.name.clone(),
                state: ch.state,
            });
        }
        self.core.launch(event);
        self.run();
        Ok(())
    }

    /// Processes every event queued by [`Injector`]s.
    pub fn handle_injected(&mut self, now: Instant) {
        self.core.now = self.core.now.max(now);
        while let Ok(Injected { channel, mut event }) = self.inbox.try_recv() {
            event.set_channel(channel);
            self.core.launch(event);
        }
        self.run();
    }

    /// A datagram from the driver for `device`: delivered straight to that session as a
    /// `Datagram` event (up, no channel) whose sendable names the sender.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        device: SessionId,
        from: NodeId,
        message: Message,
    ) {
        self.core.now = self.core.now.max(now);
        let ev = Event::sendable(
            DATAGRAM.id(),
            Direction::Up,
            ChannelId::NONE,
            Sendable::new(from, Dest::Node(self.core.node), message),
        );
        self.core.schedule(device, ev);
        self.run();
    }

    /// Fires every timer due at `now` (each with the events it causes, in deadline order).
    /// Calling it early or twice is harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.core.now = self.core.now.max(now);
        // The timers due now are one batch: what they queue leaves together.
        self.begin_batch();
        self.run();
        while let Some((id, entry)) = self.core.timers.pop_due(self.core.now) {
            let closed = self
                .core
                .channels
                .get(entry.channel.0 as usize)
                .is_some_and(|c| c.state == ChannelState::Closed);
            if closed {
                continue;
            }
            let ty = if entry.period.is_some() {
                PERIODIC_TIMER.id()
            } else {
                TIMER.id()
            };
            let body = Body::Timer(TimerFired {
                id,
                token: entry.token,
            });
            let ev = Event::new(ty, Direction::Up, entry.channel, body);
            self.core.schedule(entry.session, ev);
            self.run();
        }
        self.end_batch(now);
    }

    /// When the driver should call [`Kernel::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.core.is_idle() {
            self.core.timers.next_deadline()
        } else {
            Some(self.core.now)
        }
    }

    /// The next output for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.core.outputs.pop_front()
    }

    /// Timers pending.
    pub fn pending_timers(&self) -> usize {
        self.core.timers.len()
    }

    /// Messages not yet settled in any session (see [`Session::unsettled`]): what a closing
    /// driver lingers for.
    pub fn unsettled(&self) -> usize {
        self.sessions.iter().map(|s| s.unsettled()).sum()
    }

    /// All counters, as `layer.counter` (or `kernel.counter`) → value, sorted.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for ((who, what), n) in &self.core.counters {
            let owner = if *who == SessionId::KERNEL {
                "kernel"
            } else {
                self.layers.get(who.0 as usize).map_or("?", |l| l.name())
            };
            let c = out.entry(format!("{owner}.{what}")).or_insert(0u64);
            *c = c.saturating_add(*n);
        }
        out
    }

    /// Runs the queue until it is empty or the step cap is reached.
    fn run(&mut self) {
        let mut steps = 0u64;
        loop {
            // Hot loop: one session forwarding to the next through the fast slot. The event
            // goes from the slot straight into the call as one whole-`Event` copy (nothing here
            // looks inside it), so it is read in the same chunks `Core::schedule` wrote it in.
            while let Some(session) = self.core.fast.take() {
                steps += 1;
                if steps > self.step_cap {
                    self.core.fast = Some(session);
                    self.step_cap_reached();
                    return;
                }
                let channel = self.core.fast_event.channel();
                let vacant = Event::VACANT;
                // The session is looked up before the event is taken, so that no drop path
                // holds the event in a local: it is copied once, from the slot into the call.
                if let Some(s) = self.sessions.get_mut(session.0 as usize) {
                    let event = std::mem::replace(&mut self.core.fast_event, vacant);
                    let mut ctx = Context {
                        session,
                        channel,
                        core: &mut self.core,
                    };
                    s.handle(event, &mut ctx);
                } else {
                    self.core.fast_event = vacant;
                }
            }
            let Some(work) = self.core.queue.pop_front() else {
                // Out of work: hand the sessions that asked for it their `Flush`, unless the
                // driver is in the middle of a batch.
                if self.core.batch_depth > 0 || !self.schedule_flushes() {
                    return;
                }
                continue;
            };
            steps += 1;
            if steps > self.step_cap {
                self.core.queue.push_front(work);
                self.step_cap_reached();
                return;
            }
            self.dispatch(work.session, work.event);
        }
    }

    /// Queues one `Flush` per request; whether there were any.
    fn schedule_flushes(&mut self) -> bool {
        if self.core.flush_requests.is_empty() {
            return false;
        }
        for (session, channel) in std::mem::take(&mut self.core.flush_requests) {
            let ev = Event::new(FLUSH.id(), Direction::Down, channel, Body::Empty);
            self.core.schedule(session, ev);
        }
        true
    }

    /// Starts a batch of driver input (datagrams from one `recvmmsg`, messages from the
    /// application): sessions' `Flush` events wait for the matching [`end_batch`](Self::end_batch),
    /// so what the whole batch queued can leave together (one bundle per destination).
    /// Batches nest. Outside a batch every driver call ends with the flushes.
    pub fn begin_batch(&mut self) {
        self.core.batch_depth += 1;
    }

    /// Ends a batch begun with [`begin_batch`](Self::begin_batch); the last one delivers the
    /// pending `Flush` events (and whatever they cause) at `now`.
    pub fn end_batch(&mut self, now: Instant) {
        self.core.now = self.core.now.max(now);
        self.core.batch_depth = self.core.batch_depth.saturating_sub(1);
        self.run();
    }

    #[cold]
    fn step_cap_reached(&mut self) {
        self.core.count(SessionId::KERNEL, "step_cap_reached", 1);
        tracing::warn!(node = %self.core.node, "kernel step cap reached; yielding");
    }

    /// Hands `event` to `session` (dropped if there is no such session).
    #[inline]
    fn dispatch(&mut self, session: SessionId, event: Event) {
        let channel = event.channel();
        if let Some(s) = self.sessions.get_mut(session.0 as usize) {
            let mut ctx = Context {
                session,
                channel,
                core: &mut self.core,
            };
            s.handle(event, &mut ctx);
        }
    }
}

/// Explicit binding: walks a channel's slots and checks each session against the slot's layer
/// (seed 001 §4 "Channel cursors").
pub struct ChannelCursor<'k> {
    kernel: &'k mut Kernel,
    channel: usize,
    pos: usize,
}

impl ChannelCursor<'_> {
    fn ch(&self) -> &Channel {
        &self.kernel.core.channels[self.channel]
    }

    /// Moves to the bottom slot.
    pub fn bottom(&mut self) -> &mut Self {
        self.pos = 0;
        self
    }

    /// Moves to the top slot.
    pub fn top(&mut self) -> &mut Self {
        self.pos = self.ch().slots.len().saturating_sub(1);
        self
    }

    /// Moves one slot up; returns false at the top.
    pub fn up(&mut self) -> bool {
        if self.pos + 1 < self.ch().slots.len() {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Moves one slot down; returns false at the bottom.
    pub fn down(&mut self) -> bool {
        if self.pos > 0 {
            self.pos -= 1;
            true
        } else {
            false
        }
    }

    /// Moves to slot `pos`.
    ///
    /// # Errors
    /// [`BindError::SlotOutOfRange`].
    pub fn jump_to(&mut self, pos: usize) -> Result<&mut Self, BindError> {
        let len = self.ch().slots.len();
        if pos >= len {
            return Err(BindError::SlotOutOfRange { slot: pos, len });
        }
        self.pos = pos;
        Ok(self)
    }

    /// The current slot.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The layer the current slot expects.
    pub fn layer(&self) -> &LayerRef {
        &self.ch().qos.layers()[self.pos]
    }

    /// The session bound to the current slot.
    pub fn session(&self) -> Option<SessionId> {
        self.ch().slots[self.pos]
    }

    /// Binds `session` to the current slot.
    ///
    /// # Errors
    /// [`BindError::WrongLayer`] if the session is of another layer, [`BindError::AlreadyStarted`]
    /// once the channel runs, [`BindError::UnknownSession`].
    pub fn set_session(&mut self, session: SessionId) -> Result<(), BindError> {
        let layer = self
            .kernel
            .layers
            .get(session.0 as usize)
            .ok_or(BindError::UnknownSession(session.0))?;
        let ch = &self.kernel.core.channels[self.channel];
        if ch.state != ChannelState::Binding {
            return Err(BindError::AlreadyStarted(ch.name.clone()));
        }
        check_slot(&ch.qos, self.pos, layer)?;
        let ch = &mut self.kernel.core.channels[self.channel];
        ch.slots[self.pos] = Some(session);
        ch.modes[self.pos] = BindMode::Explicit;
        Ok(())
    }
}

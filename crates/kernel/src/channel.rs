//! Channels: instances of a QoS with one typed slot per layer (seed 001 §3.1, §4 "Channel
//! definition").
//!
//! A channel starts as an array of empty slots. Slots are filled in three steps, in this order:
//! 1. **explicitly**, through a [`ChannelCursor`](crate::ChannelCursor) that checks each
//!    session's layer against the slot;
//! 2. **automatically**: every session already bound is asked ([`Session::auto_bind`]) to fill
//!    the remaining slots with sessions it knows ([`AutoBind`]);
//! 3. **by default**: each slot still empty gets a new session from its layer.
//!
//! Then the QoS's routes (layer positions per event type) are mapped to the bound sessions and
//! `ChannelInit` flows up from the bottom. A session bound into several channels (the "diamond"
//! of seed 001 Figure 1) sees each event's channel and answers on it.
//!
//! [`Session::auto_bind`]: crate::Session::auto_bind

use std::sync::Arc;

use crate::event::EventType;
use crate::layer::{same_layer, LayerRef, SessionId};
use crate::qos::Qos;

/// Why a session could not be bound to a slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// No such channel.
    #[error("no channel {0}")]
    UnknownChannel(u32),
    /// No such session.
    #[error("no session {0}")]
    UnknownSession(u32),
    /// The slot index is past the top of the QoS.
    #[error("slot {slot} is out of range (the QoS has {len} layers)")]
    SlotOutOfRange {
        /// The slot asked for.
        slot: usize,
        /// Layers in the QoS.
        len: usize,
    },
    /// The session belongs to another layer than the slot's.
    #[error("slot {slot} holds layer `{expected}`, but the session is of layer `{found}`")]
    WrongLayer {
        /// The slot.
        slot: usize,
        /// The slot's layer.
        expected: String,
        /// The session's layer.
        found: String,
    },
    /// Slots are fixed once a channel has started.
    #[error("channel `{0}` has already started")]
    AlreadyStarted(String),
}

/// One step of a channel route: the slot (layer position) and the session bound there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    pub slot: u16,
    pub session: SessionId,
}

/// How a channel's slot got its session (seed 001 §4: explicit, then automatic, then default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// Still empty (the channel has not started).
    Empty,
    /// Through a [`ChannelCursor`](crate::ChannelCursor).
    Explicit,
    /// By a session already bound, from its [`Session::auto_bind`](crate::Session::auto_bind).
    Automatic,
    /// A new session of the slot's layer, because nobody bound one.
    Default,
}

impl std::fmt::Display for BindMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BindMode::Empty => "empty",
            BindMode::Explicit => "explicit",
            BindMode::Automatic => "automatic",
            BindMode::Default => "default",
        })
    }
}

/// Life cycle of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelState {
    /// Created; slots being bound.
    Binding,
    /// Started: events flow.
    Open,
    /// `ChannelClose` has passed; events are refused.
    Closed,
}

pub(crate) struct Channel {
    pub name: String,
    pub qos: Arc<Qos>,
    pub slots: Vec<Option<SessionId>>,
    pub modes: Vec<BindMode>,
    pub routes: Vec<Box<[Hop]>>,
    pub state: ChannelState,
}

impl Channel {
    pub fn new(name: String, qos: Arc<Qos>) -> Self {
        let n = qos.layers().len();
        Channel {
            name,
            qos,
            slots: vec![None; n],
            modes: vec![BindMode::Empty; n],
            routes: Vec::new(),
            state: ChannelState::Binding,
        }
    }

    /// Maps every QoS route onto the bound sessions (called once, when the channel starts).
    pub fn map_routes(&mut self) {
        let types = EventType::count();
        self.routes = (0..types).map(|i| self.mapped_route_index(i)).collect();
    }

    fn mapped_route_index(&self, index: usize) -> Box<[Hop]> {
        self.mapped_route(EventType::from_index(index))
    }

    fn mapped_route(&self, ty: EventType) -> Box<[Hop]> {
        self.qos
            .route(ty)
            .iter()
            .filter_map(|&slot| {
                let session = self.slots.get(slot as usize).copied().flatten()?;
                Some(Hop { slot, session })
            })
            .collect()
    }

    /// The route of `ty`, mapping it now if the type was registered after the channel started.
    #[inline]
    pub fn route(&mut self, ty: EventType) -> &[Hop] {
        if ty.index() >= self.routes.len() {
            let missing: Vec<Box<[Hop]>> = (self.routes.len()..=ty.index())
                .map(|i| self.mapped_route_index(i))
                .collect();
            self.routes.extend(missing);
        }
        &self.routes[ty.index()]
    }

    /// The slot a session occupies in this channel, if bound.
    pub fn slot_of(&self, session: SessionId) -> Option<u16> {
        self.slots
            .iter()
            .position(|s| *s == Some(session))
            .map(|p| p as u16)
    }
}

/// Checks that `session` (of layer `found`) may fill `slot` of `qos`.
pub(crate) fn check_slot(qos: &Qos, slot: usize, found: &LayerRef) -> Result<(), BindError> {
    let expected = qos.layers().get(slot).ok_or(BindError::SlotOutOfRange {
        slot,
        len: qos.layers().len(),
    })?;
    if same_layer(expected, found) {
        Ok(())
    } else {
        Err(BindError::WrongLayer {
            slot,
            expected: expected.name().to_string(),
            found: found.name().to_string(),
        })
    }
}

/// The request a starting channel hands to its bound sessions for automatic binding.
pub struct AutoBind<'a> {
    pub(crate) channel_name: &'a str,
    pub(crate) qos: &'a Qos,
    pub(crate) slots: &'a mut [Option<SessionId>],
    pub(crate) modes: &'a mut [BindMode],
    pub(crate) session_layers: &'a [LayerRef],
    pub(crate) companions: Vec<SessionId>,
}

impl AutoBind<'_> {
    /// The channel's name.
    pub fn channel_name(&self) -> &str {
        self.channel_name
    }

    /// The channel's QoS (to learn its layers).
    pub fn qos(&self) -> &Qos {
        self.qos
    }

    /// Slots still empty, with their layers.
    pub fn empty_slots(&self) -> Vec<(usize, &LayerRef)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_none())
            .filter_map(|(i, _)| self.qos.layers().get(i).map(|l| (i, l)))
            .collect()
    }

    /// The sessions the asked session already shares another channel with (in the order of
    /// those channels' creation, bottom first within each): channel introspection for a
    /// session that wants the channels it joins to share its neighbours too.
    pub fn companions(&self) -> &[SessionId] {
        &self.companions
    }

    /// Fills every empty slot whose layer is the layer of one of [`companions`](Self::companions)
    /// with that companion (the first one of the layer): a shared session brings the sessions
    /// it is shared with (seed 001 §5.1, the intermedia sync that "binds the shared sessions
    /// when requested by the channel"). Returns how many slots it filled.
    pub fn bind_companions(&mut self) -> usize {
        let mut filled = 0;
        for slot in 0..self.slots.len() {
            if self.slots[slot].is_some() {
                continue;
            }
            let Some(layer) = self.qos.layers().get(slot) else {
                continue;
            };
            let companion = self.companions.iter().copied().find(|c| {
                self.session_layers
                    .get(c.0 as usize)
                    .is_some_and(|l| same_layer(l, layer))
            });
            if let Some(c) = companion {
                if self.bind(slot, c).is_ok() {
                    filled += 1;
                }
            }
        }
        filled
    }

    /// Binds `session` into the empty `slot`.
    ///
    /// # Errors
    /// [`BindError`] when the slot does not exist, is not of the session's layer, or the session
    /// is unknown. A slot already filled is left as it is (explicit binding wins).
    pub fn bind(&mut self, slot: usize, session: SessionId) -> Result<(), BindError> {
        let layer = self
            .session_layers
            .get(session.0 as usize)
            .ok_or(BindError::UnknownSession(session.0))?;
        check_slot(self.qos, slot, layer)?;
        if let Some(s) = self.slots.get_mut(slot) {
            if s.is_none() {
                *s = Some(session);
                if let Some(m) = self.modes.get_mut(slot) {
                    *m = BindMode::Automatic;
                }
            }
        }
        Ok(())
    }
}

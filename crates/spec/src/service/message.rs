//! The overlay message and node information a service sees (seed 000 §4.2.3.1, §5.1.4.1).
//!
//! A message has the HyperCast attributes of the seed's marshalled `<Message>` (§5.1.4.1):
//! MessageIdentifier, ServiceIdentifier, DeliveryMode, HopLimit, SourceAddress,
//! DestinationAddress, PreviousHopAddress, MessageType, Payload, RootAddress, plus a sequence
//! number (best-effort ordering, Table 3.5) and any other attribute by name ([`Message::extra`]).
//! Known attributes are plain fields so filters and expressions read them without lookups.
//!
//! MessageType is one byte: the seed writes the payload type 0x80 as `-128` (a signed Java
//! byte, §5.1.2.2) and as `128` (§5.1.4.1); both denote the same type here.

use std::fmt;
use std::sync::Arc;

/// A logical overlay address. The seed's two-dimensional addresses `x,y` (§5.1.4.1, the DT
/// protocol) are packed as `x << 32 | y`; a plain number is itself. `0` means "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub u64);

impl Addr {
    /// Parses `N` or `x,y`.
    pub fn parse(s: &str) -> Option<Addr> {
        let s = s.trim();
        if let Some((x, y)) = s.split_once(',') {
            let x: u32 = x.trim().parse().ok()?;
            let y: u32 = y.trim().parse().ok()?;
            Some(Addr((u64::from(x) << 32) | u64::from(y)))
        } else {
            s.parse().ok().map(Addr)
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > u64::from(u32::MAX) {
            write!(f, "{},{}", self.0 >> 32, self.0 & 0xffff_ffff)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// The identity of one live service instance: (ServiceID, MessageID) (seed §4.3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceKey {
    /// The service.
    pub service: u32,
    /// The data message the instance belongs to.
    pub message: u64,
}

impl std::hash::Hash for InstanceKey {
    /// One word: the store's map hashes this on every input.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.message.rotate_left(24) ^ u64::from(self.service));
    }
}

/// An overlay message with its attributes (seed §5.1.4.1).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// ServiceIdentifier.
    pub service_id: u32,
    /// MessageIdentifier.
    pub message_id: u64,
    /// MessageType (one byte; see the module doc).
    pub message_type: u8,
    /// DeliveryMode (seed §5.1.2.4: 1 multicast, 3 unicast).
    pub delivery_mode: u8,
    /// HopLimit (default 255, seed §4.2.3.1).
    pub hop_limit: u8,
    /// SourceAddress.
    pub source: Addr,
    /// DestinationAddress.
    pub destination: Addr,
    /// PreviousHopAddress.
    pub previous_hop: Addr,
    /// RootAddress.
    pub root: Addr,
    /// SequenceNumber.
    pub seq: u64,
    /// Payload; `None` for control messages.
    pub payload: Option<Arc<[u8]>>,
    /// Any other attribute, by name, as text.
    pub extra: Vec<(Box<str>, Box<str>)>,
}

impl Clone for Message {
    fn clone(&self) -> Self {
        Message {
            service_id: self.service_id,
            message_id: self.message_id,
            message_type: self.message_type,
            delivery_mode: self.delivery_mode,
            hop_limit: self.hop_limit,
            source: self.source,
            destination: self.destination,
            previous_hop: self.previous_hop,
            root: self.root,
            seq: self.seq,
            payload: self.payload.clone(),
            extra: if self.extra.is_empty() {
                Vec::new()
            } else {
                self.extra.clone()
            },
        }
    }

    /// Reuses `self`'s allocations (the history overwrites its last messages in place).
    fn clone_from(&mut self, src: &Self) {
        self.service_id = src.service_id;
        self.message_id = src.message_id;
        self.message_type = src.message_type;
        self.delivery_mode = src.delivery_mode;
        self.hop_limit = src.hop_limit;
        self.source = src.source;
        self.destination = src.destination;
        self.previous_hop = src.previous_hop;
        self.root = src.root;
        self.seq = src.seq;
        let same = match (&self.payload, &src.payload) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.payload.clone_from(&src.payload);
        }
        if !(self.extra.is_empty() && src.extra.is_empty()) {
            self.extra.clone_from(&src.extra);
        }
    }
}

/// The payload message type, 0x80 (seed §5.1.2.2).
pub const PAYLOAD_TYPE: u8 = 0x80;

/// A known message attribute; the names are the seed's element names (§5.1.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attr {
    /// MessageIdentifier / MessageID.
    MessageId,
    /// ServiceIdentifier / ServiceID.
    ServiceId,
    /// MessageType.
    MessageType,
    /// DeliveryMode.
    DeliveryMode,
    /// HopLimit.
    HopLimit,
    /// SourceAddress.
    Source,
    /// DestinationAddress.
    Destination,
    /// PreviousHopAddress.
    PreviousHop,
    /// RootAddress.
    Root,
    /// SequenceNumber.
    Seq,
}

impl Attr {
    /// All attributes, in the order of [`Attr::name`].
    pub const ALL: [Attr; 10] = [
        Attr::MessageId,
        Attr::ServiceId,
        Attr::MessageType,
        Attr::DeliveryMode,
        Attr::HopLimit,
        Attr::Source,
        Attr::Destination,
        Attr::PreviousHop,
        Attr::Root,
        Attr::Seq,
    ];

    /// The seed's element name.
    pub fn name(self) -> &'static str {
        match self {
            Attr::MessageId => "MessageID",
            Attr::ServiceId => "ServiceID",
            Attr::MessageType => "MessageType",
            Attr::DeliveryMode => "DeliveryMode",
            Attr::HopLimit => "HopLimit",
            Attr::Source => "SourceAddress",
            Attr::Destination => "DestinationAddress",
            Attr::PreviousHop => "PreviousHopAddress",
            Attr::Root => "RootAddress",
            Attr::Seq => "SequenceNumber",
        }
    }

    /// The short name used in expressions (`m.source`).
    pub fn short(self) -> &'static str {
        match self {
            Attr::MessageId => "id",
            Attr::ServiceId => "service",
            Attr::MessageType => "type",
            Attr::DeliveryMode => "mode",
            Attr::HopLimit => "hoplimit",
            Attr::Source => "source",
            Attr::Destination => "destination",
            Attr::PreviousHop => "previoushop",
            Attr::Root => "root",
            Attr::Seq => "seq",
        }
    }

    /// Resolves a seed element name, a short name or an alias (`MessageIdentifier`).
    pub fn from_name(name: &str) -> Option<Attr> {
        let alias = match name {
            "MessageIdentifier" => Some(Attr::MessageId),
            "ServiceIdentifier" => Some(Attr::ServiceId),
            "Sequence" | "SeqNumber" => Some(Attr::Seq),
            _ => None,
        };
        alias.or_else(|| {
            Attr::ALL
                .into_iter()
                .find(|a| a.name() == name || a.short() == name)
        })
    }

    /// Whether values of this attribute are addresses (parsed with [`Addr::parse`]).
    pub fn is_address(self) -> bool {
        matches!(
            self,
            Attr::Source | Attr::Destination | Attr::PreviousHop | Attr::Root
        )
    }

    /// Parses a value of this attribute as written in a filter or a trace. MessageType
    /// accepts -128..=255 (one byte, two's complement).
    pub fn parse_value(self, s: &str) -> Option<i64> {
        let s = s.trim();
        if self.is_address() {
            return Addr::parse(s).map(|a| a.0 as i64);
        }
        let v: i64 = s.parse().ok()?;
        match self {
            Attr::MessageType => (-128..=255).contains(&v).then_some(v & 0xff),
            Attr::DeliveryMode | Attr::HopLimit => (0..=255).contains(&v).then_some(v),
            Attr::ServiceId => (0..=i64::from(u32::MAX)).contains(&v).then_some(v),
            _ => (v >= 0).then_some(v),
        }
    }
}

impl Message {
    /// The value of a known attribute, as an integer (addresses as their packed value).
    #[inline]
    pub fn get(&self, a: Attr) -> i64 {
        match a {
            Attr::MessageId => self.message_id as i64,
            Attr::ServiceId => i64::from(self.service_id),
            Attr::MessageType => i64::from(self.message_type),
            Attr::DeliveryMode => i64::from(self.delivery_mode),
            Attr::HopLimit => i64::from(self.hop_limit),
            Attr::Source => self.source.0 as i64,
            Attr::Destination => self.destination.0 as i64,
            Attr::PreviousHop => self.previous_hop.0 as i64,
            Attr::Root => self.root.0 as i64,
            Attr::Seq => self.seq as i64,
        }
    }

    /// Sets a known attribute from an integer (truncating to the field's width).
    #[inline]
    pub fn set(&mut self, a: Attr, v: i64) {
        match a {
            Attr::MessageId => self.message_id = v as u64,
            Attr::ServiceId => self.service_id = v as u32,
            Attr::MessageType => self.message_type = v as u8,
            Attr::DeliveryMode => self.delivery_mode = v as u8,
            Attr::HopLimit => self.hop_limit = v as u8,
            Attr::Source => self.source = Addr(v as u64),
            Attr::Destination => self.destination = Addr(v as u64),
            Attr::PreviousHop => self.previous_hop = Addr(v as u64),
            Attr::Root => self.root = Addr(v as u64),
            Attr::Seq => self.seq = v as u64,
        }
    }

    /// Overwrites every attribute with `src`'s, leaving the payload out (a flat step's send
    /// builds its message in one reused [`Message`] this way; no allocation when neither has
    /// extra attributes).
    #[inline(always)]
    pub(crate) fn assign_header(&mut self, src: &Message) {
        self.service_id = src.service_id;
        self.message_id = src.message_id;
        self.message_type = src.message_type;
        self.delivery_mode = src.delivery_mode;
        self.hop_limit = src.hop_limit;
        self.source = src.source;
        self.destination = src.destination;
        self.previous_hop = src.previous_hop;
        self.root = src.root;
        self.seq = src.seq;
        self.payload = None;
        if !(self.extra.is_empty() && src.extra.is_empty()) {
            self.extra.clone_from(&src.extra);
        }
    }

    /// Overwrites every attribute as a new message has them (HopLimit 255, seed §4.2.3.1),
    /// keeping the allocations.
    #[inline]
    pub(crate) fn assign_fresh(&mut self) {
        self.service_id = 0;
        self.message_id = 0;
        self.message_type = 0;
        self.delivery_mode = 0;
        self.hop_limit = 255;
        self.source = Addr(0);
        self.destination = Addr(0);
        self.previous_hop = Addr(0);
        self.root = Addr(0);
        self.seq = 0;
        self.payload = None;
        self.extra.clear();
    }

    /// A copy, with the payload shared (`payload`) or left out (a control message built from
    /// a data message: no reference count is taken only to be dropped).
    #[inline]
    pub fn copy(&self, payload: bool) -> Message {
        Message {
            service_id: self.service_id,
            message_id: self.message_id,
            message_type: self.message_type,
            delivery_mode: self.delivery_mode,
            hop_limit: self.hop_limit,
            source: self.source,
            destination: self.destination,
            previous_hop: self.previous_hop,
            root: self.root,
            seq: self.seq,
            payload: if payload { self.payload.clone() } else { None },
            extra: if self.extra.is_empty() {
                Vec::new()
            } else {
                self.extra.clone()
            },
        }
    }

    /// An attribute that is not a known field, by name.
    pub fn extra(&self, name: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| &**v)
    }

    /// The instance this message belongs to.
    #[inline]
    pub fn key(&self) -> InstanceKey {
        InstanceKey {
            service: self.service_id,
            message: self.message_id,
        }
    }

    /// Feeds every attribute, the payload and the extra attributes to `h` (the explorer's
    /// state hashing; `Message` is not `Hash` so that the store's map stays on its own hash).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        for a in Attr::ALL {
            h.write_i64(self.get(a));
        }
        self.payload.as_deref().hash(h);
        self.extra.hash(h);
    }

    /// Heap bytes held besides the payload (for the memory figures).
    pub fn heap_bytes(&self) -> usize {
        self.extra.capacity() * std::mem::size_of::<(Box<str>, Box<str>)>()
            + self
                .extra
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// The local node's information (seed §4.2.3.1 updateNodeInfo): its address and topology.
/// Shared by all instances of a store; expressions read it as `node.address`, `node.parent`,
/// `node.children`, `node.neighbours`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// The local logical address.
    pub address: Addr,
    /// The parent in the current tree (`Addr(0)`: none, the root).
    pub parent: Addr,
    /// The children in the current tree.
    pub children: Vec<Addr>,
    /// The neighbours in the overlay.
    pub neighbours: Vec<Addr>,
}

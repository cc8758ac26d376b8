//! The forwarding engine, sans-IO (seed 000 §3.1.1.4: "all application messages are
//! transmitted along trees that are embedded in the overlay network topology"; the delivery
//! modes of the overlay socket, §3.1.1.3).
//!
//! One [`Forwarder`] per node carries application messages ([`crate::wire::app`]) over any
//! topology that can answer three questions, the [`Topology`] trait: who am I, who are my
//! neighbours, and who are my parent and children in the tree rooted at some node (computed
//! locally, [`crate::tree`]). [`DtTopology`] and [`HcTopology`] adapt the DT and hypercube
//! engines.
//!
//! # Delivery modes
//! - **Multicast**: down the tree rooted at the source. A node accepts a multicast only from
//!   its parent in the source's tree (the *previous-hop check*); anything else is dropped and
//!   counted ([`Stats::not_from_parent`]), so a message that strayed off the tree (a stale
//!   neighbourhood) never loops. Accepted messages are delivered and passed to the children.
//! - **Flood**: to every neighbour but the previous hop; each node delivers and passes on a
//!   message the first time it sees it (*duplicate suppression*).
//! - **Unicast**: up the tree rooted at the destination (each hop sends to its parent in the
//!   destination's tree), delivered at the destination only — or, with
//!   [`Config::hand_up_unicast`], handed up at every node on the way ([`Delivery::transit`]),
//!   whose upper layer sends it on (the MessageStore's metaops, seed 000 §5.1.2.1).
//!
//! # Message identity and duplicates
//! Every message the engine originates carries a message-id extension
//! ([`crate::wire::app::ext::MESSAGE_ID`], a u64 counter per source). A node remembers the
//! `(source, id)` pairs it has handled in a bounded FIFO ([`Config::remember`] entries, the
//! oldest forgotten first and counted as [`Stats::forgotten`]), and drops a message already
//! seen ([`Stats::duplicates`]) in every mode: flood needs it, and multicast and unicast need
//! it too on links that duplicate datagrams. Memory is bounded whatever arrives.
//!
//! # Hop limit
//! Each forwarded copy carries one hop less; a message that arrives with a hop limit of 0 is
//! still delivered if it is for this node but not forwarded ([`Stats::hop_limit`]).
//!
//! # Neighbourhood changes
//! The driver reports the topology engine's changes with [`Forwarder::neighbour_added`] /
//! [`Forwarder::neighbour_removed`]; they are queued for the layer above
//! ([`Forwarder::poll_event`]).
//!
//! # Call order
//! [`Forwarder::send`] and [`Forwarder::handle_message`] with the current topology; then drain
//! [`Forwarder::poll_transmit`] (next hop's logical address and the bytes; the driver maps the
//! address to a substrate address with [`Topology::substrate`]), [`Forwarder::poll_delivery`]
//! and [`Forwarder::poll_event`]. The engine has no timer.

use std::collections::{HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;

use thiserror::Error;

use crate::addr::{DtAddr, HcLabel};
use crate::wire::app::{ext, Address, DeliveryMode, Extension, Packet, Repr};
use crate::wire::WireError;
use crate::{dt, hypercube, tree};

/// A logical address type the engine can put in the application header.
pub trait LogicalAddr: Copy + Ord + Hash + Debug {
    /// On the wire.
    fn to_wire(self) -> Address;
    /// From the wire; `None` for an address of the other topology.
    fn from_wire(a: Address) -> Option<Self>;
}

impl LogicalAddr for DtAddr {
    fn to_wire(self) -> Address {
        Address::Dt(self)
    }
    fn from_wire(a: Address) -> Option<Self> {
        match a {
            Address::Dt(a) => Some(a),
            Address::Hc(_) => None,
        }
    }
}

impl LogicalAddr for HcLabel {
    fn to_wire(self) -> Address {
        Address::Hc(self)
    }
    fn from_wire(a: Address) -> Option<Self> {
        match a {
            Address::Hc(l) => Some(l),
            Address::Dt(_) => None,
        }
    }
}

/// What the forwarding engine needs to know of the topology, at the moment it is asked.
pub trait Topology {
    /// The logical address type.
    type Addr: LogicalAddr;
    /// The substrate address type.
    type Substrate: Clone;
    /// This node's logical address (`None` while it has none, e.g. an unlabelled hypercube
    /// node).
    fn me(&self) -> Option<Self::Addr>;
    /// The current neighbours.
    fn neighbours(&self) -> Vec<Self::Addr>;
    /// The parent of this node in the tree rooted at `root`; `None` at the root.
    fn parent(&self, root: Self::Addr) -> Option<Self::Addr>;
    /// The children of this node in the tree rooted at `root`.
    fn children(&self, root: Self::Addr) -> Vec<Self::Addr>;
    /// Where neighbour `a` is.
    fn substrate(&self, a: Self::Addr) -> Option<Self::Substrate>;
}

/// A DT node as a [`Topology`] (compass-routing trees).
#[derive(Debug, Clone, Copy)]
pub struct DtTopology<'a, S>(pub &'a dt::Node<S>);

impl<S: Clone + PartialEq> Topology for DtTopology<'_, S> {
    type Addr = DtAddr;
    type Substrate = S;
    fn me(&self) -> Option<DtAddr> {
        Some(self.0.addr())
    }
    fn neighbours(&self) -> Vec<DtAddr> {
        self.0.neighbour_addrs().collect()
    }
    fn parent(&self, root: DtAddr) -> Option<DtAddr> {
        tree::dt_parent(self.0, root)
    }
    fn children(&self, root: DtAddr) -> Vec<DtAddr> {
        tree::dt_children(self.0, root).collect()
    }
    fn substrate(&self, a: DtAddr) -> Option<S> {
        self.0
            .neighbours()
            .find(|(n, _)| *n == a)
            .map(|(_, n)| n.substrate.clone())
    }
}

/// A hypercube node as a [`Topology`] (bit-rule trees).
#[derive(Debug, Clone, Copy)]
pub struct HcTopology<'a, S>(pub &'a hypercube::Node<S>);

impl<S: Clone + Ord> Topology for HcTopology<'_, S> {
    type Addr = HcLabel;
    type Substrate = S;
    fn me(&self) -> Option<HcLabel> {
        self.0.label()
    }
    fn neighbours(&self) -> Vec<HcLabel> {
        self.0.neighbour_labels().collect()
    }
    fn parent(&self, root: HcLabel) -> Option<HcLabel> {
        let me = self.0.label()?;
        let top = self.0.root_label().map_or(0, HcLabel::gray_index);
        // Only a present neighbour is a usable parent.
        tree::hc_parent(me, root, top).filter(|p| self.0.neighbour_labels().any(|n| n == *p))
    }
    fn children(&self, root: HcLabel) -> Vec<HcLabel> {
        tree::hc_children(self.0, root).collect()
    }
    fn substrate(&self, a: HcLabel) -> Option<S> {
        self.0
            .neighbours()
            .find(|(n, _)| *n == a)
            .map(|(_, n)| n.substrate.clone())
    }
}

/// Engine parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Hop limit of the messages this node originates: 64.
    pub hop_limit: u8,
    /// `(source, id)` pairs remembered for duplicate suppression: 4096.
    pub remember: usize,
    /// A unicast passing through this node (not for it) is handed up as a [`Delivery`] with
    /// `transit` set instead of being forwarded: the layer above (the MessageStore, seed 000
    /// §5.1.2.1 metaops) decides whether to process it and sends it on itself. Off.
    pub hand_up_unicast: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hop_limit: 64,
            remember: 4096,
            hand_up_unicast: false,
        }
    }
}

/// Counters of what the engine dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages originated.
    pub sent: u64,
    /// Messages delivered to this node's application.
    pub delivered: u64,
    /// Copies passed on to another node.
    pub forwarded: u64,
    /// Bytes that are not an application message.
    pub malformed: u64,
    /// Messages of the other topology's address type, without a message id, or of an
    /// unknown delivery mode.
    pub unsupported: u64,
    /// Multicasts not from this node's parent in the source's tree (previous-hop check).
    pub not_from_parent: u64,
    /// Copies of a message already handled.
    pub duplicates: u64,
    /// Messages that would have been forwarded with no hop left.
    pub hop_limit: u64,
    /// Unicasts with no next hop (no parent towards the destination), and sends while the
    /// node has no address.
    pub no_route: u64,
    /// Remembered `(source, id)` pairs forgotten to make room (the memory bound at work).
    pub forgotten: u64,
    /// The node's own messages coming back.
    pub own: u64,
}

/// Why a message could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SendError {
    /// The node has no logical address yet.
    #[error("the node has no overlay address yet")]
    NoAddress,
    /// A unicast needs a destination.
    #[error("unicast without a destination")]
    NoDestination,
    /// The mode is not one this engine sends.
    #[error("unsupported delivery mode")]
    Mode,
    /// The message could not be encoded (payload too long).
    #[error("cannot encode: {0}")]
    Wire(WireError),
}

/// A message delivered to this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<A> {
    /// The source's logical address.
    pub src: A,
    /// The source's message id.
    pub id: u64,
    /// How it travelled.
    pub mode: DeliveryMode,
    /// The payload (empty if the message had none).
    pub payload: Vec<u8>,
    /// A unicast for another node, handed up because [`Config::hand_up_unicast`] is set.
    pub transit: bool,
}

/// A neighbourhood change, surfaced to the layer above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<A> {
    /// A neighbour appeared.
    Added(A),
    /// A neighbour disappeared.
    Removed(A),
}

/// The forwarding engine of one node (see the module documentation).
#[derive(Debug, Clone)]
pub struct Forwarder<A> {
    config: Config,
    next_id: u64,
    /// Remembered `(source, id)` pairs, under a seeded fast hash (an address and a counter:
    /// SipHash cost more than the rest of remembering a message).
    seen: HashSet<(A, u64), foldhash::fast::RandomState>,
    order: VecDeque<(A, u64)>,
    transmits: VecDeque<(A, Vec<u8>)>,
    deliveries: VecDeque<Delivery<A>>,
    events: VecDeque<Change<A>>,
    stats: Stats,
}

impl<A: LogicalAddr> Forwarder<A> {
    /// An engine with `config`; message ids start at `first_id` (a restarted node should not
    /// reuse the ids of its previous incarnation: pass something fresh, e.g. random).
    pub fn new(config: Config, first_id: u64) -> Self {
        Forwarder {
            config,
            next_id: first_id,
            seen: HashSet::default(),
            order: VecDeque::new(),
            transmits: VecDeque::new(),
            deliveries: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// `(source, id)` pairs currently remembered (at most [`Config::remember`]).
    pub fn remembered(&self) -> usize {
        self.order.len()
    }

    /// Originates a message: `mode` with `payload`, to `dest` for unicast. A multicast or flood
    /// is not delivered back to its source (its application has it); a unicast to this node
    /// is. Returns the message id.
    ///
    /// # Errors
    /// [`SendError`] when the node has no address, a unicast has no destination, the mode is
    /// unknown or the payload does not fit an extension.
    pub fn send<T: Topology<Addr = A>>(
        &mut self,
        topo: &T,
        mode: DeliveryMode,
        dest: Option<A>,
        payload: &[u8],
    ) -> Result<u64, SendError> {
        let Some(me) = topo.me() else {
            self.stats.no_route += 1;
            return Err(SendError::NoAddress);
        };
        let dest = match (mode, dest) {
            (DeliveryMode::Unicast, None) => return Err(SendError::NoDestination),
            (DeliveryMode::Unicast, Some(d)) => d,
            (DeliveryMode::Multicast | DeliveryMode::Flood, _) => me,
            (DeliveryMode::Unknown(_), _) => return Err(SendError::Mode),
        };
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let id_bytes = id.to_be_bytes();
        let repr = Repr {
            mode,
            hop_limit: self.config.hop_limit,
            src: me.to_wire(),
            prev_hop: me.to_wire(),
            dest: dest.to_wire(),
            extensions: vec![
                Extension::Unknown {
                    kind: ext::MESSAGE_ID,
                    body: &id_bytes,
                },
                Extension::Payload(payload),
            ],
        };
        let mut bytes = Vec::with_capacity(repr.buffer_len());
        repr.emit_into(&mut bytes).map_err(SendError::Wire)?;
        self.stats.sent += 1;
        self.remember(me, id);
        if mode == DeliveryMode::Unicast && dest == me {
            self.deliver(me, id, mode, payload);
            return Ok(id);
        }
        let next: Vec<A> = match mode {
            DeliveryMode::Multicast => topo.children(me),
            DeliveryMode::Flood => topo.neighbours(),
            _ => match topo.parent(dest) {
                Some(p) => vec![p],
                None => {
                    self.stats.no_route += 1;
                    Vec::new()
                }
            },
        };
        self.push_transmits(next, bytes);
        Ok(id)
    }

    /// Handles an application message received from the substrate.
    pub fn handle_message<T: Topology<Addr = A>>(&mut self, topo: &T, bytes: &[u8]) {
        let Ok(mut packet) = Packet::new_checked(bytes.to_vec()) else {
            self.stats.malformed += 1;
            return;
        };
        let (Some(me), Some(src), Some(prev), Some(dest)) = (
            topo.me(),
            A::from_wire(packet.src()),
            A::from_wire(packet.prev_hop()),
            A::from_wire(packet.dest()),
        ) else {
            self.stats.unsupported += 1;
            return;
        };
        let mode = packet.mode();
        let (id, payload) = {
            let exts = packet.extensions();
            let id = exts.iter().find_map(|e| match e {
                Extension::Unknown { kind, body } if *kind == ext::MESSAGE_ID => {
                    <[u8; 8]>::try_from(*body).ok().map(u64::from_be_bytes)
                }
                _ => None,
            });
            let payload = exts
                .iter()
                .find_map(|e| match e {
                    Extension::Payload(b) => Some(b.to_vec()),
                    _ => None,
                })
                .unwrap_or_default();
            (id, payload)
        };
        let Some(id) = id else {
            self.stats.unsupported += 1;
            return;
        };
        if src == me {
            self.stats.own += 1;
            return;
        }
        // The previous-hop check comes before duplicate suppression, so a stray copy cannot
        // mark the message as seen.
        if mode == DeliveryMode::Multicast && topo.parent(src) != Some(prev) {
            self.stats.not_from_parent += 1;
            return;
        }
        if matches!(mode, DeliveryMode::Unknown(_)) {
            self.stats.unsupported += 1;
            return;
        }
        if self.seen.contains(&(src, id)) {
            self.stats.duplicates += 1;
            return;
        }
        self.remember(src, id);
        let next: Vec<A> = match mode {
            DeliveryMode::Multicast => {
                self.deliver(src, id, mode, &payload);
                topo.children(src)
            }
            DeliveryMode::Flood => {
                self.deliver(src, id, mode, &payload);
                topo.neighbours()
                    .into_iter()
                    .filter(|&n| n != prev)
                    .collect()
            }
            _ => {
                if dest == me {
                    self.deliver(src, id, mode, &payload);
                    Vec::new()
                } else if self.config.hand_up_unicast {
                    self.stats.delivered += 1;
                    self.deliveries.push_back(Delivery {
                        src,
                        id,
                        mode,
                        payload,
                        transit: true,
                    });
                    Vec::new()
                } else if let Some(p) = topo.parent(dest) {
                    vec![p]
                } else {
                    self.stats.no_route += 1;
                    Vec::new()
                }
            }
        };
        if next.is_empty() {
            return;
        }
        let hops = packet.hop_limit();
        if hops == 0 {
            self.stats.hop_limit += 1;
            return;
        }
        packet.set_hop_limit(hops - 1);
        packet.set_prev_hop(me.to_wire());
        let out = packet.into_inner();
        self.stats.forwarded += next.len() as u64;
        self.push_transmits(next, out);
    }

    /// Queues `bytes` for each of `next`, in order: copies for all but the last, which takes
    /// the buffer itself (a unicast hop, the common case, copies nothing).
    fn push_transmits(&mut self, next: Vec<A>, bytes: Vec<u8>) {
        let mut next = next.into_iter();
        let Some(last) = next.next_back() else {
            return;
        };
        for n in next {
            self.transmits.push_back((n, bytes.clone()));
        }
        self.transmits.push_back((last, bytes));
    }

    fn deliver(&mut self, src: A, id: u64, mode: DeliveryMode, payload: &[u8]) {
        self.stats.delivered += 1;
        self.deliveries.push_back(Delivery {
            src,
            id,
            mode,
            payload: payload.to_vec(),
            transit: false,
        });
    }

    fn remember(&mut self, src: A, id: u64) {
        if self.config.remember == 0 {
            return;
        }
        while self.order.len() >= self.config.remember {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
                self.stats.forgotten += 1;
            }
        }
        if self.seen.insert((src, id)) {
            self.order.push_back((src, id));
        }
    }

    /// The topology reports a new neighbour.
    pub fn neighbour_added(&mut self, a: A) {
        self.events.push_back(Change::Added(a));
    }

    /// The topology reports a lost neighbour.
    pub fn neighbour_removed(&mut self, a: A) {
        self.events.push_back(Change::Removed(a));
    }

    /// The next copy to send: the next hop's logical address and the bytes.
    pub fn poll_transmit(&mut self) -> Option<(A, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next message for this node's application.
    pub fn poll_delivery(&mut self) -> Option<Delivery<A>> {
        self.deliveries.pop_front()
    }

    /// The next neighbourhood change for the layer above.
    pub fn poll_event(&mut self) -> Option<Change<A>> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A star: the centre 0 with leaves 1..=3; every tree is the star itself.
    struct Star {
        me: HcLabel,
    }

    impl Topology for Star {
        type Addr = HcLabel;
        type Substrate = u32;
        fn me(&self) -> Option<HcLabel> {
            Some(self.me)
        }
        fn neighbours(&self) -> Vec<HcLabel> {
            if self.me.value() == 0 {
                (1..=3).map(HcLabel::new).collect()
            } else {
                vec![HcLabel::new(0)]
            }
        }
        fn parent(&self, root: HcLabel) -> Option<HcLabel> {
            if root == self.me {
                None
            } else if self.me.value() == 0 {
                Some(root)
            } else {
                Some(HcLabel::new(0))
            }
        }
        fn children(&self, root: HcLabel) -> Vec<HcLabel> {
            self.neighbours()
                .into_iter()
                .filter(|&n| n != root && self.me.value() == 0 || root == self.me)
                .collect()
        }
        fn substrate(&self, a: HcLabel) -> Option<u32> {
            Some(a.value())
        }
    }

    fn star(i: u32) -> Star {
        Star {
            me: HcLabel::new(i),
        }
    }

    #[test]
    fn multicast_goes_down_the_tree_and_checks_the_previous_hop() {
        let mut leaf = Forwarder::new(Config::default(), 100);
        leaf.send(&star(1), DeliveryMode::Multicast, None, b"hi")
            .unwrap();
        let (to, bytes) = leaf.poll_transmit().unwrap();
        assert_eq!(to, HcLabel::new(0));
        assert!(leaf.poll_transmit().is_none());
        let mut centre = Forwarder::new(Config::default(), 0);
        centre.handle_message(&star(0), &bytes);
        let d = centre.poll_delivery().unwrap();
        assert_eq!(
            (d.src, d.id, &d.payload[..]),
            (HcLabel::new(1), 100, &b"hi"[..])
        );
        let out: Vec<HcLabel> = std::iter::from_fn(|| centre.poll_transmit())
            .map(|(a, _)| a)
            .collect();
        assert_eq!(out, vec![HcLabel::new(2), HcLabel::new(3)]);
        // A second copy is a duplicate.
        centre.handle_message(&star(0), &bytes);
        assert_eq!(centre.stats().duplicates, 1);
        // The original bytes (prev hop = source 1) at leaf 2: not from its parent 0.
        let mut other = Forwarder::new(Config::default(), 0);
        other.handle_message(&star(2), &bytes);
        assert_eq!(other.stats().not_from_parent, 1);
        assert!(other.poll_delivery().is_none());
    }

    #[test]
    fn hop_limit_and_memory_bound() {
        let cfg = Config {
            hop_limit: 0,
            remember: 2,
            hand_up_unicast: false,
        };
        let mut leaf = Forwarder::new(cfg, 0);
        leaf.send(&star(1), DeliveryMode::Flood, None, b"").unwrap();
        let (_, bytes) = leaf.poll_transmit().unwrap();
        let mut centre = Forwarder::new(cfg, 0);
        centre.handle_message(&star(0), &bytes);
        assert_eq!(centre.stats().delivered, 1);
        assert_eq!(centre.stats().hop_limit, 1);
        assert!(centre.poll_transmit().is_none());
        for _ in 0..5 {
            leaf.send(&star(1), DeliveryMode::Flood, None, b"").unwrap();
        }
        assert_eq!(leaf.remembered(), 2);
        assert_eq!(leaf.stats().forgotten, 4);
        centre.handle_message(&star(0), b"\x10junk");
        assert_eq!(centre.stats().malformed, 1);
    }
}

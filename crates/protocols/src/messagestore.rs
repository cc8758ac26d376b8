//! `messagestore`: delivery services (SCXML specifications) run per message above the
//! `overlay` layer (issue 16 §3; seed 000 §4.2–§4.3, the MessageStore, and §5.1.2, the
//! executable specification of a service).
//!
//! # Role
//!
//! The session holds one [`Store`] of `viastack-spec` running its services side by side, keyed
//! by ServiceID: one service instance per (ServiceID, MessageID), created by the store on the
//! first message or timer for it. The layer is the store's host: it implements the spec
//! layer's [`Network`] trait on the overlay below. The application's messages use
//! [`Config::default_service`].
//!
//! - **Services deployed at run time** (issue 16 §4; seed 000 §4.3.2). A message for a
//!   ServiceID this node lacks waits (at most [`Deploy::queue`], all services; the oldest is
//!   dropped, counted `unknown_service_dropped`) while the layer asks for the spec
//!   ([`SPEC_REQUEST`]): the message's previous hop and source first, then round robin those,
//!   the neighbours and [`Deploy::server`], one request every [`Deploy::every`]. A node that
//!   has the service answers with its bundle ([`SPEC_RESPONSE`] chunks,
//!   [`specbundle`](crate::specbundle)); the asker reassembles it and runs it only once
//!   [`specbundle::accept`] passed (hash, a signature by one of [`Deploy::trusted_keys`] when
//!   set, the spec layer's load and verification, the ServiceID): then the service is added
//!   to the store and the waiting messages go through it. A refused bundle is counted
//!   `spec_refused` and never runs; after [`Deploy::tries`] requests the waiting messages are
//!   dropped and counted.
//! - A sendable from the application becomes a data message of the service (type Payload,
//!   `0x80`), with this node as its SourceAddress and RootAddress: multicast (DeliveryMode 1)
//!   for a broadcast, unicast (3) to the node for a node send. It is given to the store like a
//!   message from the network (seed §4.3.2: the local application's message starts an
//!   instance). With `broadcast = "flood"` a broadcast is flooded (DeliveryMode 2).
//! - A sendable from below is a service message of another node (format below); its
//!   PreviousHopAddress is the node it came from.
//! - **Roots.** A message's RootAddress names the tree it travels on and the node its
//!   instance's failure is reported to. A message a service builds afresh (no `from`: h2hack's
//!   and e2eack's Reset) has none from the spec: the layer stamps its instance's root on it,
//!   and takes a message that arrives without one for the root of the instance it names (else
//!   its source) — a Reset is passed down the original sender's tree and a give-up reported
//!   to that sender, not to the node that sent the Reset.
//! - Before the store handles an input (message or timer), the layer asks the overlay for this
//!   node's place in the tree rooted at the input's root ([`TREE_QUERY`]) and waits for the
//!   answer ([`TREE`]), queueing the input; the answer becomes the store's [`NodeInfo`]
//!   (address, parent, children, neighbours) for that input — the seed's `updateNodeInfo`,
//!   done by the host before each step, so neighbourhood changes reach every live instance at
//!   its next input.
//! - **Trees remembered per topology generation.** An answer carries the overlay's topology
//!   generation ([`TreeInfo::generation`], bumped by the overlay whenever the shape its trees
//!   are computed from changes, and announced up as a [`GENERATION`] notice); the layer keeps
//!   the answers of the newest generation it heard of, by root and root label (at most
//!   [`TREE_CACHE_MAX`]), and drops them all at a newer one. An input whose tree is kept, when
//!   no input waits for an answer, is not asked: it waits only for the end of the current
//!   event and is stepped then, in arrival order — as the answers would have come — and the
//!   store's node information is not rebuilt when the step before had the same tree. A burst
//!   of payloads and their acknowledgements on one tree costs one query, not one each (a
//!   query was a kernel round trip, two boxed events, the overlay's lookup and copies of the
//!   answer). Repairs always ask. Debug builds (every simulator test) still ask for a kept
//!   tree and assert that the overlay's answer equals it.
//! - Primitives: `toApplication` delivers the payload up, from the message's root (a node's
//!   own messages are not delivered back to it: counted `own`); `sendDataMessage`,
//!   `sendControlMessage` and `forwardMessage` send one overlay datagram per target: the
//!   children of the tree for DeliveryMode 1 (multicast, one hop each), the DestinationAddress
//!   for 3 (unicast), the neighbours but the previous hop for 2 (flood); `setTimer` /
//!   `cancelTimer` are one-shot timers the layer keeps in its own deadline queue, with one kernel
//!   timer armed at the earliest (a kernel timer per instance timer cost a kernel table entry
//!   and a cancel each: h2hack sets four per payload; the queue is a hash table of each
//!   instance's timers and a deadline heap with lazy deletion, [`Timers`]); `terminate` and
//!   `updateNodeInfo` need nothing.
//! - With `failure_state` set (h2hack: `reset`), when the instance of a message this node sent
//!   enters that state after a step, a [`PEER_UNREACHABLE`] notice with the message's tag goes
//!   up (addressee `NodeId(u32::MAX)` for a broadcast): the sender learns the service gave up.
//! - **Failure reports up the tree.** With `failure_state` set, a node whose instance of
//!   another node's message enters that state (h2hack: a child never acknowledged, so a
//!   subtree may have missed the payload) sends a *failure report* (layer MessageType
//!   [`FAILURE_REPORT`]) by unicast to the message's root, every [`REPORT_EVERY`] until the
//!   root answers with a [`REPORT_ACK`] or [`REPORT_TRIES`] reports went unanswered (counted
//!   `report_unanswered`). The root's layer turns the first report into the
//!   [`PEER_UNREACHABLE`] notice: hop-to-hop services tell the sender too.
//! - **Repair on neighbourhood change.** The layer remembers, per live instance, the payload
//!   it multicast and the nodes it went to. When the overlay reports a neighbour added or
//!   removed ([`NEIGHBOUR_ADDED`] / [`NEIGHBOUR_REMOVED`], passed on up), and once more
//!   [`REPAIR_SETTLE`] later (the overlay learns a new neighbour's own neighbours from its
//!   next hello), it asks for each such instance's tree and sends the payload to the children
//!   it has not reached (counted `repaired`): a node that joined the tree below this one while
//!   the message passed — or a sender that had no neighbour at the time — is not missed
//!   (seed §4.3: neighbourhood changes delivered to the live instances). Instances in the
//!   failure state are not repaired.
//! - **Acknowledged repairs.** The instance expects no acknowledgement from a child it did not
//!   know, so the layer asks for one: a repair is the held payload as a layer message
//!   ([`REPAIR`], MessageType `0xFA`); the child's layer hands it to its service as the payload
//!   (MessageType `0x80`) and, once the service stepped it (delivered it, or had it already),
//!   answers with a [`REPAIR_ACK`] (`0xF9`; `repair_ack_sent`). The repairer sends again after
//!   [`REPAIR_WAIT_FIRST`], doubling up to [`REPAIR_WAIT_MAX`] (`repair_sent` counts every
//!   send, `repair_acked` the answers), until the answer comes or the child leaves the
//!   children (`repair_abandoned`: repaired anew if it comes back); the held payload outlives
//!   its instance while a repair is unanswered. After [`REPAIR_TRIES`] unanswered sends it
//!   gives up (`repair_given_up`) and, with `failure_state`, reports the message's failure as
//!   a service's give-up is reported: at the sender, or by a failure report to the root. A
//!   held payload pushed out (`held_evicted`) with a repair unanswered is given up the same
//!   way. (Issue 16: three unacknowledged sends missed 6 h2hack multicasts silently on 1,000
//!   seeds at 30 % loss: seeds 375, 530, 712.) A node the payload went to that is no longer a child
//!   (at a step or a repair pass) is forgotten: the service stopped waiting for its
//!   acknowledgement when it left (h2hack's "all children acknowledged" is over the current
//!   children), so if the send was lost and it comes back it is repaired like a new child.
//!   A payload that reaches this node by unicast (a retransmission answering its NACK) is
//!   held as the multicast it repairs, so a node that had no children when it came has it
//!   for those it gains. (Issue 16: without these, 30 % loss silently missed multicasts on
//!   seeds 37, 47 and 50 of `crates/scenario/tests/messagestore.rs`.)
//! - **Exactly once to the application.** The layer remembers the messages it delivered up
//!   (root, MessageID, SequenceNumber) for [`DELIVERED_FOR`] and suppresses a second delivery
//!   (counted `duplicate_suppressed`): a service whose instance was freed and recreated by a
//!   late retransmission (e2eack under heavy loss) would otherwise deliver the payload again.
//!   At most [`DELIVERED_MAX`] are remembered; forgetting one early is counted
//!   `delivered_evicted`.
//! - With `stream`, a sender's messages share one MessageID (one instance per stream) and
//!   carry increasing SequenceNumbers; with `forward = "store"` the layer forwards a received
//!   multicast or flooded data message itself (one hop on: children or neighbours) before the
//!   service sees it — for services that do not forward (ordering).
//! - Otherwise forwarding is the service's: the shipped services forward with their own primitives
//!   (h2hack's `sendDataMessage` to the children, dupelim's `forwardMessage`), so the layer
//!   forwards nothing by itself.
//! - **Metaops** (seed 000 §5.1.2.1). With the overlay's `unicast = "hop"`, a unicast passing
//!   through this node comes up to the store (its DestinationAddress is another node's):
//!   with `processIntermediateUnicastMessage` the service runs it here (counted
//!   `transit_processed`; its `toApplication` does not deliver another node's unicast here:
//!   `transit_not_delivered`); with `messageStoreWillForwardMessage` too, sending it on is
//!   the service's (`forwardMessage`), else the layer sends it on at once, one hop less
//!   (`transit_forwarded`; HopLimit exhausted: `transit_hop_limit`) and the service gets a
//!   clone. Layer messages (failure reports, spec requests) are only passed on. With
//!   `unicast = "route"` (the default) the overlay routes a unicast to its addressee's store.
//! - **Hypercube roots.** The tree rooted at a message's root needs the root's label on a
//!   hypercube: the layer stamps it on the messages (wire version 2, below) and hands it to the
//!   overlay with each tree query (its own label from the overlay's answers; other roots'
//!   from the messages received, at most [`ROOT_LABELS_MAX`]).
//!
//! # Addresses
//!
//! A service address is the node id plus one (`0` means "none" in the spec layer).
//!
//! # Wire format
//!
//! Carried in the overlay's application payload: version `1` (u8), ServiceID (u32),
//! MessageID (u64), MessageType (u8), DeliveryMode (u8), HopLimit (u8), SourceAddress,
//! DestinationAddress, RootAddress, SequenceNumber (u64 each), a payload flag (u8, 1 if a
//! payload follows) and the payload. All big-endian. Version `2` adds RootLabel (u32, the
//! root's hypercube label) after the SequenceNumber ([`encode_labelled`]).
//!
//! # Batches
//!
//! A node acknowledges every payload to its previous hop (h2hack), so control messages would
//! double the datagrams of a multicast. A message of at most [`BATCH_ENTRY_MAX`] bytes (every
//! control message: 49 bytes) therefore waits in the layer's outbox until the kernel's
//! [`FLUSH`] at the end of the current batch of input (one `recvmmsg` of datagrams, the timers
//! due now, one batch of application sends — never a timer, no Nagle); then the messages for
//! each next hop leave together: one alone as itself, several as one *batch* (first byte
//! [`BATCH`], a count, each message behind its length; at most [`BATCH_MAX_BYTES`], a fuller
//! batch leaves at once and a new one starts). A larger message (a payload) leaves at once,
//! after what waits for the same node, so the messages to one node keep their order. A
//! received batch is checked whole ([`decode_batch`]; damaged: counted `malformed`, nothing
//! of it handed on) and its messages are handled one by one, as if each came alone.
//!
//! With [`Config::batch_window`] above zero (parameter `batch_window`), what waits at the
//! end of a batch of input stays until the window, opened by the first such batch, closes (a
//! kernel timer): a parent then gets one datagram of acknowledgements for the payloads of
//! several batches (a delayed ACK). Nothing else changes: a payload still leaves at once,
//! after what waits for its next hop; a full batch still leaves at once; the service's
//! timers (h2hack's Timeout_ACK: 1 s) are unaffected, so a window far below them changes no
//! outcome, only when an acknowledgement arrives.
//!
//! # Counters
//!
//! Under the layer's name: `malformed`, `unknown_service` (a message for a service not here:
//! held and fetched), `spec_fetch`, `spec_request_sent`, `spec_served`,
//! `spec_request_unanswered`, `spec_accepted`, `spec_refused`, `spec_refused_again`,
//! `spec_unsolicited`, `spec_fetch_failed`, `unknown_service_dropped`, `fetches_full`,
//! `services_full`, `sent`, `no_target` (a send with
//! no target: a unicast to address 0, a multicast at a leaf), `to_application`, `own`,
//! `data_queue_evicted` / `control_queue_evicted` (an input dropped because `queue` inputs
//! already wait for their tree in its buffer — data messages with a payload in one, control
//! messages, timers and repairs in the other, as the seed's DataBuffer and ControlBuffer: the
//! oldest goes), `full` (an input refused because `capacity` instances live), `step_limit`,
//! `timers_evicted`, `failure_reported` (a notice went up at the sender), `report_sent`,
//! `repaired`, `repair_sent`, `repair_acked`, `repair_ack_sent`, `repair_abandoned`,
//! `repair_given_up`, `held_evicted`,
//! `report_received`, `report_unanswered`, `reports_evicted`, `duplicate_suppressed`,
//! `delivered_evicted`, `batches` (batch datagrams sent), `batched` (messages in them; every
//! message sent, batched or not, is counted `sent`), `batches_received`, `send_refused` (this
//! node's own message never reached its service —
//! pushed out of the data buffer, or refused by a full store or the step limit — and the
//! application got a `SendRefused` notice with its tag).
//!
//! # Memory
//!
//! Bounded: at most `capacity` live instances (the store's bound), `queue` data messages and
//! `queue` control inputs waiting for their tree, the outbox (what one batch of input sends,
//! emptied at its end), [`Deploy::queue`] messages waiting for a service, [`MAX_FETCHES`] fetches (each
//! reassembling at most one bundle of [`specbundle::MAX_SPEC`] bytes), [`Deploy::max_services`]
//! services, 64 refused hashes, and per instance its timers (the timer table holds at most `8 × capacity`
//! entries; beyond, the earliest due are cancelled and counted; an ended instance's timers,
//! held payload and root are dropped when it ends, so only its delivery record outlives it); at most `capacity` failure reports
//! in flight and [`DELIVERED_MAX`] remembered deliveries.
//!
//! Failure reports and their acknowledgements are layer messages in the same format
//! (MessageType [`FAILURE_REPORT`] / [`REPORT_ACK`], the reported message's ServiceID,
//! MessageID and RootAddress, DeliveryMode 3); the service never sees them. So are repairs'
//! acknowledgements ([`REPAIR_ACK`], from the child to the repairer); a [`REPAIR`] is the held
//! payload message with MessageType `0xFA` instead of `0x80`, which the receiving layer puts
//! back before its service sees it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rand::RngCore;

use viastack_kernel::event::{CHANNEL_INIT, FLUSH, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Layer, Message, NodeId,
    Sendable, Session, Tag, TimerId,
};
use viastack_spec::service::message::PAYLOAD_TYPE;
use viastack_spec::service::store::StoreConfig;
use viastack_spec::service::Runner;
use viastack_spec::service::{
    Addr, InstanceKey, Message as SMsg, Network, NodeInfo, Primitive, Service, Store,
};

use crate::events::{self, PEER_UNREACHABLE, SEND_REFUSED};
use crate::overlay::{
    TopologyGeneration, TreeInfo, TreeQuery, GENERATION, NEIGHBOUR_ADDED, NEIGHBOUR_REMOVED, TREE,
    TREE_QUERY,
};
use crate::specbundle::{self, Assembly, Bundle, Hash, Signature, SPEC_REQUEST, SPEC_RESPONSE};
use viastack_overlay::HcLabel;

/// MessageType of a failure report (a layer message; the service never sees it).
pub const FAILURE_REPORT: u8 = 0xFE;
/// MessageType of the root's acknowledgement of a failure report.
pub const REPORT_ACK: u8 = 0xFD;
/// Interval between failure reports until the root acknowledges.
pub const REPORT_EVERY: viastack_kernel::Duration = viastack_kernel::Duration::from_millis(500);
/// Failure reports sent at most per failed instance (15 s at [`REPORT_EVERY`]).
pub const REPORT_TRIES: u32 = 30;
/// How long a delivery to the application is remembered against duplicates: longer than any
/// shipped service keeps retransmitting (e2eack's and h2hack's instances live ≤ 40 s).
pub const DELIVERED_FOR: viastack_kernel::Duration = viastack_kernel::Duration::from_secs(120);
/// Most deliveries remembered at once.
pub const DELIVERED_MAX: usize = 65_536;

/// Delay of the second repair pass after a neighbourhood change.
pub const REPAIR_SETTLE: viastack_kernel::Duration = viastack_kernel::Duration::from_secs(1);
/// MessageType of a *repair*: a held payload (a multicast, MessageType `0x80`) the layer sends
/// to a child its instance did not reach (a layer message: the receiving layer hands it to
/// its service as the payload it carries, and answers with [`REPAIR_ACK`]).
pub const REPAIR: u8 = 0xFA;
/// MessageType of a child's acknowledgement of a [`REPAIR`], once its service stepped it.
pub const REPAIR_ACK: u8 = 0xF9;
/// Repair sends to one child at most before the repairer gives up (and reports the
/// message's failure to its root, as a service that gives up does).
pub const REPAIR_TRIES: u8 = 8;
/// Wait for the acknowledgement of the first repair send; it doubles with each send up to
/// [`REPAIR_WAIT_MAX`] (8 sends: given up ≈ 11.75 s after the first).
pub const REPAIR_WAIT_FIRST: viastack_kernel::Duration =
    viastack_kernel::Duration::from_millis(250);
/// Longest wait between two repair sends to one child.
pub const REPAIR_WAIT_MAX: viastack_kernel::Duration = viastack_kernel::Duration::from_secs(2);
/// Services fetched at once at most (each may reassemble one bundle of up to
/// [`specbundle::MAX_SPEC`] bytes: 4 MiB in all); a message for another missing service is
/// dropped (`fetches_full`, `unknown_service_dropped`).
pub const MAX_FETCHES: usize = 16;
/// Nodes a fetch asks first (previous hops and sources of the messages waiting), at most.
const FETCH_FIRST: usize = 8;
/// Timer token of the repair pass (instance timers and reports use small tokens).
const REPAIR_TOKEN: u64 = u64::MAX;
/// Timer token of the next repair retry (the earliest unanswered repair due again).
const REPAIR_RETRY_TOKEN: u64 = u64::MAX - 3;
/// Token of the one kernel timer armed for the instance timers (at the earliest of them).
const INSTANCE_TIMERS_TOKEN: u64 = u64::MAX - 1;
/// Token of the kernel timer that ends the outbox's batch window ([`Config::batch_window`]).
const OUTBOX_TOKEN: u64 = u64::MAX - 2;
/// Instance timers handed to their instances per expiry of that kernel timer at most.
const TIMERS_AT_ONCE: usize = 64;

/// First byte of a *batch*: several service messages for one next hop in one overlay payload
/// (see "Batches" in the module doc); a single message starts with its version (1, or 2 with
/// the root's hypercube label), so batches take the high bit, clear of later versions.
pub const BATCH: u8 = 0x80;
/// Bytes of a batch's header (`BATCH`, `count`).
pub const BATCH_HEADER: usize = 3;
/// Bytes before each message in a batch (its length, u16).
pub const BATCH_ENTRY_HEADER: usize = 2;
/// A message encoded in at most this many bytes waits for the end of the kernel batch to
/// share a datagram (control messages: 49 bytes); a larger one (a payload) leaves at once.
pub const BATCH_ENTRY_MAX: usize = 256;
/// Most bytes of a batch (the overlay's, checksum's and device's headers fit with it in a
/// 1,500-byte Ethernet MTU); a fuller batch leaves and a new one starts.
pub const BATCH_MAX_BYTES: usize = 1200;

/// A service a node starts with: loaded and verified, with the bundle it ships to nodes that
/// ask for it.
#[derive(Debug, Clone)]
pub struct LocalService {
    /// The compiled service.
    pub service: Arc<Service>,
    /// Its spec text, hash and signature (sent as is: a node asking verifies it).
    pub bundle: Bundle,
}

impl LocalService {
    /// Loads and verifies the spec `text` (named `file` in diagnostics), with `signature`.
    ///
    /// # Errors
    /// The spec layer's diagnostics.
    pub fn load(file: &str, text: &str, signature: Option<Signature>) -> Result<Self, String> {
        let (service, _warnings) = Service::load(file, text).map_err(|e| e.to_string())?;
        Ok(LocalService {
            service: Arc::new(service),
            bundle: Bundle::with_signature(text.as_bytes(), signature),
        })
    }
}

/// Services deployed at run time (issue 16 §4): how a node fetches a spec it lacks.
#[derive(Debug, Clone)]
pub struct Deploy {
    /// Public keys whose signatures a received spec must carry (empty: any spec whose hash
    /// checks is accepted).
    pub trusted_keys: Vec<[u8; 32]>,
    /// A node serving specs, asked after the neighbours.
    pub server: Option<NodeId>,
    /// Requests sent for a missing service before its waiting messages are dropped.
    pub tries: u32,
    /// Interval between requests.
    pub every: viastack_kernel::Duration,
    /// Messages waiting for their service at most (all services; the oldest is dropped).
    pub queue: usize,
    /// Services at most (configured and fetched).
    pub max_services: usize,
}

impl Default for Deploy {
    /// No trusted keys, no server, 10 tries 500 ms apart, 256 waiting messages, 64 services.
    fn default() -> Self {
        Deploy {
            trusted_keys: Vec::new(),
            server: None,
            tries: 10,
            every: viastack_kernel::Duration::from_millis(500),
            queue: 256,
            max_services: 64,
        }
    }
}

/// The layer's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The services this node starts with (possibly none: it fetches them).
    pub services: Vec<LocalService>,
    /// The ServiceID of the application's messages.
    pub default_service: u32,
    /// Fetching missing services.
    pub deploy: Deploy,
    /// Most live instances.
    pub capacity: usize,
    /// Most inputs waiting for their tree.
    pub queue: usize,
    /// An application broadcast is flooded (DeliveryMode 2), not multicast (1).
    pub flood: bool,
    /// The service's failure state: when the instance of a message this node sent enters it,
    /// the application is told ([`PEER_UNREACHABLE`] with the message's tag).
    pub failure_state: Option<String>,
    /// One stream per sender: its messages share one MessageID (one instance per stream at
    /// each node) and carry increasing SequenceNumbers (the ordering service's model).
    pub stream: bool,
    /// The layer forwards a received multicast or flooded data message (to the children, or
    /// the neighbours) before the service sees it — the seed's default MessageStore, for
    /// services that do not forward themselves (ordering).
    pub store_forwards: bool,
    /// How long a small message (an acknowledgement, any control message) may wait in the
    /// outbox for others to the same next hop beyond the end of the kernel batch that made
    /// it (see "Batches"): zero sends at each kernel [`FLUSH`]; a short window (h2hack: far
    /// below its 1 s Timeout_ACK) lets a parent get one datagram of acknowledgements for
    /// several payloads instead of one per batch of input.
    pub batch_window: viastack_kernel::Duration,
}

/// The `messagestore` layer for one node.
#[derive(Debug, Clone)]
pub struct MessageStore {
    name: String,
    node: NodeId,
    config: Config,
}

impl MessageStore {
    /// The layer named `name` on node `node`.
    pub fn new(name: impl Into<String>, node: NodeId, config: Config) -> Self {
        MessageStore {
            name: name.into(),
            node,
            config,
        }
    }
}

impl Layer for MessageStore {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            CHANNEL_INIT.id(),
            TREE.id(),
            GENERATION.id(),
            NEIGHBOUR_ADDED.id(),
            NEIGHBOUR_REMOVED.id(),
        ]
    }
    fn requires(&self) -> Vec<EventType> {
        vec![TREE.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![TREE_QUERY.id()]
    }
    /// What the service guarantees is its own; the layer promises nothing beyond the overlay.
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(MessageStoreSession::new(self.node, &self.config))
    }
}

/// The service address of node `n`.
pub fn addr(n: NodeId) -> Addr {
    Addr(u64::from(n.0) + 1)
}

/// The node of service address `a` (`None` for 0 or out of range).
pub fn node_of(a: Addr) -> Option<NodeId> {
    a.0.checked_sub(1)
        .and_then(|v| u32::try_from(v).ok())
        .map(NodeId)
}

/// Encodes a service message (the module's wire format, version 1: no root label).
pub fn encode(m: &SMsg) -> Vec<u8> {
    encode_labelled(m, None)
}

/// Encodes a service message with its root's hypercube label when there is one (version 2,
/// the RootLabel after the SequenceNumber), else as [`encode`] (version 1).
pub fn encode_labelled(m: &SMsg, root_label: Option<HcLabel>) -> Vec<u8> {
    let (h, n) = header(m, root_label);
    let p = m.payload.as_deref().unwrap_or(&[]);
    let mut b = Vec::with_capacity(n + p.len());
    b.extend_from_slice(&h[..n]);
    b.extend_from_slice(p);
    b
}

/// The bytes of [`encode_labelled`] before the payload (up to and with the payload flag):
/// the buffer and how many of its bytes are used (49, or 53 with a root label).
fn header(m: &SMsg, root_label: Option<HcLabel>) -> ([u8; 53], usize) {
    let mut h = [0u8; 53];
    h[0] = if root_label.is_some() { 2 } else { 1 };
    h[1..5].copy_from_slice(&m.service_id.to_be_bytes());
    h[5..13].copy_from_slice(&m.message_id.to_be_bytes());
    h[13] = m.message_type;
    h[14] = m.delivery_mode;
    h[15] = m.hop_limit;
    for (i, v) in [m.source.0, m.destination.0, m.root.0, m.seq]
        .into_iter()
        .enumerate()
    {
        h[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_be_bytes());
    }
    let mut n = 48;
    if let Some(l) = root_label {
        h[48..52].copy_from_slice(&l.value().to_be_bytes());
        n = 52;
    }
    h[n] = u8::from(m.payload.is_some());
    (h, n + 1)
}

/// [`encode_labelled`] straight into a kernel message, with room in front for the headers of
/// the layers below (a payload is copied once, not into a vector and then into the message).
fn encode_message(m: &SMsg, root_label: Option<HcLabel>) -> Message {
    let (h, n) = header(m, root_label);
    let p = m.payload.as_deref().unwrap_or(&[]);
    let mut b = Message::with_capacity(viastack_kernel::message::DEFAULT_HEADROOM, n + p.len());
    b.extend_from_slice(&h[..n]);
    b.extend_from_slice(p);
    b
}

/// Decodes a service message (either version; a root label is dropped); `None` if malformed.
pub fn decode(b: &[u8]) -> Option<SMsg> {
    decode_labelled(b).map(|(m, _)| m)
}

/// Decodes a service message and its root's hypercube label (version 2; `None` in version
/// 1); `None` if malformed.
pub fn decode_labelled(b: &[u8]) -> Option<(SMsg, Option<HcLabel>)> {
    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }
    let (label, b) = match *b.first()? {
        1 => (None, std::borrow::Cow::Borrowed(b)),
        2 => {
            // The version 1 layout once the label is taken out.
            let l = u32::from_be_bytes(b.get(48..52)?.try_into().ok()?);
            let mut v = Vec::with_capacity(b.len() - 4);
            v.push(1);
            v.extend_from_slice(&b[1..48]);
            v.extend_from_slice(&b[52..]);
            (Some(HcLabel::new(l)), std::borrow::Cow::Owned(v))
        }
        _ => return None,
    };
    let b: &[u8] = &b;
    let service_id = u32::from_be_bytes(b.get(1..5)?.try_into().ok()?);
    let message_id = u64_at(b, 5)?;
    let message_type = *b.get(13)?;
    let delivery_mode = *b.get(14)?;
    let hop_limit = *b.get(15)?;
    let source = Addr(u64_at(b, 16)?);
    let destination = Addr(u64_at(b, 24)?);
    let root = Addr(u64_at(b, 32)?);
    let seq = u64_at(b, 40)?;
    let payload = match *b.get(48)? {
        0 if b.len() == 49 => None,
        1 => Some(Arc::from(&b[49..])),
        _ => return None,
    };
    Some((
        SMsg {
            service_id,
            message_id,
            message_type,
            delivery_mode,
            hop_limit,
            source,
            destination,
            root,
            seq,
            payload,
            ..SMsg::default()
        },
        label,
    ))
}

/// Encodes a batch of already encoded messages (at least 2, each at most 65,535 bytes): the
/// module's batch format. For tests and tools; the layer builds its batches in place.
pub fn encode_batch(messages: &[&[u8]]) -> Vec<u8> {
    let n: usize = messages.iter().map(|m| BATCH_ENTRY_HEADER + m.len()).sum();
    let mut b = Vec::with_capacity(BATCH_HEADER + n);
    b.push(BATCH);
    b.extend_from_slice(&(messages.len() as u16).to_be_bytes());
    for m in messages {
        b.extend_from_slice(&(m.len() as u16).to_be_bytes());
        b.extend_from_slice(m);
    }
    b
}

/// The byte ranges of the messages of a batch, all of its framing checked first; `None` if
/// `b` is not a well-formed batch (not [`BATCH`], fewer than 2 messages, an empty message, a
/// length past the end, bytes after the last message). Each message is then decoded on its
/// own ([`decode`]): a batch inside a batch is refused there.
pub fn decode_batch(b: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    if *b.first()? != BATCH {
        return None;
    }
    let count = u16::from_be_bytes(b.get(1..BATCH_HEADER)?.try_into().ok()?);
    if count < 2 {
        return None;
    }
    let mut ranges = Vec::with_capacity(usize::from(count));
    let mut at = BATCH_HEADER;
    for _ in 0..count {
        let len = u16::from_be_bytes(b.get(at..at + BATCH_ENTRY_HEADER)?.try_into().ok()?);
        let start = at + BATCH_ENTRY_HEADER;
        let end = start + usize::from(len);
        if len == 0 || end > b.len() {
            return None;
        }
        ranges.push(start..end);
        at = end;
    }
    (at == b.len()).then_some(ranges)
}

/// Small messages for one next hop waiting for the end of the kernel batch ([`FLUSH`]).
#[derive(Debug)]
struct Outgoing {
    to: NodeId,
    /// The batch being built: header room, then each message's length and bytes.
    body: Vec<u8>,
    count: u16,
}

/// An input waiting for its tree.
#[derive(Debug)]
enum Input {
    Msg(SMsg),
    /// Only learn the neighbours (a node fetching a spec before any instance ran).
    Probe,
    Timer(InstanceKey, u32),
    /// Send instance's held payload to the children it has not reached.
    Repair(InstanceKey),
}

/// What a step asked for, performed once the store returns.
#[derive(Debug)]
enum Out {
    App(SMsg),
    Send(SMsg),
    SetTimer(InstanceKey, u32, viastack_kernel::Duration),
    Cancel(InstanceKey, u32),
}

/// The [`Network`] the store runs against: it records the primitives.
#[derive(Default)]
struct Recording(Vec<Out>);

impl Network for Recording {
    fn perform(&mut self, _now: viastack_kernel::Instant, key: InstanceKey, p: Primitive<'_>) {
        match p {
            Primitive::ToApplication(m) => self.0.push(Out::App(m.clone())),
            Primitive::SendData(m) | Primitive::SendControl(m) | Primitive::Forward(m) => {
                self.0.push(Out::Send(m.clone()));
            }
            Primitive::SetTimer { id, after } => self.0.push(Out::SetTimer(key, id, after)),
            Primitive::CancelTimer { id } => self.0.push(Out::Cancel(key, id)),
            Primitive::Terminate | Primitive::UpdateNodeInfo(_) => {}
        }
    }
}

/// A missing service being fetched.
#[derive(Debug)]
struct Fetch {
    /// Messages waiting for it: arrival number, their tree's root, the message.
    waiting: VecDeque<(u64, NodeId, SMsg)>,
    /// Nodes to ask first (the previous hops and sources of the messages waiting).
    first: Vec<NodeId>,
    /// A node of `first` was asked.
    asked_holder: bool,
    /// Requests sent.
    tried: u32,
    /// Token of its retry timer.
    token: u64,
    /// The bundle being reassembled.
    assembly: Option<Assembly>,
}

/// Session of [`MessageStore`]: one per node.
pub struct MessageStoreSession {
    node: NodeId,
    service_id: u32,
    deploy: Deploy,
    /// Bundles of the services here, by ServiceID (sent to nodes that ask).
    bundles: BTreeMap<u32, Bundle>,
    /// Services being fetched, by ServiceID.
    fetches: BTreeMap<u32, Fetch>,
    /// Retry timer token of a fetch to its ServiceID.
    fetch_tokens: BTreeMap<u64, u32>,
    /// Messages waiting in `fetches`, and the next arrival number.
    waiting: usize,
    next_arrival: u64,
    /// Bundles refused, by hash and signature (never run, not reassembled again), at most 64.
    /// A bundle whose text does not match its hash is not remembered: its hash may be the
    /// genuine spec's, which must still be accepted.
    refused: VecDeque<(Hash, Option<Signature>)>,
    flood: bool,
    stream: bool,
    store_forwards: bool,
    /// [`Config::batch_window`].
    batch_window: viastack_kernel::Duration,
    /// The outbox's window timer is armed.
    outbox_armed: bool,
    failure_state: Option<String>,
    /// Messages this node sent, by MessageID: their tag and addressee (broadcast: `u32::MAX`),
    /// until the failure is reported or the instance is gone.
    own: BTreeMap<u64, (Tag, NodeId)>,
    store: Store,
    capacity: usize,
    queue: usize,
    channel: Option<ChannelId>,
    /// Inputs waiting for their tree, in the seed's two FIFO buffers (seed 000 §5.1.2,
    /// Figure 5.9): `DataBuffer` for messages with a payload, `ControlBuffer` for the rest
    /// (control messages, timers, repairs). Each holds at most `queue`, so a flood of data
    /// cannot push out the acknowledgements that would settle it, nor the reverse.
    /// An input whose tree was known here (the cache below) carries it and is stepped at the
    /// end of the current event, in order; the others wait for the overlay's answer.
    data_pending: VecDeque<Pending>,
    control_pending: VecDeque<Pending>,
    /// Tree answers of the overlay's current topology generation, by root and the root's
    /// label as asked (see "Trees" in the module doc), at most [`TREE_CACHE_MAX`].
    trees: std::collections::HashMap<TreeKey, Arc<TreeInfo>, foldhash::fast::RandomState>,
    /// The newest topology generation heard of (answers and [`GENERATION`] notices).
    tree_generation: u64,
    /// The tree (key, generation) whose [`NodeInfo`] the store holds now, when it came from
    /// a reusable answer: a step on the same tree does not rebuild it.
    node_set: Option<(TreeKey, u64)>,
    /// Inputs stepped with a remembered tree (no query to the overlay).
    tree_hits: u64,
    /// Debug builds: the remembered trees used, to compare with the overlay's answers.
    verify: VecDeque<Arc<TreeInfo>>,
    next_token: u64,
    next_message: u64,
    /// The root of each instance's tree (for its timers).
    /// (A hash table: thousands of instances live at 1,000 multicasts/s, and a B-tree
    /// lookup per step was a visible share of it; only looked up, never walked in order.)
    roots: std::collections::HashMap<(u32, u64), NodeId, foldhash::fast::RandomState>,
    /// The next hops of the send being performed (kept for its allocation).
    targets: Vec<NodeId>,
    /// Armed instance timers ([`Timers`]). One kernel timer stands for all of them
    /// ([`INSTANCE_TIMERS_TOKEN`]), armed at the earliest.
    timers: Timers,
    /// The kernel timer armed for `due`: its deadline and id.
    armed: Option<(viastack_kernel::Instant, TimerId)>,
    next_timer: u64,
    /// Failure reports in flight, by the failed instance: the root they go to, the reports
    /// sent so far and the token of the timer for the next.
    reports: BTreeMap<InstanceKey, Report>,
    /// Token of a report timer to its instance.
    report_tokens: BTreeMap<u64, InstanceKey>,
    /// Instances whose failure was reported (or is being): one report run per instance.
    reported: std::collections::BTreeSet<InstanceKey>,
    /// Deliveries to the application (root, MessageID, SequenceNumber) and when they happened.
    /// (Under a seeded fast hash: SipHash was a visible share of each delivery.)
    delivered: std::collections::HashMap<
        (u64, u64, u64),
        viastack_kernel::Instant,
        foldhash::fast::RandomState,
    >,
    /// The same keys in delivery order, for forgetting the oldest.
    delivered_order: VecDeque<((u64, u64, u64), viastack_kernel::Instant)>,
    /// Payloads multicast by live instances and where they went, for repair.
    held: BTreeMap<InstanceKey, Held>,
    /// A repair pass is armed.
    repair_armed: bool,
    /// The kernel timer armed for the earliest unanswered repair due again: its deadline
    /// and id.
    repair_retry: Option<(viastack_kernel::Instant, TimerId)>,
    /// On a hypercube: this node's label (from the overlay's last [`TreeInfo`]) and the
    /// labels of the roots of the messages seen (from their RootLabel), at most
    /// [`ROOT_LABELS_MAX`], the oldest forgotten first. Stamped on the messages sent for a
    /// root and given with each [`TreeQuery`], so any node's tree can be computed.
    my_label: Option<HcLabel>,
    root_labels: BTreeMap<NodeId, HcLabel>,
    root_label_order: VecDeque<NodeId>,
    /// Small messages waiting for the end of the kernel batch, per next hop (a few at most:
    /// the neighbours and the addressees of this batch's unicasts).
    outbox: Vec<Outgoing>,
}

/// Token of the queries debug builds send for inputs stepped on a remembered tree: the
/// answer is compared with it, nothing else.
const VERIFY_TOKEN: u64 = u64::MAX;

/// An input waiting for its tree: token, root, input, its tree when already known, and the
/// root's hypercube label it was asked with (the answer is remembered under it: the label
/// known for the root may change before the answer comes).
type Pending = (u64, NodeId, Input, Option<Arc<TreeInfo>>, Option<HcLabel>);

/// A tree as asked of the overlay: its root and the root's hypercube label.
type TreeKey = (NodeId, Option<HcLabel>);

/// Tree answers remembered at most (the roots of the messages in flight; all are dropped when
/// full).
pub const TREE_CACHE_MAX: usize = 256;

/// At most this many roots' hypercube labels are remembered.
pub const ROOT_LABELS_MAX: usize = 1024;

/// The armed instance timers: per instance its few timers (TimerIdentifier, deadline,
/// sequence number), and a heap of deadlines in firing order (deadline, then the order they
/// were set). Setting and cancelling cost a hash lookup and a heap push (h2hack sets four
/// timers per payload; two ordered maps cost ~1,000 instructions a set). A cancelled or
/// replaced timer leaves its heap entry behind, recognised as stale by its sequence number
/// when it comes up; the heap is rebuilt from the live timers once stale entries outnumber
/// them, so it holds at most about twice the live timers.
#[derive(Debug, Default)]
struct Timers {
    by_instance:
        std::collections::HashMap<(u32, u64), Vec<ArmedTimer>, foldhash::fast::RandomState>,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<DueEntry>>,
    live: usize,
    next_seq: u64,
}

/// An armed timer of an instance: its TimerIdentifier, deadline and sequence number.
type ArmedTimer = (u32, viastack_kernel::Instant, u64);
/// A heap entry: deadline, sequence number, ServiceID, MessageID, TimerIdentifier.
type DueEntry = (viastack_kernel::Instant, u64, u32, u64, u32);

impl Timers {
    fn key(k: InstanceKey) -> (u32, u64) {
        (k.service, k.message)
    }

    /// Armed timers.
    fn len(&self) -> usize {
        self.live
    }

    /// Arms timer `id` of instance `key` at `at` (replacing one armed with that id).
    fn set(&mut self, key: InstanceKey, id: u32, at: viastack_kernel::Instant) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let list = self.by_instance.entry(Self::key(key)).or_default();
        match list.iter_mut().find(|t| t.0 == id) {
            Some(t) => *t = (id, at, seq),
            None => {
                list.push((id, at, seq));
                self.live += 1;
            }
        }
        self.heap
            .push(std::cmp::Reverse((at, seq, key.service, key.message, id)));
        self.compact();
    }

    /// Disarms timer `id` of instance `key`.
    fn cancel(&mut self, key: InstanceKey, id: u32) {
        let k = Self::key(key);
        if let Some(list) = self.by_instance.get_mut(&k) {
            if let Some(i) = list.iter().position(|t| t.0 == id) {
                list.swap_remove(i);
                self.live -= 1;
                if list.is_empty() {
                    self.by_instance.remove(&k);
                    self.compact();
                }
            }
        }
    }

    /// Disarms every timer of instance `key`.
    fn forget(&mut self, key: InstanceKey) {
        if let Some(list) = self.by_instance.remove(&Self::key(key)) {
            self.live -= list.len();
            self.compact();
        }
    }

    /// Whether a heap entry is a timer still armed.
    fn is_live(&self, e: &DueEntry) -> bool {
        let &(_, seq, service, message, id) = e;
        self.by_instance
            .get(&(service, message))
            .is_some_and(|l| l.iter().any(|t| t.0 == id && t.2 == seq))
    }

    /// Drops stale entries from the top of the heap.
    fn skip_stale(&mut self) {
        while let Some(std::cmp::Reverse(top)) = self.heap.peek() {
            if self.is_live(top) {
                return;
            }
            self.heap.pop();
        }
    }

    /// The deadline of the first timer due.
    fn next_due(&mut self) -> Option<viastack_kernel::Instant> {
        self.skip_stale();
        self.heap.peek().map(|std::cmp::Reverse(e)| e.0)
    }

    /// Disarms and returns the first timer due (whatever its deadline).
    fn pop_due(&mut self) -> Option<(InstanceKey, u32)> {
        self.skip_stale();
        let std::cmp::Reverse((_, _, service, message, id)) = self.heap.pop()?;
        let key = InstanceKey { service, message };
        self.cancel(key, id);
        Some((key, id))
    }

    /// Rebuilds the heap from the live timers when stale entries outnumber them, and gives
    /// back the room of tables that emptied (a burst of instances ended): each rebuild or
    /// shrink follows a halving, so their cost is constant per timer.
    fn compact(&mut self) {
        if self.heap.len() > 2 * self.live + 64 {
            let mut v = std::mem::take(&mut self.heap).into_vec();
            v.retain(|std::cmp::Reverse(e)| self.is_live(e));
            v.shrink_to(2 * v.len());
            self.heap = v.into();
        }
        let n = self.by_instance.len();
        if self.by_instance.capacity() > 64 && 4 * n < self.by_instance.capacity() {
            self.by_instance.shrink_to(2 * n);
        }
    }
}

/// A payload an instance multicast down its tree, and the nodes it reached.
#[derive(Debug, Clone)]
struct Held {
    root: NodeId,
    message: SMsg,
    /// Nodes it went to: by the service (`None`: its own acknowledgements cover them, or the
    /// child acknowledged the repair) or by an unanswered repair (`Some`).
    /// (A short list: a node has a few children; a map cost an allocation per payload.)
    sent_to: Vec<(NodeId, Option<RepairSend>)>,
}

impl Held {
    /// Whether a repair of this payload waits for its acknowledgement.
    fn outstanding(&self) -> bool {
        self.sent_to.iter().any(|(_, r)| r.is_some())
    }
}

/// An unanswered repair to one child: the sends so far and when the next is due.
#[derive(Debug, Clone, Copy)]
struct RepairSend {
    sent: u8,
    next: viastack_kernel::Instant,
}

/// A failure report in flight to a message's root.
#[derive(Debug, Clone, Copy)]
struct Report {
    root: NodeId,
    sent: u32,
    token: u64,
}

impl std::fmt::Debug for MessageStoreSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStoreSession")
            .field("node", &self.node)
            .field("live", &self.store.live())
            .field("data_pending", &self.data_pending.len())
            .field("control_pending", &self.control_pending.len())
            .finish()
    }
}

impl MessageStoreSession {
    fn new(node: NodeId, config: &Config) -> Self {
        MessageStoreSession {
            node,
            service_id: config.default_service,
            deploy: config.deploy.clone(),
            bundles: config
                .services
                .iter()
                .map(|l| (l.service.id(), l.bundle.clone()))
                .collect(),
            fetches: BTreeMap::new(),
            fetch_tokens: BTreeMap::new(),
            waiting: 0,
            next_arrival: 0,
            refused: VecDeque::new(),
            flood: config.flood,
            stream: config.stream,
            store_forwards: config.store_forwards,
            batch_window: config.batch_window,
            outbox_armed: false,
            failure_state: config.failure_state.clone(),
            own: BTreeMap::new(),
            store: Store::new(
                config.services.iter().map(|l| l.service.clone()).collect(),
                StoreConfig {
                    pool: 0,
                    capacity: config.capacity.max(1),
                },
            ),
            capacity: config.capacity.max(1),
            queue: config.queue.max(1),
            channel: None,
            data_pending: VecDeque::new(),
            control_pending: VecDeque::new(),
            trees: std::collections::HashMap::default(),
            tree_generation: 0,
            node_set: None,
            tree_hits: 0,
            verify: VecDeque::new(),
            next_token: 0,
            next_message: 0,
            roots: std::collections::HashMap::default(),
            targets: Vec::new(),
            timers: Timers::default(),
            armed: None,
            next_timer: 0,
            reports: BTreeMap::new(),
            report_tokens: BTreeMap::new(),
            reported: std::collections::BTreeSet::new(),
            delivered: std::collections::HashMap::default(),
            delivered_order: VecDeque::new(),
            my_label: None,
            root_labels: BTreeMap::new(),
            root_label_order: VecDeque::new(),
            held: BTreeMap::new(),
            repair_armed: false,
            repair_retry: None,
            outbox: Vec::new(),
        }
    }

    /// The ServiceID of the service this store runs.
    pub fn service_id(&self) -> u32 {
        self.service_id
    }

    /// Live service instances.
    pub fn live(&self) -> usize {
        self.store.live()
    }

    /// The (first) active state of the instance of message `message`.
    pub fn state(&self, message: u64) -> Option<&str> {
        self.store.state(InstanceKey {
            service: self.service_id,
            message,
        })
    }

    /// Inputs waiting for their tree (both buffers).
    pub fn pending(&self) -> usize {
        self.data_pending.len() + self.control_pending.len()
    }

    /// Inputs stepped with a tree remembered from an earlier answer of the same topology
    /// generation (no query to the overlay).
    pub fn tree_hits(&self) -> u64 {
        self.tree_hits
    }

    /// Queues `input` for the tree rooted at `root` and asks the overlay for it — unless the
    /// tree is remembered from this topology generation and no input waits for an answer:
    /// then the input waits only for the end of the current event ([`Self::step_known`]),
    /// so inputs are stepped in the order they came, as the overlay's answers would be.
    /// Repairs always ask (they run on neighbourhood changes, where answers change).
    fn enqueue(&mut self, ctx: &mut Context<'_>, root: NodeId, input: Input) {
        let Some(channel) = self.channel else { return };
        let label = self.label_of(root);
        let known = if matches!(input, Input::Repair(_)) || !self.all_known() {
            None
        } else {
            self.trees.get(&(root, label)).cloned()
        };
        let data = matches!(&input, Input::Msg(m) if m.payload.is_some());
        let queue = self.queue;
        let (buffer, evicted) = if data {
            (&mut self.data_pending, "data_queue_evicted")
        } else {
            (&mut self.control_pending, "control_queue_evicted")
        };
        let mut dropped = Vec::new();
        while buffer.len() >= queue {
            if let Some((_, _, Input::Msg(m), _, _)) = buffer.pop_front() {
                dropped.push(m.message_id);
            }
            ctx.count(evicted);
        }
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        let asks = known.is_none();
        // Debug builds (every simulator test) still ask for a remembered tree, and compare
        // the answer with it ([`VERIFY_TOKEN`]).
        let check = known.clone().filter(|_| cfg!(debug_assertions));
        buffer.push_back((token, root, input, known, label));
        for id in dropped {
            self.refuse_own(ctx, id);
        }
        if !asks {
            if let Some(info) = check {
                self.verify.push_back(info);
                ctx.go(Event::new(
                    TREE_QUERY.id(),
                    Direction::Down,
                    channel,
                    Body::Custom(Box::new(TreeQuery {
                        root,
                        token: VERIFY_TOKEN,
                        root_label: label,
                    })),
                ));
            }
            return;
        }
        ctx.go(Event::new(
            TREE_QUERY.id(),
            Direction::Down,
            channel,
            Body::Custom(Box::new(TreeQuery {
                root,
                token,
                root_label: label,
            })),
        ));
    }

    /// The hypercube label of root `root` as this node knows it.
    fn label_of(&self, root: NodeId) -> Option<HcLabel> {
        if root == self.node {
            self.my_label
        } else {
            self.root_labels.get(&root).copied()
        }
    }

    /// Remembers root `root`'s label (bounded by [`ROOT_LABELS_MAX`]).
    fn learn_label(&mut self, root: NodeId, label: HcLabel) {
        if root == self.node {
            return;
        }
        if self.root_labels.insert(root, label).is_none() {
            self.root_label_order.push_back(root);
            while self.root_label_order.len() > ROOT_LABELS_MAX {
                if let Some(old) = self.root_label_order.pop_front() {
                    self.root_labels.remove(&old);
                }
            }
        }
    }

    /// A message's bytes, with its root's label when known.
    fn encode_for(&self, m: &SMsg) -> Vec<u8> {
        encode_labelled(m, node_of(m.root).and_then(|r| self.label_of(r)))
    }

    /// Whether every waiting input already has its tree (none waits for an answer).
    fn all_known(&self) -> bool {
        self.data_pending.iter().all(|p| p.3.is_some())
            && self.control_pending.iter().all(|p| p.3.is_some())
    }

    /// A topology generation heard of: remembered trees of an older one are dropped.
    fn generation(&mut self, g: u64) {
        if g > self.tree_generation {
            self.tree_generation = g;
            self.trees.clear();
            self.node_set = None;
        }
    }

    /// The overlay's answer: remembered when reusable and of the newest generation, then the
    /// input it was asked for is stepped (and the inputs after it whose tree is known).
    fn on_tree(&mut self, ctx: &mut Context<'_>, info: TreeInfo) {
        if info.token == VERIFY_TOKEN {
            if let Some(used) = self.verify.pop_front() {
                debug_assert!(
                    used.parent == info.parent
                        && used.children == info.children
                        && used.neighbours == info.neighbours
                        && used.label == info.label,
                    "node {}: a remembered tree {used:?} differs from the overlay's {info:?}",
                    self.node
                );
            }
            return;
        }
        let info = Arc::new(info);
        // Tokens increase in each buffer (handed out in order, never reordered within one):
        // a binary search, not a scan (a repair pass queues one input per held instance).
        let token = info.token;
        let taken = [&mut self.data_pending, &mut self.control_pending]
            .into_iter()
            .find_map(|buffer| {
                let i = buffer.binary_search_by_key(&token, |p| p.0).ok()?;
                buffer.remove(i)
            });
        if let Some(g) = info.generation {
            self.generation(g);
        }
        let Some((_, root, input, _, label)) = taken else {
            return;
        };
        if let Some(g) = info.generation {
            if g == self.tree_generation {
                if self.trees.len() >= TREE_CACHE_MAX {
                    self.trees.clear();
                }
                self.trees.insert((info.root, label), Arc::clone(&info));
            }
        }
        self.step(ctx, root, label, input, &info);
        self.step_known(ctx);
    }

    /// Steps the waiting inputs whose tree is known, oldest first, up to the first that waits
    /// for an answer.
    fn step_known(&mut self, ctx: &mut Context<'_>) {
        loop {
            let d = self.data_pending.front().map(|p| (p.0, p.3.is_some()));
            let c = self.control_pending.front().map(|p| (p.0, p.3.is_some()));
            let from_data = match (d, c) {
                (Some(d), Some(c)) => d.0 < c.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return,
            };
            let (known, buffer) = if from_data {
                (d.is_some_and(|d| d.1), &mut self.data_pending)
            } else {
                (c.is_some_and(|c| c.1), &mut self.control_pending)
            };
            if !known {
                return;
            }
            let Some((_, root, input, Some(info), label)) = buffer.pop_front() else {
                return;
            };
            self.tree_hits += 1;
            self.step(ctx, root, label, input, &info);
        }
    }

    /// Steps `input` (of the tree rooted at `root`, asked with the root label `label`) on
    /// `info`.
    fn step(
        &mut self,
        ctx: &mut Context<'_>,
        root: NodeId,
        label: Option<HcLabel>,
        mut input: Input,
        info: &TreeInfo,
    ) {
        if info.label.is_some() {
            self.my_label = info.label;
        }
        // A repair is the payload it carries to the service; its sender waits for this
        // node's acknowledgement once the service has stepped it.
        let repaired_by = match &mut input {
            Input::Msg(m) if m.message_type == REPAIR => {
                m.message_type = PAYLOAD_TYPE;
                node_of(m.previous_hop)
            }
            _ => None,
        };
        if let Input::Repair(key) = input {
            self.repair(ctx, key, &info.children);
            return;
        }
        // The store's node information, unless it holds this very tree already.
        let tree = info.generation.map(|g| ((info.root, label), g));
        if tree.is_none() || tree != self.node_set {
            self.store.set_node(NodeInfo {
                address: addr(self.node),
                parent: info.parent.map_or(Addr(0), addr),
                children: info.children.iter().copied().map(addr).collect(),
                neighbours: info.neighbours.iter().copied().map(addr).collect(),
            });
            self.node_set = tree;
        }
        if let Input::Probe = input {
            return;
        }
        let now = ctx.now();
        let mut net = Recording::default();
        let result = match &input {
            Input::Msg(m) => {
                if self.store_forwards
                    && m.message_type == PAYLOAD_TYPE
                    && matches!(m.delivery_mode, 1 | 2)
                    && m.hop_limit > 1
                {
                    let mut f = m.clone();
                    f.hop_limit -= 1;
                    net.0.push(Out::Send(f));
                }
                self.roots.insert(Timers::key(m.key()), root);
                // A payload retransmitted to this node by unicast (h2hack's and e2eack's answer
                // to a NACK) is the multicast it repairs: held like one (as a multicast), or a
                // node that had no children when it came would have nothing for those it gains.
                let resent =
                    m.delivery_mode == 3 && m.destination == addr(self.node) && root != self.node;
                if m.message_type == PAYLOAD_TYPE
                    && (m.delivery_mode == 1 || resent)
                    && m.payload.is_some()
                {
                    // Held for repair from the start: a node with no children yet has the
                    // payload for those it gains.
                    self.hold_with(ctx, m.key(), &[], || {
                        let mut h = m.clone();
                        h.hop_limit = h.hop_limit.saturating_sub(1).max(1);
                        if resent {
                            h.delivery_mode = 1;
                            h.destination = Addr(0);
                        }
                        h
                    });
                }
                self.store.handle_message(now, m, &mut net)
            }
            Input::Timer(key, id) => self.store.handle_timer(now, *key, *id, &mut net),
            Input::Repair(_) | Input::Probe => Ok(()),
        };
        // This node's own application message, stepped for the first time.
        let own = match &input {
            Input::Msg(m)
                if m.message_type == PAYLOAD_TYPE
                    && node_of(m.source) == Some(self.node)
                    && root == self.node =>
            {
                Some(m.message_id)
            }
            _ => None,
        };
        let refused = result.is_err();
        if let (false, Some(to), Input::Msg(m)) = (refused, repaired_by, &input) {
            // The service has it (it delivered it, held it, or already had it): the repair
            // is answered. A refused step is not: the repairer tries again or reports.
            let ack = self.layer_message(REPAIR_ACK, m.key(), root, to);
            ctx.count("repair_ack_sent");
            net.0.push(Out::Send(ack));
        }
        match result {
            Ok(()) => {}
            Err(viastack_spec::service::RunnerError::Full(_)) => ctx.count("full"),
            Err(viastack_spec::service::RunnerError::StepLimit { .. }) => {
                ctx.count("step_limit");
            }
            Err(viastack_spec::service::RunnerError::UnknownService(_)) => {
                ctx.count("unknown_service");
            }
        }
        if let Some(id) = own {
            if refused {
                self.refuse_own(ctx, id);
            } else if self.failure_state.is_none() {
                // No report can come for it: nothing more to tell the sender.
                self.own.remove(&id);
            }
        }
        for out in net.0 {
            self.perform(ctx, out);
        }
        let key = match &input {
            Input::Msg(m) => m.key(),
            Input::Timer(key, _) | Input::Repair(key) => *key,
            Input::Probe => return,
        };
        if let Some(h) = self.held.get_mut(&key) {
            // As in a repair pass: a node no longer a child is forgotten (see `repair`).
            let before = h.sent_to.len();
            let mut abandoned = 0;
            h.sent_to.retain(|(n, r)| {
                let keep = info.children.contains(n);
                abandoned += u64::from(!keep && r.is_some());
                keep
            });
            if h.sent_to.len() != before && abandoned > 0 {
                ctx.count_n("repair_abandoned", abandoned);
            }
        }
        self.check_failure(ctx, key, root);
        if self.store.state(key).is_none() {
            self.forget(key);
        }
        if self.roots.len() > 2 * self.capacity {
            let live: std::collections::BTreeSet<(u32, u64)> =
                self.store.keys().into_iter().map(Timers::key).collect();
            self.roots.retain(|k, _| live.contains(k));
        }
        // Own messages are remembered until reported (a report may come up the tree after
        // the sender's instance is gone), at most `capacity` of them.
        while self.own.len() > self.capacity {
            self.own.pop_first();
            ctx.count("own_evicted");
        }
    }

    /// Instance `key` ended (or never began): what the layer kept for it goes — its held
    /// payload, its root, its timers (the store ignores a timer of an instance that is gone,
    /// seed 000 §5.1.4.2; h2hack's 30 s `finaldelete` outlives its instance by 20 s). Only
    /// the delivery record stays (a few bytes, for duplicate suppression).
    ///
    /// A held payload whose repair waits for an acknowledgement stays until the repair is
    /// answered or given up (see [`Self::repair`]).
    fn forget(&mut self, key: InstanceKey) {
        if !self.held.get(&key).is_some_and(Held::outstanding) {
            self.held.remove(&key);
        }
        if self.roots.remove(&Timers::key(key)).is_some() {
            // Gives back the room of a table that emptied (a burst of instances ended); each
            // shrink follows a halving, so its cost is constant per instance.
            let (n, cap) = (self.roots.len(), self.roots.capacity());
            if cap > 64 && 4 * n < cap {
                self.roots.shrink_to(2 * n);
            }
        }
        self.timers.forget(key);
    }

    /// After a step of instance `key` (rooted at `root`): if it entered the failure state,
    /// tell the application (at the message's sender) or start reporting to the root.
    fn check_failure(&mut self, ctx: &mut Context<'_>, key: InstanceKey, root: NodeId) {
        let Some(fail) = &self.failure_state else {
            return;
        };
        if self.store.state(key) != Some(fail.as_str()) {
            return;
        }
        self.report_failure(ctx, key, root);
    }

    /// Instance `key` (rooted at `root`) failed here: tell the application if this node sent
    /// the message, else start reporting to the root (once per instance).
    fn report_failure(&mut self, ctx: &mut Context<'_>, key: InstanceKey, root: NodeId) {
        if root == self.node {
            self.report_at_sender(ctx, key.message);
        } else if self.reported.insert(key) {
            if self.reported.len() > 2 * self.capacity {
                let live: std::collections::BTreeSet<InstanceKey> =
                    self.store.keys().into_iter().collect();
                self.reported.retain(|k| live.contains(k));
            }
            while self.reports.len() >= self.capacity {
                let Some((_, r)) = self.reports.pop_first() else {
                    break;
                };
                self.report_tokens.remove(&r.token);
                ctx.count("reports_evicted");
            }
            let token = self.next_timer;
            self.next_timer = self.next_timer.wrapping_add(1);
            self.reports.insert(
                key,
                Report {
                    root,
                    sent: 0,
                    token,
                },
            );
            self.report_tokens.insert(token, key);
            self.send_report(ctx, key);
        }
    }

    /// Whether instance `key` lives and has not given up.
    fn repairable(&self, key: InstanceKey) -> bool {
        match self.store.state(key) {
            None => false,
            Some(state) => self.failure_state.as_deref() != Some(state),
        }
    }

    /// Whether instance `key` entered the failure state (its failure is reported already).
    fn failed(&self, key: InstanceKey) -> bool {
        self.failure_state.is_some() && self.store.state(key) == self.failure_state.as_deref()
    }

    /// A repair of `key`'s payload (rooted at `root`) went unanswered [`REPAIR_TRIES`] times,
    /// or was pushed out of the held payloads: a child may lack the payload, and no service
    /// will tell, so the layer reports the message's failure as the service's own give-up is
    /// reported (with `failure_state`: at the sender, or up the tree to the root).
    fn repair_given_up(&mut self, ctx: &mut Context<'_>, key: InstanceKey, root: NodeId) {
        ctx.count("repair_given_up");
        if self.failure_state.is_some() {
            self.report_failure(ctx, key, root);
        }
    }

    /// Arms the repair retry timer at `at`, unless it is armed earlier already.
    fn retry_repairs_at(&mut self, ctx: &mut Context<'_>, at: viastack_kernel::Instant) {
        match self.repair_retry {
            Some((armed, _)) if armed <= at => {}
            other => {
                if let Some((_, t)) = other {
                    ctx.cancel_timer(t);
                }
                let t = ctx.set_timer_at(at, REPAIR_RETRY_TOKEN);
                self.repair_retry = Some((at, t));
            }
        }
    }

    /// The repair retry timer fired: every held payload with a repair due is repaired (asked
    /// its tree), and the timer is armed at the next repair due after now.
    fn repair_retries_due(&mut self, ctx: &mut Context<'_>) {
        self.repair_retry = None;
        let now = ctx.now();
        let mut due = Vec::new();
        let mut next: Option<viastack_kernel::Instant> = None;
        for (&key, h) in &self.held {
            let first = h
                .sent_to
                .iter()
                .filter_map(|(_, r)| r.map(|r| r.next))
                .min();
            match first {
                Some(at) if at <= now => due.push((key, h.root)),
                Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                None => {}
            }
        }
        for (key, root) in due {
            self.enqueue(ctx, root, Input::Repair(key));
        }
        if let Some(at) = next {
            self.retry_repairs_at(ctx, at);
        }
    }

    /// A neighbourhood change: one repair pass now and one after [`REPAIR_SETTLE`].
    fn on_neighbourhood_change(&mut self, ctx: &mut Context<'_>) {
        self.repair_pass(ctx);
        if !self.repair_armed && !self.held.is_empty() {
            self.repair_armed = true;
            ctx.set_timer(REPAIR_SETTLE, REPAIR_TOKEN);
        }
    }

    /// Asks for the tree of every held instance that lives or waits for a repair's
    /// acknowledgement (forgetting the others).
    fn repair_pass(&mut self, ctx: &mut Context<'_>) {
        let keys: Vec<InstanceKey> = self.held.keys().copied().collect();
        for key in keys {
            let outstanding = self.held.get(&key).is_some_and(Held::outstanding);
            if self.failed(key) || !(self.repairable(key) || outstanding) {
                self.held.remove(&key);
                continue;
            }
            if let Some(h) = self.held.get(&key) {
                let root = h.root;
                self.enqueue(ctx, root, Input::Repair(key));
            }
        }
    }

    /// Sends `key`'s held payload to the `children` it has not reached, as a [`REPAIR`] each
    /// child acknowledges ([`REPAIR_ACK`]): a new child gets it at once, an unanswered one
    /// again after a back-off ([`REPAIR_WAIT_FIRST`], doubling up to [`REPAIR_WAIT_MAX`]);
    /// after [`REPAIR_TRIES`] unanswered sends the repairer gives up and reports the
    /// message's failure ([`Self::repair_given_up`]). A child that left the children is no
    /// longer waited for (counted `repair_abandoned`; repaired anew if it comes back). Once
    /// the instance ended (or before, in the failure state: its failure is reported) no new
    /// child is repaired, but the unanswered repairs go on.
    fn repair(&mut self, ctx: &mut Context<'_>, key: InstanceKey, children: &[NodeId]) {
        if self.failed(key) {
            self.held.remove(&key);
            return;
        }
        let live = self.repairable(key);
        if !live && !self.held.get(&key).is_some_and(Held::outstanding) {
            self.held.remove(&key);
            return;
        }
        let label = self
            .held
            .get(&key)
            .and_then(|h| node_of(h.message.root))
            .and_then(|r| self.label_of(r));
        let (Some(_), Some(h)) = (self.channel, self.held.get_mut(&key)) else {
            return;
        };
        let me = self.node;
        let now = ctx.now();
        // A node this payload went to that is no longer a child may not have it (the send was
        // lost, and the service stopped waiting for its acknowledgement when it left the
        // children): forgotten, so it is repaired when it is a child again.
        let before = h.sent_to.iter().filter(|(_, r)| r.is_some()).count();
        h.sent_to.retain(|(n, _)| children.contains(n));
        let after = h.sent_to.iter().filter(|(_, r)| r.is_some()).count();
        ctx.count_n("repair_abandoned", (before - after) as u64);
        let mut to = Vec::new();
        let mut next: Option<viastack_kernel::Instant> = None;
        let mut give_up = false;
        for &c in children {
            if c == me {
                continue;
            }
            let i = match h.sent_to.iter().position(|&(n, _)| n == c) {
                Some(i) => i,
                None if live => {
                    ctx.count("repaired");
                    h.sent_to.push((c, Some(RepairSend { sent: 0, next: now })));
                    h.sent_to.len() - 1
                }
                None => continue,
            };
            let Some(r) = &mut h.sent_to[i].1 else {
                continue;
            };
            if r.next <= now {
                if r.sent >= REPAIR_TRIES {
                    give_up = true;
                    continue;
                }
                r.sent += 1;
                let wait = REPAIR_WAIT_FIRST
                    .saturating_mul(1 << (r.sent - 1).min(16))
                    .min(REPAIR_WAIT_MAX);
                r.next = now + wait;
                to.push(c);
            }
            next = Some(next.map_or(r.next, |n| n.min(r.next)));
        }
        if !to.is_empty() {
            let mut m = h.message.clone();
            m.message_type = REPAIR;
            let bytes = encode_labelled(&m, label);
            ctx.count_n("sent", to.len() as u64);
            ctx.count_n("repair_sent", to.len() as u64);
            for c in to {
                self.transmit(ctx, c, &bytes);
            }
        }
        if give_up {
            let root = self.held.remove(&key).map_or(self.node, |h| h.root);
            self.repair_given_up(ctx, key, root);
            return;
        }
        if let Some(at) = next {
            self.retry_repairs_at(ctx, at);
        }
        if !live && !self.held.get(&key).is_some_and(Held::outstanding) {
            self.held.remove(&key);
        }
    }

    /// Remembers that `m`, a multicast payload, went to `targets` (for repair).
    fn hold(&mut self, ctx: &mut Context<'_>, m: &SMsg, targets: &[NodeId]) {
        self.hold_with(ctx, m.key(), targets, || m.clone());
    }

    /// [`Self::hold`] of the message `make` builds (only when `key` holds none yet).
    fn hold_with(
        &mut self,
        ctx: &mut Context<'_>,
        key: InstanceKey,
        targets: &[NodeId],
        make: impl FnOnce() -> SMsg,
    ) {
        if !self.held.contains_key(&key) {
            if self.held.len() >= self.capacity {
                let live: std::collections::BTreeSet<InstanceKey> =
                    self.store.keys().into_iter().collect();
                self.held.retain(|k, h| live.contains(k) || h.outstanding());
            }
            if self.held.len() >= self.capacity {
                if let Some((k, h)) = self.held.pop_first() {
                    ctx.count("held_evicted");
                    if h.outstanding() {
                        // Its unanswered repair can no longer go on: not silently.
                        self.repair_given_up(ctx, k, h.root);
                    }
                }
            }
            let message = make();
            let root = node_of(message.root).unwrap_or(self.node);
            self.held.insert(
                key,
                Held {
                    root,
                    message,
                    sent_to: Vec::new(),
                },
            );
        }
        if let Some(h) = self.held.get_mut(&key) {
            for &t in targets {
                match h.sent_to.iter_mut().find(|(n, _)| *n == t) {
                    Some(e) => e.1 = None,
                    None => h.sent_to.push((t, None)),
                }
            }
        }
    }

    /// Sends one encoded message to `to`. A small one (at most [`BATCH_ENTRY_MAX`] bytes: a
    /// control message) waits in the outbox until the kernel's [`FLUSH`] at the end of the
    /// current batch of input, so the messages this batch makes for one next hop leave as one
    /// batch; a larger one leaves at once, after what waits for `to` (the messages to one node
    /// keep their order).
    /// (The caller counts `sent`, once per message for all its next hops.)
    fn transmit(&mut self, ctx: &mut Context<'_>, to: NodeId, bytes: &[u8]) {
        if bytes.len() > BATCH_ENTRY_MAX {
            self.flush_to(ctx, to);
            self.emit(ctx, to, bytes);
            return;
        }
        let entry = BATCH_ENTRY_HEADER + bytes.len();
        let at = self.outbox.iter().position(|o| o.to == to);
        let i = match at {
            Some(i)
                if self.outbox[i].body.len() + entry <= BATCH_MAX_BYTES
                    && self.outbox[i].count < u16::MAX =>
            {
                i
            }
            _ => {
                if let Some(i) = at {
                    let full = self.outbox.swap_remove(i);
                    self.emit_outgoing(ctx, full);
                }
                let mut body = Vec::with_capacity(BATCH_MAX_BYTES.min(BATCH_HEADER + 4 * entry));
                body.extend_from_slice(&[BATCH, 0, 0]);
                self.outbox.push(Outgoing { to, body, count: 0 });
                ctx.request_flush();
                self.outbox.len() - 1
            }
        };
        let o = &mut self.outbox[i];
        o.body
            .extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        o.body.extend_from_slice(bytes);
        o.count += 1;
    }

    /// Sends what waits in the outbox (the kernel's [`FLUSH`]).
    fn flush_outbox(&mut self, ctx: &mut Context<'_>) {
        for o in std::mem::take(&mut self.outbox) {
            self.emit_outgoing(ctx, o);
        }
    }

    /// Sends what waits in the outbox for `to`.
    fn flush_to(&mut self, ctx: &mut Context<'_>, to: NodeId) {
        if let Some(i) = self.outbox.iter().position(|o| o.to == to) {
            let o = self.outbox.swap_remove(i);
            self.emit_outgoing(ctx, o);
        }
    }

    /// One waiting message leaves as it is; several as one batch.
    fn emit_outgoing(&mut self, ctx: &mut Context<'_>, mut o: Outgoing) {
        match o.count {
            0 => {}
            1 => self.emit(ctx, o.to, &o.body[BATCH_HEADER + BATCH_ENTRY_HEADER..]),
            n => {
                o.body[1..BATCH_HEADER].copy_from_slice(&n.to_be_bytes());
                ctx.count("batches");
                ctx.count_n("batched", u64::from(n));
                self.emit(ctx, o.to, &o.body);
            }
        }
    }

    /// One datagram's worth of bytes to `to`, down the channel (copied once, with room in
    /// front for the headers of the layers below).
    fn emit(&mut self, ctx: &mut Context<'_>, to: NodeId, bytes: &[u8]) {
        self.emit_message(ctx, to, Message::from_payload(bytes));
    }

    /// One datagram to `to`, down the channel.
    fn emit_message(&mut self, ctx: &mut Context<'_>, to: NodeId, message: Message) {
        let Some(channel) = self.channel else { return };
        let s = Sendable::new(self.node, Dest::Node(to), message);
        ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, channel, s));
    }

    /// The sender's side of a refusal: its own message `message` never reached the service
    /// (the store was full, the step limit was hit, or it was pushed out of the data buffer):
    /// a [`SEND_REFUSED`] notice with its tag, counted `send_refused` (a message of another
    /// node, or an untagged one, has no entry and is only counted where it was dropped).
    fn refuse_own(&mut self, ctx: &mut Context<'_>, message: u64) {
        if let Some((tag, peer)) = self.own.remove(&message) {
            ctx.count("send_refused");
            if let Some(channel) = self.channel {
                ctx.go(events::failure(&SEND_REFUSED, channel, peer, [tag]));
            }
        }
    }

    /// The sender's side of a failure: the notice with the message's tag, once.
    fn report_at_sender(&mut self, ctx: &mut Context<'_>, message: u64) {
        if let Some((tag, peer)) = self.own.remove(&message) {
            ctx.count("failure_reported");
            if let Some(channel) = self.channel {
                ctx.go(events::failure(&PEER_UNREACHABLE, channel, peer, [tag]));
            }
        }
    }

    /// Sends the next failure report of `key` and arms the timer for the one after.
    fn send_report(&mut self, ctx: &mut Context<'_>, key: InstanceKey) {
        let Some(r) = self.reports.get_mut(&key) else {
            return;
        };
        if r.sent >= REPORT_TRIES {
            let token = r.token;
            self.reports.remove(&key);
            self.report_tokens.remove(&token);
            ctx.count("report_unanswered");
            return;
        }
        r.sent += 1;
        let (root, token) = (r.root, r.token);
        ctx.set_timer(REPORT_EVERY, token);
        ctx.count("report_sent");
        let m = self.layer_message(FAILURE_REPORT, key, root, root);
        self.perform(ctx, Out::Send(m));
    }

    /// A layer message (failure report or its acknowledgement) about instance `key`.
    fn layer_message(&self, ty: u8, key: InstanceKey, root: NodeId, to: NodeId) -> SMsg {
        SMsg {
            service_id: key.service,
            message_id: key.message,
            message_type: ty,
            delivery_mode: 3,
            hop_limit: 255,
            source: addr(self.node),
            destination: addr(to),
            root: addr(root),
            ..SMsg::default()
        }
    }

    /// A failure report or its acknowledgement, from `from`.
    fn on_layer_message(&mut self, ctx: &mut Context<'_>, m: &SMsg) {
        let key = m.key();
        match m.message_type {
            FAILURE_REPORT => {
                ctx.count("report_received");
                if node_of(m.root) == Some(self.node) {
                    self.report_at_sender(ctx, key.message);
                }
                if let Some(reporter) = node_of(m.source) {
                    let ack = self.layer_message(REPORT_ACK, key, self.node, reporter);
                    self.perform(ctx, Out::Send(ack));
                }
            }
            REPAIR_ACK => {
                let Some(child) = node_of(m.source) else {
                    ctx.count("malformed");
                    return;
                };
                let Some(h) = self.held.get_mut(&key) else {
                    return;
                };
                if let Some(e) = h
                    .sent_to
                    .iter_mut()
                    .find(|(n, r)| *n == child && r.is_some())
                {
                    e.1 = None;
                    ctx.count("repair_acked");
                }
                if !h.outstanding() && self.store.state(key).is_none() {
                    self.held.remove(&key);
                }
            }
            _ => {
                if let Some(r) = self.reports.remove(&key) {
                    self.report_tokens.remove(&r.token);
                }
            }
        }
    }

    /// Whether `m` reached this application before (and remembers it if not).
    fn delivered_before(&mut self, now: viastack_kernel::Instant, m: &SMsg) -> bool {
        while let Some(&(k, at)) = self.delivered_order.front() {
            if now.saturating_duration_since(at) < DELIVERED_FOR {
                break;
            }
            self.delivered_order.pop_front();
            if self.delivered.get(&k) == Some(&at) {
                self.delivered.remove(&k);
            }
        }
        let k = (m.root.0, m.message_id, m.seq);
        if self.delivered.contains_key(&k) {
            return true;
        }
        self.delivered.insert(k, now);
        self.delivered_order.push_back((k, now));
        false
    }

    fn perform(&mut self, ctx: &mut Context<'_>, out: Out) {
        let Some(channel) = self.channel else { return };
        let me = self.node;
        match out {
            Out::App(m) => {
                if m.delivery_mode == 3 && node_of(m.destination).is_some_and(|d| d != me) {
                    // A unicast processed on its way (processIntermediateUnicastMessage):
                    // its payload is its addressee's, not this application's.
                    ctx.count("transit_not_delivered");
                    return;
                }
                let from = node_of(m.root).or_else(|| node_of(m.source)).unwrap_or(me);
                if from == me {
                    ctx.count("own");
                    return;
                }
                let Some(p) = m.payload.clone() else { return };
                if self.delivered_before(ctx.now(), &m) {
                    ctx.count("duplicate_suppressed");
                    return;
                }
                while self.delivered.len() > DELIVERED_MAX {
                    let Some((k, at)) = self.delivered_order.pop_front() else {
                        break;
                    };
                    if self.delivered.get(&k) == Some(&at) {
                        self.delivered.remove(&k);
                        ctx.count("delivered_evicted");
                    }
                }
                ctx.count("to_application");
                let s = Sendable::new(from, Dest::Node(me), Message::from_payload(&p));
                ctx.go(Event::sendable(SENDABLE.id(), Direction::Up, channel, s));
            }
            Out::Send(mut m) => {
                if m.root == Addr(0)
                    && !matches!(
                        m.message_type,
                        SPEC_REQUEST | SPEC_RESPONSE | FAILURE_REPORT | REPORT_ACK | REPAIR_ACK
                    )
                {
                    // A message the service built afresh (no `from`: h2hack's and e2eack's
                    // Reset) belongs to its instance's tree: it carries the instance's root,
                    // not its sender, so the receivers forward it down that tree and report a
                    // give-up to the message's original sender.
                    m.root = addr(self.roots.get(&Timers::key(m.key())).copied().unwrap_or(me));
                }
                let node = self.store.node();
                let prev = m.previous_hop;
                let mut targets = std::mem::take(&mut self.targets);
                targets.clear();
                let hops = match m.delivery_mode {
                    1 => &node.children[..],
                    2 => &node.neighbours[..],
                    _ => std::slice::from_ref(&m.destination),
                };
                targets.extend(
                    hops.iter()
                        .filter(|&&a| m.delivery_mode != 2 || a != prev)
                        .filter_map(|&a| node_of(a))
                        .filter(|&n| n != me),
                );
                if m.delivery_mode == 1 && m.message_type == PAYLOAD_TYPE && m.payload.is_some() {
                    self.hold(ctx, &m, &targets);
                }
                let label = node_of(m.root).and_then(|r| self.label_of(r));
                if targets.is_empty() {
                    ctx.count("no_target");
                } else if header(&m, label).1 + m.payload.as_deref().map_or(0, <[u8]>::len)
                    > BATCH_ENTRY_MAX
                {
                    // A payload: leaves at once to each target (as `transmit` sends it),
                    // encoded once into a kernel message, copied for all but the last.
                    ctx.count_n("sent", targets.len() as u64);
                    let mut message = Some(encode_message(&m, label));
                    for (i, &t) in targets.iter().enumerate() {
                        self.flush_to(ctx, t);
                        let one = if i + 1 == targets.len() {
                            message.take()
                        } else {
                            message.clone()
                        };
                        if let Some(one) = one {
                            self.emit_message(ctx, t, one);
                        }
                    }
                } else {
                    let bytes = encode_labelled(&m, label);
                    ctx.count_n("sent", targets.len() as u64);
                    for &t in &targets {
                        self.transmit(ctx, t, &bytes);
                    }
                }
                self.targets = targets;
            }
            Out::SetTimer(key, id, after) => {
                // The bound: beyond `8 × capacity` armed timers the earliest due is cancelled.
                self.timers.cancel(key, id);
                while self.timers.len() >= 8 * self.capacity && self.timers.pop_due().is_some() {
                    ctx.count("timers_evicted");
                }
                self.timers.set(key, id, ctx.now() + after);
                self.arm(ctx);
            }
            Out::Cancel(key, id) => self.timers.cancel(key, id),
        }
    }

    /// Keeps one kernel timer armed at the earliest instance timer (one armed earlier stays:
    /// it fires, finds nothing due, and arms the next).
    fn arm(&mut self, ctx: &mut Context<'_>) {
        let Some(at) = self.timers.next_due() else {
            return;
        };
        match self.armed {
            Some((armed_at, _)) if armed_at <= at => {}
            other => {
                if let Some((_, t)) = other {
                    ctx.cancel_timer(t);
                }
                let t = ctx.set_timer_at(at, INSTANCE_TIMERS_TOKEN);
                self.armed = Some((at, t));
            }
        }
    }

    /// The kernel timer of the instance timers fired: every instance timer due now goes to
    /// its instance (in deadline order, ties in the order they were set).
    ///
    /// At most as many as the control buffer has room for go at once (each waits there for
    /// its tree): the kernel timer is armed again at the next due, now, and fires again once
    /// these have been stepped — a burst of expiries is never pushed out of the buffer.
    fn instance_timers_due(&mut self, ctx: &mut Context<'_>) {
        self.armed = None;
        let now = ctx.now();
        let mut room = self
            .queue
            .saturating_sub(self.control_pending.len())
            .clamp(1, TIMERS_AT_ONCE);
        while room > 0 && self.timers.next_due().is_some_and(|at| at <= now) {
            let Some((key, id)) = self.timers.pop_due() else {
                break;
            };
            room -= 1;
            let root = self
                .roots
                .get(&Timers::key(key))
                .copied()
                .unwrap_or(self.node);
            self.enqueue(ctx, root, Input::Timer(key, id));
        }
        self.arm(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, token: u64) {
        if token == INSTANCE_TIMERS_TOKEN {
            self.instance_timers_due(ctx);
            return;
        }
        if token == OUTBOX_TOKEN {
            self.outbox_armed = false;
            self.flush_outbox(ctx);
            return;
        }
        if token == REPAIR_TOKEN {
            self.repair_armed = false;
            self.repair_pass(ctx);
            return;
        }
        if token == REPAIR_RETRY_TOKEN {
            self.repair_retries_due(ctx);
            return;
        }
        if let Some(&key) = self.report_tokens.get(&token) {
            self.send_report(ctx, key);
            return;
        }
        if let Some(sid) = self.fetch_tokens.remove(&token) {
            self.fetch_retry(ctx, sid);
        }
    }

    fn on_application(&mut self, ctx: &mut Context<'_>, dest: Dest, tag: Tag, payload: Vec<u8>) {
        if self.next_message == 0 {
            // Fresh ids per incarnation: a restarted node must not reuse an instance's id.
            self.next_message = (ctx.rng().next_u64() >> 24).max(1);
        }
        let counter = self.next_message & ((1 << 40) - 1);
        self.next_message = self.next_message.wrapping_add(1);
        let (id, seq) = if self.stream {
            // Never 0 (the spec layer's "none"): node 0's stream is 1 << 40.
            ((u64::from(self.node.0) + 1) << 40, counter)
        } else {
            ((u64::from(self.node.0) << 40) | counter, 0)
        };
        // Remembered until its first step (to tell the sender if the store refuses it), and
        // with `failure_state` until its failure is reported or its instance is gone.
        if tag != Tag::NONE {
            let peer = match dest {
                Dest::Broadcast => NodeId(u32::MAX),
                Dest::Node(n) => n,
            };
            self.own.insert(id, (tag, peer));
        }
        let (mode, destination) = match dest {
            Dest::Broadcast => (if self.flood { 2 } else { 1 }, Addr(0)),
            Dest::Node(n) => (3, addr(n)),
        };
        let m = SMsg {
            service_id: self.service_id,
            message_id: id,
            message_type: PAYLOAD_TYPE,
            delivery_mode: mode,
            hop_limit: 255,
            source: addr(self.node),
            destination,
            root: addr(self.node),
            seq,
            payload: Some(Arc::from(payload)),
            ..SMsg::default()
        };
        self.admit(ctx, self.node, m);
    }

    fn on_network(&mut self, ctx: &mut Context<'_>, from: NodeId, bytes: &[u8]) {
        if bytes.first() == Some(&BATCH) {
            let Some(ranges) = decode_batch(bytes) else {
                ctx.count("malformed");
                return;
            };
            ctx.count("batches_received");
            for r in ranges {
                self.on_message(ctx, from, &bytes[r]);
            }
            return;
        }
        self.on_message(ctx, from, bytes);
    }

    /// One service message from `from`.
    fn on_message(&mut self, ctx: &mut Context<'_>, from: NodeId, bytes: &[u8]) {
        let Some((mut m, label)) = decode_labelled(bytes) else {
            ctx.count("malformed");
            return;
        };
        if let (Some(l), Some(r)) = (label, node_of(m.root)) {
            self.learn_label(r, l);
        }
        if m.delivery_mode == 3
            && m.destination != addr(self.node)
            && node_of(m.destination).is_some()
        {
            m.previous_hop = addr(from);
            return self.on_transit(ctx, from, m);
        }
        m.previous_hop = addr(from);
        match m.message_type {
            SPEC_REQUEST => return self.on_spec_request(ctx, &m),
            SPEC_RESPONSE => return self.on_spec_response(ctx, &m),
            FAILURE_REPORT | REPORT_ACK | REPAIR_ACK => {
                if self.has_service(m.service_id) {
                    self.on_layer_message(ctx, &m);
                } else {
                    ctx.count("unknown_service");
                }
                return;
            }
            _ => {}
        }
        // A message without a root (from a node that did not fill it in) belongs to the
        // instance it names, if this node has one: its root, not the message's sender.
        let root = node_of(m.root)
            .or_else(|| self.roots.get(&Timers::key(m.key())).copied())
            .or_else(|| node_of(m.source))
            .unwrap_or(from);
        self.admit(ctx, root, m);
    }

    /// A unicast for another node, handed up by the overlay (`unicast = "hop"`): the
    /// service's metaops decide (seed 000 §5.1.2.1). With `processIntermediateUnicastMessage`
    /// the service runs it here (an instance for it, counted `transit_processed`); forwarding
    /// it on is the layer's (`transit_forwarded`, at once, the service getting a clone) unless
    /// `messageStoreWillForwardMessage` gives it to a service that processes it — then only
    /// the service's own `forwardMessage` sends it on, and a service that does not forward
    /// it ends its journey here. Layer messages and messages of services not here are only
    /// forwarded.
    fn on_transit(&mut self, ctx: &mut Context<'_>, from: NodeId, m: SMsg) {
        let meta = self
            .store
            .services()
            .iter()
            .find(|s| s.id() == m.service_id)
            .map(|s| s.data.metaops);
        let layer = matches!(
            m.message_type,
            SPEC_REQUEST | SPEC_RESPONSE | FAILURE_REPORT | REPORT_ACK | REPAIR_ACK
        );
        let (run, layer_forwards) = match meta {
            Some(mo) if !layer => (
                mo.process_intermediate_unicast_message,
                !(mo.message_store_will_forward_message && mo.process_intermediate_unicast_message),
            ),
            _ => (false, true),
        };
        if layer_forwards {
            match (m.hop_limit > 1, self.channel, node_of(m.destination)) {
                (true, Some(channel), Some(to)) => {
                    let mut f = m.clone();
                    f.hop_limit -= 1;
                    let bytes = self.encode_for(&f);
                    ctx.count("transit_forwarded");
                    let s = Sendable::new(self.node, Dest::Node(to), Message::from_wire(bytes));
                    ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, channel, s));
                }
                _ => ctx.count("transit_hop_limit"),
            }
        }
        if run {
            if m.hop_limit <= 1 {
                ctx.count("transit_hop_limit");
                return;
            }
            // One hop used: the service's own forwardMessage sends it on with one less, so a
            // route that loops (an overlay not yet converged) dies out.
            let mut m = m;
            m.hop_limit -= 1;
            ctx.count("transit_processed");
            let root = node_of(m.root)
                .or_else(|| node_of(m.source))
                .unwrap_or(from);
            self.admit(ctx, root, m);
        }
    }

    /// Whether the service `id` runs here.
    fn has_service(&self, id: u32) -> bool {
        self.bundles.contains_key(&id)
    }

    /// Services here (configured and fetched).
    pub fn services(&self) -> Vec<u32> {
        self.bundles.keys().copied().collect()
    }

    /// Messages waiting for a service being fetched.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Gives `m` (rooted at `root`) to its service, or holds it while the service is fetched.
    fn admit(&mut self, ctx: &mut Context<'_>, root: NodeId, m: SMsg) {
        if self.has_service(m.service_id) {
            self.enqueue(ctx, root, Input::Msg(m));
            return;
        }
        ctx.count("unknown_service");
        let sid = m.service_id;
        if !self.fetches.contains_key(&sid) && self.fetches.len() >= MAX_FETCHES {
            // Each fetch may hold a bundle being reassembled (up to MAX_SPEC bytes).
            ctx.count("fetches_full");
            ctx.count("unknown_service_dropped");
            return;
        }
        while self.waiting >= self.deploy.queue.max(1) {
            self.drop_oldest_waiting(ctx);
        }
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.waiting += 1;
        let me = self.node;
        let holders: Vec<NodeId> = [node_of(m.previous_hop), node_of(m.source), Some(root)]
            .into_iter()
            .flatten()
            .filter(|&n| n != me)
            .collect();
        if let Some(f) = self.fetches.get_mut(&sid) {
            f.waiting.push_back((arrival, root, m));
            // A message from a node not known yet: that node (or its source) has the
            // service — asked in the next rounds (at most FETCH_FIRST such nodes per fetch),
            // and at once if no node known to have it was asked yet (a fetch started by
            // this node's own message, asking neighbours that lack it too).
            let mut ask = None;
            for n in holders {
                if f.first.len() < FETCH_FIRST && !f.first.contains(&n) {
                    f.first.push(n);
                    if !f.asked_holder && f.assembly.is_none() {
                        f.asked_holder = true;
                        ask = Some(n);
                    }
                }
            }
            if let Some(n) = ask {
                self.send_spec_request(ctx, sid, n);
            }
            return;
        }
        let mut first = Vec::new();
        for n in holders {
            if !first.contains(&n) {
                first.push(n);
            }
        }
        let asked_holder = !first.is_empty();
        let token = self.next_timer;
        self.next_timer = self.next_timer.wrapping_add(1);
        let mut waiting = VecDeque::new();
        waiting.push_back((arrival, root, m));
        self.fetches.insert(
            sid,
            Fetch {
                waiting,
                first,
                asked_holder,
                tried: 0,
                token,
                assembly: None,
            },
        );
        self.fetch_tokens.insert(token, sid);
        ctx.count("spec_fetch");
        // Learn the neighbours (asked after the first candidates).
        self.enqueue(ctx, self.node, Input::Probe);
        self.fetch_retry(ctx, sid);
    }

    /// Drops the oldest message waiting for a service (the waiting queue is full).
    fn drop_oldest_waiting(&mut self, ctx: &mut Context<'_>) {
        let oldest = self
            .fetches
            .iter()
            .filter_map(|(&sid, f)| f.waiting.front().map(|w| (w.0, sid)))
            .min();
        let Some((_, sid)) = oldest else {
            self.waiting = 0;
            return;
        };
        if let Some(f) = self.fetches.get_mut(&sid) {
            f.waiting.pop_front();
            self.waiting -= 1;
            ctx.count("unknown_service_dropped");
            if f.waiting.is_empty() {
                let token = f.token;
                self.fetches.remove(&sid);
                self.fetch_tokens.remove(&token);
            }
        }
    }

    /// Sends the next request for service `sid`, or gives up after [`Deploy::tries`].
    fn fetch_retry(&mut self, ctx: &mut Context<'_>, sid: u32) {
        let me = self.node;
        let neighbours: Vec<NodeId> = self
            .store
            .node()
            .neighbours
            .iter()
            .copied()
            .filter_map(node_of)
            .collect();
        let server = self.deploy.server;
        let Some(f) = self.fetches.get_mut(&sid) else {
            return;
        };
        if f.tried >= self.deploy.tries {
            let n = f.waiting.len();
            self.waiting = self.waiting.saturating_sub(n);
            let token = f.token;
            self.fetches.remove(&sid);
            self.fetch_tokens.remove(&token);
            ctx.count("spec_fetch_failed");
            ctx.count_n("unknown_service_dropped", n as u64);
            return;
        }
        let mut candidates = f.first.clone();
        for n in neighbours.into_iter().chain(server) {
            if n != me && !candidates.contains(&n) {
                candidates.push(n);
            }
        }
        let to = if candidates.is_empty() {
            None
        } else {
            Some(candidates[f.tried as usize % candidates.len()])
        };
        f.tried += 1;
        let token = f.token;
        self.fetch_tokens.insert(token, sid);
        ctx.set_timer(self.deploy.every, token);
        let Some(to) = to else {
            ctx.count("no_target");
            return;
        };
        self.send_spec_request(ctx, sid, to);
    }

    /// Asks `to` for the spec of service `sid`.
    fn send_spec_request(&mut self, ctx: &mut Context<'_>, sid: u32, to: NodeId) {
        ctx.count("spec_request_sent");
        let m = SMsg {
            service_id: sid,
            message_type: SPEC_REQUEST,
            delivery_mode: 3,
            hop_limit: 255,
            source: addr(self.node),
            destination: addr(to),
            payload: Some(Arc::from(specbundle::encode_request(None))),
            ..SMsg::default()
        };
        self.perform(ctx, Out::Send(m));
    }

    /// A node asks for a spec: every chunk of its bundle goes back to it, if this node has it.
    fn on_spec_request(&mut self, ctx: &mut Context<'_>, m: &SMsg) {
        let Some(want) = specbundle::decode_request(m.payload.as_deref().unwrap_or(&[])) else {
            ctx.count("malformed");
            return;
        };
        let Some(asker) = node_of(m.source) else {
            ctx.count("malformed");
            return;
        };
        let bundle = match want {
            None => self.bundles.get(&m.service_id),
            Some(h) => self.bundles.values().find(|b| b.hash == h),
        };
        let Some(bundle) = bundle.cloned() else {
            ctx.count("spec_request_unanswered");
            return;
        };
        ctx.count("spec_served");
        for c in specbundle::chunks(&bundle) {
            let r = SMsg {
                service_id: m.service_id,
                message_type: SPEC_RESPONSE,
                delivery_mode: 3,
                hop_limit: 255,
                source: addr(self.node),
                destination: addr(asker),
                payload: Some(Arc::from(specbundle::encode_chunk(&c))),
                ..SMsg::default()
            };
            self.perform(ctx, Out::Send(r));
        }
    }

    /// A chunk of a spec this node asked for: reassembled, and once complete verified and
    /// loaded ([`specbundle::accept`]) before the service runs the messages waiting for it.
    fn on_spec_response(&mut self, ctx: &mut Context<'_>, m: &SMsg) {
        let Some(c) = specbundle::decode_chunk(m.payload.as_deref().unwrap_or(&[])) else {
            ctx.count("malformed");
            return;
        };
        let sid = m.service_id;
        let Some(f) = self.fetches.get_mut(&sid) else {
            ctx.count("spec_unsolicited");
            return;
        };
        if self.refused.contains(&(c.hash, c.signature)) {
            ctx.count("spec_refused_again");
            return;
        }
        let a = match &mut f.assembly {
            Some(a) if a.matches(&c) => a,
            slot => slot.insert(Assembly::new(&c)),
        };
        let Some(bundle) = a.add(c) else {
            return;
        };
        f.assembly = None;
        if self.bundles.len() >= self.deploy.max_services {
            ctx.count("services_full");
            return;
        }
        match specbundle::accept(&bundle, Some(sid), None, &self.deploy.trusted_keys) {
            Err(why) => {
                ctx.count("spec_refused");
                if why != specbundle::Refusal::BadHash {
                    if self.refused.len() >= 64 {
                        self.refused.pop_front();
                    }
                    self.refused.push_back((bundle.hash, bundle.signature));
                }
            }
            Ok(service) => {
                ctx.count("spec_accepted");
                self.store.add_service(Arc::new(service));
                self.bundles.insert(sid, bundle);
                if let Some(f) = self.fetches.remove(&sid) {
                    self.fetch_tokens.remove(&f.token);
                    self.waiting = self.waiting.saturating_sub(f.waiting.len());
                    for (_, root, m) in f.waiting {
                        self.enqueue(ctx, root, Input::Msg(m));
                    }
                }
            }
        }
    }
}

impl Session for MessageStoreSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        self.handle_event(event, ctx);
        // Inputs whose tree was remembered are stepped now, after what queued them (a batch
        // of messages, the instance timers due) as the overlay's answers would be.
        if !self.data_pending.is_empty() || !self.control_pending.is_empty() {
            self.step_known(ctx);
        }
    }
}

impl MessageStoreSession {
    fn handle_event(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            if let Body::Timer(t) = &event.body {
                let token = t.token;
                self.on_timer(ctx, token);
            }
            return;
        }
        if ty == FLUSH.id() {
            if self.batch_window.is_zero() {
                self.flush_outbox(ctx);
            } else if !self.outbox_armed && !self.outbox.is_empty() {
                // The window opens with the first batch of input that left something waiting.
                self.outbox_armed = true;
                let at = ctx.now() + self.batch_window;
                ctx.set_timer_at(at, OUTBOX_TOKEN);
            }
            return;
        }
        if ty == CHANNEL_INIT.id() {
            if self.channel.is_none() {
                self.channel = Some(event.channel());
            }
            ctx.go(event);
            return;
        }
        if ty == NEIGHBOUR_ADDED.id() || ty == NEIGHBOUR_REMOVED.id() {
            self.on_neighbourhood_change(ctx);
            ctx.go(event);
            return;
        }
        if ty == TREE.id() {
            let info = match std::mem::replace(&mut event.body, Body::Empty) {
                Body::Custom(b) => b.downcast::<TreeInfo>().ok(),
                _ => None,
            };
            if let Some(info) = info {
                self.on_tree(ctx, *info);
            }
            return;
        }
        if ty == GENERATION.id() {
            if let Body::Custom(b) = &event.body {
                if let Some(g) = b.downcast_ref::<TopologyGeneration>() {
                    self.generation(g.0);
                }
            }
            return;
        }
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        if self.channel.is_none() {
            self.channel = Some(ctx.channel());
        }
        match dir {
            Direction::Down => {
                let dest = s.dest;
                let tag = s.tag;
                let bytes = std::mem::take(&mut s.message).into_vec();
                self.on_application(ctx, dest, tag, bytes);
            }
            Direction::Up => {
                let from = s.source;
                // Read in place: `into_vec` would move the bytes to the front first.
                let message = std::mem::take(&mut s.message);
                self.on_network(ctx, from, message.as_slice());
            }
        }
    }
}

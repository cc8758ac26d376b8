//! Exhaustive bounded exploration of one delivery service over a small overlay (issue 15 §5;
//! seed 000 chapters 3–5: the delivery services run per (ServiceID, MessageID) at every node).
//!
//! [`explore`] builds a [`Topology`] (`tree:N`, `line:N`, `star:N`), one [`Store`] per node,
//! injects the messages the service's `<data name="explore">` declares, and searches **every**
//! interleaving, breadth first, of:
//!
//! - delivering any message in flight (messages are delivered in any order);
//! - losing one (at most [`Options::loss`] in a run), duplicating one (at most [`Options::dup`]);
//! - firing an armed timer. With [`TimerMode::Deadline`] (the default) time is virtual and a
//!   timer fires only when no message is in flight, earliest deadline first (ties in any
//!   order): the network is taken to be faster than every timeout, as the seed's durations
//!   assume (§6.2.2), and a loss is how a late message shows. With [`TimerMode::Any`] any armed
//!   timer may fire at any point (a timeout racing the network), which finds more, and more
//!   spurious, violations.
//!
//! States are hashed (every node's store via [`Store::fingerprint`], the multiset of messages
//! in flight, the armed timers as time left, the loss/duplicate counters and what each node's
//! application got) into 128 bits, and a state seen before is not expanded again. Breadth
//! first, so the first violation found has a shortest trace; it is written as the JSONL of
//! `viastack spec run` ([`trace`](super::trace), with `"at"` naming the node), which replays it.
//!
//! Properties: universal ones (a runner error; more than [`Options::max_inflight`] messages in
//! flight; an instance still live in a terminal state, where nothing is in flight and no timer
//! is armed: a stuck instance) and those the service declares (see [`Property`]).
//!
//! Messages travel one overlay hop per delivery: a unicast (DeliveryMode 3, or a destination
//! in the overlay) goes to the next node on the tree path to its destination (and, at its
//! destination, a message the node itself sends there reaches its application); a multicast
//! (1) goes to the sender's children; a flood (2) to its neighbours but the previous hop; a
//! message with no destination in the overlay leaves it. Every hop sets PreviousHopAddress to
//! the sender. Node `i` has address `i + 1`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{json, Value};
use viastack_kernel::time::Instant;

use super::action::{Network, Primitive};
use super::message::{Addr, Attr, InstanceKey, Message, NodeInfo};
use super::trace::{message_to_json, node_to_json};
use super::{Runner, Service, Store, StoreConfig};

/// Why an exploration cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExploreError {
    /// A topology that is not `tree:N`, `line:N` or `star:N` (1 ≤ N ≤ 64).
    #[error("topology `{0}`: expected tree:N, line:N or star:N with 1 <= N <= 64")]
    Topology(String),
    /// The `<data name="explore">` declaration is wrong (file:line: message).
    #[error("{0}")]
    Declaration(String),
}

/// The overlay: node `i` has address `i + 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// As given (`tree:7`).
    pub name: String,
    /// Per node: address, parent (`Addr(0)` for the root), children, neighbours.
    pub nodes: Vec<NodeInfo>,
}

impl Topology {
    /// Parses `tree:N` (complete binary tree rooted at node 0), `line:N`, `star:N`.
    ///
    /// # Errors
    /// [`ExploreError::Topology`].
    pub fn parse(s: &str) -> Result<Topology, ExploreError> {
        let bad = || ExploreError::Topology(s.to_string());
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if !(1..=64).contains(&n) {
            return Err(bad());
        }
        let parent = |i: usize| -> Option<usize> {
            if i == 0 {
                return None;
            }
            match kind {
                "tree" => Some((i - 1) / 2),
                "line" => Some(i - 1),
                _ => Some(0),
            }
        };
        if !matches!(kind, "tree" | "line" | "star") {
            return Err(bad());
        }
        let addr = |i: usize| Addr(i as u64 + 1);
        let nodes = (0..n)
            .map(|i| {
                let children: Vec<Addr> =
                    (0..n).filter(|&c| parent(c) == Some(i)).map(addr).collect();
                let mut neighbours: Vec<Addr> = parent(i).map(addr).into_iter().collect();
                neighbours.extend(children.iter().copied());
                NodeInfo {
                    address: addr(i),
                    parent: parent(i).map_or(Addr(0), addr),
                    children,
                    neighbours,
                }
            })
            .collect();
        Ok(Topology {
            name: s.to_string(),
            nodes,
        })
    }

    fn node_of(&self, a: Addr) -> Option<usize> {
        let i = usize::try_from(a.0).ok()?.checked_sub(1)?;
        (i < self.nodes.len()).then_some(i)
    }

    fn parent(&self, i: usize) -> Option<usize> {
        self.node_of(self.nodes[i].parent)
    }

    /// Whether `d` is in the subtree of `i`.
    fn below(&self, d: usize, i: usize) -> bool {
        let mut x = Some(d);
        let mut steps = 0;
        while let Some(n) = x {
            if n == i {
                return true;
            }
            steps += 1;
            if steps > self.nodes.len() {
                return false;
            }
            x = self.parent(n);
        }
        false
    }

    /// The next node from `i` towards `d` on the tree.
    fn next_hop(&self, i: usize, d: usize) -> Option<usize> {
        if i == d {
            return Some(d);
        }
        if self.below(d, i) {
            self.nodes[i]
                .children
                .iter()
                .filter_map(|&c| self.node_of(c))
                .find(|&c| self.below(d, c))
        } else {
            self.parent(i)
        }
    }

    fn select(&self, sel: &Sel) -> Vec<usize> {
        let n = self.nodes.len();
        match sel {
            Sel::All => (0..n).collect(),
            Sel::Root => vec![0],
            Sel::Leaves => (0..n)
                .filter(|&i| self.nodes[i].children.is_empty())
                .collect(),
            Sel::Inner => (0..n)
                .filter(|&i| !self.nodes[i].children.is_empty())
                .collect(),
            Sel::Nodes(v) => v.iter().copied().filter(|&i| i < n).collect(),
        }
    }
}

/// A set of nodes in a declaration: `all`, `root`, `leaves`, `inner`, or node indexes
/// (`"0 1"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sel {
    /// Every node.
    All,
    /// Node 0.
    Root,
    /// Nodes without children.
    Leaves,
    /// Nodes with children.
    Inner,
    /// These nodes (indexes past the topology are ignored).
    Nodes(Vec<usize>),
}

impl Sel {
    fn parse(s: &str) -> Option<Sel> {
        Some(match s.trim() {
            "all" => Sel::All,
            "root" => Sel::Root,
            "leaves" => Sel::Leaves,
            "inner" => Sel::Inner,
            other => Sel::Nodes(
                other
                    .split_whitespace()
                    .map(|x| x.parse().ok())
                    .collect::<Option<Vec<usize>>>()?,
            ),
        })
    }
}

/// An address in a declaration: a number, or `@self` (the node injected at), `@parent` (its
/// parent), `@root`, `@N` (node N's).
#[derive(Clone, Debug, PartialEq, Eq)]
enum AddrRef {
    Fixed(i64),
    SelfAddr,
    Parent,
    Node(usize),
}

impl AddrRef {
    fn resolve(&self, topo: &Topology, at: usize) -> i64 {
        match self {
            AddrRef::Fixed(v) => *v,
            AddrRef::SelfAddr => topo.nodes[at].address.0 as i64,
            AddrRef::Parent => topo.nodes[at].parent.0 as i64,
            AddrRef::Node(n) => *n as i64 + 1,
        }
    }
}

/// One `<Inject>`: a message given to node(s) `at` by the local application, or, with `from`,
/// sent to them over the network by node `from` (then it can be lost or duplicated). Its
/// attributes are the seed's names; ServiceID is the service's, MessageID 1, SourceAddress
/// the sender's unless given; `{node}` in the Payload is the node's number.
#[derive(Clone, Debug, PartialEq)]
pub struct Inject {
    at: Sel,
    from: Option<usize>,
    attrs: Vec<(Attr, AddrRef)>,
    payload: Option<String>,
}

/// A property a service declares in `<data name="explore">` (docs/spec-format.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    /// Its name (reported with a violation).
    pub name: String,
    /// What it asks.
    pub kind: Kind,
    /// The nodes it is about.
    pub nodes: Sel,
    /// Waived in a run where a node's instance was ever in one of these states (the service
    /// gave up and said so).
    pub unless_state: Vec<String>,
    /// Waived in a run where a message was lost (a service without retransmission).
    pub unless_loss: bool,
}

/// The kinds of declared property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// In every terminal state, each node got a payload at its application; with `all`,
    /// every injected payload (a merged payload `a|b` counts for its parts).
    Delivered {
        /// Every injected payload, not just one.
        all: bool,
    },
    /// Never does a node's application get the same (MessageID, payload) twice.
    AtMostOnce,
    /// A node's application gets a message's SequenceNumbers in increasing order.
    InOrder,
    /// A node's application gets messages only from these SourceAddresses.
    OnlyFrom(Vec<i64>),
    /// In every terminal state, each node's instance was once in this state.
    Reaches(String),
}

/// The `<data name="explore">` declaration of a service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Declaration {
    /// What is injected at the start.
    pub injects: Vec<Inject>,
    /// What must hold.
    pub properties: Vec<Property>,
}

impl Declaration {
    /// Reads `<data name="explore">` from a service's SCXML source (`None` if it has none).
    ///
    /// # Errors
    /// [`ExploreError::Declaration`] with `file:line`.
    pub fn read(file: &str, src: &str) -> Result<Option<Declaration>, ExploreError> {
        let doc = roxmltree::Document::parse(src)
            .map_err(|e| ExploreError::Declaration(format!("{file}: {e}")))?;
        let Some(d) = doc.descendants().find(|n| {
            n.is_element()
                && n.tag_name().name() == "data"
                && n.attribute("name").or_else(|| n.attribute("id")) == Some("explore")
        }) else {
            return Ok(None);
        };
        let mut decl = Declaration::default();
        for c in d.children().filter(roxmltree::Node::is_element) {
            let line = doc.text_pos_at(c.range().start).row;
            let err = |m: String| ExploreError::Declaration(format!("{file}:{line}: {m}"));
            let sel = |name: &str, default: Sel| -> Result<Sel, ExploreError> {
                match c.attribute(name) {
                    None => Ok(default),
                    Some(v) => Sel::parse(v).ok_or_else(|| {
                        err(format!(
                            "{name}=\"{v}\": expected all, root, leaves, inner or node numbers"
                        ))
                    }),
                }
            };
            match c.tag_name().name() {
                "Inject" => {
                    let at = sel("at", Sel::Root)?;
                    let from = match c.attribute("from") {
                        None => None,
                        Some("root") => Some(0),
                        Some(v) => Some(v.trim().parse().map_err(|_| {
                            err(format!("from=\"{v}\": expected root or a node number"))
                        })?),
                    };
                    let mut attrs = Vec::new();
                    let mut payload = None;
                    for a in c.attributes() {
                        match a.name() {
                            "at" | "from" => {}
                            "Payload" => payload = Some(a.value().to_string()),
                            n => {
                                let attr = Attr::from_name(n).ok_or_else(|| {
                                    err(format!("unknown message attribute `{n}`"))
                                })?;
                                let v = a.value().trim();
                                let r = match v {
                                    "@self" => AddrRef::SelfAddr,
                                    "@parent" => AddrRef::Parent,
                                    "@root" => AddrRef::Node(0),
                                    _ if v.starts_with('@') => {
                                        AddrRef::Node(v[1..].parse().map_err(|_| {
                                            err(format!(
                                                "{n}=\"{v}\": expected @self, @parent, @root or @N"
                                            ))
                                        })?)
                                    }
                                    _ => AddrRef::Fixed(attr.parse_value(v).ok_or_else(|| {
                                        err(format!("{n}=\"{v}\": not a valid value"))
                                    })?),
                                };
                                attrs.push((attr, r));
                            }
                        }
                    }
                    decl.injects.push(Inject {
                        at,
                        from,
                        attrs,
                        payload,
                    });
                }
                "Property" => {
                    let name = c.attribute("name").unwrap_or("property").to_string();
                    let kind = match c.attribute("kind") {
                        Some("delivered") => Kind::Delivered {
                            all: c.attribute("payloads") == Some("all"),
                        },
                        Some("at-most-once") => Kind::AtMostOnce,
                        Some("in-order") => Kind::InOrder,
                        Some("only-from") => Kind::OnlyFrom(
                            c.attribute("sources")
                                .unwrap_or("")
                                .split_whitespace()
                                .map(|s| Attr::Source.parse_value(s))
                                .collect::<Option<Vec<i64>>>()
                                .ok_or_else(|| err("sources: expected addresses".into()))?,
                        ),
                        Some("reaches") => Kind::Reaches(
                            c.attribute("state")
                                .ok_or_else(|| err("reaches: expected state=\"…\"".into()))?
                                .to_string(),
                        ),
                        other => {
                            return Err(err(format!(
                                "kind {other:?}: expected delivered, at-most-once, in-order, only-from or reaches"
                            )))
                        }
                    };
                    decl.properties.push(Property {
                        name,
                        kind,
                        nodes: sel("nodes", Sel::All)?,
                        unless_state: c
                            .attribute("unless-state")
                            .unwrap_or("")
                            .split_whitespace()
                            .map(str::to_string)
                            .collect(),
                        unless_loss: c.attribute("unless-loss") == Some("true"),
                    });
                }
                other => {
                    return Err(err(format!(
                        "unknown element <{other}> (expected <Inject> or <Property>)"
                    )))
                }
            }
        }
        if decl.injects.is_empty() {
            return Err(ExploreError::Declaration(format!(
                "{file}: <data name=\"explore\"> injects nothing (expected an <Inject>)"
            )));
        }
        Ok(Some(decl))
    }
}

/// When timers fire (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimerMode {
    /// Only when nothing is in flight, earliest deadline first.
    #[default]
    Deadline,
    /// Any armed timer at any point.
    Any,
}

/// Bounds and faults of an exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Most messages lost in one run.
    pub loss: u32,
    /// Most messages duplicated in one run.
    pub dup: u32,
    /// Most distinct states visited.
    pub max_states: usize,
    /// Most events in one run (states deeper are not expanded).
    pub max_depth: usize,
    /// More messages in flight than this is a violation (unbounded growth).
    pub max_inflight: usize,
    /// When timers fire.
    pub timers: TimerMode,
}

impl Default for Options {
    /// No faults; 1,000,000 states; depth 10,000; 64 messages in flight; deadline timers.
    fn default() -> Self {
        Options {
            loss: 0,
            dup: 0,
            max_states: 1_000_000,
            max_depth: 10_000,
            max_inflight: 64,
            timers: TimerMode::Deadline,
        }
    }
}

/// What an exploration found.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Distinct states visited.
    pub states: usize,
    /// Transitions taken (events applied, revisits included).
    pub transitions: usize,
    /// Deepest state reached (events from the start).
    pub depth: usize,
    /// Terminal states (nothing in flight, no timer armed).
    pub terminal: usize,
    /// The whole space within the bounds was searched: no state was left unexpanded because
    /// of `max_states` or `max_depth`.
    pub exhausted: bool,
    /// The first violation (on a shortest trace).
    pub violation: Option<Violation>,
}

/// A property that failed, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The property (`stuck`, `growth`, `runner-error` or a declared name).
    pub property: String,
    /// What went wrong.
    pub message: String,
    /// The trace from the start: JSONL for `viastack spec run` (node lines, then one message or
    /// timer input per event with `"at"`; losses and duplicates as `#` comment lines).
    pub trace: Vec<String>,
    /// Events in the trace (its depth).
    pub events: usize,
}

impl Report {
    /// The report as JSON (the violation's trace left out).
    pub fn to_json(&self, secs: f64) -> Value {
        json!({
            "states": self.states,
            "transitions": self.transitions,
            "depth": self.depth,
            "terminal": self.terminal,
            "exhausted": self.exhausted,
            "seconds": secs,
            "states_per_s": if secs > 0.0 { self.states as f64 / secs } else { 0.0 },
            "violation": self.violation.as_ref().map(|v| json!({
                "property": v.property, "message": v.message, "events": v.events
            })),
        })
    }
}

/// A message on its way to node `to`.
#[derive(Clone, Debug, PartialEq)]
struct Flight {
    to: u16,
    /// `None`: from the local application (cannot be lost or duplicated).
    from: Option<u16>,
    msg: Message,
}

impl Flight {
    fn hash64(&self) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        self.to.hash(&mut h);
        self.from.hash(&mut h);
        self.msg.fingerprint(&mut h);
        h.finish()
    }
}

/// What one node's application got, and which states its instances were in.
#[derive(Clone, Debug, Default, PartialEq)]
struct Obs {
    got: Vec<Message>,
    /// Bits of interned state names.
    visited: u64,
}

#[derive(Clone)]
struct World {
    stores: Vec<Store>,
    flights: Vec<Flight>,
    /// (node, instance, timer) → deadline (ns).
    timers: BTreeMap<(u16, InstanceKey, u32), u64>,
    now: u64,
    lost: u32,
    duped: u32,
    obs: Vec<Obs>,
}

#[derive(Clone, Debug)]
enum Ev {
    Deliver(Flight),
    Lose(Flight),
    Dup(Flight),
    Timer(u16, InstanceKey, u32, u64),
}

/// The [`Network`] of one step at one node.
struct Host<'a> {
    node: usize,
    topo: &'a Topology,
    out: Vec<Flight>,
    timers: &'a mut BTreeMap<(u16, InstanceKey, u32), u64>,
    obs: &'a mut Obs,
}

impl Host<'_> {
    fn send(&mut self, m: &Message) {
        let n = self.node;
        let topo = self.topo;
        let dest = topo.node_of(m.destination);
        let mut copy = m.clone();
        copy.previous_hop = topo.nodes[n].address;
        let targets: Vec<usize> = match (m.delivery_mode, dest) {
            (1, _) => topo.nodes[n]
                .children
                .iter()
                .filter_map(|&c| topo.node_of(c))
                .collect(),
            (2, _) => topo.nodes[n]
                .neighbours
                .iter()
                .filter(|&&a| a != m.previous_hop)
                .filter_map(|&a| topo.node_of(a))
                .collect(),
            (_, Some(d)) if d == n => {
                // At its destination: the node's own application.
                self.obs.got.push(copy);
                return;
            }
            (_, Some(d)) => topo.next_hop(n, d).into_iter().collect(),
            (_, None) => Vec::new(),
        };
        for t in targets {
            self.out.push(Flight {
                to: t as u16,
                from: Some(n as u16),
                msg: copy.clone(),
            });
        }
    }
}

impl Network for Host<'_> {
    fn perform(&mut self, now: Instant, key: InstanceKey, p: Primitive<'_>) {
        match p {
            Primitive::ToApplication(m) => self.obs.got.push(m.clone()),
            Primitive::SendData(m) | Primitive::SendControl(m) | Primitive::Forward(m) => {
                self.send(m);
            }
            Primitive::SetTimer { id, after } => {
                let at = now.saturating_add(after).as_nanos();
                self.timers.insert((self.node as u16, key, id), at);
            }
            Primitive::CancelTimer { id } => {
                self.timers.remove(&(self.node as u16, key, id));
            }
            Primitive::Terminate | Primitive::UpdateNodeInfo(_) => {}
        }
    }
}

/// The explorer: one service on one topology.
struct Explorer<'a> {
    svc: &'a Arc<Service>,
    decl: &'a Declaration,
    topo: &'a Topology,
    opts: Options,
    /// Interned state names (bit index in [`Obs::visited`]).
    names: HashMap<String, u32>,
    /// Payloads injected (for `payloads="all"`).
    injected: Vec<Vec<u8>>,
    /// Whether the service processes a unicast at an intermediate node.
    intermediate: bool,
}

impl Explorer<'_> {
    fn bit(&mut self, name: &str) -> u64 {
        let n = self.names.len() as u32;
        let i = *self.names.entry(name.to_string()).or_insert(n);
        if i < 64 {
            1 << i
        } else {
            0
        }
    }

    fn initial(&mut self) -> World {
        let mut stores = Vec::new();
        for n in &self.topo.nodes {
            let mut s = Store::new(vec![self.svc.clone()], StoreConfig::default());
            s.set_node(n.clone());
            stores.push(s);
        }
        let mut flights = Vec::new();
        for inj in &self.decl.injects {
            for at in self.topo.select(&inj.at) {
                let from = inj.from.filter(|&f| f < self.topo.nodes.len());
                let origin = from.unwrap_or(at);
                let mut m = Message {
                    service_id: self.svc.id(),
                    message_id: 1,
                    hop_limit: 255,
                    source: self.topo.nodes[origin].address,
                    previous_hop: from.map_or(Addr(0), |f| self.topo.nodes[f].address),
                    ..Message::default()
                };
                for (a, r) in &inj.attrs {
                    m.set(*a, r.resolve(self.topo, at));
                }
                if let Some(p) = &inj.payload {
                    let p = p.replace("{node}", &at.to_string());
                    m.payload = Some(p.as_bytes().into());
                    self.injected.push(p.into_bytes());
                }
                flights.push(Flight {
                    to: at as u16,
                    from: from.map(|f| f as u16),
                    msg: m,
                });
            }
        }
        World {
            stores,
            flights,
            timers: BTreeMap::new(),
            now: 0,
            lost: 0,
            duped: 0,
            obs: vec![Obs::default(); self.topo.nodes.len()],
        }
    }

    fn fingerprint(&self, w: &World) -> u128 {
        let now = Instant::from_nanos(w.now);
        let mut fl: Vec<u64> = w.flights.iter().map(Flight::hash64).collect();
        fl.sort_unstable();
        let mut out = [0u64; 2];
        for (salt, o) in out.iter_mut().enumerate() {
            let mut h = std::hash::DefaultHasher::new();
            h.write_usize(salt);
            for s in &w.stores {
                s.fingerprint(now, &mut h);
            }
            fl.hash(&mut h);
            for (k, &at) in &w.timers {
                k.0.hash(&mut h);
                k.1.service.hash(&mut h);
                k.1.message.hash(&mut h);
                k.2.hash(&mut h);
                at.saturating_sub(w.now).hash(&mut h);
            }
            w.lost.hash(&mut h);
            w.duped.hash(&mut h);
            for o in &w.obs {
                o.visited.hash(&mut h);
                o.got.len().hash(&mut h);
                for m in &o.got {
                    m.fingerprint(&mut h);
                }
            }
            *o = h.finish();
        }
        (u128::from(out[0]) << 64) | u128::from(out[1])
    }

    /// The events enabled in `w` (identical messages in flight count once).
    fn enabled(&self, w: &World) -> Vec<Ev> {
        let mut evs = Vec::new();
        for (i, f) in w.flights.iter().enumerate() {
            if w.flights[..i].contains(f) {
                continue;
            }
            evs.push(Ev::Deliver(f.clone()));
            if f.from.is_some() {
                if w.lost < self.opts.loss {
                    evs.push(Ev::Lose(f.clone()));
                }
                if w.duped < self.opts.dup {
                    evs.push(Ev::Dup(f.clone()));
                }
            }
        }
        let due: Option<u64> = match self.opts.timers {
            TimerMode::Deadline if w.flights.is_empty() => w.timers.values().min().copied(),
            TimerMode::Deadline => None,
            TimerMode::Any => Some(u64::MAX),
        };
        if let Some(due) = due {
            for (&(n, k, id), &at) in &w.timers {
                if at <= due {
                    evs.push(Ev::Timer(n, k, id, at));
                }
            }
        }
        evs
    }

    /// Applies `ev` to a copy of `w`; an error is a runner error.
    fn apply(&mut self, w: &World, ev: &Ev) -> (World, Option<String>) {
        let mut w = w.clone();
        let take = |w: &mut World, f: &Flight| {
            if let Some(i) = w.flights.iter().position(|x| x == f) {
                w.flights.swap_remove(i);
            }
        };
        let (node, key, res) = match ev {
            Ev::Lose(f) => {
                take(&mut w, f);
                w.lost += 1;
                return (w, None);
            }
            Ev::Dup(f) => {
                w.flights.push(f.clone());
                w.duped += 1;
                return (w, None);
            }
            Ev::Deliver(f) => {
                take(&mut w, f);
                let n = usize::from(f.to);
                let dest = self.topo.node_of(f.msg.destination);
                let passing =
                    f.from.is_some() && f.msg.delivery_mode == 3 && dest.is_some_and(|d| d != n);
                let World {
                    stores,
                    timers,
                    obs,
                    flights,
                    now,
                    ..
                } = &mut w;
                let mut host = Host {
                    node: n,
                    topo: self.topo,
                    out: Vec::new(),
                    timers,
                    obs: &mut obs[n],
                };
                let res = if passing && !self.intermediate {
                    host.send(&f.msg);
                    Ok(())
                } else {
                    stores[n].handle_message(Instant::from_nanos(*now), &f.msg, &mut host)
                };
                flights.append(&mut host.out);
                (n, f.msg.key(), res)
            }
            Ev::Timer(n, k, id, at) => {
                let n = usize::from(*n);
                w.timers.remove(&(n as u16, *k, *id));
                w.now = w.now.max(*at);
                let World {
                    stores,
                    timers,
                    obs,
                    flights,
                    now,
                    ..
                } = &mut w;
                let mut host = Host {
                    node: n,
                    topo: self.topo,
                    out: Vec::new(),
                    timers,
                    obs: &mut obs[n],
                };
                let res = stores[n].handle_timer(Instant::from_nanos(*now), *k, *id, &mut host);
                flights.append(&mut host.out);
                (n, *k, res)
            }
        };
        let states: Vec<String> = w.stores[node]
            .states(key)
            .into_iter()
            .map(str::to_string)
            .collect();
        if states.is_empty() {
            w.timers
                .retain(|&(tn, tk, _), _| !(usize::from(tn) == node && tk == key));
        }
        for s in states {
            w.obs[node].visited |= self.bit(&s);
        }
        (w, res.err().map(|e| format!("node {node}: {e}")))
    }

    fn waived(&mut self, p: &Property, w: &World) -> bool {
        if p.unless_loss && w.lost > 0 {
            return true;
        }
        let mask: u64 = p
            .unless_state
            .iter()
            .map(|s| self.bit(s))
            .fold(0, |a, b| a | b);
        mask != 0 && w.obs.iter().any(|o| o.visited & mask != 0)
    }

    /// Safety properties, checked in every state.
    fn safety(&mut self, w: &World) -> Option<(String, String)> {
        if w.flights.len() > self.opts.max_inflight {
            return Some((
                "growth".into(),
                format!(
                    "{} messages in flight (more than {})",
                    w.flights.len(),
                    self.opts.max_inflight
                ),
            ));
        }
        for p in &self.decl.properties {
            if self.waived(p, w) {
                continue;
            }
            for n in self.topo.select(&p.nodes) {
                let got = &w.obs[n].got;
                let bad = match &p.kind {
                    Kind::AtMostOnce => got.iter().enumerate().find_map(|(i, m)| {
                        got[..i]
                            .iter()
                            .any(|x| x.message_id == m.message_id && x.payload == m.payload)
                            .then(|| format!("node {n} got message {} twice", m.message_id))
                    }),
                    Kind::InOrder => got.iter().enumerate().find_map(|(i, m)| {
                        let before = got[..i]
                            .iter()
                            .rev()
                            .find(|x| x.message_id == m.message_id)?;
                        (m.seq <= before.seq).then(|| {
                            format!("node {n} got SequenceNumber {} after {}", m.seq, before.seq)
                        })
                    }),
                    Kind::OnlyFrom(srcs) => got.iter().find_map(|m| {
                        (!srcs.contains(&(m.source.0 as i64)))
                            .then(|| format!("node {n} got a message from source {}", m.source))
                    }),
                    Kind::Delivered { .. } | Kind::Reaches(_) => None,
                };
                if let Some(msg) = bad {
                    return Some((p.name.clone(), msg));
                }
            }
        }
        None
    }

    /// Properties of a terminal state (nothing in flight, no timer armed).
    fn terminal(&mut self, w: &World) -> Option<(String, String)> {
        for (n, s) in w.stores.iter().enumerate() {
            if let Some(k) = s.keys().first() {
                return Some((
                    "stuck".into(),
                    format!(
                        "node {n}: instance {} stays in state {:?} with nothing in flight and no timer armed",
                        k.message,
                        s.state(*k).unwrap_or("?")
                    ),
                ));
            }
        }
        let props = self.decl.properties.clone();
        for p in &props {
            if self.waived(p, w) {
                continue;
            }
            for n in self.topo.select(&p.nodes) {
                let got = &w.obs[n].got;
                let bad = match &p.kind {
                    Kind::Delivered { all: false } => got
                        .iter()
                        .all(|m| m.payload.is_none())
                        .then(|| format!("node {n}'s application got no payload")),
                    Kind::Delivered { all: true } => {
                        let parts: HashSet<&[u8]> = got
                            .iter()
                            .filter_map(|m| m.payload.as_deref())
                            .flat_map(|p| p.split(|&b| b == b'|'))
                            .collect();
                        self.injected
                            .iter()
                            .find(|p| !parts.contains(p.as_slice()))
                            .map(|p| {
                                format!(
                                    "node {n}'s application never got payload {:?}",
                                    String::from_utf8_lossy(p)
                                )
                            })
                    }
                    Kind::Reaches(state) => {
                        let b = self.bit(state);
                        (w.obs[n].visited & b == 0)
                            .then(|| format!("node {n} never reached state {state:?}"))
                    }
                    _ => None,
                };
                if let Some(msg) = bad {
                    return Some((p.name.clone(), msg));
                }
            }
        }
        None
    }
}

/// Explores `svc` on `topo` as its declaration says, within `opts`.
pub fn explore(svc: &Arc<Service>, decl: &Declaration, topo: &Topology, opts: Options) -> Report {
    let mut ex = Explorer {
        svc,
        decl,
        topo,
        opts,
        names: HashMap::new(),
        injected: Vec::new(),
        intermediate: svc.data.metaops.process_intermediate_unicast_message,
    };
    let start = ex.initial();
    // parents[i] = (parent index, event that led here).
    let mut parents: Vec<(u32, Option<Ev>)> = vec![(0, None)];
    let mut seen: HashSet<u128> = HashSet::new();
    seen.insert(ex.fingerprint(&start));
    let mut queue: VecDeque<(u32, usize, World)> = VecDeque::new();
    let mut report = Report {
        states: 1,
        transitions: 0,
        depth: 0,
        terminal: 0,
        exhausted: true,
        violation: None,
    };
    let found = |ex: &Explorer<'_>, parents: &[(u32, Option<Ev>)], idx: u32, prop, msg| {
        let evs = path(parents, idx);
        Violation {
            property: prop,
            message: msg,
            trace: trace_lines(ex.topo, &evs),
            events: evs.len(),
        }
    };
    if let Some((p, m)) = ex.safety(&start) {
        report.violation = Some(found(&ex, &parents, 0, p, m));
        return report;
    }
    queue.push_back((0, 0, start));
    while let Some((idx, depth, w)) = queue.pop_front() {
        report.depth = report.depth.max(depth);
        let evs = ex.enabled(&w);
        if evs.is_empty() {
            report.terminal += 1;
            if let Some((p, m)) = ex.terminal(&w) {
                report.violation = Some(found(&ex, &parents, idx, p, m));
                return report;
            }
            continue;
        }
        if depth >= opts.max_depth {
            report.exhausted = false;
            continue;
        }
        for ev in evs {
            report.transitions += 1;
            let (next, err) = ex.apply(&w, &ev);
            let fp = ex.fingerprint(&next);
            if !seen.insert(fp) {
                continue;
            }
            if report.states >= opts.max_states {
                report.exhausted = false;
                continue;
            }
            report.states += 1;
            parents.push((idx, Some(ev)));
            let nidx = (parents.len() - 1) as u32;
            let bad = err
                .map(|e| ("runner-error".to_string(), e))
                .or_else(|| ex.safety(&next));
            if let Some((p, m)) = bad {
                report.depth = report.depth.max(depth + 1);
                report.violation = Some(found(&ex, &parents, nidx, p, m));
                return report;
            }
            queue.push_back((nidx, depth + 1, next));
        }
    }
    report
}

fn path(parents: &[(u32, Option<Ev>)], mut idx: u32) -> Vec<Ev> {
    let mut out = Vec::new();
    while let Some((p, Some(ev))) = parents.get(idx as usize) {
        out.push(ev.clone());
        idx = *p;
    }
    out.reverse();
    out
}

fn ms(ns: u64) -> Value {
    if ns.is_multiple_of(1_000_000) {
        json!(ns / 1_000_000)
    } else {
        json!(ns as f64 / 1e6)
    }
}

/// The events of a run as `spec run` input lines (multi-node: `"at"`), the clock following
/// the timers' deadlines.
fn trace_lines(topo: &Topology, evs: &[Ev]) -> Vec<String> {
    let mut out: Vec<String> = topo
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"t_ms": 0, "at": i, "node": node_to_json(n)}).to_string())
        .collect();
    let mut now = 0u64;
    let who = |f: &Flight| match f.from {
        Some(x) => format!("from node {x}"),
        None => "from the application".to_string(),
    };
    for ev in evs {
        match ev {
            Ev::Deliver(f) => out.push(
                json!({"t_ms": ms(now), "at": f.to, "message": message_to_json(&f.msg)})
                    .to_string(),
            ),
            Ev::Lose(f) => out.push(format!(
                "# lost: {} to node {} (type {})",
                who(f),
                f.to,
                f.msg.message_type
            )),
            Ev::Dup(f) => out.push(format!(
                "# duplicated: {} to node {} (type {})",
                who(f),
                f.to,
                f.msg.message_type
            )),
            Ev::Timer(n, k, id, at) => {
                now = now.max(*at);
                out.push(
                    json!({"t_ms": ms(now), "at": n, "timer": {
                        "ServiceID": k.service, "MessageID": k.message, "TimerIdentifier": id
                    }})
                    .to_string(),
                );
            }
        }
    }
    out
}

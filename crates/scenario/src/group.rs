//! The group-communication history checker (seed 001 §2.1's virtual-synchrony group, checked
//! the way Jepsen-style checkers judge a recorded history): reusable by every group stack.
//!
//! The applications record, per member incarnation (a node between two boots), the views it
//! installed (`View` notices) and the `multicast` workload messages it sent and delivered, in
//! the order it saw them ([`History`]). [`check`] verifies over that history:
//!
//! - **view-agreement**: every installation of a view id lists the same members;
//! - **view-monotonic**: each incarnation installs views with strictly increasing counters;
//! - **virtual-synchrony**: incarnations that install view V and then the same view W
//!   delivered the same set of messages in V;
//! - **self-delivery**: every message an incarnation sent is delivered to it, unless it was
//!   refused (`SendFailed` named it) or the incarnation ended (crash, leave, end of run while
//!   it was not live), or it ended the run in a non-primary view (`primary = "majority"`)
//!   and nobody delivered the message, sent since its last primary view (it waits in the
//!   sender's queue for a primary view);
//! - **no-creation**: every delivered message was sent;
//! - **no-duplication**: no incarnation delivers a message twice;
//! - **total-order** (when asked): incarnations that install V then W delivered V's messages
//!   in the same order;
//! - **causal-order** (when asked): no incarnation delivers a message after one it causally
//!   precedes — `m1` precedes `m2` when `m2`'s sender had delivered or sent `m1` (or a
//!   successor of it) before sending `m2`; per source the predecessors are a sequence-number
//!   prefix, so the relation is kept as one vector of sequence numbers per message;
//! - **state-agreement** (when a `state-transfer` layer reports digests): incarnations that
//!   install V and then the same W report the same state digest at the end of V — a joiner
//!   or merging member that took the state is indistinguishable from those that had it;
//! - **cross-channel-order** (when asked, [`check_channels`]): over the history of every
//!   channel together, incarnations that install view V and then W (the light views of one
//!   heavy view share its counter and coordinator) deliver the messages they both delivered
//!   in V, of whatever
//!   channel, in the same order — a session shared by several channels orders them all
//!   (seed 001 §1);
//! - **liveness**: when the run ends at least [`LIVENESS_BOUND`] after its last fault
//!   (crash, restart, partition heal, leave), every live member's last view is one view whose
//!   members are exactly the live nodes, installed within the bound after the last fault.
//!
//! With several channels that install views (light-weight groups, `stacks/lwg.toml`),
//! [`check_channels`] judges each channel's history on its own (per light group: view
//! agreement, virtual synchrony, no creation, no duplication, …) and names the channel in a
//! violation.
//!
//! Each property comes out [`Outcome::Held`], [`Outcome::Violated`] (with a minimal excerpt
//! of the history: the two members and the view involved) or [`Outcome::NotChecked`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use viastack_kernel::{Duration, Instant, NodeId};

/// The bound of the liveness property: after the last fault, one view with every live member
/// is installed within this time (failure detection ≈ 0.6 s with `heartbeat`'s defaults, plus
/// confirmation, beacons and a flush, with room for a few retries).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(5);

/// A `multicast` workload message: (workload, source node, sequence number).
pub type MsgId = (u16, NodeId, u64);

/// A view as the checker sees it: (counter, coordinator node, coordinator epoch).
pub type ViewKey = (u64, u32, u32);

/// One entry of an incarnation's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Installed a view with these members (node, epoch).
    View {
        /// When.
        at: Instant,
        /// Its id.
        id: ViewKey,
        /// Its members.
        members: Vec<(u32, u32)>,
        /// Whether it may carry messages (`vsync`'s `primary`; always, unless `"majority"`).
        primary: bool,
    },
    /// The application sent a message.
    Sent(MsgId),
    /// The application received a message.
    Delivered(MsgId),
    /// A `state-transfer` layer's digest (count, hash) at the end of the current view.
    State(u64, u64),
}

/// One incarnation of a node: what it saw from its boot on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Incarnation {
    /// When it booted.
    pub booted: Instant,
    /// What it saw, in order.
    pub entries: Vec<Entry>,
}

/// Every node's incarnations, in boot order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Per node.
    pub nodes: BTreeMap<NodeId, Vec<Incarnation>>,
}

impl History {
    /// Node `node` boots at `at`: a new incarnation.
    pub fn boot(&mut self, node: NodeId, at: Instant) {
        self.nodes.entry(node).or_default().push(Incarnation {
            booted: at,
            entries: Vec::new(),
        });
    }

    /// Appends to the current incarnation of `node`.
    pub fn push(&mut self, node: NodeId, entry: Entry) {
        if let Some(inc) = self.nodes.entry(node).or_default().last_mut() {
            inc.entries.push(entry);
        }
    }

    /// Whether anything group-related was recorded (a view).
    pub fn has_views(&self) -> bool {
        self.nodes
            .values()
            .flatten()
            .any(|i| i.entries.iter().any(|e| matches!(e, Entry::View { .. })))
    }
}

/// What the run says about each property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It held.
    Held,
    /// It did not; why, with a history excerpt.
    Violated(String),
    /// It could not be judged (why).
    NotChecked(String),
}

/// What [`check`] needs besides the history.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Check total order too.
    pub total_order: bool,
    /// Check causal order too.
    pub causal_order: bool,
    /// Nodes up (booted, not crashed, not left) at the end.
    pub live: BTreeSet<NodeId>,
    /// Time of the last fault (crash, restart, heal, leave), if any.
    pub last_fault: Instant,
    /// End of the run.
    pub end: Instant,
    /// Messages their sender's stack refused or reported: exempt from self-delivery.
    pub reported: BTreeSet<MsgId>,
}

/// An incarnation's name in excerpts: `n2.1` is node 2's second boot.
fn who(node: NodeId, k: usize) -> String {
    format!("{node}.{k}")
}

fn show_view(id: ViewKey) -> String {
    format!("{}@n{}#{:08x}", id.0, id.1, id.2)
}

fn show_msgs<'a>(msgs: impl IntoIterator<Item = &'a MsgId>, max: usize) -> String {
    let mut s = String::new();
    for (n, (w, src, seq)) in msgs.into_iter().enumerate() {
        if n == max {
            s.push_str(" …");
            break;
        }
        let _ = write!(s, " w{w}/{src}/{seq}");
    }
    if s.is_empty() {
        s.push_str(" (none)");
    }
    s
}

/// One incarnation's deliveries per view, and the view that followed.
struct Segment {
    view: ViewKey,
    next: Option<ViewKey>,
    delivered: Vec<MsgId>,
    /// The state digest reported at the segment's end.
    state: Option<(u64, u64)>,
}

fn segments(inc: &Incarnation) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for e in &inc.entries {
        match e {
            Entry::View { id, .. } => {
                if let Some(last) = out.last_mut() {
                    last.next = Some(*id);
                }
                out.push(Segment {
                    view: *id,
                    next: None,
                    delivered: Vec::new(),
                    state: None,
                });
            }
            Entry::Delivered(m) => {
                if let Some(last) = out.last_mut() {
                    last.delivered.push(*m);
                }
            }
            Entry::State(c, h) => {
                if let Some(last) = out.last_mut() {
                    last.state = Some((*c, *h));
                }
            }
            Entry::Sent(_) => {}
        }
    }
    out
}

/// Judges the history. Properties in a fixed order, by name.
pub fn check(history: &History, facts: &Facts) -> BTreeMap<&'static str, Outcome> {
    let mut out = BTreeMap::new();
    let incs: Vec<(NodeId, usize, &Incarnation)> = history
        .nodes
        .iter()
        .flat_map(|(n, v)| v.iter().enumerate().map(move |(k, i)| (*n, k, i)))
        .collect();

    // view-agreement
    // Each view's members, and who installed it first.
    type FirstInstall<'h> = (&'h Vec<(u32, u32)>, String);
    let mut views: BTreeMap<ViewKey, FirstInstall<'_>> = BTreeMap::new();
    let mut agreement = Outcome::Held;
    'a: for &(n, k, inc) in &incs {
        for e in &inc.entries {
            if let Entry::View { id, members, .. } = e {
                match views.get(id) {
                    Some((m, w)) if *m != members => {
                        agreement = Outcome::Violated(format!(
                            "view {} installed by {w} with members {m:?} and by {} with {members:?}",
                            show_view(*id),
                            who(n, k)
                        ));
                        break 'a;
                    }
                    Some(_) => {}
                    None => {
                        views.insert(*id, (members, who(n, k)));
                    }
                }
            }
        }
    }
    out.insert("view-agreement", agreement);

    // view-monotonic
    let mut mono = Outcome::Held;
    'm: for &(n, k, inc) in &incs {
        let mut last: Option<ViewKey> = None;
        for e in &inc.entries {
            if let Entry::View { id, .. } = e {
                if last.is_some_and(|l| l.0 >= id.0) {
                    mono = Outcome::Violated(format!(
                        "{} installed {} after {}",
                        who(n, k),
                        show_view(*id),
                        show_view(last.unwrap_or(*id))
                    ));
                    break 'm;
                }
                last = Some(*id);
            }
        }
    }
    out.insert("view-monotonic", mono);

    // virtual-synchrony and total-order, over (V, W) transitions.
    // Per (view, next view): each incarnation that went through it and its deliveries in it.
    type Went = Vec<(String, Vec<MsgId>)>;
    let mut by_transition: BTreeMap<(ViewKey, ViewKey), Went> = BTreeMap::new();
    // Per (view, next view): each incarnation's state digest at the change.
    type Digests = Vec<(String, (u64, u64))>;
    let mut states: BTreeMap<(ViewKey, ViewKey), Digests> = BTreeMap::new();
    for &(n, k, inc) in &incs {
        for s in segments(inc) {
            if let Some(next) = s.next {
                if let Some(st) = s.state {
                    states
                        .entry((s.view, next))
                        .or_default()
                        .push((who(n, k), st));
                }
                by_transition
                    .entry((s.view, next))
                    .or_default()
                    .push((who(n, k), s.delivered));
            }
        }
    }
    if !states.is_empty() {
        let mut agree = Outcome::Held;
        for ((v, w), list) in &states {
            if let Some((a, sa)) = list.first() {
                if let Some((b, sb)) = list.iter().find(|(_, s)| s != sa) {
                    agree = Outcome::Violated(format!(
                        "{a} and {b} both went from view {} to {} with different states: \
                         {a} ({} messages, hash {:016x}), {b} ({} messages, hash {:016x})",
                        show_view(*v),
                        show_view(*w),
                        sa.0,
                        sa.1,
                        sb.0,
                        sb.1
                    ));
                    break;
                }
            }
        }
        out.insert("state-agreement", agree);
    }
    let mut vs = Outcome::Held;
    let mut to = Outcome::Held;
    for ((v, w), members) in &by_transition {
        let Some((first, first_msgs)) = members.first() else {
            continue;
        };
        let first_set: BTreeSet<&MsgId> = first_msgs.iter().collect();
        for (other, msgs) in &members[1..] {
            let set: BTreeSet<&MsgId> = msgs.iter().collect();
            if set != first_set && vs == Outcome::Held {
                let only_a: Vec<&MsgId> = first_set.difference(&set).copied().collect();
                let only_b: Vec<&MsgId> = set.difference(&first_set).copied().collect();
                vs = Outcome::Violated(format!(
                    "{first} and {other} both went from view {} to {} but delivered different \
                     messages in it: only at {first}:{}; only at {other}:{}",
                    show_view(*v),
                    show_view(*w),
                    show_msgs(only_a, 8),
                    show_msgs(only_b, 8)
                ));
            }
            if facts.total_order && msgs != first_msgs && to == Outcome::Held && set == first_set {
                let at = msgs
                    .iter()
                    .zip(first_msgs)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let lo = at.saturating_sub(2);
                to = Outcome::Violated(format!(
                    "{first} and {other} both went from view {} to {} but delivered its \
                     messages in different orders, from position {at}: {first}:{} vs {other}:{}",
                    show_view(*v),
                    show_view(*w),
                    show_msgs(&first_msgs[lo..], 5),
                    show_msgs(&msgs[lo..], 5)
                ));
            }
        }
    }
    out.insert("virtual-synchrony", vs);
    if facts.total_order {
        out.insert("total-order", to);
    }

    // no-creation, no-duplication, self-delivery
    let mut sent: BTreeSet<MsgId> = BTreeSet::new();
    for &(_, _, inc) in &incs {
        for e in &inc.entries {
            if let Entry::Sent(m) = e {
                sent.insert(*m);
            }
        }
    }
    // Messages some incarnation delivered (a message nobody delivered never left its sender).
    let mut anywhere: BTreeSet<MsgId> = BTreeSet::new();
    for &(_, _, inc) in &incs {
        for e in &inc.entries {
            if let Entry::Delivered(m) = e {
                anywhere.insert(*m);
            }
        }
    }
    let mut creation = Outcome::Held;
    let mut dup = Outcome::Held;
    let mut selfd = Outcome::Held;
    for &(n, k, inc) in &incs {
        let mut seen: BTreeSet<MsgId> = BTreeSet::new();
        let mut mine: Vec<MsgId> = Vec::new();
        for e in &inc.entries {
            match e {
                Entry::Delivered(m) => {
                    if !sent.contains(m) && creation == Outcome::Held {
                        creation = Outcome::Violated(format!(
                            "{} delivered{} which nobody sent",
                            who(n, k),
                            show_msgs([m], 1)
                        ));
                    }
                    if !seen.insert(*m) && dup == Outcome::Held {
                        dup = Outcome::Violated(format!(
                            "{} delivered{} twice",
                            who(n, k),
                            show_msgs([m], 1)
                        ));
                    }
                }
                Entry::Sent(m) => mine.push(*m),
                Entry::View { .. } | Entry::State(..) => {}
            }
        }
        let last_incarnation = history.nodes.get(&n).is_some_and(|v| v.len() == k + 1);
        let alive = last_incarnation && facts.live.contains(&n);
        // Ending the run in a view that may not carry messages (`primary = "majority"`, a
        // minority), its messages sent since its last primary view that nobody delivered
        // still wait in its queue for a primary view: not a loss.
        let waiting: BTreeSet<MsgId> = {
            let last_primary = inc
                .entries
                .iter()
                .rposition(|e| matches!(e, Entry::View { primary: true, .. }));
            let last_view_minority = inc
                .entries
                .iter()
                .rev()
                .find_map(|e| match e {
                    Entry::View { primary, .. } => Some(!primary),
                    _ => None,
                })
                .unwrap_or(false);
            if last_view_minority {
                inc.entries[last_primary.map_or(0, |i| i + 1)..]
                    .iter()
                    .filter_map(|e| match e {
                        Entry::Sent(m) if !anywhere.contains(m) => Some(*m),
                        _ => None,
                    })
                    .collect()
            } else {
                BTreeSet::new()
            }
        };
        if alive && selfd == Outcome::Held {
            let missing: Vec<&MsgId> = mine
                .iter()
                .filter(|m| {
                    !seen.contains(m) && !facts.reported.contains(m) && !waiting.contains(m)
                })
                .collect();
            if !missing.is_empty() {
                selfd = Outcome::Violated(format!(
                    "{} never delivered {} of its own messages:{}",
                    who(n, k),
                    missing.len(),
                    show_msgs(missing, 8)
                ));
            }
        }
    }
    out.insert("no-creation", creation);
    out.insert("no-duplication", dup);
    out.insert("self-delivery", selfd);

    if facts.causal_order {
        out.insert("causal-order", causal(&incs));
    }

    // liveness
    let quiet = facts.end.saturating_duration_since(facts.last_fault);
    let live = if quiet < LIVENESS_BOUND {
        Outcome::NotChecked(format!(
            "the run ends {:.1} s after its last fault, less than the bound {:.1} s",
            quiet.as_secs_f64(),
            LIVENESS_BOUND.as_secs_f64()
        ))
    } else {
        let mut last_views: BTreeMap<NodeId, (Instant, ViewKey, Vec<u32>)> = BTreeMap::new();
        for n in &facts.live {
            let last = history.nodes.get(n).and_then(|v| v.last()).and_then(|inc| {
                inc.entries.iter().rev().find_map(|e| match e {
                    Entry::View {
                        at, id, members, ..
                    } => Some((*at, *id, members.iter().map(|m| m.0).collect::<Vec<u32>>())),
                    _ => None,
                })
            });
            if let Some(l) = last {
                last_views.insert(*n, l);
            }
        }
        let want: Vec<u32> = facts.live.iter().map(|n| n.0).collect();
        let deadline = facts.last_fault + LIVENESS_BOUND;
        let mut bad = None;
        let first = last_views.values().next().map(|v| v.1);
        for n in &facts.live {
            match last_views.get(n) {
                None => bad = Some(format!("{n} installed no view")),
                Some((at, id, members)) => {
                    if *members != want {
                        bad = Some(format!(
                            "{n}'s last view {} has members {members:?}, the live nodes are {want:?}",
                            show_view(*id)
                        ));
                    } else if Some(*id) != first {
                        bad = Some(format!(
                            "{n}'s last view is {}, another live node's is {}",
                            show_view(*id),
                            show_view(first.unwrap_or(*id))
                        ));
                    } else if *at > deadline {
                        bad = Some(format!(
                            "{n} installed the full view {} at {at}, later than the last fault \
                             ({}) + {:.1} s",
                            show_view(*id),
                            facts.last_fault,
                            LIVENESS_BOUND.as_secs_f64()
                        ));
                    }
                }
            }
            if bad.is_some() {
                break;
            }
        }
        bad.map_or(Outcome::Held, Outcome::Violated)
    };
    out.insert("liveness", live);
    out
}

/// [`check`] for each channel's history (those that installed views; a light-weight group's
/// views are its own), the outcomes joined by property: a violation names its channel, and a
/// property not checked on one channel is not checked. With `cross`, adds
/// `cross-channel-order` over `merged`, every channel's entries together in the order each
/// member saw them. With fewer than two channels with views, [`check`] over `merged`.
pub fn check_channels(
    channels: &BTreeMap<String, History>,
    merged: &History,
    facts: &Facts,
    cross: bool,
) -> BTreeMap<&'static str, Outcome> {
    let with_views: Vec<(&String, &History)> =
        channels.iter().filter(|(_, h)| h.has_views()).collect();
    let mut out = if with_views.len() < 2 {
        check(merged, facts)
    } else {
        let mut out: BTreeMap<&'static str, Outcome> = BTreeMap::new();
        for (name, h) in with_views {
            for (prop, o) in check(h, facts) {
                let o = match o {
                    Outcome::Violated(why) => Outcome::Violated(format!("channel `{name}`: {why}")),
                    Outcome::NotChecked(why) => {
                        Outcome::NotChecked(format!("channel `{name}`: {why}"))
                    }
                    Outcome::Held => Outcome::Held,
                };
                let slot = out.entry(prop).or_insert(Outcome::Held);
                match (&*slot, &o) {
                    (Outcome::Violated(_), _) => {}
                    (_, Outcome::Violated(_)) => *slot = o,
                    (Outcome::NotChecked(_), _) => {}
                    (_, Outcome::NotChecked(_)) => *slot = o,
                    _ => {}
                }
            }
        }
        out
    };
    if cross {
        out.insert("cross-channel-order", cross_channel_order(merged));
    }
    out
}

/// The cross-channel-order property over a history holding every channel's entries.
pub fn cross_channel_order(history: &History) -> Outcome {
    type Went = Vec<(String, Vec<MsgId>)>;
    let mut by_transition: BTreeMap<(ViewKey, ViewKey), Went> = BTreeMap::new();
    for (n, incs) in &history.nodes {
        for (k, inc) in incs.iter().enumerate() {
            // (view, deliveries of every channel while it was the latest view seen); the
            // channels' views of one heavy view share its counter and coordinator node (a
            // light view's third field also names its members), so those two key a segment.
            let mut cur: Option<(ViewKey, Vec<MsgId>)> = None;
            for e in &inc.entries {
                match e {
                    Entry::View { id, .. } => {
                        let id = &(id.0, id.1, 0);
                        if cur.as_ref().is_some_and(|(v, _)| v == id) {
                            continue;
                        }
                        if let Some((v, msgs)) = cur.take() {
                            by_transition
                                .entry((v, *id))
                                .or_default()
                                .push((who(*n, k), msgs));
                        }
                        cur = Some((*id, Vec::new()));
                    }
                    Entry::Delivered(m) => {
                        if let Some((_, msgs)) = cur.as_mut() {
                            msgs.push(*m);
                        }
                    }
                    Entry::Sent(_) | Entry::State(..) => {}
                }
            }
        }
    }
    for ((v, w), members) in &by_transition {
        let Some((first, first_msgs)) = members.first() else {
            continue;
        };
        let first_set: BTreeSet<&MsgId> = first_msgs.iter().collect();
        for (other, msgs) in &members[1..] {
            let set: BTreeSet<&MsgId> = msgs.iter().collect();
            let a: Vec<MsgId> = first_msgs
                .iter()
                .filter(|m| set.contains(m))
                .copied()
                .collect();
            let b: Vec<MsgId> = msgs
                .iter()
                .filter(|m| first_set.contains(m))
                .copied()
                .collect();
            if a != b {
                let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
                let lo = at.saturating_sub(2);
                return Outcome::Violated(format!(
                    "{first} and {other} both went from view {} to {} but delivered the \
                     messages of its channels (workloads) in different orders, from common \
                     position {at}: {first}:{} vs {other}:{}",
                    show_view(*v),
                    show_view(*w),
                    show_msgs(&a[lo..], 5),
                    show_msgs(&b[lo..], 5)
                ));
            }
        }
    }
    Outcome::Held
}

/// A source of messages: (workload, node).
type Source = (u16, NodeId);

/// Per source, the highest sequence number causally before a message (or known to a member).
type Clock = BTreeMap<Source, u64>;

fn merge(into: &mut Clock, from: &Clock) {
    for (s, &q) in from {
        let e = into.entry(*s).or_insert(q);
        *e = (*e).max(q);
    }
}

/// The causal-order property over every incarnation's history.
fn causal(incs: &[(NodeId, usize, &Incarnation)]) -> Outcome {
    // Each message's causal past, computed to a fixpoint: a sender's past at a send is what it
    // had sent and delivered before, with the pasts of what it delivered.
    let mut past: BTreeMap<MsgId, Clock> = BTreeMap::new();
    loop {
        let mut changed = false;
        for &(_, _, inc) in incs {
            let mut known = Clock::new();
            for e in &inc.entries {
                match e {
                    Entry::Sent(m) => {
                        if past.get(m) != Some(&known) {
                            past.insert(*m, known.clone());
                            changed = true;
                        }
                        let e = known.entry((m.0, m.1)).or_insert(m.2);
                        *e = (*e).max(m.2);
                    }
                    Entry::Delivered(m) => {
                        if let Some(p) = past.get(m) {
                            let p = p.clone();
                            merge(&mut known, &p);
                        }
                        let e = known.entry((m.0, m.1)).or_insert(m.2);
                        *e = (*e).max(m.2);
                    }
                    Entry::View { .. } | Entry::State(..) => {}
                }
            }
        }
        if !changed {
            break;
        }
    }
    for &(n, k, inc) in incs {
        // Per source, the highest number a delivered message required first.
        let mut floor = Clock::new();
        let mut got: BTreeSet<MsgId> = BTreeSet::new();
        let mut first_needing: BTreeMap<Source, MsgId> = BTreeMap::new();
        for e in &inc.entries {
            let Entry::Delivered(m) = e else {
                continue;
            };
            let src = (m.0, m.1);
            if let Some(&f) = floor.get(&src) {
                if m.2 <= f && !got.contains(m) {
                    let after = first_needing.get(&src).copied().unwrap_or(*m);
                    return Outcome::Violated(format!(
                        "{} delivered{} after{}, which its sender sent after delivering it",
                        who(n, k),
                        show_msgs([m], 1),
                        show_msgs([&after], 1)
                    ));
                }
            }
            got.insert(*m);
            if let Some(p) = past.get(m) {
                for (s, &q) in p {
                    let e = floor.entry(*s).or_insert(0);
                    if q > *e {
                        *e = q;
                        first_needing.insert(*s, *m);
                    }
                }
            }
        }
    }
    Outcome::Held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(at: u64, c: u64, members: &[u32]) -> Entry {
        Entry::View {
            at: Instant::from_millis(at),
            id: (c, members[0], 1),
            members: members.iter().map(|&m| (m, 1)).collect(),
            primary: true,
        }
    }

    fn msg(src: u32, seq: u64) -> MsgId {
        (0, NodeId(src), seq)
    }

    fn facts(total: bool) -> Facts {
        Facts {
            total_order: total,
            causal_order: total,
            live: [NodeId(0), NodeId(1)].into(),
            last_fault: Instant::ZERO,
            end: Instant::from_millis(10_000),
            reported: BTreeSet::new(),
        }
    }

    /// Two members, both send one message and deliver both, in the same order.
    fn good() -> History {
        let mut h = History::default();
        for n in 0..2 {
            h.boot(NodeId(n), Instant::ZERO);
            h.push(NodeId(n), view(1, 1, &[0, 1]));
            h.push(NodeId(n), Entry::Sent(msg(n, 0)));
        }
        for n in 0..2 {
            h.push(NodeId(n), Entry::Delivered(msg(0, 0)));
            h.push(NodeId(n), Entry::Delivered(msg(1, 0)));
            h.push(NodeId(n), view(20, 2, &[0, 1]));
        }
        h
    }

    /// Issue 18 (the majority-lwg seeds 19, 57, 59): a member that ends the run in a
    /// minority view (`primary = "majority"`) with a message nobody delivered — it waits in
    /// its queue for a primary view — has not lost it; in a primary last view it has, and a
    /// message someone else delivered must reach the sender too.
    #[test]
    fn a_message_waiting_in_a_minority_is_no_self_delivery_miss() {
        let minority = |at, c| {
            let mut v = view(at, c, &[0]);
            if let Entry::View { primary, .. } = &mut v {
                *primary = false;
            }
            v
        };
        let mut h = good();
        h.push(NodeId(0), Entry::Sent(msg(0, 1)));
        h.push(NodeId(0), minority(30, 3));
        let r = check(&h, &facts(false));
        assert_eq!(r["self-delivery"], Outcome::Held, "{r:?}");
        // The same message delivered by node 1: it left node 0, which must deliver it.
        let mut h2 = h.clone();
        h2.push(NodeId(1), Entry::Delivered(msg(0, 1)));
        assert!(matches!(
            check(&h2, &facts(false))["self-delivery"],
            Outcome::Violated(_)
        ));
        // Ending in a primary view instead: a self-delivery miss.
        let mut h3 = good();
        h3.push(NodeId(0), Entry::Sent(msg(0, 1)));
        h3.push(NodeId(0), view(30, 3, &[0]));
        assert!(matches!(
            check(&h3, &facts(false))["self-delivery"],
            Outcome::Violated(_)
        ));
    }

    #[test]
    fn a_good_history_passes_every_property() {
        let r = check(&good(), &facts(true));
        assert!(r.values().all(|o| *o == Outcome::Held), "{r:?}");
        assert_eq!(r.len(), 9);
    }

    #[test]
    fn each_planted_bug_is_caught_by_its_property() {
        // Node 1 misses node 0's message before the next view: virtual synchrony.
        let mut h = good();
        let n1 = &mut h.nodes.get_mut(&NodeId(1)).unwrap()[0].entries;
        n1.retain(|e| *e != Entry::Delivered(msg(0, 0)));
        let r = check(&h, &facts(false));
        assert!(
            matches!(r["virtual-synchrony"], Outcome::Violated(_)),
            "{r:?}"
        );

        // Node 1 delivers in another order: total order only.
        let mut h = good();
        let n1 = &mut h.nodes.get_mut(&NodeId(1)).unwrap()[0].entries;
        n1.swap(2, 3);
        let r = check(&h, &facts(true));
        assert!(matches!(r["total-order"], Outcome::Violated(_)), "{r:?}");
        assert_eq!(r["virtual-synchrony"], Outcome::Held);

        // Node 1 delivers node 0's reply before the message it answers: causal order. Node 0
        // delivered its own m(0,0), then node 1's m(1,0), then sent m(0,1) (it follows both).
        let mut h = good();
        h.push(NodeId(0), Entry::Sent(msg(0, 1)));
        h.push(NodeId(1), Entry::Delivered(msg(0, 1)));
        let mut f = facts(true);
        f.live.clear();
        assert_eq!(check(&h, &f)["causal-order"], Outcome::Held);
        let n1 = &mut h.nodes.get_mut(&NodeId(1)).unwrap()[0].entries;
        let last = n1.len() - 1;
        n1.swap(2, last); // m(0,1) now comes before m(0,0) at node 1
        assert!(
            matches!(check(&h, &f)["causal-order"], Outcome::Violated(_)),
            "{:?}",
            check(&h, &f)
        );

        // Two members leave a view for the same next one with different states.
        let mut h = good();
        for (n, hash) in [(0u32, 5u64), (1, 6)] {
            let e = &mut h.nodes.get_mut(&NodeId(n)).unwrap()[0].entries;
            let at = e.len() - 1; // before the second view
            e.insert(at, Entry::State(2, hash));
        }
        assert!(matches!(
            check(&h, &facts(false))["state-agreement"],
            Outcome::Violated(_)
        ));

        // Same view id, different members: agreement.
        let mut h = good();
        h.nodes.get_mut(&NodeId(1)).unwrap()[0].entries[0] = Entry::View {
            at: Instant::from_millis(1),
            id: (1, 0, 1),
            members: vec![(0, 1), (1, 1), (2, 1)],
            primary: true,
        };
        assert!(matches!(
            check(&h, &facts(false))["view-agreement"],
            Outcome::Violated(_)
        ));

        // A view counter going back: monotonicity.
        let mut h = good();
        h.push(NodeId(0), view(30, 1, &[0, 1]));
        assert!(matches!(
            check(&h, &facts(false))["view-monotonic"],
            Outcome::Violated(_)
        ));

        // A delivery of a message never sent, a duplicate, a lost own message.
        let mut h = good();
        h.push(NodeId(0), Entry::Delivered(msg(7, 3)));
        h.push(NodeId(1), Entry::Delivered(msg(1, 0)));
        h.push(NodeId(1), Entry::Sent(msg(1, 1)));
        let r = check(&h, &facts(false));
        assert!(matches!(r["no-creation"], Outcome::Violated(_)), "{r:?}");
        assert!(matches!(r["no-duplication"], Outcome::Violated(_)), "{r:?}");
        assert!(matches!(r["self-delivery"], Outcome::Violated(_)), "{r:?}");

        // A live node missing from the last view: liveness.
        let mut f = facts(false);
        f.live.insert(NodeId(2));
        h = good();
        h.boot(NodeId(2), Instant::ZERO);
        h.push(NodeId(2), view(1, 1, &[2]));
        assert!(matches!(check(&h, &f)["liveness"], Outcome::Violated(_)));
    }

    /// Two channels (workloads 0 and 1) whose light views share the heavy view's ids: the
    /// merged history orders both channels' messages; a swap across channels at one member
    /// is caught by cross-channel-order only, a loss in one channel names that channel.
    #[test]
    fn per_channel_and_cross_channel_checks_catch_planted_bugs() {
        let m = |w: u16, src: u32, seq: u64| (w, NodeId(src), seq);
        let mut channels: BTreeMap<String, History> = BTreeMap::new();
        let mut merged = History::default();
        // Each member: views on a and b, then a0 b0 a1 b1 in this order, then the next views.
        let order = [m(0, 0, 0), m(1, 1, 0), m(0, 1, 0), m(1, 0, 0)];
        for n in 0..2u32 {
            merged.boot(NodeId(n), Instant::ZERO);
            for ch in ["a", "b"] {
                let h = channels.entry(ch.to_string()).or_default();
                h.boot(NodeId(n), Instant::ZERO);
                h.push(NodeId(n), view(1, 1, &[0, 1]));
                merged.push(NodeId(n), view(1, 1, &[0, 1]));
            }
            for msg in order {
                if msg.1 == NodeId(n) {
                    let ch = if msg.0 == 0 { "a" } else { "b" };
                    channels
                        .get_mut(ch)
                        .unwrap()
                        .push(NodeId(n), Entry::Sent(msg));
                    merged.push(NodeId(n), Entry::Sent(msg));
                }
            }
        }
        let deliver = |channels: &mut BTreeMap<String, History>,
                       merged: &mut History,
                       n: u32,
                       seq: &[MsgId]| {
            for msg in seq {
                let ch = if msg.0 == 0 { "a" } else { "b" };
                channels
                    .get_mut(ch)
                    .unwrap()
                    .push(NodeId(n), Entry::Delivered(*msg));
                merged.push(NodeId(n), Entry::Delivered(*msg));
            }
            for ch in ["a", "b"] {
                channels
                    .get_mut(ch)
                    .unwrap()
                    .push(NodeId(n), view(20, 2, &[0, 1]));
                merged.push(NodeId(n), view(20, 2, &[0, 1]));
            }
        };
        let f = facts(true);
        // Good: same order everywhere.
        let (mut c, mut h) = (channels.clone(), merged.clone());
        deliver(&mut c, &mut h, 0, &order);
        deliver(&mut c, &mut h, 1, &order);
        let r = check_channels(&c, &h, &f, true);
        assert!(r.values().all(|o| *o == Outcome::Held), "{r:?}");
        assert!(r.contains_key("cross-channel-order"));
        // Node 1 swaps a0 and b0: each channel's own order is unchanged, the merged one not.
        let (mut c, mut h) = (channels.clone(), merged.clone());
        deliver(&mut c, &mut h, 0, &order);
        deliver(&mut c, &mut h, 1, &[order[1], order[0], order[2], order[3]]);
        let r = check_channels(&c, &h, &f, true);
        assert_eq!(r["total-order"], Outcome::Held, "{r:?}");
        assert!(
            matches!(r["cross-channel-order"], Outcome::Violated(_)),
            "{r:?}"
        );
        // Node 1 loses b0 (channel b only): virtual synchrony of light group b.
        let (mut c, mut h) = (channels.clone(), merged.clone());
        deliver(&mut c, &mut h, 0, &order);
        deliver(&mut c, &mut h, 1, &[order[0], order[2], order[3]]);
        let r = check_channels(&c, &h, &facts(false), false);
        match &r["virtual-synchrony"] {
            Outcome::Violated(why) => assert!(why.contains("channel `b`"), "{why}"),
            o => panic!("{o:?}"),
        }
        assert!(!r.contains_key("cross-channel-order"));
        // A light view of channel a with other members than the same view of channel b is
        // fine (light groups have their own members), but two members disagreeing on channel
        // a's view is a view-agreement violation named by channel.
        let (mut c, mut h) = (channels.clone(), merged.clone());
        deliver(&mut c, &mut h, 0, &order);
        deliver(&mut c, &mut h, 1, &order);
        c.get_mut("a").unwrap().nodes.get_mut(&NodeId(1)).unwrap()[0].entries[0] = Entry::View {
            at: Instant::from_millis(1),
            id: (1, 0, 1),
            members: vec![(1, 1)],
            primary: true,
        };
        let r = check_channels(&c, &h, &facts(false), false);
        match &r["view-agreement"] {
            Outcome::Violated(why) => assert!(why.contains("channel `a`"), "{why}"),
            o => panic!("{o:?}"),
        }
    }
}

//! The flat machine: a delivery service whose chart is a plain finite-state machine, compiled
//! one step further than the general chart table (seed 000 §6.3: the XML processing of a
//! generic engine was the prior system's bottleneck; issue 5 "compile to a table").
//!
//! Most delivery services (h2hack, e2eack, duplicate elimination, handshake, selection,
//! synchronization) are written as the seed writes them: states, each transition named by a
//! basic or composite event, executable content made only of the service's actions. For such
//! a chart the configuration is one atomic state with its ancestors, every (atomic state,
//! event) pair selects at most one transition (the state's first matching one, else its
//! nearest ancestor's) and its whole effect is known at load time: the `<onexit>` blocks of
//! the states it leaves (deepest first, up to the transition's domain), the transition's body,
//! the `<onentry>` blocks of the states it enters (top-down, then through the initial
//! transitions of compound states entered by default, their content after the parent's
//! `<onentry>`) and, on reaching a top-level `<final>`, its `<onexit>` as the interpreter
//! exits. [`Flat`] stores exactly that — a table indexed by (service event, atomic state) of
//! steps, each a target and its action blocks, the blocks also resolved into [`FastOp`]s — so
//! an instance is one state number and an event is one table read (issue 15 §2). Per basic
//! event, an [`EventPlan`] resolves what an input of that event alone does besides its step
//! (history slot, direct keyed-index record, the composites some state takes), and a send's
//! constant one-byte writes are split from its other writes ([`SendOp`]). Per MessageType and
//! per TimerIdentifier, a [`Route`] joins the matcher's answer, the event's plan and where its
//! [`Cell`]s start, so the store reads one entry per input (issue 15 §2, eighth round).
//!
//! [`Flat::compile`] accepts a chart only when the flat run is indistinguishable from the
//! general engine's ([`chart::Instance`](crate::chart::Instance)); tests drive every shipped
//! service and corner-case charts both ways with random traces and compare the actions and
//! states. A chart qualifies when:
//! - its states are atomic, compound or top-level `<final>`s (no `<parallel>`, `<history>`,
//!   or `<final>` inside a compound state, whose `done.state.*` only the engine raises), none
//!   with its own datamodel or donedata, and every compound state's initial transition has one
//!   target; the initial configuration is one chain of states;
//! - every transition has at most one target; an eventless one has a target and no `cond`
//!   (the load appends it to every step that reaches its state, as the engine takes it in the
//!   same macrostep; a cycle of them is refused); every
//!   descriptor names a basic or composite event (or matches them by prefix or `*`) — none can
//!   match `error.*` or `done.*`, which only the engine raises;
//! - executable content is only the service's actions and `<assign>` (no `<raise>`, `<send>`,
//!   `<log>`, `<if>`, `<foreach>`, `<script>`), and every expression (`cond`, `<assign>`,
//!   top-level `<data>`) is one the [`datamodel`] evaluates (issue 15 §2, last item: incast,
//!   leakybucket and ordering).
//!
//! A transition with a `cond` is one candidate of a chain: the (event, state) entry points at
//! the first candidate in the engine's selection order, and each candidate with a `cond` links
//! to the next ([`Step::alt`]); the first whose `cond` holds is taken (a `cond` that fails to
//! evaluate is false, as the engine's selection takes it).
//!
//! As in the engine, an action or `<assign>` that fails ends its block (the rest of the block
//! is skipped; the `error.execution` the engine would raise selects no transition in such a
//! chart).

use viastack_kernel::time::Duration;

use crate::chart::compile::descriptor_matches;
use crate::chart::compile::{Chart, Kind, Op, Spec, StateInfo};
use crate::chart::expr::{Expr, Location};

pub(crate) mod datamodel;
pub(crate) use datamodel::{Ev, Model, Scratch};

use super::action::{Action, Field, Prim, Value};
use super::data::ServiceData;
use super::message::Attr;

/// One transition's effect: where it goes and the action blocks it runs, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Step {
    /// The transition's `cond` (rewritten for the [`Model`]); `None`: always taken.
    pub cond: Option<Expr>,
    /// When `cond` does not hold: the next candidate for the same (event, state) (step
    /// index + 1; 0: none, no transition is taken).
    pub alt: u16,
    /// Target state (`None`: a targetless transition, the state does not change).
    pub target: Option<u16>,
    /// Whether the target is a top-level `<final>`: the instance ends after the step.
    pub ends: bool,
    /// Blocks of executable content; a failing element ends its block.
    pub blocks: Box<[Box<[Exec]>]>,
    /// The same blocks resolved into [`FastOp`]s (what the store runs), in one run: each op
    /// with the index of the first op after its block (where a failing op continues).
    pub ops: Box<[(FastOp, u16)]>,
    /// Whether an op uses the drafts (they are cleared after the step only then).
    pub drafts: bool,
}

/// One element of a flat step's block: a service action or an `<assign>` (its location and
/// value rewritten for the [`Model`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Exec {
    /// A service action.
    Act(Action),
    /// `<assign location expr>`.
    Assign(Location, Spec),
}

/// A flat step's action resolved at load time (issue 15 §2): the shapes nearly every
/// delivery service is made of — a timer with constant fields, a message built from a fresh
/// one / `last(E)` / `msg` plus attribute writes, then performed — run without the
/// interpreter's value dispatch, without `Result<_, String>` and without cloning a payload the
/// primitive drops. Anything else stays an [`Action`] run by [`action::run`](super::action::run).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum FastOp {
    /// `setTimer` with constant id and duration.
    SetTimer {
        /// TimerIdentifier.
        id: u32,
        /// Delay.
        after: Duration,
    },
    /// `cancelTimer` with a constant id.
    CancelTimer {
        /// TimerIdentifier.
        id: u32,
    },
    /// Build a message and perform `prim` (a send, a forward or `toApplication`).
    Send(SendOp),
    /// A send with `foreach`: the nodes are selected first, then [`FastOp::Send`] runs once
    /// per node with [`Src::Each`] its address; the first failure ends it.
    Each {
        /// The nodes addressed.
        selector: super::logic::Selector,
        /// The send.
        send: SendOp,
    },
    /// `terminate`.
    Terminate,
    /// `<assign>`, evaluated by the [`Model`].
    Assign(Box<(Location, Spec)>),
    /// Anything else, interpreted.
    Action(Box<Action>),
}

/// A send resolved at load time: its base message, the constant one-byte attributes
/// (MessageType, DeliveryMode, HopLimit — what nearly every send writes) as a mask and their
/// values, written without dispatch, and the other writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SendOp {
    /// The primitive.
    pub prim: Prim,
    /// The message it starts from.
    pub base: Base,
    /// Bit 0: MessageType, bit 1: DeliveryMode, bit 2: HopLimit is written with `bytes[bit]`.
    pub mask: u8,
    /// The constant one-byte values.
    pub bytes: [u8; 3],
    /// The other attribute writes, in order (a written attribute appears once in all, so
    /// their order against the constants does not matter).
    pub sets: Box<[(Attr, Src)]>,
}

impl SendOp {
    /// Splits the writes `sets` (in order) into constants and the rest; when an attribute is
    /// written twice they stay as written.
    fn new(prim: Prim, base: Base, sets: Vec<(Attr, Src)>) -> SendOp {
        let twice = sets
            .iter()
            .enumerate()
            .any(|(i, (a, _))| sets[..i].iter().any(|(b, _)| b == a));
        let (mut mask, mut bytes, mut rest) = (0u8, [0u8; 3], Vec::new());
        for (a, src) in sets {
            let bit = match a {
                Attr::MessageType => 0,
                Attr::DeliveryMode => 1,
                Attr::HopLimit => 2,
                _ => 3,
            };
            match src {
                Src::Int(x) if bit < 3 && !twice => {
                    mask |= 1 << bit;
                    bytes[bit] = x as u8;
                }
                _ => rest.push((a, src)),
            }
        }
        SendOp {
            prim,
            base,
            mask,
            bytes,
            sets: rest.into(),
        }
    }
}

/// Where a [`FastOp::Send`] message starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    /// A new message (HopLimit 255).
    Fresh,
    /// `last(E)` by history slot.
    Last(u8),
    /// The message that triggered the step.
    Current,
}

/// An integer a [`FastOp::Send`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Src {
    /// A constant.
    Int(i64),
    /// `last(E).Attr`.
    LastAttr(u8, Attr),
    /// `msg.Attr`.
    CurrentAttr(Attr),
    /// `node.address`.
    NodeAddress,
    /// `node.parent`.
    NodeParent,
    /// The address a `foreach` is at.
    Each,
}

impl FastOp {
    /// Resolves one action.
    fn resolve(a: &Action) -> FastOp {
        let keep = || FastOp::Action(Box::new(a.clone()));
        match a {
            Action::Timer { prim, sets } => {
                let (mut id, mut ms) = (0u32, 0u64);
                for (f, v) in sets.iter() {
                    let Value::Int(x) = v else { return keep() };
                    match f {
                        Field::TimerId => id = *x as u32,
                        _ => ms = (*x).max(0) as u64,
                    }
                }
                match prim {
                    Prim::SetTimer => FastOp::SetTimer {
                        id,
                        after: Duration::from_millis(ms),
                    },
                    _ => FastOp::CancelTimer { id },
                }
            }
            Action::Run {
                prim: Prim::Terminate,
                draft: None,
                base: None,
                sets,
            } if sets.is_empty() => FastOp::Terminate,
            Action::Run {
                prim,
                draft: None,
                base,
                sets,
            } if matches!(
                prim,
                Prim::ToApplication
                    | Prim::SendData
                    | Prim::SendControl
                    | Prim::Send
                    | Prim::Forward
            ) =>
            {
                let mut base = match base {
                    None => Base::Fresh,
                    Some(Value::Last(s)) => Base::Last(*s),
                    Some(Value::Current) => Base::Current,
                    Some(_) => return keep(),
                };
                // A fused create/set/execute run starts by copying a whole message: that is
                // its base.
                let mut sets = &sets[..];
                if let (Base::Fresh, [(Field::Message, v), rest @ ..]) = (base, sets) {
                    base = match v {
                        Value::Last(s) => Base::Last(*s),
                        Value::Current => Base::Current,
                        _ => return keep(),
                    };
                    sets = rest;
                }
                let mut out = Vec::with_capacity(sets.len());
                for (f, v) in sets.iter() {
                    let Field::Attr(at) = f else { return keep() };
                    let src = match v {
                        Value::Int(x) => Src::Int(*x),
                        Value::LastAttr(s, x) => Src::LastAttr(*s, *x),
                        Value::CurrentAttr(x) => Src::CurrentAttr(*x),
                        Value::NodeAddress => Src::NodeAddress,
                        Value::NodeParent => Src::NodeParent,
                        Value::Each => Src::Each,
                        _ => return keep(),
                    };
                    out.push((*at, src));
                }
                FastOp::Send(SendOp::new(*prim, base, out))
            }
            Action::Each { selector, action } => match FastOp::resolve(action) {
                FastOp::Send(send) => FastOp::Each {
                    selector: selector.clone(),
                    send,
                },
                _ => keep(),
            },
            _ => keep(),
        }
    }

    /// Whether it may touch the drafts.
    fn uses_drafts(&self) -> bool {
        matches!(self, FastOp::Action(a) if !a.drafts().is_empty())
    }
}

/// A chart compiled to (event × state) → step.
#[derive(Clone, Debug)]
pub(crate) struct Flat {
    states: usize,
    /// Per service event (basic events, then composite ones) × state: step index + 1, 0 = none.
    table: Box<[u16]>,
    steps: Box<[Step]>,
    /// Entering the initial state.
    start: Step,
    /// Per basic event, what recording it takes and which composite events may follow
    /// (filled by [`Flat::plan`] once the history layout and the indexes are known).
    plans: Box<[EventPlan]>,
    /// Per basic event × state, on a chart without a datamodel and without `cond`: the whole
    /// input of that event alone in that state ([`Cell`]); empty otherwise.
    cells: Box<[Cell]>,
    /// The datamodel, when the chart has variables or reads `_event`.
    model: Option<Model>,
    /// Per MessageType: the input's [`Route`] (eighth round).
    msg_routes: Box<[Route; 256]>,
    /// Per TimerIdentifier below [`TIMER_ROUTES`]: the input's [`Route`].
    timer_routes: Box<[Route; TIMER_ROUTES]>,
}

/// TimerIdentifiers below this have a [`Route`]; the others take the general path.
pub(crate) const TIMER_ROUTES: usize = 64;

/// How an input of one MessageType or one TimerIdentifier is handled, resolved at load time
/// (issue 15 §2, eighth round): everything the usual input needs before its instance is
/// looked up — the one basic event it triggers, that event's history slot and keyed index,
/// and where its [`Cell`]s start — in one table read, so the store's per-input function
/// reads no matcher, plan or cell table of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Route {
    /// [`ROUTE_NONE`], [`ROUTE_CELL`] or [`ROUTE_SLOW`].
    pub kind: u8,
    /// History slot of the event's message ([`NO_SLOT`]: not kept).
    pub slot: u8,
    /// Whether an index records the event through the general loop ([`Route::keyed`] is
    /// none and a composite index listens).
    pub logic: bool,
    /// The one keyed index the event updates ([`EventPlan::keyed`]).
    pub keyed: Option<(u16, Attr)>,
    /// The basic event.
    pub event: u16,
    /// Index of the event's first [`Cell`] (event × states).
    pub cells: u32,
}

/// [`Route::kind`]: the input triggers no basic event (nothing happens).
pub(crate) const ROUTE_NONE: u8 = 0;
/// [`Route::kind`]: the input triggers one basic event and its course is in [`Cell`]s.
pub(crate) const ROUTE_CELL: u8 = 1;
/// [`Route::kind`]: anything else (several events, filters beyond the type, a datamodel,
/// `cond`): the general path.
pub(crate) const ROUTE_SLOW: u8 = 2;

impl Route {
    /// The general path.
    const SLOW: Route = Route {
        kind: ROUTE_SLOW,
        slot: NO_SLOT,
        logic: false,
        keyed: None,
        event: 0,
        cells: 0,
    };

    /// The route of an input whose matcher gives `hits` (`None`: it depends on more than the
    /// type or id).
    fn of(hits: Option<&[u16]>, plans: &[EventPlan], cells: bool, states: usize) -> Route {
        match hits {
            Some([]) => Route {
                kind: ROUTE_NONE,
                ..Route::SLOW
            },
            Some(&[e]) if cells => match plans.get(usize::from(e)) {
                Some(p) => Route {
                    kind: ROUTE_CELL,
                    slot: p.slot,
                    logic: p.logic && p.keyed.is_none(),
                    keyed: p.keyed,
                    event: e,
                    cells: (usize::from(e) * states) as u32,
                },
                None => Route::SLOW,
            },
            _ => Route::SLOW,
        }
    }
}

/// What an input that triggers one basic event does in one state, resolved at load time on
/// a chart without a datamodel (issue 15 §2, sixth round): its step, and the composite events
/// to evaluate after it with the step each takes in the state the step leads to (known at
/// load time: without `cond`, the (event, state) pair fixes the step and its target). An
/// input whose cell has neither is over once recorded.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cell {
    /// The basic event's step (index + 1; 0: none).
    pub step: u16,
    /// Composite events (indexes) with a step in the state after `step`, in declaration
    /// order, each with that step (index + 1).
    pub comps: Box<[(u16, u16)]>,
}

impl Cell {
    /// Whether the input does nothing beyond its history record.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.step == 0 && self.comps.is_empty()
    }
}

/// What an input that triggers one basic event does besides its step, resolved at load time
/// (issue 15 §2): the history slot its message is kept in, whether a composite index listens
/// to it, and the composite events it is a constituent of that some state takes (a composite
/// no state takes is never evaluated).
#[derive(Clone, Debug, Default)]
pub(crate) struct EventPlan {
    /// History slot of the event's last message ([`NO_SLOT`]: not kept).
    pub slot: u8,
    /// Whether a composite index records it.
    pub logic: bool,
    /// The one keyed index it updates, keyed by this attribute of its message, when that is
    /// all it updates ([`Program::direct_keyed`](super::logic::Program::direct_keyed)).
    pub keyed: Option<(u16, Attr)>,
    /// Composite events (indexes) to evaluate after it, in declaration order.
    pub comps: Box<[u16]>,
}

/// [`EventPlan::slot`] of an event whose message is not kept.
pub(crate) const NO_SLOT: u8 = u8::MAX;

impl Flat {
    /// Compiles `chart` (the chart of the service with `data`) when it qualifies (module doc).
    ///
    /// # Errors
    /// Why the chart does not qualify (the first construct found), for `spec check`.
    pub(crate) fn compile(
        chart: &Chart<Action>,
        data: &ServiceData,
        src: &str,
    ) -> Result<Flat, String> {
        let states = chart.states();
        let n = states.len();
        if n < 2 || n > usize::from(u16::MAX) {
            return Err(format!(
                "{} states (1 to 65,534 are flattened)",
                n.saturating_sub(1)
            ));
        }
        if !chart.scripts.is_empty() {
            return Err("the document has a top-level <script>".into());
        }
        // The top-level datamodel, and every expression rewritten for it (as the store
        // decides for the engine, events carry data when the document mentions it).
        let model = std::cell::RefCell::new(Model::new(chart, src.contains("_event.data"))?);
        // A block's content: the service's actions and `<assign>`s, rewritten.
        let content = |ops: &[Op]| -> Result<Vec<Exec>, String> {
            let mut out = Vec::with_capacity(ops.len());
            for op in ops {
                match op {
                    Op::Custom(i) => {
                        if let Some(a) = chart.actions().get(*i as usize) {
                            out.push(Exec::Act(a.clone()));
                        }
                    }
                    Op::Assign(loc, spec) => {
                        let mut m = model.borrow_mut();
                        out.push(Exec::Assign(m.location(loc)?, m.spec(spec)?));
                    }
                    other => {
                        return Err(format!(
                            "executable content other than the service's actions and <assign> ({})",
                            op_name(other)
                        ))
                    }
                }
            }
            Ok(out)
        };
        for s in &states[1..] {
            let name = &s.id;
            match s.kind {
                Kind::Atomic | Kind::Compound => {}
                // A <final> inside a compound state raises done.state.*, which only the
                // engine delivers.
                Kind::Final if s.parent == 0 => {}
                Kind::Final => {
                    return Err(format!(
                        "state `{name}` is a <final> inside a compound state (done.state events)"
                    ))
                }
                Kind::Parallel | Kind::History { .. } => {
                    return Err(format!("state `{name}` is parallel or a history state"))
                }
            }
            if !s.data.is_empty() || s.donedata.is_some() {
                return Err(format!(
                    "state `{name}` has its own datamodel or donedata (the flat machine keeps the top-level <data> only)"
                ));
            }
            if s.kind == Kind::Compound {
                let init = s
                    .initial
                    .and_then(|i| chart.transitions().get(i as usize))
                    .filter(|t| t.targets.len() == 1 && !t.history_target);
                match init {
                    Some(t) => {
                        content(&t.body).map_err(|e| {
                            format!("state `{name}`: its initial transition has {e}")
                        })?;
                    }
                    None => {
                        return Err(format!(
                            "state `{name}`: its initial transition is not one target"
                        ))
                    }
                }
            }
            if !s.invokes.is_empty() {
                return Err(format!("state `{name}` invokes a session"));
            }
        }
        for s in states {
            for b in s.onentry.iter().chain(&s.onexit) {
                content(b).map_err(|e| format!("state `{}`: <onentry>/<onexit> has {e}", s.id))?;
            }
        }
        let names: Vec<&str> = data
            .basic
            .iter()
            .map(|b| b.name.as_str())
            .chain(data.composite.iter().map(|c| c.name.as_str()))
            .collect();
        let own = |s: &StateInfo| {
            &chart.transitions()[s.transitions.start as usize..s.transitions.end as usize]
        };
        for t in states.iter().flat_map(own) {
            let from = chart.state_name(crate::chart::StateId(t.source));
            // An eventless transition is taken as soon as its state is entered, within the
            // same macrostep: one the load can resolve (no `cond`, a target) is appended to
            // the steps that reach its state (see `settle` below).
            if t.events.is_empty() {
                if t.cond.is_some() {
                    return Err(format!(
                        "state `{from}` has an eventless transition with a `cond`"
                    ));
                }
                if t.targets.is_empty() {
                    return Err(format!(
                        "state `{from}` has an eventless transition without a target (the engine takes it forever)"
                    ));
                }
            }
            if let Some(c) = &t.cond {
                model
                    .borrow_mut()
                    .cond_expr(c)
                    .map_err(|e| format!("state `{from}`: a transition's `cond`: {e}"))?;
            }
            if t.targets.len() > 1 {
                return Err(format!(
                    "state `{from}` has a transition with several targets"
                ));
            }
            content(&t.body).map_err(|e| format!("state `{from}`: a transition has {e}"))?;
            let internal = ["error.execution", "error.communication", "done.state.x"];
            if let Some(d) = t.events.iter().find(|d| {
                internal.iter().any(|e| descriptor_matches(d, e))
                    || !names.iter().any(|e| descriptor_matches(d, e))
            }) {
                return Err(format!(
                    "state `{from}`: event descriptor `{d}` can match an event the engine raises, or no service event"
                ));
            }
        }
        // The initial configuration: a chain of states from the root to one atomic state.
        for w in chart.initial_entry.windows(2) {
            if states[w[1].0 as usize].parent != w[0].0 {
                return Err("the initial configuration is not one chain of states".into());
            }
        }
        match chart.initial_entry.last() {
            Some(&(s, _)) if s != 0 && states[s as usize].kind != Kind::Compound => {}
            _ => return Err("the initial configuration is not one chain of states".into()),
        }
        let all_blocks = || {
            let state_blocks = states
                .iter()
                .flat_map(|s| s.onentry.iter().chain(&s.onexit).map(Vec::as_slice));
            let bodies = states.iter().flat_map(own).map(|t| t.body.as_slice());
            let initials = states
                .iter()
                .filter_map(|s| chart.transitions().get(s.initial? as usize))
                .map(|t| t.body.as_slice());
            state_blocks
                .chain(bodies)
                .chain(initials)
                .map(|ops| content(ops).unwrap_or_default())
        };
        let fusable = fusable_drafts(all_blocks());
        // Whether `a` is `d` or one of its ancestors.
        let contains = |a: u32, d: u32| a <= d && d < states[a as usize].desc_end.max(a + 1);
        // One step: exit `exits` (deepest first), run `body`, then enter from below `domain`
        // down to `target` and on through the initial transitions of the compound states
        // entered by default, as the engine's entry order does.
        let step_to = |leaf: Option<u32>, domain: u32, target: Option<u32>, body: &[Op]| -> Step {
            let mut blocks: Vec<Box<[Exec]>> = Vec::new();
            let mut push = |ops: &[Op]| {
                let actions = fuse(&content(ops).unwrap_or_default(), &fusable);
                if !actions.is_empty() {
                    blocks.push(actions.into());
                }
            };
            if let (Some(mut x), Some(_)) = (leaf, target) {
                while x != 0 && !contains(x, domain) {
                    states[x as usize].onexit.iter().for_each(|b| push(b));
                    x = states[x as usize].parent;
                }
            }
            push(body);
            let mut ends = false;
            let mut at = target;
            if let Some(t) = target {
                // The ancestors of the target below the domain, top-down, then the target.
                let mut path = vec![t];
                let mut x = states[t as usize].parent;
                while x != domain && x != 0 {
                    path.push(x);
                    x = states[x as usize].parent;
                }
                let mut cur = t;
                for &x in path.iter().rev() {
                    states[x as usize].onentry.iter().for_each(|b| push(b));
                }
                // Default entry of compound states.
                while states[cur as usize].kind == Kind::Compound {
                    let Some(init) = states[cur as usize]
                        .initial
                        .and_then(|i| chart.transitions().get(i as usize))
                    else {
                        break;
                    };
                    let Some(&next) = init.targets.first() else {
                        break;
                    };
                    push(&init.body);
                    let mut path = vec![next];
                    let mut x = states[next as usize].parent;
                    while x != cur && x != 0 {
                        path.push(x);
                        x = states[x as usize].parent;
                    }
                    for &x in path.iter().rev() {
                        states[x as usize].onentry.iter().for_each(|b| push(b));
                    }
                    cur = next;
                }
                at = Some(cur);
                let st = &states[cur as usize];
                if st.kind == Kind::Final {
                    ends = true;
                    st.onexit.iter().for_each(|b| push(b));
                }
            }
            let ops = resolve_blocks(&blocks);
            let drafts = ops.iter().any(|(op, _)| op.uses_drafts());
            Step {
                cond: None,
                alt: 0,
                target: at.map(|t| t as u16),
                ends,
                blocks: blocks.into(),
                ops,
                drafts,
            }
        };
        // The eventless transition the engine takes in atomic state `s` (its own first, then
        // its ancestors', in document order): (its source, the transition).
        let eventless = |s: u32| {
            let mut x = s;
            while x != 0 {
                if let Some(t) = own(&states[x as usize])
                    .iter()
                    .find(|t| t.events.is_empty())
                {
                    return Some((x, t));
                }
                x = states[x as usize].parent;
            }
            None
        };
        // A step that reaches a state with an eventless transition goes on through it in the
        // same macrostep, as the engine does: that transition's exits, body and entries are
        // appended, until a state without one (or a top-level <final>). A cycle is refused.
        let settle = |mut step: Step| -> Result<Step, String> {
            let mut hops = 0;
            while let (Some(at), false) = (step.target, step.ends) {
                let Some((from, t)) = eventless(u32::from(at)) else {
                    break;
                };
                hops += 1;
                if hops > n {
                    return Err(format!(
                        "state `{}`: its eventless transitions form a cycle",
                        states[from as usize].id
                    ));
                }
                let Some(domain) = t.domain else {
                    return Err(format!(
                        "state `{}`: an eventless transition whose domain is known only at run time",
                        states[from as usize].id
                    ));
                };
                let next = step_to(
                    Some(u32::from(at)),
                    domain,
                    t.targets.first().copied(),
                    &t.body,
                );
                let mut blocks = step.blocks.into_vec();
                blocks.extend(next.blocks.into_vec());
                step.ops = resolve_blocks(&blocks);
                step.drafts = step.ops.iter().any(|(op, _)| op.uses_drafts());
                step.blocks = blocks.into();
                step.target = next.target;
                step.ends = next.ends;
            }
            Ok(step)
        };
        // Starting: the engine's initial entry, in its order (the root's initial transition
        // content, then each state's <onentry> and, for one entered by default, the content
        // of its initial transition).
        let start = {
            let mut blocks: Vec<Box<[Exec]>> = Vec::new();
            let mut push = |ops: &[Op]| {
                let actions = fuse(&content(ops).unwrap_or_default(), &fusable);
                if !actions.is_empty() {
                    blocks.push(actions.into());
                }
            };
            let mut last = 0;
            for &(x, default_entry) in &chart.initial_entry {
                let st = &states[x as usize];
                st.onentry.iter().for_each(|b| push(b));
                if default_entry && st.kind == Kind::Compound {
                    if let Some(init) = st.initial.and_then(|i| chart.transitions().get(i as usize))
                    {
                        push(&init.body);
                    }
                }
                last = x;
            }
            let st = &states[last as usize];
            let ends = st.kind == Kind::Final;
            if ends {
                st.onexit.iter().for_each(|b| push(b));
            }
            let ops = resolve_blocks(&blocks);
            let drafts = ops.iter().any(|(op, _)| op.uses_drafts());
            settle(Step {
                cond: None,
                alt: 0,
                target: Some(last as u16),
                ends,
                blocks: blocks.into(),
                ops,
                drafts,
            })?
        };
        let mut steps: Vec<Step> = Vec::new();
        let mut table = vec![0u16; names.len() * n];
        for (e, name) in names.iter().enumerate() {
            for s in 1..n {
                let st = &states[s];
                // Only atomic states are ever the machine's state.
                if st.kind != Kind::Atomic {
                    continue;
                }
                // The matching transitions of the state, then of its ancestors, in the
                // engine's selection order: the first whose `cond` holds is taken. A
                // candidate without `cond` ends the chain.
                let mut chain: Vec<(u32, &crate::chart::compile::TransInfo)> = Vec::new();
                let mut x = s as u32;
                'up: while x != 0 {
                    for t in own(&states[x as usize])
                        .iter()
                        .filter(|t| t.events.iter().any(|d| descriptor_matches(d, name)))
                    {
                        chain.push((x, t));
                        if t.cond.is_none() {
                            break 'up;
                        }
                    }
                    x = states[x as usize].parent;
                }
                let mut first = true;
                for (from, t) in chain {
                    let target = t.targets.first().copied();
                    let domain = match (target, t.domain) {
                        (None, _) => 0,
                        (Some(_), Some(d)) => d,
                        (Some(_), None) => {
                            return Err(format!(
                                "state `{}`: a transition whose domain is known only at run time",
                                states[from as usize].id
                            ))
                        }
                    };
                    let mut step = settle(step_to(Some(s as u32), domain, target, &t.body))?;
                    step.cond = match &t.cond {
                        Some(c) => Some(model.borrow_mut().cond_expr(c)?),
                        None => None,
                    };
                    if steps.len() + 1 >= usize::from(u16::MAX) {
                        return Err("more than 65,534 (event, state) steps".into());
                    }
                    if first {
                        table[e * n + s] = steps.len() as u16 + 1;
                        first = false;
                    } else {
                        let next = steps.len() as u16 + 1;
                        if let Some(prev) = steps.last_mut() {
                            prev.alt = next;
                        }
                    }
                    steps.push(step);
                }
            }
        }
        if steps
            .iter()
            .chain([&start])
            .any(|s| s.ops.len() >= usize::from(u16::MAX))
        {
            return Err("a step runs more than 65,534 actions".into());
        }
        let model = model.into_inner();
        // A `cond` or `<assign>` needs the model even when the chart has no variables and
        // reads nothing of `_event` (`cond="false"`).
        let needed = !model.is_empty()
            || steps.iter().chain([&start]).any(|s| {
                s.cond.is_some() || s.ops.iter().any(|(op, _)| matches!(op, FastOp::Assign(_)))
            });
        Ok(Flat {
            states: n,
            table: table.into(),
            steps: steps.into(),
            start,
            plans: Box::default(),
            cells: Box::default(),
            model: needed.then_some(model),
            msg_routes: Box::new([Route::SLOW; 256]),
            timer_routes: Box::new([Route::SLOW; TIMER_ROUTES]),
        })
    }

    /// Resolves the per-event plans: `slot(e)` is basic event `e`'s history slot, `listens(e)`
    /// whether an index records it, `comps[e]` the composites it is a constituent of.
    /// The routes are made from `matcher`'s plain tables.
    pub(crate) fn plan(
        &mut self,
        basics: usize,
        slot: impl Fn(u16) -> Option<u8>,
        listens: impl Fn(u16) -> bool,
        keyed: impl Fn(u16) -> Option<(u16, Attr)>,
        comps: &[Vec<u16>],
        matcher: &super::basic::Matcher,
    ) {
        let taken = |c: u16| {
            let row = (basics + usize::from(c)) * self.states;
            self.table
                .get(row..row + self.states)
                .is_some_and(|r| r.iter().any(|&x| x != 0))
        };
        let plans = (0..basics)
            .map(|e| {
                let e16 = e as u16;
                EventPlan {
                    slot: slot(e16).filter(|&s| s != NO_SLOT).unwrap_or(NO_SLOT),
                    logic: listens(e16),
                    keyed: keyed(e16),
                    comps: comps
                        .get(e)
                        .map(|v| v.iter().copied().filter(|&c| taken(c)).collect())
                        .unwrap_or_default(),
                }
            })
            .collect();
        self.plans = plans;
        self.cells = self.cells(basics);
        let cells = !self.cells.is_empty();
        for (t, r) in self.msg_routes.iter_mut().enumerate() {
            *r = Route::of(
                matcher.message_plain(t as u8),
                &self.plans,
                cells,
                self.states,
            );
        }
        for (id, r) in self.timer_routes.iter_mut().enumerate() {
            *r = Route::of(
                matcher.timer_plain(id as u32),
                &self.plans,
                cells,
                self.states,
            );
        }
    }

    /// The route of a message of type `t`.
    #[inline(always)]
    pub(crate) fn message_route(&self, t: u8) -> &Route {
        &self.msg_routes[usize::from(t)]
    }

    /// The route of a timer expiry of `id`.
    #[inline(always)]
    pub(crate) fn timer_route(&self, id: u32) -> &Route {
        self.timer_routes.get(id as usize).unwrap_or(&Route::SLOW)
    }

    /// The cell at `i` (a [`Route::cells`] plus a state).
    #[inline(always)]
    pub(crate) fn cell_at(&self, i: usize) -> Option<&Cell> {
        self.cells.get(i)
    }

    /// The [`Cell`]s of a chart without a datamodel whose steps have no `cond` (none
    /// otherwise: such an input takes the general path).
    fn cells(&self, basics: usize) -> Box<[Cell]> {
        if self.model.is_some() || self.steps.iter().any(|s| s.cond.is_some() || s.alt != 0) {
            return Box::default();
        }
        let index = |event: usize, state: u16| {
            self.table
                .get(event * self.states + usize::from(state))
                .copied()
                .unwrap_or(0)
        };
        let mut cells = Vec::with_capacity(basics * self.states);
        for e in 0..basics {
            for s in 0..self.states {
                let s = s as u16;
                let step = index(e, s);
                let after = match usize::from(step).checked_sub(1) {
                    Some(i) => self.steps.get(i).and_then(|x| x.target).unwrap_or(s),
                    None => s,
                };
                let comps = self
                    .plans
                    .get(e)
                    .map(|p| {
                        p.comps
                            .iter()
                            .filter_map(|&c| {
                                let t = index(basics + usize::from(c), after);
                                (t != 0).then_some((c, t))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                cells.push(Cell { step, comps });
            }
        }
        cells.into_boxed_slice()
    }

    /// The [`Cell`] of basic event `e` in `state` (`None`: the chart has none, or out of
    /// range).
    #[inline]
    pub(crate) fn cell(&self, e: u16, state: u16) -> Option<&Cell> {
        self.cells
            .get(usize::from(e) * self.states + usize::from(state))
    }

    /// The step of a [`Cell`] index (index + 1; 0: none).
    #[inline]
    pub(crate) fn step_at(&self, i: u16) -> Option<&Step> {
        self.steps.get(usize::from(i).checked_sub(1)?)
    }

    /// The datamodel, when the chart has variables or reads `_event`.
    #[inline]
    pub(crate) fn model(&self) -> Option<&Model> {
        self.model.as_ref()
    }

    /// The candidate after `step` when its `cond` does not hold.
    #[inline]
    pub(crate) fn alt(&self, step: &Step) -> Option<&Step> {
        self.steps.get(usize::from(step.alt).checked_sub(1)?)
    }

    /// The plan of basic event `e`.
    #[inline]
    pub(crate) fn event_plan(&self, e: u16) -> Option<&EventPlan> {
        self.plans.get(usize::from(e))
    }

    /// Number of states (the root is 0).
    pub(crate) fn state_count(&self) -> usize {
        self.states
    }

    /// Every (service event, state, step) entry of the table.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (usize, u16, &Step)> + '_ {
        self.table.iter().enumerate().filter_map(move |(i, &t)| {
            let step = self.steps.get(usize::from(t).checked_sub(1)?)?;
            Some((i / self.states, (i % self.states) as u16, step))
        })
    }

    /// The step entering the initial state.
    #[inline]
    pub(crate) fn start(&self) -> &Step {
        &self.start
    }

    /// The step service event `event` (basic index, or basic count + composite index) takes
    /// in `state`, if any.
    #[inline]
    pub(crate) fn step(&self, event: usize, state: u16) -> Option<&Step> {
        let i = *self.table.get(event * self.states + usize::from(state))?;
        self.steps.get(usize::from(i).checked_sub(1)?)
    }
}

/// A step's blocks resolved into one run of [`FastOp`]s, each with the index where its
/// block ends.
fn resolve_blocks(blocks: &[Box<[Exec]>]) -> Box<[(FastOp, u16)]> {
    let mut out = Vec::new();
    for b in blocks {
        let end = (out.len() + b.len()).min(usize::from(u16::MAX)) as u16;
        out.extend(b.iter().map(|x| {
            let op = match x {
                Exec::Act(a) => FastOp::resolve(a),
                Exec::Assign(l, v) => FastOp::Assign(Box::new((l.clone(), v.clone()))),
            };
            (op, end)
        }));
    }
    out.into()
}

/// The name of an element the flat machine does not run, for the refusal.
fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Raise(_) => "<raise>",
        Op::Send(_) => "<send>",
        Op::Cancel(_) => "<cancel>",
        Op::Log(..) => "<log>",
        Op::If(_) => "<if>",
        Op::Foreach { .. } | Op::HostForeach { .. } => "<foreach>",
        Op::Script(_) | Op::ScriptSrc(_) | Op::HostScript(_) => "<script>",
        Op::HostAssign { .. } => "<assign> of the ECMAScript/XPath datamodel",
        Op::Assign(..) | Op::Custom(_) | Op::Nop => "an empty element",
    }
}

/// The action at `block[i]`, if it is one.
fn act(block: &[Exec], i: usize) -> Option<&Action> {
    match block.get(i)? {
        Exec::Act(a) => Some(a),
        Exec::Assign(..) => None,
    }
}

/// A `create`, `set`… , `execute` run of one draft starting at `block[i]`: its length.
fn triple(block: &[Exec], i: usize) -> Option<usize> {
    let Some(Action::Create { draft }) = act(block, i) else {
        return None;
    };
    let d = *draft;
    for j in i + 1..block.len() {
        match act(block, j)? {
            Action::Set { draft, value, .. } if *draft == d && !value.reads_draft(d) => {}
            Action::Execute { draft, .. } if *draft == d => return Some(j + 1 - i),
            _ => return None,
        }
    }
    None
}

/// Drafts whose every use in the chart is a whole create/set/execute run: nothing can observe
/// them between actions, so each run can become one [`Action::Run`].
fn fusable_drafts(blocks: impl Iterator<Item = Vec<Exec>>) -> Vec<u8> {
    let mut inside: Vec<u8> = Vec::new();
    let mut outside: Vec<u8> = Vec::new();
    for block in blocks {
        let mut i = 0;
        while i < block.len() {
            if let Some(len) = triple(&block, i) {
                if let Some(Action::Create { draft }) = act(&block, i) {
                    inside.push(*draft);
                }
                i += len;
                continue;
            }
            if let Some(a) = act(&block, i) {
                outside.extend(a.drafts());
            }
            i += 1;
        }
    }
    inside.retain(|d| !outside.contains(d));
    inside
}

/// A block's content with the runs of `fusable` drafts fused.
fn fuse(block: &[Exec], fusable: &[u8]) -> Vec<Exec> {
    let mut out = Vec::with_capacity(block.len());
    let mut i = 0;
    while i < block.len() {
        if let (Some(len), Some(Action::Create { draft })) = (triple(block, i), act(block, i)) {
            if fusable.contains(draft) {
                let sets = (i + 1..i + len - 1).filter_map(|j| match act(block, j) {
                    Some(Action::Set { field, value, .. }) => Some((field.clone(), value.clone())),
                    _ => None,
                });
                if let Some(Action::Execute { prim, .. }) = act(block, i + len - 1) {
                    out.push(Exec::Act(Action::Run {
                        prim: *prim,
                        draft: None,
                        base: None,
                        sets: sets.collect(),
                    }));
                    i += len;
                    continue;
                }
            }
        }
        out.push(block[i].clone());
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::load::Service;
    use super::*;

    const SRC: &str = r#"<scxml xmlns="http://www.w3.org/2005/07/scxml"
           xmlns:action="http://my.custom-actions.domain/action" initial="a">
      <datamodel>
        <data name="service"><ServiceID>4</ServiceID></data>
        <data name="events"><Basic>
          <Event name="x"><Message><MessageType>1</MessageType></Message></Event>
        </Basic></data>
      </datamodel>
      <state id="a">
        <transition event="x" target="b">
          <action:create name="sendControlMessage"/>
          <action:set name="sendControlMessage" field="Message" expr="last(x)"/>
          <action:set name="sendControlMessage" field="Message/MessageType" value="7"/>
          <action:execute name="sendControlMessage"/>
          <action:create name="toApplication"/>
          <action:set name="toApplication" field="Message" expr="last(x)"/>
          <action:execute name="toApplication"/>
          <action:sendControlMessage MessageType="5" DestinationAddress="toApplication.SourceAddress"/>
        </transition>
      </state>
      <final id="b"/>
    </scxml>"#;

    #[test]
    fn create_set_execute_runs_of_unobserved_drafts_become_one_action() {
        let (svc, _) = Service::load("f.scxml", SRC).unwrap();
        let flat = svc.flat.as_ref().unwrap();
        let step = flat.step(0, 1).unwrap();
        assert_eq!(step.target, Some(2));
        assert!(step.ends);
        let block = &step.blocks[0];
        // sendControlMessage's run is fused; toApplication's draft is read by a later action,
        // so its run is kept as written.
        assert!(
            matches!(&block[0], Exec::Act(Action::Run { prim: super::super::action::Prim::SendControl, draft: None, base: None, sets }) if sets.len() == 2),
            "{block:?}"
        );
        assert!(
            matches!(block[1], Exec::Act(Action::Create { .. })),
            "{block:?}"
        );
        assert!(
            matches!(block[2], Exec::Act(Action::Set { .. })),
            "{block:?}"
        );
        assert!(
            matches!(block[3], Exec::Act(Action::Execute { .. })),
            "{block:?}"
        );
        assert!(
            matches!(block[4], Exec::Act(Action::Run { .. })),
            "{block:?}"
        );
        assert_eq!(block.len(), 5);
    }

    #[test]
    fn constant_one_byte_writes_are_split_unless_an_attribute_is_written_twice() {
        let op = SendOp::new(
            Prim::SendControl,
            Base::Fresh,
            vec![
                (Attr::MessageType, Src::Int(2)),
                (Attr::Destination, Src::NodeParent),
                (Attr::HopLimit, Src::Int(1)),
            ],
        );
        assert_eq!((op.mask, op.bytes), (0b101, [2, 0, 1]));
        assert_eq!(&*op.sets, &[(Attr::Destination, Src::NodeParent)]);
        // Written twice: the order decides which value stays, so nothing is split.
        let op = SendOp::new(
            Prim::SendControl,
            Base::Fresh,
            vec![
                (Attr::MessageType, Src::Int(2)),
                (Attr::MessageType, Src::CurrentAttr(Attr::MessageType)),
            ],
        );
        assert_eq!(op.mask, 0);
        assert_eq!(op.sets.len(), 2);
    }

    /// h2hack's plans: the ACK keeps no message but updates the "who acknowledged" index
    /// directly, keyed by its source; the payload is kept and is followed by the two
    /// composites on it; a timer keeps nothing and is followed by none.
    #[test]
    fn h2hack_event_plans() {
        let src = include_str!("../../../../specs/h2hack.scxml");
        let (svc, _) = Service::load("h2hack.scxml", src).unwrap();
        let flat = svc.flat.as_ref().unwrap();
        let idx = |name: &str| svc.data.basic.iter().position(|b| b.name == name).unwrap() as u16;
        let comp = |name: &str| {
            svc.data
                .composite
                .iter()
                .position(|c| c.name == name)
                .unwrap() as u16
        };
        let ack = flat.event_plan(idx("h2hackmessage")).unwrap();
        assert!(ack.logic);
        assert!(matches!(ack.keyed, Some((_, Attr::Source))), "{ack:?}");
        assert_eq!(ack.slot, NO_SLOT);
        assert_eq!(&*ack.comps, &[comp("allh2hackmessagesreceived")]);
        let payload = flat.event_plan(idx("payloadmessage")).unwrap();
        assert_ne!(payload.slot, NO_SLOT);
        assert!(payload.keyed.is_none() && !payload.logic);
        assert_eq!(&*payload.comps, &[comp("haschildren"), comp("nochildren")]);
        let timer = flat.event_plan(idx("acktimeout")).unwrap();
        assert_eq!(
            (timer.slot, timer.logic, timer.comps.len()),
            (NO_SLOT, false, 0)
        );
    }

    /// Every action of the shipped h2hack (timers, sends from `last(E)`, the fused
    /// create/set/execute run, the `foreach` send) resolves to a fast op: none is left to the
    /// interpreter, so `bench spec`'s run-time lane measures the resolved path.
    #[test]
    fn h2hack_resolves_every_action_to_a_fast_op() {
        let src = include_str!("../../../../specs/h2hack.scxml");
        let (svc, _) = Service::load("h2hack.scxml", src).unwrap();
        let flat = svc.flat.as_ref().unwrap();
        let mut ops = 0;
        let steps = flat.entries().map(|(_, _, s)| s).chain([flat.start()]);
        for step in steps {
            assert!(!step.drafts, "{step:?}");
            for (op, _) in step.ops.iter() {
                assert!(!matches!(op, FastOp::Action(_)), "interpreted: {op:?}");
                ops += 1;
            }
        }
        assert!(ops > 40, "{ops}");
        let each = flat
            .entries()
            .flat_map(|(_, _, s)| s.ops.iter())
            .filter(|(op, _)| matches!(op, FastOp::Each { .. }))
            .count();
        assert_eq!(each, 1);
    }

    /// ordering's payload step in `open` is a chain of two candidates: the guarded delivery
    /// (an `<assign>`, then the actions) and, when the guard does not hold, the targetless
    /// drop; the chart's datamodel is kept.
    #[test]
    fn ordering_guards_are_a_chain_of_candidates() {
        let src = include_str!("../../../../specs/ordering.scxml");
        let (svc, _) = Service::load("ordering.scxml", src).unwrap();
        let flat = svc.flat.as_ref().unwrap();
        assert!(flat.model().is_some());
        let payload = svc
            .data
            .basic
            .iter()
            .position(|b| b.name == "payloadmessage")
            .unwrap();
        let open = (1..flat.state_count() as u16)
            .find(|&s| svc.chart.state_name(crate::chart::StateId(u32::from(s))) == "open")
            .unwrap();
        let first = flat.step(payload, open).unwrap();
        assert!(first.cond.is_some());
        assert!(
            matches!(first.ops[0].0, FastOp::Assign(_)),
            "{:?}",
            first.ops
        );
        let drop = flat.alt(first).unwrap();
        assert!(drop.cond.is_none() && drop.ops.is_empty() && drop.target.is_none());
        assert!(flat.alt(drop).is_none());
    }
}

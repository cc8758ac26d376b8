//! The run-time engine: one [`Instance`] per live state machine, W3C SCXML semantics.
//!
//! The algorithm is the W3C recommendation's (Appendix D): a *macrostep* takes one external
//! event, runs the microstep its enabled transitions form, then keeps taking eventless
//! transitions and internal events until none is left. A *microstep* exits the exit set
//! (recording history first, `onexit` in reverse document order), runs the transitions'
//! content in document order, and enters the entry set (`onentry` in document order, initial
//! and default-history content, `done.state.ID` when a final state is entered). In a
//! parallel state, conflicting transitions are resolved by preemption: a transition whose
//! source is a descendant wins over its ancestor's, otherwise the earlier one wins.
//!
//! Sans-IO: every entry point takes `now`. A `<send>` with a delay becomes a deadline;
//! [`Instance::poll_timeout`] gives the earliest, [`Instance::handle_timeout`] delivers
//! those due. A call that takes more than [`Chart::step_limit`] steps (microsteps, internal
//! and self-sent events) is stopped with [`RunError::StepLimit`] (its internal queue is
//! dropped; the instance stays usable).
//!
//! Memory: an instance is the active configuration (a bitset), recorded histories (bitsets),
//! variable slots, the two queues, pending delayed sends and the last event; nothing
//! else. Processing an interned event without data allocates nothing (the scratch sets of a
//! microstep live in a per-thread buffer reused across calls).
//!
//! `<send>` routing and delays are in `engine/send.rs`. `<invoke>` (W3C SCXML §6.4) runs
//! child sessions inside their parent's instance, on the same virtual clock
//! (`engine/invoke.rs`): see there for ids, cancellation, `#_parent`
//! and `#_<invokeid>` routing. `_sessionid` is given by the caller ([`Instance::with_session`]);
//! a child's is derived from its parent's, so a run is a function of its inputs.
//!
//! After the machine reaches a top-level final state, the configuration keeps that state
//! (after the `onexit` handlers ran) so callers can see where it ended; further events are
//! ignored.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use viastack_kernel::time::Instant;

use super::compile::{descriptor_matches, Chart, Kind, Op, Spec, StateId, Symbol};
use super::expr::{self, EventField, Expr, Location, PathStep, Scope, System};
use super::host::{self, HostModel, Init, ModelCell};
use super::value::Value;

mod invoke;
mod send;

/// The name of an event given to [`Instance::handle_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventName {
    /// An interned name ([`Chart::symbol`]): the fast path.
    Symbol(Symbol),
    /// Any other name (matched against descriptors by string).
    Dynamic(String),
}

/// An event from the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalEvent {
    /// Name.
    pub name: EventName,
    /// `_event.data`.
    pub data: Value,
}

impl ExternalEvent {
    /// An interned event without data.
    pub fn symbol(s: Symbol) -> ExternalEvent {
        ExternalEvent {
            name: EventName::Symbol(s),
            data: Value::Null,
        }
    }

    /// An event by name without data.
    pub fn named(name: &str) -> ExternalEvent {
        ExternalEvent {
            name: EventName::Dynamic(name.to_string()),
            data: Value::Null,
        }
    }
}

/// Whether the machine still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Waiting for events.
    Running,
    /// Reached a top-level final state.
    Final,
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// More than [`Chart::step_limit`] steps (microsteps, internal and self-sent events) in one call: a
    /// transition or event loop.
    #[error("stopped after {steps} steps in one call (a transition or event loop?)")]
    StepLimit {
        /// Microsteps taken.
        steps: u32,
    },
    /// [`Instance::start`] was not called.
    #[error("the instance was not started")]
    NotStarted,
}

/// Runs custom actions and receives `<log>` output.
pub trait Host<A> {
    /// Runs one custom action; `Err(reason)` raises `error.execution` in the machine.
    ///
    /// # Errors
    /// Whatever the action reports.
    fn execute(&mut self, action: &A, vars: &mut Vars<'_>) -> Result<(), String>;
    /// A `<log>`.
    fn log(&mut self, _label: &str, _value: &Value) {}
    /// Fetches the resource `uri` named by `<invoke src>`, `<script src>` or `<data src>` in
    /// the document `base` (the chart's file name), as text. The engine does no IO itself.
    ///
    /// # Errors
    /// The resource cannot be fetched (the default: this host has no loader).
    fn load(&mut self, base: &str, uri: &str) -> Result<String, String> {
        let _ = base;
        Err(format!("cannot fetch \"{uri}\": the host has no loader"))
    }
}

/// A [`Host`] for charts without custom actions (any custom action fails).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHost;

impl<A> Host<A> for NoHost {
    fn execute(&mut self, _action: &A, _vars: &mut Vars<'_>) -> Result<(), String> {
        Err("no host to run custom actions".into())
    }
}

/// The instance's datamodel variables by name, and the current event, for a [`Host`].
pub struct Vars<'a> {
    map: &'a HashMap<Arc<str>, u32>,
    slots: &'a mut [Option<Value>],
    event: Option<&'a Event>,
    symbols: &'a [Arc<str>],
}

impl Vars<'_> {
    /// Variable `name`, if the chart mentions it and it has been bound.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let slot = *self.map.get(name)?;
        self.slots.get(slot as usize)?.as_ref()
    }

    /// Sets variable `name`; `false` if the chart never mentions it (no slot).
    pub fn set(&mut self, name: &str, value: Value) -> bool {
        match self.map.get(name) {
            Some(&slot) => match self.slots.get_mut(slot as usize) {
                Some(s) => {
                    *s = Some(value);
                    true
                }
                None => false,
            },
            None => false,
        }
    }

    /// The current event's name.
    pub fn event_name(&self) -> Option<&str> {
        self.event.map(|e| e.name_str(self.symbols))
    }

    /// The current event's data.
    pub fn event_data(&self) -> Option<&Value> {
        self.event.map(|e| &e.data)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EvKind {
    Platform,
    Internal,
    External,
}

#[derive(Clone, Debug, PartialEq)]
enum EvName {
    Sym(Symbol),
    Dyn(Arc<str>),
}

#[derive(Clone, Debug, PartialEq, Default)]
struct Meta {
    sendid: Option<Arc<str>>,
    origin: Option<Arc<str>>,
    origintype: Option<Arc<str>>,
    invokeid: Option<Arc<str>>,
}

/// An event inside the machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    name: EvName,
    kind: EvKind,
    data: Value,
    meta: Option<Box<Meta>>,
}

impl Event {
    fn name_str<'s>(&'s self, symbols: &'s [Arc<str>]) -> &'s str {
        match &self.name {
            EvName::Sym(s) => symbols.get(s.0 as usize).map_or("", |n| n),
            EvName::Dyn(n) => n,
        }
    }
}

/// Where a `<send>`'s event goes.
#[derive(Clone, Debug, PartialEq)]
enum Dest {
    /// This session's external queue.
    Own,
    /// The invoking session (`#_parent`).
    Parent,
    /// An invoked child (`#_<invokeid>`).
    Child(Arc<str>),
}

#[derive(Clone, Debug)]
struct Pending {
    at: Instant,
    seq: u64,
    id: Option<Arc<str>>,
    dest: Dest,
    event: Event,
}

/// (state, entered by default) in entry order, and (parent, default-history transition).
pub(crate) type InitialEntry = (Vec<(u32, bool)>, Vec<(u32, u32)>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    New,
    Running,
    Final,
}

const SCXML_PROCESSOR: &str = "http://www.w3.org/TR/scxml/#SCXMLEventProcessor";

/// Most events one instance may hold in each of its internal queue, external queue and
/// pending delayed sends; a `<raise>`/`<send>` beyond it raises `error.execution`.
pub const MAX_QUEUED: usize = 10_000;

/// One live state machine. Always pass it the chart it was created from.
#[derive(Clone, Debug)]
pub struct Instance {
    config: Box<[u64]>,
    history: Box<[u64]>,
    inited: Box<[u64]>,
    vars: Box<[Option<Value>]>,
    internal: VecDeque<Event>,
    external: VecDeque<Event>,
    pending: Vec<Pending>,
    last_event: Option<Event>,
    session: u64,
    next_seq: u64,
    phase: Phase,
    /// Invoked child sessions (W3C SCXML §6.4).
    children: Vec<invoke::Child>,
    /// States entered in this macrostep whose `<invoke>`s run at its end.
    to_invoke: Vec<u32>,
    /// Events for the invoking session (`#_parent`), when this is a child: (name, data).
    outbox: Vec<(Arc<str>, Value)>,
    /// Whether this session was invoked (so `#_parent` exists).
    is_child: bool,
    /// `<donedata>` of the top-level final state reached (`done.invoke` data).
    done_value: Value,
    /// The ECMAScript or XPath datamodel (created by [`Instance::start`]); shared by clones.
    model: Option<ModelCell>,
    /// Counts events taken, so the datamodel's `_event` is rebound only when it changed.
    event_seq: u64,
}

impl Instance {
    /// Feeds the instance's observable state to `h`: configuration, history, initialised data,
    /// variables, queued and pending events and phase (not its session id, which every instance
    /// has its own). Two instances of one chart with equal fingerprints behave alike; the
    /// service explorer ([`explore`](crate::service::explore)) hashes them to merge states.
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.config.hash(h);
        self.history.hash(h);
        self.inited.hash(h);
        for v in self.vars.iter() {
            match v {
                Some(v) => {
                    h.write_u8(1);
                    hash_value(v, h);
                }
                None => h.write_u8(0),
            }
        }
        // Events and pending sends rarely exist between steps; their debug form is canonical.
        h.write_usize(self.internal.len() + self.external.len() + self.pending.len());
        for e in self.internal.iter().chain(self.external.iter()) {
            format!("{e:?}").hash(h);
        }
        for p in &self.pending {
            format!("{:?}{:?}{:?}{}", p.event, p.id, p.at, p.seq).hash(h);
        }
        self.next_seq.hash(h);
        (self.phase as u8).hash(h);
    }
}

/// Hashes a datamodel value (numbers by their bits).
fn hash_value<H: std::hash::Hasher>(v: &Value, h: &mut H) {
    use std::hash::Hash;
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Number(n) => {
            h.write_u8(2);
            h.write_u64(n.to_bits());
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Value::List(l) => {
            h.write_u8(4);
            h.write_usize(l.len());
            for x in l.iter() {
                hash_value(x, h);
            }
        }
        Value::Map(m) => {
            h.write_u8(5);
            h.write_usize(m.len());
            for (k, x) in m.iter() {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

#[derive(Default)]
struct Scratch {
    filtered: Vec<u32>,
    exit: Vec<u64>,
    exit_a: Vec<u64>,
    exit_b: Vec<u64>,
    enter: Vec<u64>,
    default_entry: Vec<u64>,
    default_hist: Vec<(u32, u32)>,
    targets: Vec<u32>,
}

thread_local! {
    /// Reused across calls; boxed so taking and returning it moves one pointer. A reentrant
    /// call (a host running another instance from an action) finds it taken and uses a fresh one.
    static SCRATCH: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

fn take_scratch() -> Box<Scratch> {
    SCRATCH.with(Cell::take).unwrap_or_default()
}

fn put_scratch(sc: Box<Scratch>) {
    SCRATCH.with(|c| c.set(Some(sc)));
}

fn bit(bits: &[u64], i: u32) -> bool {
    bits.get(i as usize / 64)
        .is_some_and(|w| w & (1 << (i % 64)) != 0)
}

fn set_bit(bits: &mut [u64], i: u32) {
    if let Some(w) = bits.get_mut(i as usize / 64) {
        *w |= 1 << (i % 64);
    }
}

fn clear_bit(bits: &mut [u64], i: u32) {
    if let Some(w) = bits.get_mut(i as usize / 64) {
        *w &= !(1 << (i % 64));
    }
}

/// Set bits in `lo..hi`.
fn any_in(bits: &[u64], lo: u32, hi: u32) -> bool {
    (lo..hi).any(|i| bit(bits, i))
}

/// Indexes of the set bits, ascending (or descending with `.rev()`), skipping zero words.
fn ones(bits: &[u64]) -> Ones<'_> {
    Ones {
        bits,
        front: 0,
        back: bits.len(),
        fw: bits.first().copied().unwrap_or(0),
        bw: bits.last().copied().unwrap_or(0),
    }
}

struct Ones<'a> {
    bits: &'a [u64],
    /// Word index of the front cursor and the bits of that word not yet yielded.
    front: usize,
    fw: u64,
    /// One past the word index of the back cursor and that word's remaining bits.
    back: usize,
    bw: u64,
}

impl Ones<'_> {
    fn index(w: usize, b: u32) -> u32 {
        u32::try_from(w).unwrap_or(u32::MAX / 64) * 64 + b
    }
}

impl Iterator for Ones<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        loop {
            if self.front + 1 >= self.back {
                // Front and back share the last word: the back's copy is authoritative.
                if self.front + 1 != self.back || self.bw == 0 {
                    return None;
                }
                let w = self.fw & self.bw;
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                self.fw = w & (w - 1);
                self.bw = self.fw;
                return Some(Self::index(self.front, b));
            }
            if self.fw != 0 {
                let b = self.fw.trailing_zeros();
                self.fw &= self.fw - 1;
                return Some(Self::index(self.front, b));
            }
            self.front += 1;
            self.fw = self.bits[self.front];
        }
    }
}

impl DoubleEndedIterator for Ones<'_> {
    fn next_back(&mut self) -> Option<u32> {
        loop {
            if self.back == 0 {
                return None;
            }
            let w = if self.front + 1 == self.back {
                self.fw & self.bw
            } else {
                self.bw
            };
            if w != 0 {
                let b = 63 - w.leading_zeros();
                let rest = w & !(1u64 << b);
                self.bw = rest;
                if self.front + 1 == self.back {
                    self.fw = rest;
                }
                return Some(Self::index(self.back - 1, b));
            }
            if self.front + 1 >= self.back {
                return None;
            }
            self.back -= 1;
            self.bw = self.bits[self.back - 1];
        }
    }
}

fn reset(bits: &mut Vec<u64>, words: usize) {
    bits.clear();
    bits.resize(words, 0);
}

struct Rt<'c, A, H> {
    chart: &'c Chart<A>,
    host: &'c mut H,
    now: Instant,
    steps: u32,
    /// Taken from the thread's buffer on first use (not at all on the fast paths).
    sc: Option<Box<Scratch>>,
    enabled: Enabled,
}

/// The enabled transitions of a step: inline up to 6, spilling to the heap beyond.
#[derive(Default)]
struct Enabled {
    small: [u32; 6],
    n: usize,
    big: Vec<u32>,
}

impl Enabled {
    fn clear(&mut self) {
        self.n = 0;
        self.big.clear();
    }

    fn as_slice(&self) -> &[u32] {
        if self.big.is_empty() {
            &self.small[..self.n]
        } else {
            &self.big
        }
    }

    fn push(&mut self, t: u32) {
        if self.big.is_empty() && self.n < self.small.len() {
            self.small[self.n] = t;
            self.n += 1;
        } else {
            if self.big.is_empty() {
                self.big.extend_from_slice(&self.small[..self.n]);
            }
            self.big.push(t);
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn contains(&self, t: u32) -> bool {
        self.as_slice().contains(&t)
    }
}

struct Env<'a, A> {
    inst: &'a Instance,
    chart: &'a Chart<A>,
    event: Option<&'a Event>,
}

impl<A> Scope for Env<'_, A> {
    fn var(&self, slot: u32) -> Option<&Value> {
        self.inst.vars.get(slot as usize)?.as_ref()
    }
    fn var_name(&self, slot: u32) -> &str {
        self.chart.vars.get(slot as usize).map_or("?", |n| n)
    }
    fn system(&self, v: System) -> Option<Value> {
        Some(match v {
            System::Event => {
                let ev = self.event?;
                let mut m = BTreeMap::new();
                for (k, f) in [
                    ("name", EventField::Name),
                    ("type", EventField::Type),
                    ("sendid", EventField::SendId),
                    ("origin", EventField::Origin),
                    ("origintype", EventField::OriginType),
                    ("invokeid", EventField::InvokeId),
                    ("data", EventField::Data),
                ] {
                    m.insert(k.to_string(), field(self.chart, ev, f));
                }
                Value::map(m)
            }
            System::SessionId => Value::str(&self.inst.session.to_string()),
            System::Name => Value::String(self.chart.name.clone()),
            System::IoProcessors => {
                let loc = Value::map(BTreeMap::from([(
                    "location".to_string(),
                    Value::str(&format!("#_scxml_{}", self.inst.session)),
                )]));
                Value::map(BTreeMap::from([
                    ("scxml".to_string(), loc.clone()),
                    (SCXML_PROCESSOR.to_string(), loc),
                ]))
            }
        })
    }
    fn event_field(&self, f: EventField) -> Option<Value> {
        self.event.map(|ev| field(self.chart, ev, f))
    }
    fn in_state(&self, index: u32) -> bool {
        bit(&self.inst.config, index)
    }
    fn host_eval(&self, src: &str) -> Result<Value, String> {
        self.inst.with_model(self.chart, |m| m.eval(src))
    }
    fn host_cond(&self, src: &str) -> Result<bool, String> {
        self.inst.with_model(self.chart, |m| m.cond(src))
    }
}

/// `_event` as a map of the W3C fields.
fn event_value<A>(chart: &Chart<A>, ev: &Event) -> Value {
    let mut m = BTreeMap::new();
    for (k, f) in [
        ("name", EventField::Name),
        ("type", EventField::Type),
        ("sendid", EventField::SendId),
        ("origin", EventField::Origin),
        ("origintype", EventField::OriginType),
        ("invokeid", EventField::InvokeId),
        ("data", EventField::Data),
    ] {
        m.insert(k.to_string(), field(chart, ev, f));
    }
    Value::map(m)
}

fn field<A>(chart: &Chart<A>, ev: &Event, f: EventField) -> Value {
    let meta = |g: fn(&Meta) -> &Option<Arc<str>>| {
        ev.meta
            .as_ref()
            .and_then(|m| g(m).clone())
            .map_or(Value::Null, Value::String)
    };
    match f {
        EventField::Name => match &ev.name {
            EvName::Sym(s) => Value::String(chart.symbols[s.0 as usize].clone()),
            EvName::Dyn(n) => Value::String(n.clone()),
        },
        EventField::Type => Value::str(match ev.kind {
            EvKind::Platform => "platform",
            EvKind::Internal => "internal",
            EvKind::External => "external",
        }),
        EventField::SendId => meta(|m| &m.sendid),
        EventField::Origin => meta(|m| &m.origin),
        EventField::OriginType => meta(|m| &m.origintype),
        EventField::InvokeId => meta(|m| &m.invokeid),
        EventField::Data => ev.data.clone(),
    }
}

impl Instance {
    /// A new instance of `chart`, not started.
    pub fn new<A>(chart: &Chart<A>) -> Instance {
        let w = chart.words;
        Instance {
            config: vec![0; w].into_boxed_slice(),
            history: vec![0; w * chart.n_history as usize].into_boxed_slice(),
            inited: if chart.late_binding {
                vec![0; w].into_boxed_slice()
            } else {
                Box::new([])
            },
            vars: vec![None; chart.vars.len()].into_boxed_slice(),
            internal: VecDeque::new(),
            external: VecDeque::new(),
            pending: Vec::new(),
            last_event: None,
            session: 0,
            next_seq: 0,
            phase: Phase::New,
            children: Vec::new(),
            to_invoke: Vec::new(),
            outbox: Vec::new(),
            is_child: false,
            done_value: Value::Null,
            model: None,
            event_seq: 0,
        }
    }

    /// A new instance whose `_sessionid` is `session` (callers derive it from their seed or
    /// their own numbering, so a run is a function of its inputs).
    pub fn with_session<A>(chart: &Chart<A>, session: u64) -> Instance {
        let mut i = Instance::new(chart);
        i.session = session;
        i
    }

    /// Sets `_sessionid` (0 unless given; see [`Instance::with_session`]).
    pub fn set_session_id(&mut self, id: u64) {
        self.session = id;
    }

    /// `_sessionid`.
    pub fn session_id(&self) -> u64 {
        self.session
    }

    /// The variables, for a host to set values `cond`s read (before or between events).
    pub fn vars<'a, A>(&'a mut self, chart: &'a Chart<A>) -> Vars<'a> {
        Vars {
            map: &chart.var_map,
            slots: &mut self.vars,
            event: self.last_event.as_ref(),
            symbols: &chart.symbols,
        }
    }

    /// Variable `name`'s value, if bound.
    pub fn var<A>(&self, chart: &Chart<A>, name: &str) -> Option<&Value> {
        let slot = *chart.var_map.get(name)?;
        self.vars.get(slot as usize)?.as_ref()
    }

    /// Enters the initial configuration (initialising the datamodel) and runs to a stable
    /// configuration.
    ///
    /// # Errors
    /// [`RunError::StepLimit`].
    pub fn start<A, H: Host<A>>(
        &mut self,
        chart: &Chart<A>,
        now: Instant,
        host: &mut H,
    ) -> Result<Status, RunError> {
        self.start_with(chart, now, host, Vec::new())
    }

    /// [`Instance::start`], with values for top-level data given at instantiation time (an
    /// invoke's `<param>`s and `namelist`, W3C SCXML §5.3): they replace the documents' own.
    pub(crate) fn start_with<A, H: Host<A>>(
        &mut self,
        chart: &Chart<A>,
        now: Instant,
        host: &mut H,
        overrides: Vec<(Arc<str>, Value)>,
    ) -> Result<Status, RunError> {
        if self.phase != Phase::New {
            return Ok(self.status());
        }
        self.phase = Phase::Running;
        let mut rt = Rt {
            chart,
            host,
            now,
            steps: 0,
            sc: None,
            enabled: Enabled::default(),
        };
        if chart.datamodel.is_host() && self.model.is_none() {
            match host::create(chart.datamodel, self.session, &chart.name) {
                Ok(m) => self.model = Some(ModelCell::new(m)),
                Err(msg) => self.raise_error(&rt, false, &msg),
            }
        }
        if chart.late_binding {
            self.init_data(&mut rt, 0);
        } else {
            for s in 0..chart.states.len() {
                self.init_data(&mut rt, u32::try_from(s).unwrap_or(0));
            }
        }
        for (name, v) in overrides {
            if chart.datamodel.is_host() {
                let top = chart.states[0]
                    .data
                    .iter()
                    .any(|(d, _)| chart.vars.get(*d as usize).is_some_and(|n| *n == name));
                if top {
                    let _ = self.with_model(chart, |m| m.declare(&name, Init::Value(&v)));
                }
                continue;
            }
            // Only top-level data the document declares (W3C SCXML §6.4.4).
            if let Some(&slot) = chart
                .var_map
                .get(&name)
                .filter(|&&slot| chart.states[0].data.iter().any(|(d, _)| *d == slot))
            {
                if let Some(x) = self.vars.get_mut(slot as usize) {
                    *x = Some(v);
                }
            }
        }
        if !chart.scripts.is_empty() {
            let _ = self.exec_block(&mut rt, &chart.scripts);
        }
        // The initial entry set is the same for every instance: computed once by the compiler.
        for &(s, default_entry) in &chart.initial_entry {
            self.enter_state(&mut rt, s, default_entry, &chart.initial_history);
        }
        if self.phase == Phase::Final {
            self.exit_interpreter(&mut rt);
        }
        let r = self
            .stabilize(&mut rt)
            .and_then(|()| self.drain_external(&mut rt));
        if let Some(sc) = rt.sc.take() {
            put_scratch(sc);
        }
        r.map(|()| self.status())
    }

    /// Processes one external event (a macrostep), then any events the machine sent to
    /// itself without delay. A [`Symbol`] that is not one of `chart`'s is ignored.
    ///
    /// # Errors
    /// [`RunError::StepLimit`]; [`RunError::NotStarted`].
    pub fn handle_event<A, H: Host<A>>(
        &mut self,
        chart: &Chart<A>,
        now: Instant,
        ev: ExternalEvent,
        host: &mut H,
    ) -> Result<Status, RunError> {
        match self.phase {
            Phase::New => return Err(RunError::NotStarted),
            Phase::Final => return Ok(Status::Final),
            Phase::Running => {}
        }
        let name = match ev.name {
            // A symbol of another chart (a host's mistake) is not an event of this one.
            EventName::Symbol(s) if s.0 as usize >= chart.symbols.len() => {
                return Ok(self.status());
            }
            EventName::Symbol(s) => EvName::Sym(s),
            EventName::Dynamic(n) => match chart.symbol(&n) {
                Some(s) => EvName::Sym(s),
                None => EvName::Dyn(Arc::from(n)),
            },
        };
        let event = Event {
            name,
            kind: EvKind::External,
            data: ev.data,
            meta: None,
        };
        self.handle_internal_event(chart, now, event, host)
    }

    /// [`Instance::handle_event`] for an event built inside the engine (with its metadata).
    fn handle_internal_event<A, H: Host<A>>(
        &mut self,
        chart: &Chart<A>,
        now: Instant,
        event: Event,
        host: &mut H,
    ) -> Result<Status, RunError> {
        match self.phase {
            Phase::New => return Err(RunError::NotStarted),
            Phase::Final => return Ok(Status::Final),
            Phase::Running => {}
        }
        let mut rt = Rt {
            chart,
            host,
            now,
            steps: 0,
            sc: None,
            enabled: Enabled::default(),
        };
        let r = if self.external.is_empty() {
            self.macrostep(&mut rt, event)
                .and_then(|()| self.drain_external(&mut rt))
        } else {
            self.external.push_back(event);
            self.drain_external(&mut rt)
        };
        if let Some(sc) = rt.sc.take() {
            put_scratch(sc);
        }
        r.map(|()| self.status())
    }

    /// The earliest deadline of a pending delayed `<send>`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase != Phase::Running {
            return None;
        }
        let own = self.pending.iter().map(|p| p.at).min();
        if self.children.is_empty() {
            return own;
        }
        self.children
            .iter()
            .filter_map(|c| c.inst.poll_timeout())
            .chain(own)
            .min()
    }

    /// Delivers the delayed sends due at `now` (in deadline order) and processes them.
    ///
    /// # Errors
    /// [`RunError::StepLimit`]; [`RunError::NotStarted`].
    pub fn handle_timeout<A, H: Host<A>>(
        &mut self,
        chart: &Chart<A>,
        now: Instant,
        host: &mut H,
    ) -> Result<Status, RunError> {
        match self.phase {
            Phase::New => return Err(RunError::NotStarted),
            Phase::Final => return Ok(Status::Final),
            Phase::Running => {}
        }
        let mut rt = Rt {
            chart,
            host,
            now,
            steps: 0,
            sc: None,
            enabled: Enabled::default(),
        };
        let mut r = Ok(());
        while self.phase == Phase::Running {
            let due = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, p)| p.at <= now)
                .min_by_key(|(_, p)| (p.at, p.seq))
                .map(|(i, p)| (i, p.at));
            // A child's timer due no later than our own runs first (one clock for all).
            if let Some((c, at)) = self.child_due(now) {
                if due.is_none_or(|(_, own)| at <= own) {
                    self.child_timeout(&mut rt, c, at);
                    r = self.drain_external(&mut rt);
                    if r.is_err() {
                        break;
                    }
                    continue;
                }
            }
            let Some((i, _)) = due else { break };
            let p = self.pending.remove(i);
            self.dispatch(&mut rt, p.dest, p.event);
            r = self.drain_external(&mut rt);
            if r.is_err() {
                break;
            }
        }
        if let Some(sc) = rt.sc.take() {
            put_scratch(sc);
        }
        r.map(|()| self.status())
    }

    /// Active states in document order.
    pub fn active_states(&self) -> impl Iterator<Item = StateId> + '_ {
        ones(&self.config).map(StateId)
    }

    /// Whether `s` is active.
    pub fn is_active(&self, s: StateId) -> bool {
        bit(&self.config, s.0)
    }

    /// Whether the machine reached a top-level final state.
    pub fn is_final(&self) -> bool {
        self.phase == Phase::Final
    }

    /// Running or final.
    pub fn status(&self) -> Status {
        if self.phase == Phase::Final {
            Status::Final
        } else {
            Status::Running
        }
    }

    /// Heap bytes this instance owns beyond its own size (an estimate: queue and pending
    /// capacities, slots and bitsets; values' shared contents not counted).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        (self.config.len() + self.history.len() + self.inited.len()) * 8
            + self.vars.len() * size_of::<Option<Value>>()
            + (self.internal.capacity() + self.external.capacity()) * size_of::<Event>()
            + self.pending.capacity() * size_of::<Pending>()
            + self.children.capacity() * size_of::<invoke::Child>()
            + self
                .children
                .iter()
                .map(|c| c.inst.heap_bytes())
                .sum::<usize>()
    }

    // ---- the algorithm ----

    /// The entry set of the root's initial transition on a fresh instance, in entry order,
    /// each with "enter by default" (run `<initial>` content), and the default-history content
    /// to run: what [`Instance::start`] enters.
    pub(crate) fn initial_entry<A>(chart: &Chart<A>) -> InitialEntry {
        let fresh = Instance {
            config: vec![0; chart.words].into_boxed_slice(),
            history: vec![0; chart.words * chart.n_history as usize].into_boxed_slice(),
            inited: Box::new([]),
            vars: Box::new([]),
            internal: VecDeque::new(),
            external: VecDeque::new(),
            pending: Vec::new(),
            last_event: None,
            session: 0,
            next_seq: 0,
            phase: Phase::New,
            children: Vec::new(),
            to_invoke: Vec::new(),
            outbox: Vec::new(),
            is_child: false,
            done_value: Value::Null,
            model: None,
            event_seq: 0,
        };
        let mut sc = Scratch::default();
        reset(&mut sc.enter, chart.words);
        reset(&mut sc.default_entry, chart.words);
        let t = chart.root_initial as usize;
        let Some(tr) = chart.trans.get(t) else {
            return (Vec::new(), Vec::new());
        };
        for &x in &tr.targets {
            fresh.add_descendants(chart, x, &mut sc);
        }
        let mut tmp = Vec::new();
        let domain = fresh.domain(chart, chart.root_initial, &mut tmp);
        fresh.effective_targets(chart, chart.root_initial, &mut tmp);
        for &x in &tmp {
            fresh.add_ancestors(chart, x, domain.unwrap_or(0), &mut sc);
        }
        let order = ones(&sc.enter)
            .map(|s| (s, bit(&sc.default_entry, s)))
            .collect();
        (order, sc.default_hist)
    }

    fn env<'a, A>(&'a self, chart: &'a Chart<A>) -> Env<'a, A> {
        Env {
            inst: self,
            chart,
            event: self.last_event.as_ref(),
        }
    }

    fn raise_error<A, H>(&mut self, rt: &Rt<'_, A, H>, communication: bool, msg: &str) {
        self.raise_error_for(rt, communication, msg, None);
    }

    /// `error.execution` / `error.communication`, with the `sendid` of the `<send>` that
    /// failed (W3C SCXML §5.10.1).
    fn raise_error_for<A, H>(
        &mut self,
        rt: &Rt<'_, A, H>,
        communication: bool,
        msg: &str,
        sendid: Option<Arc<str>>,
    ) {
        let sym = if communication {
            rt.chart.sym_error_communication
        } else {
            rt.chart.sym_error_execution
        };
        self.internal.push_back(Event {
            name: EvName::Sym(sym),
            kind: EvKind::Platform,
            data: Value::str(msg),
            meta: sendid.map(|id| {
                Box::new(Meta {
                    sendid: Some(id),
                    ..Meta::default()
                })
            }),
        });
    }

    fn drain_external<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) -> Result<(), RunError> {
        while self.phase == Phase::Running {
            let Some(ev) = self.external.pop_front() else {
                break;
            };
            rt.steps += 1;
            if rt.steps > rt.chart.step_limit {
                self.internal.clear();
                return Err(RunError::StepLimit { steps: rt.steps });
            }
            self.macrostep(rt, ev)?;
        }
        Ok(())
    }

    fn macrostep<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        ev: Event,
    ) -> Result<(), RunError> {
        if !self.children.is_empty() && !self.route_to_children(rt, &ev) {
            // An event of a cancelled invocation: dropped (W3C SCXML §6.4.2).
            return Ok(());
        }
        self.last_event = Some(ev);
        self.event_seq += 1;
        if !self.children.is_empty() {
            self.finalize(rt);
        }
        self.select_transitions(rt, false);
        if !rt.enabled.is_empty() {
            self.microstep(rt)?;
        }
        self.stabilize(rt)
    }

    /// Eventless transitions and internal events until stable.
    fn stabilize<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) -> Result<(), RunError> {
        while self.phase == Phase::Running {
            if rt.chart.has_eventless {
                self.select_transitions(rt, true);
            } else {
                rt.enabled.clear();
            }
            if rt.enabled.is_empty() {
                let Some(ev) = self.internal.pop_front() else {
                    if self.to_invoke.is_empty() {
                        break;
                    }
                    // The end of a macrostep: start the invokes of the states entered.
                    self.run_invokes(rt);
                    continue;
                };
                // Internal events count as steps too: an eventless transition whose `cond`
                // fails raises `error.execution` on every evaluation, without ever firing.
                rt.steps += 1;
                if rt.steps > rt.chart.step_limit {
                    self.internal.clear();
                    return Err(RunError::StepLimit { steps: rt.steps });
                }
                self.last_event = Some(ev);
                self.event_seq += 1;
                self.select_transitions(rt, false);
            }
            if !rt.enabled.is_empty() {
                self.microstep(rt)?;
            }
        }
        Ok(())
    }

    fn microstep<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) -> Result<(), RunError> {
        rt.steps += 1;
        if rt.steps > rt.chart.step_limit {
            self.internal.clear();
            return Err(RunError::StepLimit { steps: rt.steps });
        }
        let chart = rt.chart;
        if rt.enabled.len() == 1 {
            let t = rt.enabled.as_slice()[0];
            let tr = &chart.trans[t as usize];
            if tr.targets.is_empty() {
                // Targetless: no exit, no entry.
                let _ = self.exec_block(rt, &tr.body);
                return Ok(());
            }
            if tr.simple {
                // Exit set {source}, entry set {target}: no set computations.
                for block in &chart.states[tr.source as usize].onexit {
                    let _ = self.exec_block(rt, block);
                }
                clear_bit(&mut self.config, tr.source);
                self.cancel_invokes(tr.source);
                let _ = self.exec_block(rt, &tr.body);
                self.enter_state(rt, tr.targets[0], false, &[]);
                if self.phase == Phase::Final {
                    self.exit_interpreter(rt);
                }
                return Ok(());
            }
        } else {
            self.remove_conflicts(rt);
        }
        self.exit_states(rt);
        let enabled = std::mem::take(&mut rt.enabled);
        for &t in enabled.as_slice() {
            let _ = self.exec_block(rt, &chart.trans[t as usize].body);
        }
        rt.enabled = enabled;
        self.enter_states(rt);
        Ok(())
    }

    fn select_transitions<A, H>(&mut self, rt: &mut Rt<'_, A, H>, eventless: bool) {
        let chart = rt.chart;
        rt.enabled.clear();
        let mut errors = 0u32;
        let ev_name = if eventless {
            None
        } else {
            self.last_event.as_ref().map(|e| e.name.clone())
        };
        if !eventless && ev_name.is_none() {
            return;
        }
        for w in 0..self.config.len() {
            let mut word = self.config[w] & chart.atomic[w];
            while word != 0 {
                let b = word.trailing_zeros();
                word &= word - 1;
                let s = u32::try_from(w).unwrap_or(0) * 64 + b;
                let found = match &ev_name {
                    None => self.first_enabled(chart, chart.eventless_of(s), &mut errors),
                    Some(EvName::Sym(sym)) => {
                        self.first_enabled(chart, chart.candidates(s, *sym), &mut errors)
                    }
                    Some(EvName::Dyn(name)) => self.first_enabled_slow(chart, s, name, &mut errors),
                };
                if let Some(t) = found {
                    if !rt.enabled.contains(t) {
                        rt.enabled.push(t);
                    }
                }
            }
        }
        for _ in 0..errors {
            self.raise_error(rt, false, "condition could not be evaluated as a boolean");
        }
    }

    fn cond_true<A>(&self, chart: &Chart<A>, t: u32, errors: &mut u32) -> bool {
        match &chart.trans[t as usize].cond {
            None => true,
            Some(c) => match expr::eval_cond(c, &self.env(chart)) {
                Ok(b) => b,
                Err(_) => {
                    *errors += 1;
                    false
                }
            },
        }
    }

    fn first_enabled<A>(&self, chart: &Chart<A>, cands: &[u32], errors: &mut u32) -> Option<u32> {
        cands
            .iter()
            .copied()
            .find(|&t| self.cond_true(chart, t, errors))
    }

    fn first_enabled_slow<A>(
        &self,
        chart: &Chart<A>,
        s: u32,
        name: &str,
        errors: &mut u32,
    ) -> Option<u32> {
        let mut a = s;
        loop {
            for t in chart.states[a as usize].transitions.clone() {
                let tr = &chart.trans[t as usize];
                if tr.events.iter().any(|d| descriptor_matches(d, name))
                    && self.cond_true(chart, t, errors)
                {
                    return Some(t);
                }
            }
            if a == 0 {
                return None;
            }
            a = chart.states[a as usize].parent;
        }
    }

    /// Effective targets of transition `t` (history resolved) into `out`.
    fn effective_targets<A>(&self, chart: &Chart<A>, t: u32, out: &mut Vec<u32>) {
        out.clear();
        for &x in &chart.trans[t as usize].targets {
            self.push_effective(chart, x, out, 0);
        }
    }

    fn push_effective<A>(&self, chart: &Chart<A>, x: u32, out: &mut Vec<u32>, depth: u32) {
        let st = &chart.states[x as usize];
        if let Kind::History { .. } = st.kind {
            let h = self.history_bits(chart, st.history_slot);
            if h.iter().any(|&w| w != 0) {
                out.extend(ones(h));
            } else if let Some(dt) = st.initial {
                if depth < 8 {
                    for &y in &chart.trans[dt as usize].targets {
                        self.push_effective(chart, y, out, depth + 1);
                    }
                }
            }
        } else {
            out.push(x);
        }
    }

    fn history_bits<A>(&self, chart: &Chart<A>, slot: u32) -> &[u64] {
        let w = chart.words;
        let lo = slot as usize * w;
        self.history.get(lo..lo + w).unwrap_or(&[])
    }

    fn domain<A>(&self, chart: &Chart<A>, t: u32, tmp: &mut Vec<u32>) -> Option<u32> {
        let tr = &chart.trans[t as usize];
        if tr.targets.is_empty() {
            return None;
        }
        if !tr.history_target {
            return tr.domain;
        }
        self.effective_targets(chart, t, tmp);
        let src = tr.source;
        if tr.internal
            && chart.states[src as usize].kind == Kind::Compound
            && tmp.iter().all(|&x| chart.is_descendant(x, src))
        {
            return Some(src);
        }
        Some(super::compile::lcca(&chart.states, src, tmp))
    }

    fn exit_set<A>(&self, chart: &Chart<A>, t: u32, out: &mut [u64], tmp: &mut Vec<u32>) {
        if let Some(d) = self.domain(chart, t, tmp) {
            let end = chart.states[d as usize].desc_end;
            for s in d + 1..end {
                if bit(&self.config, s) {
                    set_bit(out, s);
                }
            }
        }
    }

    fn remove_conflicts<A, H>(&mut self, rt: &mut Rt<'_, A, H>) {
        let chart = rt.chart;
        let words = chart.words;
        let sc: &mut Scratch = rt.sc.get_or_insert_with(take_scratch);
        sc.filtered.clear();
        for &t1 in rt.enabled.as_slice() {
            reset(&mut sc.exit_a, words);
            self.exit_set(chart, t1, &mut sc.exit_a, &mut sc.targets);
            let mut preempted = false;
            let mut i = 0;
            while i < sc.filtered.len() {
                let t2 = sc.filtered[i];
                reset(&mut sc.exit_b, words);
                self.exit_set(chart, t2, &mut sc.exit_b, &mut sc.targets);
                let overlap = sc.exit_a.iter().zip(&sc.exit_b).any(|(a, b)| a & b != 0);
                if overlap {
                    let s1 = chart.trans[t1 as usize].source;
                    let s2 = chart.trans[t2 as usize].source;
                    if chart.is_descendant(s1, s2) {
                        sc.filtered.remove(i);
                        continue;
                    }
                    preempted = true;
                    break;
                }
                i += 1;
            }
            if !preempted {
                sc.filtered.push(t1);
            }
        }
        rt.enabled.clear();
        for &t in &sc.filtered {
            rt.enabled.push(t);
        }
    }

    fn exit_states<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) {
        let chart = rt.chart;
        let words = chart.words;
        let sc: &mut Scratch = rt.sc.get_or_insert_with(take_scratch);
        reset(&mut sc.exit, words);
        for &t in rt.enabled.as_slice() {
            self.exit_set(chart, t, &mut sc.exit, &mut sc.targets);
        }
        if sc.exit.iter().all(|&w| w == 0) {
            return;
        }
        let exit = std::mem::take(&mut sc.exit);
        // Record histories first.
        for s in ones(&exit).rev() {
            let st = &chart.states[s as usize];
            for &h in &st.histories {
                let hs = &chart.states[h as usize];
                let deep = matches!(hs.kind, Kind::History { deep: true });
                let lo = hs.history_slot as usize * words;
                for w in 0..words {
                    self.history[lo + w] = 0;
                }
                for x in s + 1..st.desc_end {
                    let rec = if deep {
                        chart.is_atomic(x)
                    } else {
                        chart.states[x as usize].parent == s
                    };
                    if rec && bit(&self.config, x) {
                        set_bit(&mut self.history[lo..lo + words], x);
                    }
                }
            }
        }
        for s in ones(&exit).rev() {
            for block in &chart.states[s as usize].onexit {
                let _ = self.exec_block(rt, block);
            }
            clear_bit(&mut self.config, s);
            self.cancel_invokes(s);
        }
        if let Some(sc) = rt.sc.as_mut() {
            sc.exit = exit;
        }
    }

    fn enter_states<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) {
        let chart = rt.chart;
        let words = chart.words;
        {
            let sc: &mut Scratch = rt.sc.get_or_insert_with(take_scratch);
            reset(&mut sc.enter, words);
            reset(&mut sc.default_entry, words);
            sc.default_hist.clear();
            let mut tmp = std::mem::take(&mut sc.targets);
            for &t in rt.enabled.as_slice() {
                for &x in &chart.trans[t as usize].targets {
                    self.add_descendants(chart, x, sc);
                }
                let domain = self.domain(chart, t, &mut tmp);
                self.effective_targets(chart, t, &mut tmp);
                for &x in &tmp {
                    self.add_ancestors(chart, x, domain.unwrap_or(0), sc);
                }
            }
            sc.targets = tmp;
        }
        let (enter, default_entry, default_hist) = match rt.sc.as_mut() {
            Some(sc) => (
                std::mem::take(&mut sc.enter),
                std::mem::take(&mut sc.default_entry),
                std::mem::take(&mut sc.default_hist),
            ),
            None => return,
        };
        for s in ones(&enter) {
            self.enter_state(rt, s, bit(&default_entry, s), &default_hist);
        }
        if let Some(sc) = rt.sc.as_mut() {
            sc.enter = enter;
            sc.default_entry = default_entry;
            sc.default_hist = default_hist;
        }
        if self.phase == Phase::Final {
            self.exit_interpreter(rt);
        }
    }

    /// Enters one state: datamodel (late binding), `onentry`, initial or default-history
    /// content, `done.state.ID` events.
    fn enter_state<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        s: u32,
        default_entry: bool,
        default_hist: &[(u32, u32)],
    ) {
        let chart = rt.chart;
        set_bit(&mut self.config, s);
        let st = &chart.states[s as usize];
        if !st.invokes.is_empty() && !self.to_invoke.contains(&s) {
            self.to_invoke.push(s);
        }
        if chart.late_binding && !bit(&self.inited, s) {
            self.init_data(rt, s);
        }
        for block in &st.onentry {
            let _ = self.exec_block(rt, block);
        }
        if default_entry {
            if let Some(t) = st.initial {
                let _ = self.exec_block(rt, &chart.trans[t as usize].body);
            }
        }
        for &(p, ht) in default_hist {
            if p == s {
                let _ = self.exec_block(rt, &chart.trans[ht as usize].body);
            }
        }
        if st.kind == Kind::Final {
            let parent = st.parent;
            if parent == 0 {
                if st.donedata.is_some() {
                    self.done_value = self.done_data(rt, s);
                }
                self.phase = Phase::Final;
            } else {
                let data = self.done_data(rt, s);
                self.raise_done(chart, parent, data);
                let gp = chart.states[parent as usize].parent;
                if chart.states[gp as usize].kind == Kind::Parallel
                    && chart.states[gp as usize]
                        .children
                        .iter()
                        .all(|&c| self.in_final(chart, c))
                {
                    self.raise_done(chart, gp, Value::Null);
                }
            }
        }
    }

    fn exit_interpreter<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) {
        let chart = rt.chart;
        let active: Vec<u32> = ones(&self.config).collect();
        for &s in active.iter().rev() {
            for block in &chart.states[s as usize].onexit {
                let _ = self.exec_block(rt, block);
            }
        }
        self.internal.clear();
        self.external.clear();
        self.pending.clear();
        self.children.clear();
        self.to_invoke.clear();
    }

    fn raise_done<A>(&mut self, chart: &Chart<A>, state: u32, data: Value) {
        if let Some(sym) = chart.states[state as usize].done {
            self.internal.push_back(Event {
                name: EvName::Sym(sym),
                kind: EvKind::Internal,
                data,
                meta: None,
            });
        }
    }

    fn in_final<A>(&self, chart: &Chart<A>, s: u32) -> bool {
        let st = &chart.states[s as usize];
        match st.kind {
            Kind::Compound => st
                .children
                .iter()
                .any(|&c| bit(&self.config, c) && chart.states[c as usize].kind == Kind::Final),
            Kind::Parallel => st.children.iter().all(|&c| self.in_final(chart, c)),
            _ => false,
        }
    }

    fn add_descendants<A>(&self, chart: &Chart<A>, x: u32, sc: &mut Scratch) {
        let st = &chart.states[x as usize];
        match st.kind {
            Kind::History { .. } => {
                let h = self.history_bits(chart, st.history_slot);
                if h.iter().any(|&w| w != 0) {
                    let recorded: Vec<u32> = ones(h).collect();
                    for &y in &recorded {
                        self.add_descendants(chart, y, sc);
                    }
                    for &y in &recorded {
                        self.add_ancestors(chart, y, st.parent, sc);
                    }
                } else if let Some(dt) = st.initial {
                    sc.default_hist.push((st.parent, dt));
                    for &y in &chart.trans[dt as usize].targets {
                        self.add_descendants(chart, y, sc);
                    }
                    for &y in &chart.trans[dt as usize].targets {
                        self.add_ancestors(chart, y, st.parent, sc);
                    }
                }
            }
            _ => {
                set_bit(&mut sc.enter, x);
                match st.kind {
                    Kind::Compound => {
                        set_bit(&mut sc.default_entry, x);
                        if let Some(it) = st.initial {
                            for &y in &chart.trans[it as usize].targets {
                                self.add_descendants(chart, y, sc);
                            }
                            for &y in &chart.trans[it as usize].targets {
                                self.add_ancestors(chart, y, x, sc);
                            }
                        }
                    }
                    Kind::Parallel => {
                        for &c in &st.children {
                            let end = chart.states[c as usize].desc_end;
                            if !any_in(&sc.enter, c + 1, end) {
                                self.add_descendants(chart, c, sc);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn add_ancestors<A>(&self, chart: &Chart<A>, x: u32, ancestor: u32, sc: &mut Scratch) {
        let mut a = x;
        while a != 0 {
            a = chart.states[a as usize].parent;
            if a == ancestor || a == 0 {
                break;
            }
            set_bit(&mut sc.enter, a);
            if chart.states[a as usize].kind == Kind::Parallel {
                for &c in &chart.states[a as usize].children {
                    let end = chart.states[c as usize].desc_end;
                    if !any_in(&sc.enter, c + 1, end) {
                        self.add_descendants(chart, c, sc);
                    }
                }
            }
        }
    }

    fn init_data<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>, s: u32) {
        let chart = rt.chart;
        if chart.late_binding {
            set_bit(&mut self.inited, s);
        }
        if chart.datamodel.is_host() {
            self.init_host_data(rt, s);
            return;
        }
        for (slot, init) in &chart.states[s as usize].data {
            let v = match init {
                None => Ok(Value::Null),
                Some(Spec::Lit(v)) => Ok(v.clone()),
                Some(Spec::Expr(e)) => expr::eval(e, &self.env(chart)),
                Some(Spec::Src(uri)) => rt
                    .host
                    .load(&chart.file, uri)
                    .map(|text| super::compile::inline_value(&text).unwrap_or(Value::Null)),
            };
            let v = match v {
                Ok(v) => v,
                Err(msg) => {
                    self.raise_error(rt, false, &msg);
                    Value::Null
                }
            };
            if let Some(x) = self.vars.get_mut(*slot as usize) {
                *x = Some(v);
            }
        }
        // Late binding: variables of states not yet entered exist, unassigned.
        if chart.late_binding && s == 0 {
            for st in &chart.states[1..] {
                for (slot, _) in &st.data {
                    if let Some(x) = self.vars.get_mut(*slot as usize) {
                        if x.is_none() {
                            *x = Some(Value::Null);
                        }
                    }
                }
            }
        }
    }

    /// [`Instance::init_data`] for an ECMAScript or XPath datamodel.
    fn init_host_data<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>, s: u32) {
        let chart = rt.chart;
        for (slot, init) in &chart.states[s as usize].data {
            let name = chart.vars.get(*slot as usize).cloned().unwrap_or_default();
            let r = match init {
                None => self.with_model(chart, |m| m.declare(&name, Init::None)),
                Some(Spec::Lit(v)) => self.with_model(chart, |m| m.declare(&name, Init::Value(v))),
                Some(Spec::Expr(Expr::Host(src))) => {
                    self.with_model(chart, |m| m.declare(&name, Init::Expr(src)))
                }
                Some(Spec::Expr(_)) => Err("not an expression of the datamodel".into()),
                Some(Spec::Src(uri)) => match rt.host.load(&chart.file, uri) {
                    Ok(text) => {
                        let v = host::text_value(chart.datamodel, &text);
                        self.with_model(chart, |m| m.declare(&name, Init::Value(&v)))
                    }
                    Err(msg) => {
                        let _ = self.with_model(chart, |m| m.declare(&name, Init::None));
                        Err(msg)
                    }
                },
            };
            if let Err(msg) = r {
                self.raise_error(rt, false, &msg);
            }
        }
        if chart.late_binding && s == 0 {
            for st in &chart.states[1..] {
                for (slot, _) in &st.data {
                    let name = chart.vars.get(*slot as usize).cloned().unwrap_or_default();
                    let _ = self.with_model(chart, |m| m.declare(&name, Init::None));
                }
            }
        }
    }

    /// Runs `f` on the datamodel, after binding `_event` (if another event was taken since)
    /// and the active states (if they changed).
    fn with_model<A, R>(
        &self,
        chart: &Chart<A>,
        f: impl FnOnce(&mut dyn HostModel) -> Result<R, String>,
    ) -> Result<R, String> {
        let Some(cell) = &self.model else {
            return Err("the session has no datamodel (it could not be created)".into());
        };
        let mut guard = cell
            .0
            .lock()
            .map_err(|_| "the datamodel failed earlier".to_string())?;
        let st = &mut *guard;
        if st.event_seq != self.event_seq {
            st.event_seq = self.event_seq;
            if let Some(ev) = &self.last_event {
                let _ = st.model.set_event(&event_value(chart, ev));
            }
        }
        if !st.active.iter().copied().eq(ones(&self.config)) {
            st.active = ones(&self.config).collect();
            let names: Vec<&str> = st
                .active
                .iter()
                .map(|&s| chart.states.get(s as usize).map_or("", |x| &*x.id))
                .collect();
            st.model.set_active(&names);
        }
        f(&mut *st.model)
    }

    /// A `namelist` entry's value.
    fn namelist_value<A>(&self, chart: &Chart<A>, name: &str, slot: u32) -> Option<Value> {
        if chart.datamodel.is_host() {
            return self.with_model(chart, |m| m.read(name)).ok();
        }
        self.vars
            .get(slot as usize)
            .and_then(Option::as_ref)
            .cloned()
    }

    fn done_data<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>, s: u32) -> Value {
        let chart = rt.chart;
        let Some((content, params)) = &chart.states[s as usize].donedata else {
            return Value::Null;
        };
        let r = (|| -> Result<Value, String> {
            if let Some(c) = content {
                return self.eval_spec(chart, c);
            }
            let mut m = BTreeMap::new();
            for (k, e) in params {
                m.insert(k.to_string(), expr::eval(e, &self.env(chart))?);
            }
            Ok(Value::map(m))
        })();
        match r {
            Ok(v) => v,
            Err(msg) => {
                self.raise_error(rt, false, &msg);
                Value::Null
            }
        }
    }

    /// Runs a block; on the first error raises `error.execution` and stops the block.
    fn exec_block<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>, ops: &[Op]) -> Result<(), ()> {
        for op in ops {
            if let Err((communication, msg)) = self.exec(rt, op) {
                if !msg.is_empty() {
                    self.raise_error(rt, communication, &msg);
                }
                if !communication {
                    return Err(());
                }
            }
        }
        Ok(())
    }

    fn eval_spec<A>(&self, chart: &Chart<A>, s: &Spec) -> Result<Value, String> {
        match s {
            Spec::Lit(v) => Ok(v.clone()),
            Spec::Expr(e) => expr::eval(e, &self.env(chart)),
            Spec::Src(uri) => Err(format!("src=\"{uri}\" is only read by <data>")),
        }
    }

    fn exec<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        op: &Op,
    ) -> Result<(), (bool, String)> {
        let chart = rt.chart;
        let x = |m: String| (false, m);
        match op {
            Op::Raise(_) if self.internal.len() >= MAX_QUEUED => {
                return Err(x(format!("internal queue full ({MAX_QUEUED} events)")));
            }
            Op::Raise(sym) => self.internal.push_back(Event {
                name: EvName::Sym(*sym),
                kind: EvKind::Internal,
                data: Value::Null,
                meta: None,
            }),
            Op::Send(s) => return self.send(rt, s),
            Op::Cancel(spec) => {
                let id = self.eval_spec(chart, spec).map_err(x)?;
                let id = id.to_string();
                self.pending
                    .retain(|p| p.id.as_deref() != Some(id.as_str()));
            }
            Op::Log(label, e) => {
                let v = match e {
                    Some(e) => expr::eval(e, &self.env(chart)).map_err(x)?,
                    None => Value::Null,
                };
                rt.host.log(label, &v);
            }
            Op::Assign(loc, spec) => {
                let v = self.eval_spec(chart, spec).map_err(x)?;
                self.assign(chart, loc, v, false).map_err(x)?;
            }
            Op::If(branches) => {
                for (cond, block) in branches {
                    let take = match cond {
                        None => true,
                        Some(c) => expr::eval_cond(c, &self.env(chart)).map_err(x)?,
                    };
                    if take {
                        return self
                            .exec_block(rt, block)
                            .map_err(|()| (false, String::new()));
                    }
                }
            }
            Op::Foreach {
                array,
                item,
                index,
                body,
            } => {
                let list = match expr::eval(array, &self.env(chart)).map_err(x)? {
                    Value::List(l) => l,
                    other => {
                        return Err(x(format!(
                            "foreach over a {} (expected a list)",
                            other.type_name()
                        )))
                    }
                };
                for (i, v) in list.iter().enumerate() {
                    self.assign(chart, item, v.clone(), true).map_err(x)?;
                    if let Some(ix) = index {
                        self.assign(chart, ix, Value::Number(i as f64), true)
                            .map_err(x)?;
                    }
                    self.exec_block(rt, body)
                        .map_err(|()| (false, String::new()))?;
                }
            }
            Op::Custom(i) => {
                let Some(action) = chart.actions.get(*i as usize) else {
                    return Ok(());
                };
                let mut vars = Vars {
                    map: &chart.var_map,
                    slots: &mut self.vars,
                    event: self.last_event.as_ref(),
                    symbols: &chart.symbols,
                };
                rt.host.execute(action, &mut vars).map_err(x)?;
            }
            Op::Script(stmts) => self.script(chart, stmts).map_err(x)?,
            Op::HostScript(src) => self.with_model(chart, |m| m.script(src)).map_err(x)?,
            Op::ScriptSrc(uri) if chart.datamodel.is_host() => {
                let text = rt.host.load(&chart.file, uri).map_err(x)?;
                self.with_model(chart, |m| m.script(&text)).map_err(x)?;
            }
            Op::HostAssign {
                location,
                value,
                kind,
                attr,
            } => {
                let init = match value {
                    Spec::Expr(Expr::Host(src)) => Init::Expr(src),
                    Spec::Lit(v) => Init::Value(v),
                    _ => return Err(x("not a value of the datamodel".into())),
                };
                self.with_model(chart, |m| {
                    m.assign(location, init, kind.as_deref(), attr.as_deref())
                })
                .map_err(x)?;
            }
            Op::HostForeach {
                array,
                item,
                index,
                body,
            } => {
                let n = self
                    .with_model(chart, |m| m.foreach_start(array))
                    .map_err(x)?;
                let mut r = Ok(());
                for i in 0..n {
                    if let Err(msg) =
                        self.with_model(chart, |m| m.foreach_bind(item, index.as_deref(), i))
                    {
                        r = Err(x(msg));
                        break;
                    }
                    if self.exec_block(rt, body).is_err() {
                        r = Err((false, String::new()));
                        break;
                    }
                }
                let _ = self.with_model(chart, |m| {
                    m.foreach_end();
                    Ok(())
                });
                return r;
            }
            Op::ScriptSrc(uri) => {
                let text = rt.host.load(&chart.file, uri).map_err(x)?;
                let stmts = invoke::parse_runtime_script(chart, &text).map_err(x)?;
                self.script(chart, &stmts).map_err(x)?;
            }
            Op::Nop => {}
        }
        Ok(())
    }

    /// Runs `<script>` statements in order; the first error stops the script.
    fn script<A>(&mut self, chart: &Chart<A>, stmts: &[expr::Stmt]) -> Result<(), String> {
        for st in stmts {
            match st {
                expr::Stmt::Var(loc, e) => {
                    let v = match e {
                        Some(e) => expr::eval(e, &self.env(chart))?,
                        None => Value::Null,
                    };
                    self.assign(chart, loc, v, true)?;
                }
                expr::Stmt::Assign(loc, e) => {
                    let v = expr::eval(e, &self.env(chart))?;
                    self.assign(chart, loc, v, false)?;
                }
                expr::Stmt::Expr(e) => {
                    expr::eval(e, &self.env(chart))?;
                }
            }
        }
        Ok(())
    }

    fn assign<A>(
        &mut self,
        chart: &Chart<A>,
        loc: &Location,
        v: Value,
        declare: bool,
    ) -> Result<(), String> {
        let (slot, path) = match loc {
            Location::System(s) => {
                return Err(format!("cannot assign the system variable {}", s.name()))
            }
            Location::Host(l) => {
                return self.with_model(chart, |m| m.assign(l, Init::Value(&v), None, None));
            }
            Location::Var(slot, path) => (*slot, path),
        };
        // Evaluate indexes first (they read the datamodel).
        let mut keys = Vec::with_capacity(path.len());
        for step in path {
            keys.push(match step {
                PathStep::Member(m) => Value::String(m.clone()),
                PathStep::Index(e) => expr::eval(e, &self.env(chart))?,
            });
        }
        let name = chart.vars.get(slot as usize).cloned();
        let cell = self
            .vars
            .get_mut(slot as usize)
            .ok_or_else(|| "bad slot".to_string())?;
        if cell.is_none() && !(declare && path.is_empty()) {
            return Err(format!(
                "assignment to undeclared variable {}",
                name.as_deref().unwrap_or("?")
            ));
        }
        if path.is_empty() {
            *cell = Some(v);
            return Ok(());
        }
        let mut cur = cell.get_or_insert(Value::Null);
        for k in &keys {
            cur = match (cur, k) {
                (Value::Map(m), Value::String(key)) => Arc::make_mut(m)
                    .entry(key.to_string())
                    .or_insert(Value::Null),
                (Value::List(l), Value::Number(n)) => {
                    let l = Arc::make_mut(l);
                    if n.fract() != 0.0 || *n < 0.0 || *n >= l.len() as f64 {
                        return Err(format!("index {n} out of range"));
                    }
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    &mut l[*n as usize]
                }
                (other, _) => {
                    return Err(format!(
                        "cannot assign into a {} (expected a map or list)",
                        other.type_name()
                    ))
                }
            };
        }
        *cur = v;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::ones;

    #[test]
    fn set_bits_both_ways() {
        let bits = [0b1010_u64, 0, 1 << 63 | 1, 0b110];
        let up: Vec<u32> = ones(&bits).collect();
        assert_eq!(up, [1, 3, 128, 191, 193, 194]);
        let down: Vec<u32> = ones(&bits).rev().collect();
        assert_eq!(down, [194, 193, 191, 128, 3, 1]);
        let mut it = ones(&bits);
        assert_eq!(
            (it.next(), it.next_back(), it.next(), it.next_back()),
            (Some(1), Some(194), Some(3), Some(193))
        );
        assert_eq!(it.collect::<Vec<_>>(), [128, 191]);
        assert_eq!(ones(&[]).count(), 0);
        assert_eq!(ones(&[0, 0]).next_back(), None);
        let one = [1u64 << 5 | 1 << 7];
        assert_eq!(ones(&one).rev().collect::<Vec<_>>(), [7, 5]);
        let mut it = ones(&one);
        assert_eq!(
            (it.next(), it.next_back(), it.next()),
            (Some(5), Some(7), None)
        );
    }
}

//! Compiling a [`Document`] into an immutable, shareable [`Chart`].
//!
//! - States are numbered in document order (pre-order; the `<scxml>` root is 0), so "is a
//!   descendant of" is a range check and entry/exit order is index order.
//! - Every event name the chart mentions (transition descriptors, `raise`, literal `send`
//!   events, `done.state.ID`, `error.*`, names an [`Extension`] declares) is interned to a
//!   [`Symbol`]. For each (state, symbol) the chart stores the candidate transitions of the
//!   state and its ancestors in selection order (the state's own first, each in document
//!   order); descriptor matching (token prefix, `*`) is resolved here, so the run time does
//!   one table lookup per active atomic state and never compares strings for known events.
//!   Names not known at compile time (a dynamic `eventexpr`, a host's unknown event) take a
//!   slow path that matches descriptors by string.
//! - Variables are slots; expressions are parsed once into [`Expr`] trees.
//! - Executable content is a list of [`Op`]s; custom elements are compiled once by the
//!   [`Extension`] and referenced by index.

use std::collections::HashMap;
use std::sync::Arc;

use viastack_kernel::time::Duration;

use super::expr::{self, Expr, Location, Names};
use super::model::{
    Content, DataNode, Document, Exec, InvokeContent, InvokeNode, Param, StateKind, StateNode,
    TransitionNode,
};
use super::value::Value;
use super::{validate, verify, Diagnostic, Diagnostics, Extension, Pos};

/// An interned event name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Symbol(pub u32);

/// A state's index in document order (the root `<scxml>` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateId(pub u32);

/// The compiled kind of a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No child states.
    Atomic,
    /// Child states, one active at a time (also the root).
    Compound,
    /// Child states, all active.
    Parallel,
    /// `<final>`.
    Final,
    /// `<history>` pseudo-state.
    History {
        /// Deep history.
        deep: bool,
    },
}

/// How a value is given: a literal or an expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// Known at compile time.
    Lit(Value),
    /// Evaluated at run time.
    Expr(Expr),
    /// `<data src=…>`: fetched through the host's loader when the data is bound.
    Src(Arc<str>),
}

/// What a compiled `<invoke>` starts.
#[derive(Clone, Debug)]
pub enum InvokeSource {
    /// An inline `<content><scxml>` document, compiled with the parent.
    Chart(Arc<Chart<()>>),
    /// `<content expr=…>`: the document's text, compiled when the invoke runs.
    Expr(Expr),
    /// `<content>` text.
    Text(Arc<str>),
}

/// A compiled `<invoke>` (W3C SCXML §6.4).
#[derive(Clone, Debug)]
pub struct InvokeOp {
    /// Where.
    pub pos: Pos,
    /// `type` / `typeexpr`.
    pub type_: Option<Spec>,
    /// `src` / `srcexpr`: a URI the host's loader fetches.
    pub src: Option<Spec>,
    /// `<content>`.
    pub content: Option<InvokeSource>,
    /// `id`.
    pub id: Option<Arc<str>>,
    /// `idlocation`.
    pub idlocation: Option<Location>,
    /// `namelist`: (name, slot).
    pub namelist: Vec<(Arc<str>, u32)>,
    /// `<param>`s.
    pub params: Vec<(Arc<str>, Expr)>,
    /// `autoforward="true"`.
    pub autoforward: bool,
    /// `<finalize>`.
    pub finalize: Vec<Op>,
}

/// A compiled `<send>`.
#[derive(Clone, Debug, PartialEq)]
pub struct SendOp {
    /// Where (for messages).
    pub pos: Pos,
    /// The event name: an interned symbol, or an expression.
    pub event: Option<Result<Symbol, Expr>>,
    /// `target` / `targetexpr`.
    pub target: Option<Spec>,
    /// `type` / `typeexpr`.
    pub type_: Option<Spec>,
    /// `id`.
    pub id: Option<Arc<str>>,
    /// `idlocation`.
    pub idlocation: Option<Location>,
    /// `delay` (parsed) / `delayexpr`.
    pub delay: Option<Result<Duration, Expr>>,
    /// `namelist`: (name, slot).
    pub namelist: Vec<(Arc<str>, u32)>,
    /// `<param>`s: (name, value).
    pub params: Vec<(Arc<str>, Expr)>,
    /// `<content>`.
    pub content: Option<Spec>,
}

/// Compiled executable content.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `<raise>`.
    Raise(Symbol),
    /// `<send>`.
    Send(Box<SendOp>),
    /// `<cancel>`.
    Cancel(Spec),
    /// `<log>`.
    Log(Arc<str>, Option<Expr>),
    /// `<assign>`.
    Assign(Location, Spec),
    /// `<if>`: branches (cond, block); `None` = else.
    If(Vec<(Option<Expr>, Vec<Op>)>),
    /// `<foreach>`.
    Foreach {
        /// The list.
        array: Expr,
        /// Item variable.
        item: Location,
        /// Index variable.
        index: Option<Location>,
        /// Body.
        body: Vec<Op>,
    },
    /// A custom action (index into the chart's actions).
    Custom(u32),
    /// `<script>` with inline statements.
    Script(Vec<expr::Stmt>),
    /// `<script src=…>`: fetched through the host's loader and run.
    ScriptSrc(Arc<str>),
    /// `<script>` of the ECMAScript datamodel, run by the instance's
    /// [`HostModel`](super::host::HostModel).
    HostScript(Arc<str>),
    /// `<assign>` of the ECMAScript or XPath datamodel: location, value, the XPath profile's
    /// `type=` and `attr=`.
    HostAssign {
        /// `location`.
        location: Arc<str>,
        /// `expr` (as [`Expr::Host`]) or inline content.
        value: Spec,
        /// `type`.
        kind: Option<Arc<str>>,
        /// `attr`.
        attr: Option<Arc<str>>,
    },
    /// `<foreach>` of the ECMAScript or XPath datamodel.
    HostForeach {
        /// `array`.
        array: Arc<str>,
        /// `item`.
        item: Arc<str>,
        /// `index`.
        index: Option<Arc<str>>,
        /// Body.
        body: Vec<Op>,
    },
    /// Does nothing (an empty `<script>`).
    Nop,
}

/// Compiled `<donedata>`: `<content>`, or `<param>`s (name, value).
pub type DoneDataOp = (Option<Spec>, Vec<(Arc<str>, Expr)>);

/// One compiled state.
#[derive(Clone, Debug)]
pub struct StateInfo {
    /// `id` (the root's is the document name or "scxml"; anonymous states get "#N").
    pub id: Arc<str>,
    /// Whether the id was written in the document.
    pub named: bool,
    /// Kind.
    pub kind: Kind,
    /// Parent index (the root's parent is itself).
    pub parent: u32,
    /// Descendants are the indexes `self+1 .. desc_end`.
    pub desc_end: u32,
    /// Child states (not history) in document order.
    pub children: Vec<u32>,
    /// History pseudo-states among the children.
    pub histories: Vec<u32>,
    /// Initial transition (index into transitions) of a compound state.
    pub initial: Option<u32>,
    /// Own transitions (a range of the chart's transitions).
    pub transitions: std::ops::Range<u32>,
    /// `<onentry>` blocks.
    pub onentry: Vec<Vec<Op>>,
    /// `<onexit>` blocks.
    pub onexit: Vec<Vec<Op>>,
    /// `<data>` of this state: (slot, initial value).
    pub data: Vec<(u32, Option<Spec>)>,
    /// `<donedata>` of a final state: content, or params.
    pub donedata: Option<DoneDataOp>,
    /// `done.state.ID` symbol (compound and parallel states with an id).
    pub done: Option<Symbol>,
    /// Index among the chart's history states (history only).
    pub history_slot: u32,
    /// `<invoke>`s in document order.
    pub invokes: Vec<InvokeOp>,
    /// Where the element starts.
    pub pos: Pos,
}

/// One compiled transition.
#[derive(Clone, Debug)]
pub struct TransInfo {
    /// Source state.
    pub source: u32,
    /// Event descriptors as written (normalised: no trailing `.*`/`.`); empty = eventless.
    pub events: Vec<Arc<str>>,
    /// `cond`.
    pub cond: Option<Expr>,
    /// Targets.
    pub targets: Vec<u32>,
    /// `type="internal"`.
    pub internal: bool,
    /// Executable content.
    pub body: Vec<Op>,
    /// Transition domain if it does not depend on history; `None` for targetless ones.
    pub domain: Option<u32>,
    /// Whether a target is a history state (domain computed at run time).
    pub history_target: bool,
    /// Fast path: source and single target are atomic children of the (compound) domain, so
    /// the exit set is the source alone and the entry set the target alone.
    pub simple: bool,
    /// Where the element starts.
    pub pos: Pos,
}

/// A compiled state chart: immutable, shared by every instance.
pub struct Chart<A> {
    pub(crate) file: String,
    pub(crate) name: Arc<str>,
    pub(crate) states: Vec<StateInfo>,
    pub(crate) trans: Vec<TransInfo>,
    pub(crate) symbols: Vec<Arc<str>>,
    pub(crate) symbol_map: HashMap<Arc<str>, Symbol>,
    /// Per (state × symbol): offsets into `cand`.
    pub(crate) cand_offs: Vec<u32>,
    pub(crate) cand: Vec<u32>,
    /// Per state: offsets into `eventless`.
    pub(crate) eventless_offs: Vec<u32>,
    pub(crate) eventless: Vec<u32>,
    pub(crate) vars: Vec<Arc<str>>,
    pub(crate) var_map: HashMap<Arc<str>, u32>,
    pub(crate) actions: Vec<A>,
    pub(crate) n_history: u32,
    pub(crate) words: usize,
    /// Bitset of atomic (and final) states.
    pub(crate) atomic: Vec<u64>,
    pub(crate) late_binding: bool,
    pub(crate) step_limit: u32,
    pub(crate) has_eventless: bool,
    /// What [`Instance::start`](super::Instance::start) enters, in order (state, default entry).
    pub(crate) initial_entry: Vec<(u32, bool)>,
    /// Default-history content run on that entry: (parent, transition).
    pub(crate) initial_history: Vec<(u32, u32)>,
    pub(crate) root_initial: u32,
    pub(crate) sym_error_execution: Symbol,
    pub(crate) sym_error_communication: Symbol,
    /// Top-level `<script>`s, run once after the datamodel is bound.
    pub(crate) scripts: Vec<Op>,
    /// The datamodel (`<scxml datamodel=…>`).
    pub(crate) datamodel: super::host::Datamodel,
}

impl<A> std::fmt::Debug for Chart<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chart")
            .field("name", &self.name)
            .field("states", &self.states.len())
            .field("transitions", &self.trans.len())
            .field("symbols", &self.symbols.len())
            .finish_non_exhaustive()
    }
}

/// Most (state × event name) entries a chart's transition table may have (16 MiB of
/// offsets): a larger document is rejected rather than exhausting memory.
pub const MAX_TABLE: usize = 1 << 22;

/// Most candidate-transition entries in a chart's table (64 MiB).
pub const MAX_CANDIDATES: usize = 1 << 24;

/// Default [`Chart::step_limit`]: steps (microsteps, internal and self-sent events) one call
/// may take before the run is stopped.
pub const DEFAULT_STEP_LIMIT: u32 = 10_000;

/// Whether descriptor `d` (normalised) matches event name `name` (W3C §3.12.1: token prefix).
pub fn descriptor_matches(d: &str, name: &str) -> bool {
    d == "*"
        || (name.len() >= d.len()
            && name.starts_with(d)
            && (name.len() == d.len() || name.as_bytes()[d.len()] == b'.'))
}

/// Normalises a descriptor: `a.b.*` and `a.b.` are `a.b`.
pub fn normalise_descriptor(d: &str) -> &str {
    let d = d.strip_suffix(".*").unwrap_or(d);
    let d = if d.len() > 1 {
        d.strip_suffix('.').unwrap_or(d)
    } else {
        d
    };
    d
}

/// Parses a delay: `1s`, `1.5s`, `.5s`, `200ms`, or a bare number of milliseconds.
pub fn parse_delay(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1e-3)
    };
    let v: f64 = num.trim().parse().ok()?;
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return None;
    }
    Some(Duration::from_secs_f64(secs))
}

struct Resolver {
    vars: Vec<Arc<str>>,
    var_map: HashMap<Arc<str>, u32>,
    states: HashMap<String, u32>,
}

impl Names for Resolver {
    fn var(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.var_map.get(name) {
            return s;
        }
        let s = u32::try_from(self.vars.len()).unwrap_or(u32::MAX);
        let n: Arc<str> = Arc::from(name);
        self.vars.push(n.clone());
        self.var_map.insert(n, s);
        s
    }
    fn state(&self, id: &str) -> Option<u32> {
        self.states.get(id).copied()
    }
}

struct Compiler<'e, E: Extension> {
    file: String,
    ext: &'e E,
    res: Resolver,
    diags: Vec<Diagnostic>,
    symbols: Vec<Arc<str>>,
    symbol_map: HashMap<Arc<str>, Symbol>,
    actions: Vec<E::Action>,
    states: Vec<StateInfo>,
    trans: Vec<TransInfo>,
    /// (owner state, transition node) for initial/history-default transitions, built later.
    pending_initial: Vec<(u32, TransitionNode)>,
    n_history: u32,
    scripts: Vec<Op>,
    /// The datamodel: expressions are kept as text for a host datamodel.
    dm: super::host::Datamodel,
}

impl<A> Chart<A> {
    /// Validates, verifies and compiles `doc`. `Ok` carries the warnings.
    ///
    /// # Errors
    /// Every error found by validation, verification, expression parsing or the extension.
    pub fn compile<E: Extension<Action = A>>(
        doc: &Document,
        ext: &E,
    ) -> Result<(Chart<A>, Vec<Diagnostic>), Diagnostics> {
        let mut diags = doc.warnings.clone();
        diags.extend(validate::validate(doc));
        if diags.iter().any(Diagnostic::is_error) {
            return Err(Diagnostics(
                diags.into_iter().filter(Diagnostic::is_error).collect(),
            ));
        }
        let mut c = Compiler {
            file: doc.file.clone(),
            ext,
            res: Resolver {
                vars: Vec::new(),
                var_map: HashMap::new(),
                states: HashMap::new(),
            },
            diags: Vec::new(),
            symbols: Vec::new(),
            symbol_map: HashMap::new(),
            actions: Vec::new(),
            states: Vec::new(),
            trans: Vec::new(),
            pending_initial: Vec::new(),
            n_history: 0,
            scripts: Vec::new(),
            dm: doc.datamodel,
        };
        // Pass 1: number states so In() and targets resolve.
        number_states(&doc.root, &mut c.res.states, &mut 0);
        c.symbol("error.execution");
        c.symbol("error.communication");
        c.symbol("error.platform");
        let root_name = doc.name.clone().unwrap_or_else(|| "scxml".into());
        c.state(&doc.root, 0, Some(&root_name));
        let pending = std::mem::take(&mut c.pending_initial);
        for (owner, t) in &pending {
            let id = c.transition(*owner, t);
            // For a history state, `initial` is its default transition.
            c.states[*owner as usize].initial = Some(id);
        }
        let mut chart = c.finish(doc.late_binding)?;
        let (entry, history) = super::engine::Instance::initial_entry(&chart);
        chart.initial_entry = entry;
        chart.initial_history = history;
        let mut warnings = diags;
        let vdiags = verify::verify(doc, &chart, ext);
        warnings.extend(vdiags);
        let mut all = Diagnostics(warnings);
        all.sort();
        if all.has_errors() {
            all.0.retain(Diagnostic::is_error);
            return Err(all);
        }
        Ok((chart, all.0))
    }

    /// The symbol of an event name the chart mentions.
    pub fn symbol(&self, event_name: &str) -> Option<Symbol> {
        self.symbol_map.get(event_name).copied()
    }

    /// The name of a symbol.
    pub fn symbol_name(&self, s: Symbol) -> &str {
        self.symbols.get(s.0 as usize).map_or("", |n| n)
    }

    /// Every interned event name, by symbol.
    pub fn symbols(&self) -> impl Iterator<Item = (Symbol, &str)> {
        self.symbols
            .iter()
            .enumerate()
            .map(|(i, n)| (Symbol(u32::try_from(i).unwrap_or(u32::MAX)), &**n))
    }

    /// A state's id.
    pub fn state_name(&self, s: StateId) -> &str {
        self.states.get(s.0 as usize).map_or("", |st| &st.id)
    }

    /// The state with id `name`.
    pub fn state_id(&self, name: &str) -> Option<StateId> {
        self.states
            .iter()
            .position(|s| s.named && &*s.id == name)
            .map(|i| StateId(u32::try_from(i).unwrap_or(u32::MAX)))
    }

    /// Number of states (including the root and history pseudo-states).
    pub fn state_count(&self) -> usize {
        self.states.len()
    }

    /// Compiled states, in document order.
    pub fn states(&self) -> &[StateInfo] {
        &self.states
    }

    /// Compiled transitions.
    pub fn transitions(&self) -> &[TransInfo] {
        &self.trans
    }

    /// Variable names by slot.
    pub fn variables(&self) -> &[Arc<str>] {
        &self.vars
    }

    /// The compiled custom actions.
    pub fn actions(&self) -> &[A] {
        &self.actions
    }

    /// The file name the chart came from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The chart's name (`name` on `<scxml>`, or "scxml").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Steps (microsteps, internal events, self-sent events) one call may take before it is
    /// stopped with [`RunError::StepLimit`](super::RunError::StepLimit).
    pub fn step_limit(&self) -> u32 {
        self.step_limit
    }

    /// Sets [`Chart::step_limit`].
    pub fn set_step_limit(&mut self, steps: u32) {
        self.step_limit = steps.max(1);
    }

    pub(crate) fn candidates(&self, state: u32, sym: Symbol) -> &[u32] {
        let n = self.symbols.len();
        let i = state as usize * n + sym.0 as usize;
        let (a, b) = (self.cand_offs[i] as usize, self.cand_offs[i + 1] as usize);
        &self.cand[a..b]
    }

    pub(crate) fn eventless_of(&self, state: u32) -> &[u32] {
        let i = state as usize;
        let (a, b) = (
            self.eventless_offs[i] as usize,
            self.eventless_offs[i + 1] as usize,
        );
        &self.eventless[a..b]
    }

    pub(crate) fn is_descendant(&self, s: u32, anc: u32) -> bool {
        s > anc && s < self.states[anc as usize].desc_end
    }

    pub(crate) fn is_atomic(&self, s: u32) -> bool {
        self.atomic[s as usize / 64] & (1 << (s % 64)) != 0
    }
}

fn number_states(st: &StateNode, map: &mut HashMap<String, u32>, next: &mut u32) {
    let me = *next;
    *next += 1;
    if let Some(id) = &st.id {
        map.entry(id.text.clone()).or_insert(me);
    }
    for c in &st.children {
        number_states(c, map, next);
    }
}

impl<E: Extension> Compiler<'_, E> {
    fn error(&mut self, pos: Pos, msg: String) {
        self.diags.push(Diagnostic::error(&self.file, pos, msg));
    }

    fn symbol(&mut self, name: &str) -> Symbol {
        if let Some(&s) = self.symbol_map.get(name) {
            return s;
        }
        let s = Symbol(u32::try_from(self.symbols.len()).unwrap_or(u32::MAX));
        let n: Arc<str> = Arc::from(name);
        self.symbols.push(n.clone());
        self.symbol_map.insert(n, s);
        s
    }

    fn expr(&mut self, src: &super::model::Src) -> Option<Expr> {
        if self.dm.is_host() {
            return Some(Expr::Host(Arc::from(src.text.as_str())));
        }
        match expr::parse(&src.text, &mut self.res) {
            Ok(e) => Some(e),
            Err(e) => {
                self.error(
                    src.pos.right(e.offset),
                    format!("bad expression \"{}\": {}", src.text, e.message),
                );
                None
            }
        }
    }

    fn location(&mut self, src: &super::model::Src) -> Option<Location> {
        if self.dm.is_host() {
            return Some(Location::Host(Arc::from(src.text.as_str())));
        }
        match expr::parse_location(&src.text, &mut self.res) {
            Ok(l) => Some(l),
            Err(e) => {
                self.error(
                    src.pos.right(e.offset),
                    format!("bad location \"{}\": {}", src.text, e.message),
                );
                None
            }
        }
    }

    fn state(&mut self, st: &StateNode, parent: u32, root_name: Option<&str>) -> u32 {
        let me = u32::try_from(self.states.len()).unwrap_or(u32::MAX);
        let has_children = st
            .children
            .iter()
            .any(|c| !matches!(c.kind, StateKind::History { .. }));
        let kind = match st.kind {
            StateKind::Root => Kind::Compound,
            StateKind::State if has_children => Kind::Compound,
            StateKind::State => Kind::Atomic,
            StateKind::Parallel => Kind::Parallel,
            StateKind::Final => Kind::Final,
            StateKind::History { deep } => Kind::History { deep },
        };
        let (id, named): (Arc<str>, bool) = match (&st.id, root_name) {
            (_, Some(n)) => (Arc::from(n), false),
            (Some(id), None) => (Arc::from(id.text.as_str()), true),
            (None, None) => (Arc::from(format!("#{me}").as_str()), false),
        };
        let done = if named && matches!(kind, Kind::Compound | Kind::Parallel) {
            Some(self.symbol(&format!("done.state.{id}")))
        } else {
            None
        };
        let history_slot = if let Kind::History { .. } = kind {
            self.n_history += 1;
            self.n_history - 1
        } else {
            0
        };
        self.states.push(StateInfo {
            id,
            named,
            kind,
            parent,
            desc_end: me + 1,
            children: Vec::new(),
            histories: Vec::new(),
            initial: None,
            transitions: 0..0,
            onentry: Vec::new(),
            onexit: Vec::new(),
            data: Vec::new(),
            donedata: None,
            done,
            history_slot,
            invokes: Vec::new(),
            pos: st.pos,
        });
        let data: Vec<(u32, Option<Spec>)> = st.data.iter().filter_map(|d| self.data(d)).collect();
        let onentry = st.onentry.iter().map(|b| self.block(b)).collect();
        let onexit = st.onexit.iter().map(|b| self.block(b)).collect();
        let donedata = st.donedata.as_ref().map(|dd| {
            let content = dd.content.as_ref().and_then(|c| self.content(c));
            let params = self.params(&dd.params);
            (content, params)
        });
        // Own transitions are contiguous; a history's default transition is built later.
        let t0 = u32::try_from(self.trans.len()).unwrap_or(u32::MAX);
        if let Kind::History { .. } = kind {
            if let Some(t) = st.transitions.first() {
                self.pending_initial.push((me, t.clone()));
            }
        } else {
            for t in &st.transitions {
                self.transition(me, t);
            }
        }
        let t1 = u32::try_from(self.trans.len()).unwrap_or(u32::MAX);
        let invokes = st.invokes.iter().filter_map(|i| self.invoke(i)).collect();
        let scripts = self.block(&st.scripts);
        self.scripts.extend(scripts);
        {
            let s = &mut self.states[me as usize];
            s.invokes = invokes;
            s.data = data;
            s.onentry = onentry;
            s.onexit = onexit;
            s.donedata = donedata;
            s.transitions = t0..t1;
        }
        let mut children = Vec::new();
        let mut histories = Vec::new();
        for c in &st.children {
            let ci = self.state(c, me, None);
            if matches!(c.kind, StateKind::History { .. }) {
                histories.push(ci);
            } else {
                children.push(ci);
            }
        }
        let end = u32::try_from(self.states.len()).unwrap_or(u32::MAX);
        // Initial transition of a compound state: <initial>, initial=, or the first child.
        if kind == Kind::Compound {
            if let Some(t) = &st.initial_transition {
                self.pending_initial.push((me, t.clone()));
            } else if let Some(init) = &st.initial {
                let t = TransitionNode {
                    pos: init.pos,
                    event: None,
                    cond: None,
                    target: Some(init.clone()),
                    internal: false,
                    body: Vec::new(),
                };
                self.pending_initial.push((me, t));
            } else if let Some(&first) = children.first() {
                let id = u32::try_from(self.trans.len()).unwrap_or(u32::MAX);
                self.trans.push(TransInfo {
                    source: me,
                    events: Vec::new(),
                    cond: None,
                    targets: vec![first],
                    internal: false,
                    body: Vec::new(),
                    domain: None,
                    history_target: false,
                    simple: false,
                    pos: st.pos,
                });
                self.states[me as usize].initial = Some(id);
            }
        }
        let s = &mut self.states[me as usize];
        s.desc_end = end;
        s.children = children;
        s.histories = histories;
        me
    }

    fn data(&mut self, d: &DataNode) -> Option<(u32, Option<Spec>)> {
        let id = d.id.as_ref()?;
        if self.dm.is_host() {
            let slot = self.res.var(id.text.trim());
            let init = if let Some(src) = &d.src {
                Some(Spec::Src(Arc::from(src.text.trim())))
            } else if let Some(e) = &d.expr {
                self.expr(e).map(Spec::Expr)
            } else if d.has_elements {
                Some(Spec::Lit(super::host::text_value(self.dm, &d.markup)))
            } else if d.text.trim().is_empty() {
                None
            } else {
                Some(Spec::Lit(super::host::text_value(self.dm, &d.text)))
            };
            return Some((slot, init));
        }
        if d.has_elements && d.expr.is_none() {
            // Opaque structured data (the seed's service/events/metaops): not a variable value.
            let slot = self.res.var(&id.text);
            return Some((slot, None));
        }
        let slot = self.res.var(&id.text);
        let init = if let Some(src) = &d.src {
            Some(Spec::Src(Arc::from(src.text.trim())))
        } else if let Some(e) = &d.expr {
            self.expr(e).map(Spec::Expr)
        } else {
            inline_value(&d.text).map(Spec::Lit)
        };
        Some((slot, init))
    }

    fn content(&mut self, c: &Content) -> Option<Spec> {
        if let Some(e) = &c.expr {
            return self.expr(e).map(Spec::Expr);
        }
        if self.dm.is_host() {
            let text = if c.markup.is_empty() {
                &c.text
            } else {
                &c.markup
            };
            return Some(Spec::Lit(super::host::text_value(self.dm, text)));
        }
        Some(Spec::Lit(inline_value(&c.text).unwrap_or(Value::Null)))
    }

    fn invoke(&mut self, i: &InvokeNode) -> Option<InvokeOp> {
        let spec =
            |c: &mut Self, lit: &Option<super::model::Src>, ex: &Option<super::model::Src>| {
                if let Some(l) = lit {
                    Some(Spec::Lit(Value::str(l.text.trim())))
                } else {
                    ex.as_ref().and_then(|e| c.expr(e)).map(Spec::Expr)
                }
            };
        let type_ = spec(self, &i.type_, &i.typeexpr);
        let src = spec(self, &i.src, &i.srcexpr);
        let content = match &i.content {
            None => None,
            Some(InvokeContent::Doc(doc)) => match Chart::<()>::compile(doc, &super::NoExtension) {
                Ok((chart, _)) => Some(InvokeSource::Chart(Arc::new(chart))),
                Err(ds) => {
                    self.diags.extend(ds.0);
                    return None;
                }
            },
            Some(InvokeContent::Expr(e)) => Some(InvokeSource::Expr(self.expr(e)?)),
            Some(InvokeContent::Text(t)) => Some(InvokeSource::Text(Arc::from(t.as_str()))),
        };
        let idlocation = i.idlocation.as_ref().and_then(|l| self.location(l));
        let namelist = i
            .namelist
            .as_ref()
            .map(|n| {
                n.text
                    .split_whitespace()
                    .map(|v| (Arc::from(v), self.res.var(v)))
                    .collect()
            })
            .unwrap_or_default();
        let params = self.params(&i.params);
        let finalize = self.block(&i.finalize);
        Some(InvokeOp {
            pos: i.pos,
            type_,
            src,
            content,
            id: i.id.as_ref().map(|s| Arc::from(s.text.trim())),
            idlocation,
            namelist,
            params,
            autoforward: i.autoforward,
            finalize,
        })
    }

    fn params(&mut self, params: &[Param]) -> Vec<(Arc<str>, Expr)> {
        let mut out = Vec::new();
        for p in params {
            let e = match (&p.expr, &p.location) {
                (Some(e), _) | (None, Some(e)) => self.expr(e),
                (None, None) => {
                    self.error(
                        p.pos,
                        format!("<param name=\"{}\"> without expr= or location=", p.name),
                    );
                    None
                }
            };
            if let Some(e) = e {
                out.push((Arc::from(p.name.as_str()), e));
            }
        }
        out
    }

    fn targets(&mut self, src: &super::model::Src) -> Vec<u32> {
        src.text
            .split_whitespace()
            .filter_map(|t| self.res.states.get(t).copied())
            .collect()
    }

    fn transition(&mut self, source: u32, t: &TransitionNode) -> u32 {
        let events: Vec<Arc<str>> = t
            .event
            .as_ref()
            .map(|e| {
                e.text
                    .split_whitespace()
                    .map(|d| Arc::from(normalise_descriptor(d)))
                    .collect()
            })
            .unwrap_or_default();
        for d in &events {
            if &**d != "*" {
                self.symbol(d);
            }
        }
        let cond = t.cond.as_ref().and_then(|c| self.expr(c));
        let targets = t
            .target
            .as_ref()
            .map(|s| self.targets(s))
            .unwrap_or_default();
        let body = self.block(&t.body);
        let id = u32::try_from(self.trans.len()).unwrap_or(u32::MAX);
        self.trans.push(TransInfo {
            source,
            events,
            cond,
            targets,
            internal: t.internal,
            body,
            domain: None,
            history_target: false,
            simple: false,
            pos: t.pos,
        });
        id
    }

    fn block(&mut self, b: &[Exec]) -> Vec<Op> {
        let mut out = Vec::with_capacity(b.len());
        for e in b {
            let op = match e {
                Exec::Raise { event, .. } => Op::Raise(self.symbol(event.text.trim())),
                Exec::Send(s) => {
                    let event = if let Some(ev) = &s.event {
                        Some(Ok(self.symbol(ev.text.trim())))
                    } else {
                        s.eventexpr.as_ref().and_then(|e| self.expr(e)).map(Err)
                    };
                    let spec = |c: &mut Self,
                                lit: &Option<super::model::Src>,
                                ex: &Option<super::model::Src>| {
                        if let Some(l) = lit {
                            Some(Spec::Lit(Value::str(&l.text)))
                        } else {
                            ex.as_ref().and_then(|e| c.expr(e)).map(Spec::Expr)
                        }
                    };
                    let target = spec(self, &s.target, &s.targetexpr);
                    let type_ = spec(self, &s.type_, &s.typeexpr);
                    let delay = if let Some(d) = &s.delay {
                        match parse_delay(&d.text) {
                            Some(d) => Some(Ok(d)),
                            None => {
                                self.error(
                                    d.pos,
                                    format!(
                                        "bad delay \"{}\" (expected e.g. 1s, 1.5s or 200ms)",
                                        d.text
                                    ),
                                );
                                None
                            }
                        }
                    } else {
                        s.delayexpr.as_ref().and_then(|e| self.expr(e)).map(Err)
                    };
                    let idlocation = s.idlocation.as_ref().and_then(|l| self.location(l));
                    let namelist = s
                        .namelist
                        .as_ref()
                        .map(|n| {
                            n.text
                                .split_whitespace()
                                .map(|v| (Arc::from(v), self.res.var(v)))
                                .collect()
                        })
                        .unwrap_or_default();
                    let params = self.params(&s.params);
                    let content = s.content.as_ref().and_then(|c| self.content(c));
                    Op::Send(Box::new(SendOp {
                        pos: s.pos,
                        event,
                        target,
                        type_,
                        id: s.id.as_ref().map(|i| Arc::from(i.text.as_str())),
                        idlocation,
                        delay,
                        namelist,
                        params,
                        content,
                    }))
                }
                Exec::Cancel {
                    sendid, sendidexpr, ..
                } => {
                    if let Some(s) = sendid {
                        Op::Cancel(Spec::Lit(Value::str(&s.text)))
                    } else if let Some(e) = sendidexpr.as_ref().and_then(|e| self.expr(e)) {
                        Op::Cancel(Spec::Expr(e))
                    } else {
                        continue;
                    }
                }
                Exec::Log { label, expr, .. } => {
                    let e = expr.as_ref().and_then(|e| self.expr(e));
                    Op::Log(Arc::from(label.as_str()), e)
                }
                Exec::Assign {
                    location,
                    expr,
                    text,
                    kind,
                    attr,
                    ..
                } if self.dm.is_host() => {
                    let value = match expr {
                        Some(e) => Spec::Expr(Expr::Host(Arc::from(e.text.as_str()))),
                        None => Spec::Lit(super::host::text_value(self.dm, text)),
                    };
                    Op::HostAssign {
                        location: Arc::from(location.text.as_str()),
                        value,
                        kind: kind.as_ref().map(|k| Arc::from(k.text.trim())),
                        attr: attr.as_ref().map(|a| Arc::from(a.text.trim())),
                    }
                }
                Exec::Foreach {
                    array,
                    item,
                    index,
                    body,
                    ..
                } if self.dm.is_host() => Op::HostForeach {
                    array: Arc::from(array.text.as_str()),
                    item: Arc::from(item.text.as_str()),
                    index: index.as_ref().map(|i| Arc::from(i.text.as_str())),
                    body: self.block(body),
                },
                Exec::Script { text, src, .. } if self.dm.is_host() => {
                    if let Some(s) = src {
                        Op::ScriptSrc(Arc::from(s.text.trim()))
                    } else {
                        Op::HostScript(Arc::from(text.text.as_str()))
                    }
                }
                Exec::Assign {
                    location,
                    expr,
                    text,
                    ..
                } => {
                    let Some(loc) = self.location(location) else {
                        continue;
                    };
                    let v = match expr {
                        Some(e) => match self.expr(e) {
                            Some(e) => Spec::Expr(e),
                            None => continue,
                        },
                        None => Spec::Lit(inline_value(text).unwrap_or(Value::Null)),
                    };
                    Op::Assign(loc, v)
                }
                Exec::If { branches, .. } => {
                    let mut out_b = Vec::new();
                    for (cond, block) in branches {
                        let c = cond.as_ref().and_then(|c| self.expr(c));
                        let b = self.block(block);
                        out_b.push((c, b));
                    }
                    Op::If(out_b)
                }
                Exec::Foreach {
                    array,
                    item,
                    index,
                    body,
                    ..
                } => {
                    let (Some(array), Some(item)) = (self.expr(array), self.location(item)) else {
                        continue;
                    };
                    let index = index.as_ref().and_then(|i| self.location(i));
                    Op::Foreach {
                        array,
                        item,
                        index,
                        body: self.block(body),
                    }
                }
                Exec::Script { text, src, .. } => {
                    if let Some(s) = src {
                        Op::ScriptSrc(Arc::from(s.text.trim()))
                    } else if text.text.trim().is_empty() {
                        Op::Nop
                    } else {
                        match expr::parse_script(&text.text, &mut self.res) {
                            Ok(stmts) => Op::Script(stmts),
                            Err(e) => {
                                self.error(
                                    text.pos,
                                    format!(
                                        "bad <script> at character {}: {}",
                                        e.offset, e.message
                                    ),
                                );
                                continue;
                            }
                        }
                    }
                }
                Exec::Custom(el) => {
                    for ev in self.ext.action_events(el) {
                        self.symbol(&ev);
                    }
                    match self.ext.compile_action(el) {
                        Ok(a) => {
                            self.actions.push(a);
                            Op::Custom(u32::try_from(self.actions.len() - 1).unwrap_or(u32::MAX))
                        }
                        Err(msg) => {
                            self.error(el.pos, msg);
                            continue;
                        }
                    }
                }
            };
            out.push(op);
        }
        out
    }

    fn finish(mut self, late_binding: bool) -> Result<Chart<E::Action>, Diagnostics> {
        if let Some(names) = self.ext.external_events() {
            for n in names {
                self.symbol(&n);
            }
        }
        // Resolve initial transitions' targets and domains.
        let n = self.states.len();
        let is_desc =
            |states: &[StateInfo], s: u32, anc: u32| s > anc && s < states[anc as usize].desc_end;
        for t in 0..self.trans.len() {
            let (source, targets) = (self.trans[t].source, self.trans[t].targets.clone());
            let history = targets
                .iter()
                .any(|&x| matches!(self.states[x as usize].kind, Kind::History { .. }));
            self.trans[t].history_target = history;
            if targets.is_empty() || history {
                continue;
            }
            let src_kind = self.states[source as usize].kind;
            let domain = if self.trans[t].internal
                && src_kind == Kind::Compound
                && targets.iter().all(|&x| is_desc(&self.states, x, source))
            {
                source
            } else {
                lcca(&self.states, source, &targets)
            };
            self.trans[t].domain = Some(domain);
            let atomic = |k: Kind| matches!(k, Kind::Atomic | Kind::Final);
            self.trans[t].simple = targets.len() == 1
                && atomic(src_kind)
                && atomic(self.states[targets[0] as usize].kind)
                && self.states[source as usize].parent == domain
                && self.states[targets[0] as usize].parent == domain
                && self.states[domain as usize].kind == Kind::Compound;
        }
        if self.diags.iter().any(Diagnostic::is_error) {
            return Err(Diagnostics(self.diags));
        }
        // Candidate tables.
        let nsym = self.symbols.len();
        if n.saturating_mul(nsym + 1) > MAX_TABLE {
            return Err(Diagnostics(vec![Diagnostic::error(
                &self.file,
                self.states[0].pos,
                format!(
                    "chart too large: {} states × {nsym} event names (expected at most {MAX_TABLE} table entries)",
                    n - 1
                ),
            )]));
        }
        // The symbols each transition matches: a descriptor matches the names it prefixes,
        // which are contiguous in sorted order (binary search, not a scan of every name).
        let mut sorted: Vec<(&str, u32)> = self
            .symbols
            .iter()
            .enumerate()
            .map(|(i, n)| (&**n, u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        sorted.sort_unstable();
        let mut tsyms: Vec<Option<Vec<u32>>> = Vec::with_capacity(self.trans.len());
        for t in &self.trans {
            if t.events.iter().any(|d| &**d == "*") {
                tsyms.push(None); // every symbol
                continue;
            }
            let mut ks = Vec::new();
            for d in &t.events {
                let lo = sorted.partition_point(|(n, _)| *n < &**d);
                for &(name, k) in &sorted[lo..] {
                    if !name.starts_with(&**d) {
                        break;
                    }
                    if descriptor_matches(d, name) {
                        ks.push(k);
                    }
                }
            }
            ks.sort_unstable();
            ks.dedup();
            tsyms.push(Some(ks));
        }
        let too_large = |file: &str, pos| {
            Diagnostics(vec![Diagnostic::error(
                file,
                pos,
                format!(
                    "chart too large: its transition table exceeds {MAX_CANDIDATES} entries (expected fewer transitions matching each event)"
                ),
            )])
        };
        let mut cand_offs = Vec::with_capacity(n * nsym + 1);
        let mut cand: Vec<u32> = Vec::new();
        let mut eventless_offs = Vec::with_capacity(n + 1);
        let mut eventless = Vec::new();
        let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); nsym];
        for s in 0..n {
            let chain = ancestors_inclusive(&self.states, s as u32);
            for b in &mut buckets {
                b.clear();
            }
            let mut size = 0usize;
            for &a in &chain {
                for t in self.states[a as usize].transitions.clone() {
                    match &tsyms[t as usize] {
                        None => {
                            size += nsym;
                            if cand.len() + size > MAX_CANDIDATES {
                                return Err(too_large(&self.file, self.states[0].pos));
                            }
                            for b in &mut buckets {
                                b.push(t);
                            }
                        }
                        Some(ks) => {
                            size += ks.len();
                            if cand.len() + size > MAX_CANDIDATES {
                                return Err(too_large(&self.file, self.states[0].pos));
                            }
                            for &k in ks {
                                buckets[k as usize].push(t);
                            }
                        }
                    }
                }
            }
            for b in &buckets {
                cand_offs.push(u32::try_from(cand.len()).unwrap_or(u32::MAX));
                cand.extend_from_slice(b);
            }
            eventless_offs.push(u32::try_from(eventless.len()).unwrap_or(u32::MAX));
            for &a in &chain {
                for t in self.states[a as usize].transitions.clone() {
                    if self.trans[t as usize].events.is_empty() {
                        eventless.push(t);
                    }
                }
            }
        }
        cand_offs.push(u32::try_from(cand.len()).unwrap_or(u32::MAX));
        eventless_offs.push(u32::try_from(eventless.len()).unwrap_or(u32::MAX));
        let words = n.div_ceil(64).max(1);
        let mut atomic = vec![0u64; words];
        for (i, s) in self.states.iter().enumerate() {
            if matches!(s.kind, Kind::Atomic | Kind::Final) {
                atomic[i / 64] |= 1 << (i % 64);
            }
        }
        let root_initial = self.states[0].initial.unwrap_or(0);
        let has_eventless = !eventless.is_empty();
        let sym_error_execution = self.symbol("error.execution");
        let sym_error_communication = self.symbol("error.communication");
        let name = self.states[0].id.clone();
        Ok(Chart {
            file: self.file,
            name,
            states: self.states,
            trans: self.trans,
            symbols: self.symbols,
            symbol_map: self.symbol_map,
            cand_offs,
            cand,
            eventless_offs,
            eventless,
            vars: self.res.vars,
            var_map: self.res.var_map,
            actions: self.actions,
            n_history: self.n_history,
            words,
            atomic,
            late_binding,
            step_limit: DEFAULT_STEP_LIMIT,
            has_eventless,
            initial_entry: Vec::new(),
            initial_history: Vec::new(),
            root_initial,
            sym_error_execution,
            sym_error_communication,
            scripts: self.scripts,
            datamodel: self.dm,
        })
    }
}

/// Inline content of `<data>`/`<content>`/`<assign>`: an expression, else JSON, else the
/// whitespace-normalised text as a string; empty text is `None`.
pub(crate) fn inline_value(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    if let Ok(j) = serde_json::from_str::<serde_json::Value>(t) {
        return Some(Value::from_json(&j));
    }
    // Only closed expressions (no variables) are evaluated at compile time.
    let mut probe = expr::AnyNames::default();
    if let Ok(e) = expr::parse(t, &mut probe) {
        if probe.0.is_empty() {
            struct NoScope;
            impl expr::Scope for NoScope {
                fn var(&self, _: u32) -> Option<&Value> {
                    None
                }
                fn var_name(&self, _: u32) -> &str {
                    ""
                }
                fn system(&self, _: expr::System) -> Option<Value> {
                    None
                }
                fn event_field(&self, _: expr::EventField) -> Option<Value> {
                    None
                }
                fn in_state(&self, _: u32) -> bool {
                    false
                }
            }
            if let Ok(v) = expr::eval(&e, &NoScope) {
                return Some(v);
            }
        }
    }
    Some(Value::str(
        &t.split_whitespace().collect::<Vec<_>>().join(" "),
    ))
}

fn ancestors_inclusive(states: &[StateInfo], s: u32) -> Vec<u32> {
    let mut out = vec![s];
    let mut cur = s;
    while cur != 0 {
        cur = states[cur as usize].parent;
        out.push(cur);
    }
    out
}

/// Least common compound ancestor of `source` and `targets` (W3C `findLCCA`).
pub(crate) fn lcca(states: &[StateInfo], source: u32, targets: &[u32]) -> u32 {
    let mut anc = source;
    while anc != 0 {
        anc = states[anc as usize].parent;
        if states[anc as usize].kind == Kind::Compound
            && targets
                .iter()
                .all(|&t| t > anc && t < states[anc as usize].desc_end)
        {
            return anc;
        }
    }
    0
}

/// Interned event names that a descriptor list matches (for the verifier and dot).
pub fn matching_symbols<'c>(
    symbols: &'c [Arc<str>],
    events: &'c [Arc<str>],
) -> impl Iterator<Item = &'c str> + 'c {
    symbols
        .iter()
        .filter(move |n| events.iter().any(|d| descriptor_matches(d, n)))
        .map(|n| &**n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_match_by_token_prefix() {
        assert!(descriptor_matches("a", "a"));
        assert!(descriptor_matches("a", "a.b"));
        assert!(!descriptor_matches("a", "ab"));
        assert!(descriptor_matches("*", "x"));
        assert!(descriptor_matches(normalise_descriptor("a.*"), "a.c"));
        assert!(!descriptor_matches("a.b", "a"));
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_delay(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_delay("200ms"), Some(Duration::from_millis(200)));
        assert_eq!(parse_delay("x"), None);
        assert_eq!(parse_delay("-1s"), None);
    }
}

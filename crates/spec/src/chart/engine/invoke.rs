//! `<invoke>` of SCXML sessions (W3C SCXML 1.0 §6.4), inside the invoking [`Instance`].
//!
//! A child session is an [`Instance`] of its own [`Chart<()>`] (compiled with the parent when
//! the document is inline, at invoke time when it comes from `<content expr>` or `src`,
//! fetched through [`Host::load`]), owned by the parent and run on the parent's calls with
//! the parent's `now`: one virtual clock, one timer queue (the parent's
//! [`Instance::poll_timeout`] includes its children's deadlines). Call order:
//!
//! 1. entering a state with `<invoke>`s records it; when the macrostep ends (the internal
//!    queue is empty) the invokes of the states still active start, in entry order
//!    ([`Instance::run_invokes`]);
//! 2. an id is `id=`, or generated as `STATEID.PLATFORMID` with `PLATFORMID` =
//!    `SESSION.N` from the parent's session id and a per-instance counter (deterministic);
//!    `idlocation=` receives it; `<param>`s and `namelist` replace the child's top-level data;
//! 3. the child's `<send target="#_parent">` events reach the parent's external queue with
//!    `_event.invokeid` set and origin `#_INVOKEID`; the parent's `#_INVOKEID` sends reach
//!    the child (origin `#_parent`); when the child reaches a top-level final state the
//!    parent receives `done.invoke.INVOKEID` (data: the child's `<donedata>`);
//! 4. before the parent processes an external event from a child, that invoke's
//!    `<finalize>` runs; with `autoforward="true"` every external event the parent processes
//!    is also sent to the child;
//! 5. exiting the invoking state cancels the child: it is dropped with its timers, and events
//!    already queued from it are discarded when they come up (no further events from it).
//!
//! An invoke that cannot start (unsupported `type`, a document that cannot be fetched or
//! compiled, a `<param>` that fails) raises `error.execution` in the parent.

use std::marker::PhantomData;
use std::sync::Arc;

use viastack_kernel::time::Instant;

use super::super::compile::{Chart, InvokeOp, InvokeSource, Spec};
use super::super::expr::{self, Names, Stmt};
use super::super::value::Value;
use super::super::{parse, NoExtension};
use super::{Dest, EvKind, EvName, Event, Host, Instance, Meta, Rt, Vars, SCXML_PROCESSOR};

/// The invoke types this processor runs (W3C SCXML §6.4.1: the SCXML type's URI and its
/// short form).
const SCXML_TYPES: &[&str] = &[
    "http://www.w3.org/TR/scxml/",
    "http://www.w3.org/TR/scxml",
    "scxml",
];

/// One invoked session.
#[derive(Clone, Debug)]
pub(super) struct Child {
    /// The invokeid.
    pub(super) id: Arc<str>,
    /// The invoking state and the index of the `<invoke>` among its invokes.
    state: u32,
    index: usize,
    autoforward: bool,
    chart: Arc<Chart<()>>,
    pub(super) inst: Instance,
    /// `done.invoke` was delivered.
    done: bool,
}

/// Logging and loading of a parent's host, as a trait object (so nested sessions do not
/// instantiate one host type per level).
trait ParentIo {
    fn log(&mut self, label: &str, value: &Value);
    fn load(&mut self, base: &str, uri: &str) -> Result<String, String>;
}

struct HostIo<'h, A, H>(&'h mut H, PhantomData<fn(&A)>);

impl<A, H: Host<A>> ParentIo for HostIo<'_, A, H> {
    fn log(&mut self, label: &str, value: &Value) {
        self.0.log(label, value);
    }
    fn load(&mut self, base: &str, uri: &str) -> Result<String, String> {
        self.0.load(base, uri)
    }
}

/// The host a child session runs with: no custom actions; logging and loading go to the
/// parent's host.
struct ChildHost<'h> {
    parent: &'h mut dyn ParentIo,
}

impl Host<()> for ChildHost<'_> {
    fn execute(&mut self, _action: &(), _vars: &mut Vars<'_>) -> Result<(), String> {
        Err("an invoked session has no custom actions".into())
    }
    fn log(&mut self, label: &str, value: &Value) {
        self.parent.log(label, value);
    }
    fn load(&mut self, base: &str, uri: &str) -> Result<String, String> {
        self.parent.load(base, uri)
    }
}

fn with_child_host<A, H: Host<A>, R>(h: &mut H, f: impl FnOnce(&mut ChildHost<'_>) -> R) -> R {
    let mut io = HostIo::<A, H>(h, PhantomData);
    let mut ch = ChildHost { parent: &mut io };
    f(&mut ch)
}

/// A child's session id from its parent's and the invoke's number (splitmix64: distinct,
/// deterministic, not a process-wide counter).
fn child_session(parent: u64, n: u64) -> u64 {
    let mut z = parent
        .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) & 0x000F_FFFF_FFFF_FFFF
}

/// Compiles a document given as text at run time.
fn compile_text(file: &str, text: &str) -> Result<Arc<Chart<()>>, String> {
    let doc = parse(file, text).map_err(|d| d.to_string())?;
    let (chart, _) = Chart::compile(&doc, &NoExtension).map_err(|d| d.to_string())?;
    Ok(Arc::new(chart))
}

/// Names of a chart that is already compiled: a `<script src>` fetched at run time may only
/// use variables the chart declares.
struct Known<'c, A> {
    chart: &'c Chart<A>,
    unknown: Option<String>,
}

impl<A> Names for Known<'_, A> {
    fn var(&mut self, name: &str) -> u32 {
        match self.chart.var_map.get(name) {
            Some(&s) => s,
            None => {
                self.unknown.get_or_insert_with(|| name.to_string());
                u32::MAX
            }
        }
    }
    fn state(&self, id: &str) -> Option<u32> {
        self.chart.state_id(id).map(|s| s.0)
    }
}

/// Parses a `<script src>` fetched at run time against `chart`'s variables.
pub(super) fn parse_runtime_script<A>(chart: &Chart<A>, text: &str) -> Result<Vec<Stmt>, String> {
    let mut names = Known {
        chart,
        unknown: None,
    };
    let stmts = expr::parse_script(text, &mut names)
        .map_err(|e| format!("bad script at character {}: {}", e.offset, e.message))?;
    match names.unknown {
        Some(n) => Err(format!(
            "the script uses {n}, which the document does not declare"
        )),
        None => Ok(stmts),
    }
}

impl Instance {
    /// Starts the invokes of the states entered in this macrostep that are still active.
    pub(super) fn run_invokes<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) {
        let mut states = std::mem::take(&mut self.to_invoke);
        states.sort_unstable();
        for s in states {
            if !super::bit(&self.config, s) {
                continue;
            }
            let n = rt.chart.states[s as usize].invokes.len();
            for k in 0..n {
                if let Err(msg) = self.start_invoke(rt, s, k) {
                    self.raise_error(rt, false, &msg);
                }
            }
        }
    }

    fn start_invoke<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        s: u32,
        k: usize,
    ) -> Result<(), String> {
        let chart = rt.chart;
        let inv: &InvokeOp = &chart.states[s as usize].invokes[k];
        if let Some(t) = &inv.type_ {
            let ty = self.eval_spec(chart, t)?.to_string();
            if !SCXML_TYPES.contains(&ty.as_str()) {
                return Err(format!(
                    "unsupported invoke type \"{ty}\" (expected http://www.w3.org/TR/scxml/)"
                ));
            }
        }
        self.next_seq += 1;
        let n = self.next_seq;
        let id: Arc<str> = match &inv.id {
            Some(id) => id.clone(),
            None => Arc::from(format!(
                "{}.{}.{n}",
                chart.states[s as usize].id, self.session
            )),
        };
        if let Some(loc) = &inv.idlocation {
            self.assign(chart, loc, Value::String(id.clone()), false)?;
        }
        let mut data = Vec::new();
        for (name, slot) in &inv.namelist {
            match self.namelist_value(chart, name, *slot) {
                Some(v) => data.push((name.clone(), v)),
                None => return Err(format!("namelist variable {name} is not declared")),
            }
        }
        for (name, e) in &inv.params {
            data.push((name.clone(), expr::eval(e, &self.env(chart))?));
        }
        let child_chart = match (&inv.content, &inv.src) {
            (Some(InvokeSource::Chart(c)), _) => c.clone(),
            (Some(InvokeSource::Expr(e)), _) => {
                let v = expr::eval(e, &self.env(chart))?;
                // An XML value of the ECMAScript/XPath datamodels is the document itself.
                let text =
                    super::super::host::as_xml(&v).map_or_else(|| v.to_string(), str::to_string);
                compile_text(&chart.file, &text)?
            }
            (Some(InvokeSource::Text(t)), _) => compile_text(&chart.file, t)?,
            (None, Some(src)) => {
                let uri = match src {
                    Spec::Lit(v) => v.to_string(),
                    other => self.eval_spec(chart, other)?.to_string(),
                };
                let text = rt.host.load(&chart.file, &uri)?;
                compile_text(&uri, &text)?
            }
            (None, None) => return Err("<invoke> without src= or <content>".into()),
        };
        let mut inst = Instance::with_session(&*child_chart, child_session(self.session, n));
        inst.is_child = true;
        // A child's own loops are its business; an error in it stays in it.
        let now = rt.now;
        let _ = with_child_host(rt.host, |h| inst.start_with(&*child_chart, now, h, data));
        self.children.push(Child {
            id,
            state: s,
            index: k,
            autoforward: inv.autoforward,
            chart: child_chart,
            inst,
            done: false,
        });
        self.collect(rt.chart, self.children.len() - 1);
        Ok(())
    }

    /// Moves child `i`'s events for its parent, and its `done.invoke`, to our external queue.
    fn collect<A>(&mut self, chart: &Chart<A>, i: usize) {
        let Some(c) = self.children.get_mut(i) else {
            return;
        };
        let out = std::mem::take(&mut c.inst.outbox);
        let finished = c.inst.is_final() && !c.done;
        if finished {
            c.done = true;
        }
        let id = c.id.clone();
        let done_data = if finished {
            c.inst.done_value.clone()
        } else {
            Value::Null
        };
        let origin: Arc<str> = Arc::from(format!("#_{id}").as_str());
        let meta = |sendid: Option<Arc<str>>| {
            Some(Box::new(Meta {
                sendid,
                origin: Some(origin.clone()),
                origintype: Some(Arc::from(SCXML_PROCESSOR)),
                invokeid: Some(id.clone()),
            }))
        };
        for (name, data) in out {
            let name = match chart.symbol(&name) {
                Some(s) => EvName::Sym(s),
                None => EvName::Dyn(name),
            };
            self.external.push_back(Event {
                name,
                kind: EvKind::External,
                data,
                meta: meta(None),
            });
        }
        if finished {
            let name = format!("done.invoke.{id}");
            let name = match chart.symbol(&name) {
                Some(s) => EvName::Sym(s),
                None => EvName::Dyn(Arc::from(name)),
            };
            self.external.push_back(Event {
                name,
                kind: EvKind::External,
                data: done_data,
                meta: meta(None),
            });
        }
    }

    /// Cancels the invocations of state `s` (it is being exited).
    pub(super) fn cancel_invokes(&mut self, s: u32) {
        if !self.to_invoke.is_empty() {
            self.to_invoke.retain(|&x| x != s);
        }
        if !self.children.is_empty() {
            self.children.retain(|c| c.state != s);
        }
    }

    /// Before an external event is processed: drops it if it comes from a cancelled
    /// invocation (returns `false`), and autoforwards it to the children that asked.
    pub(super) fn route_to_children<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        ev: &Event,
    ) -> bool {
        if let Some(from) = ev.meta.as_ref().and_then(|m| m.invokeid.as_ref()) {
            if !self.children.iter().any(|c| c.id == *from) {
                return false;
            }
        }
        let name: Arc<str> = Arc::from(ev.name_str(&rt.chart.symbols));
        for i in 0..self.children.len() {
            if self.children[i].autoforward && !self.children[i].inst.is_final() {
                let mut copy = ev.clone();
                copy.name = EvName::Dyn(name.clone());
                self.deliver(rt, i, copy);
            }
        }
        true
    }

    /// Runs the `<finalize>` of the invocation the current event comes from.
    pub(super) fn finalize<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>) {
        let Some(from) = self
            .last_event
            .as_ref()
            .and_then(|e| e.meta.as_ref())
            .and_then(|m| m.invokeid.clone())
        else {
            return;
        };
        let Some(c) = self.children.iter().find(|c| c.id == from) else {
            return;
        };
        let chart = rt.chart;
        let ops = &chart.states[c.state as usize].invokes[c.index].finalize;
        if !ops.is_empty() {
            let _ = self.exec_block(rt, ops);
        }
    }

    /// Gives `ev` to child `i` and runs it.
    fn deliver<A, H: Host<A>>(&mut self, rt: &mut Rt<'_, A, H>, i: usize, mut ev: Event) {
        let Some(c) = self.children.get_mut(i) else {
            return;
        };
        let name = ev.name_str(&rt.chart.symbols).to_string();
        ev.name = match c.chart.symbol(&name) {
            Some(s) => EvName::Sym(s),
            None => EvName::Dyn(Arc::from(name)),
        };
        ev.kind = EvKind::External;
        let chart = c.chart.clone();
        let now = rt.now;
        let inst = &mut c.inst;
        let _ = with_child_host(rt.host, |h| inst.handle_internal_event(&chart, now, ev, h));
        self.collect(rt.chart, i);
    }

    /// Sends `event` (from a `<send>` of ours, now due) where it goes.
    pub(super) fn dispatch<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        dest: Dest,
        event: Event,
    ) {
        match dest {
            Dest::Own => self.external.push_back(event),
            Dest::Parent => {
                let name = Arc::from(event.name_str(&rt.chart.symbols));
                self.outbox.push((name, event.data));
            }
            Dest::Child(id) => match self.children.iter().position(|c| c.id == id) {
                Some(i) => {
                    let mut ev = event;
                    let m = ev.meta.get_or_insert_with(Box::default);
                    m.origin = Some(Arc::from("#_parent"));
                    self.deliver(rt, i, ev);
                }
                None => self.raise_error(rt, true, &format!("no invoked session \"{id}\"")),
            },
        }
    }

    /// The child with the earliest deadline due at `now`.
    pub(super) fn child_due(&self, now: Instant) -> Option<(usize, Instant)> {
        self.children
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.inst.poll_timeout().map(|t| (i, t)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(i, t)| (t, i))
    }

    /// Runs child `i`'s timers due at `at`.
    pub(super) fn child_timeout<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        i: usize,
        at: Instant,
    ) {
        let Some(c) = self.children.get_mut(i) else {
            return;
        };
        let chart = c.chart.clone();
        let inst = &mut c.inst;
        let _ = with_child_host(rt.host, |h| inst.handle_timeout(&*chart, at, h));
        self.collect(rt.chart, i);
    }

    /// The children's session ids and invokeids, for hosts and tests.
    pub fn invoked(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.children.iter().map(|c| (&*c.id, c.inst.session_id()))
    }

    /// Variable `name` of the invoked session `invokeid`, if bound.
    pub fn invoked_var(&self, invokeid: &str, name: &str) -> Option<&Value> {
        let c = self.children.iter().find(|c| &*c.id == invokeid)?;
        c.inst.var(&*c.chart, name)
    }
}

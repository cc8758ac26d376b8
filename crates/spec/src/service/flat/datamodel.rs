//! The flat machine's datamodel (issue 15 §2, last item: "the generator and the fast path
//! handle all nine shipped services"): the top-level `<data>` of a chart, `cond` guards,
//! `<assign>` and the reads of `_event` that incast, leakybucket and ordering are written with,
//! evaluated exactly as the general engine does (its expression language, its values, its
//! error rules), but without an engine instance or an `_event` map per event.
//!
//! At load time every expression is rewritten once: each read of `_event.data.NAME`,
//! `_event.data`, `_event.name`, `_event.type` (or another `_event` field) becomes a read of a
//! *pseudo-variable*, a slot after the chart's own variables. At run time those slots are
//! filled from the input (message attributes, payload, extra attributes or the timer id, as
//! [`event_data`](super::super::store::event_data) would put them in the map) the first time a
//! step needs them, and the unchanged [`expr::eval`] reads them like variables. What the
//! rewriting cannot express (`_event` as a whole, `_sessionid`, `_name`, `_ioprocessors`, an
//! ECMAScript/XPath datamodel, `<data src>`) is refused with its name, and the chart stays on
//! the engine.

use std::collections::HashMap;
use std::sync::Arc;

use crate::chart::compile::Spec;
use crate::chart::expr::{self, EventField, Expr, Location, PathStep, Scope, System};
use crate::chart::{Chart, Value};

use super::super::action::VarSource;
use super::super::message::{Attr, Message};

/// What a pseudo-variable holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Pseudo {
    /// `_event.data.NAME`.
    Member(Arc<str>),
    /// `_event.data`.
    Data,
    /// `_event.name`.
    Name,
    /// `_event.type` (always "external": the flat machine takes only the service's events).
    Type,
    /// `_event.sendid`, `.origin`, `.origintype`, `.invokeid`: null for a service event.
    Null,
}

/// The datamodel of a flat chart: its variables, their initial values and the pseudo-variables
/// its expressions were rewritten to read.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    /// The chart's variables (slots `0..names.len()`).
    names: Box<[Arc<str>]>,
    map: HashMap<Arc<str>, u32>,
    /// Top-level `<data>`: slot and initial value (rewritten), in document order.
    init: Box<[(u32, Option<Spec>)]>,
    /// Pseudo-variables (slots `names.len()..`).
    pseudo: Vec<Pseudo>,
    /// Whether events carry data (the document mentions `_event.data`, as the store decides
    /// for the engine); otherwise `_event.data` is null.
    data: bool,
    /// Parent of each state (for `In()`).
    parents: Box<[u32]>,
    /// While rewriting a `cond`: `In()` is allowed (a `cond` is evaluated in the
    /// configuration before the step; elsewhere the engine's configuration is between states).
    in_ok: bool,
}

/// What the current event is, for the pseudo-variables (`None` while entering the initial
/// state: `_event` is not bound yet).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ev<'a> {
    /// The event's name.
    pub name: &'a str,
    /// The message of the input (`None`: a timer).
    pub current: Option<&'a Message>,
    /// The timer id of a timer input.
    pub timer: u32,
}

/// Per-store scratch: the pseudo-variables' values for the current event.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    values: Vec<Option<Value>>,
    filled: bool,
}

impl Scratch {
    /// A new event: the values are filled again when read.
    #[inline]
    pub(crate) fn reset(&mut self) {
        self.filled = false;
    }
}

impl Model {
    /// The model of `chart`: its top-level data rewritten; `data` is whether events carry
    /// data (the document mentions `_event.data`).
    ///
    /// # Errors
    /// What the flat machine does not evaluate, named.
    pub(crate) fn new<A>(chart: &Chart<A>, data: bool) -> Result<Model, String> {
        if chart.datamodel.is_host() {
            return Err("the chart uses the ECMAScript or XPath datamodel".into());
        }
        let states = chart.states();
        let mut m = Model {
            names: chart.vars.clone().into(),
            map: chart.var_map.clone(),
            init: Box::default(),
            pseudo: Vec::new(),
            data,
            parents: states.iter().map(|s| s.parent).collect(),
            in_ok: false,
        };
        let mut init = Vec::new();
        for (slot, spec) in &states[0].data {
            let spec = match spec {
                None => None,
                Some(s) => Some(m.spec(s)?),
            };
            init.push((*slot, spec));
        }
        m.init = init.into();
        Ok(m)
    }

    /// Whether the chart has no variables and reads nothing of `_event` (nothing to keep per
    /// instance).
    pub(crate) fn is_empty(&self) -> bool {
        self.names.is_empty() && self.pseudo.is_empty()
    }

    /// A value spec rewritten.
    pub(crate) fn spec(&mut self, s: &Spec) -> Result<Spec, String> {
        match s {
            Spec::Lit(v) => Ok(Spec::Lit(v.clone())),
            Spec::Expr(e) => Ok(Spec::Expr(self.expr(e)?)),
            Spec::Src(uri) => Err(format!("a <data src=\"{uri}\">")),
        }
    }

    /// A location rewritten (its index expressions).
    pub(crate) fn location(&mut self, l: &Location) -> Result<Location, String> {
        match l {
            Location::Var(slot, path) => {
                let mut out = Vec::with_capacity(path.len());
                for p in path {
                    out.push(match p {
                        PathStep::Member(m) => PathStep::Member(m.clone()),
                        PathStep::Index(e) => PathStep::Index(self.expr(e)?),
                    });
                }
                Ok(Location::Var(*slot, out))
            }
            Location::System(s) => Err(format!("an <assign> to {}", s.name())),
            Location::Host(h) => Err(format!("an <assign> to the host location {h}")),
        }
    }

    fn pseudo_slot(&mut self, p: Pseudo) -> u32 {
        let i = match self.pseudo.iter().position(|q| *q == p) {
            Some(i) => i,
            None => {
                self.pseudo.push(p);
                self.pseudo.len() - 1
            }
        };
        (self.names.len() + i) as u32
    }

    /// A transition's `cond` rewritten (as [`Model::expr`], `In()` allowed).
    ///
    /// # Errors
    /// As [`Model::expr`].
    pub(crate) fn cond_expr(&mut self, e: &Expr) -> Result<Expr, String> {
        self.in_ok = true;
        let r = self.expr(e);
        self.in_ok = false;
        r
    }

    /// An expression with its `_event` reads turned into pseudo-variables.
    ///
    /// # Errors
    /// A system variable other than `_event`'s fields, `_event` as a whole, a host expression.
    pub(crate) fn expr(&mut self, e: &Expr) -> Result<Expr, String> {
        let b = |m: &mut Model, x: &Expr| m.expr(x).map(Box::new);
        Ok(match e {
            Expr::Member(inner, name) if **inner == Expr::Event(EventField::Data) => {
                Expr::Var(self.pseudo_slot(Pseudo::Member(name.clone())))
            }
            Expr::Event(f) => Expr::Var(self.pseudo_slot(match f {
                EventField::Data => Pseudo::Data,
                EventField::Name => Pseudo::Name,
                EventField::Type => Pseudo::Type,
                _ => Pseudo::Null,
            })),
            // `isBound(_event)`: whether an event is being taken, as `_event.name` is bound
            // exactly then (issue 15 §2: `isBound()` of an expression).
            Expr::Call(expr::Func::Bound, args)
                if matches!(args.as_slice(), [Expr::System(System::Event)]) =>
            {
                Expr::Call(
                    expr::Func::Bound,
                    vec![Expr::Var(self.pseudo_slot(Pseudo::Name))],
                )
            }
            Expr::System(System::Event) => {
                return Err("an expression reads `_event` as a whole".into())
            }
            Expr::System(s) => return Err(format!("an expression reads {}", s.name())),
            Expr::Host(src) => return Err(format!("a datamodel expression \"{src}\"")),
            Expr::In(_) if !self.in_ok => return Err("In() outside a transition's `cond`".into()),
            Expr::Lit(_) | Expr::Var(_) | Expr::In(_) | Expr::IsBound(_) => e.clone(),
            Expr::Member(inner, name) => Expr::Member(b(self, inner)?, name.clone()),
            Expr::Index(a, i) => Expr::Index(b(self, a)?, b(self, i)?),
            Expr::Neg(a) => Expr::Neg(b(self, a)?),
            Expr::Not(a) => Expr::Not(b(self, a)?),
            Expr::Bin(op, x, y) => Expr::Bin(*op, b(self, x)?, b(self, y)?),
            Expr::And(x, y) => Expr::And(b(self, x)?, b(self, y)?),
            Expr::Or(x, y) => Expr::Or(b(self, x)?, b(self, y)?),
            Expr::Call(f, args) => Expr::Call(
                *f,
                args.iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::List(items) => Expr::List(
                items
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Map(entries) => Expr::Map(
                entries
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.expr(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    /// A new instance's variables: every slot unbound, then the top-level `<data>` bound in
    /// document order (an expression that fails binds null, as the engine does after raising
    /// `error.execution`, which a flat chart never takes).
    pub(crate) fn new_vars(&self, scratch: &mut Scratch) -> Box<[Option<Value>]> {
        let mut vars: Box<[Option<Value>]> = vec![None; self.names.len()].into();
        scratch.reset();
        for (slot, init) in self.init.iter() {
            let v = match init {
                None => Value::Null,
                Some(Spec::Lit(v)) => v.clone(),
                Some(Spec::Expr(e)) => {
                    self.fill(scratch, None);
                    let sc = Sc {
                        model: self,
                        vars: &vars,
                        pseudo: &scratch.values,
                        state: 0,
                    };
                    expr::eval(e, &sc).unwrap_or(Value::Null)
                }
                Some(Spec::Src(_)) => Value::Null,
            };
            if let Some(x) = vars.get_mut(*slot as usize) {
                *x = Some(v);
            }
        }
        vars
    }

    /// Fills the pseudo-variables for `ev` (once per event).
    fn fill(&self, scratch: &mut Scratch, ev: Option<&Ev<'_>>) {
        if scratch.filled {
            return;
        }
        scratch.filled = true;
        scratch.values.clear();
        for p in &self.pseudo {
            let Some(ev) = ev else {
                scratch.values.push(None);
                continue;
            };
            scratch.values.push(match p {
                Pseudo::Name => Some(Value::str(ev.name)),
                Pseudo::Type => Some(Value::str("external")),
                Pseudo::Null => Some(Value::Null),
                Pseudo::Data if !self.data => Some(Value::Null),
                Pseudo::Data => Some(super::super::store::event_data(ev.current, ev.timer)),
                // A member of null: an error, as in the engine.
                Pseudo::Member(_) if !self.data => None,
                Pseudo::Member(name) => member(ev, name),
            });
        }
    }

    /// Whether `cond` holds now (an error is false, as the engine's selection takes it).
    pub(crate) fn cond(
        &self,
        cond: &Expr,
        vars: &[Option<Value>],
        scratch: &mut Scratch,
        ev: Option<&Ev<'_>>,
        state: u16,
    ) -> bool {
        self.fill(scratch, ev);
        let sc = Sc {
            model: self,
            vars,
            pseudo: &scratch.values,
            state,
        };
        expr::eval_cond(cond, &sc).unwrap_or(false)
    }

    /// Runs `<assign>`; false on an error (the engine raises `error.execution` and ends the
    /// block).
    pub(crate) fn assign(
        &self,
        loc: &Location,
        value: &Spec,
        vars: &mut [Option<Value>],
        scratch: &mut Scratch,
        ev: Option<&Ev<'_>>,
        state: u16,
    ) -> bool {
        self.fill(scratch, ev);
        let sc = Sc {
            model: self,
            vars,
            pseudo: &scratch.values,
            state,
        };
        let v = match value {
            Spec::Lit(v) => v.clone(),
            Spec::Expr(e) => match expr::eval(e, &sc) {
                Ok(v) => v,
                Err(_) => return false,
            },
            Spec::Src(_) => return false,
        };
        let Location::Var(slot, path) = loc else {
            return false;
        };
        let mut keys = Vec::with_capacity(path.len());
        for step in path {
            keys.push(match step {
                PathStep::Member(m) => Value::String(m.clone()),
                PathStep::Index(e) => match expr::eval(e, &sc) {
                    Ok(k) => k,
                    Err(_) => return false,
                },
            });
        }
        set(vars, *slot, &keys, v)
    }

    /// The variables as `$x` reads them.
    pub(crate) fn source<'a>(&'a self, vars: &'a [Option<Value>]) -> Vars<'a> {
        Vars { model: self, vars }
    }
}

/// For the generator ([`codegen`](super::super::codegen)).
impl Model {
    /// Number of the chart's own variables (pseudo-variables come after).
    pub(crate) fn var_count(&self) -> usize {
        self.names.len()
    }

    /// The slot of `$name`, if the chart has the variable.
    pub(crate) fn slot(&self, name: &str) -> Option<u32> {
        self.map.get(name).copied()
    }

    /// What pseudo-variable `slot` holds (`None`: one of the chart's variables).
    pub(crate) fn pseudo(&self, slot: u32) -> Option<&Pseudo> {
        self.pseudo
            .get((slot as usize).checked_sub(self.names.len())?)
    }

    /// Whether events carry data.
    pub(crate) fn has_data(&self) -> bool {
        self.data
    }

    /// The top-level `<data>`: slot and initial value.
    pub(crate) fn init(&self) -> &[(u32, Option<Spec>)] {
        &self.init
    }
}

/// `_event.data.NAME` of `ev`, as [`event_data`](super::super::store::event_data) builds the
/// map (extra attributes written last win, then the payload, then the header attributes).
pub(crate) fn member(ev: &Ev<'_>, name: &str) -> Option<Value> {
    match ev.current {
        Some(m) => {
            if let Some((_, v)) = m.extra.iter().rev().find(|(k, _)| &**k == name) {
                return Some(Value::str(v));
            }
            if name == "Payload" {
                if let Some(p) = &m.payload {
                    return Some(Value::str(&String::from_utf8_lossy(p)));
                }
            }
            Attr::ALL
                .iter()
                .find(|a| a.name() == name)
                .map(|a| Value::Number(m.get(*a) as f64))
        }
        None => (name == "TimerIdentifier").then(|| Value::Number(f64::from(ev.timer))),
    }
}

/// The engine's assignment (`Instance::assign` without declaring): into `slot` along `keys`.
pub(crate) fn set(vars: &mut [Option<Value>], slot: u32, keys: &[Value], v: Value) -> bool {
    let Some(cell) = vars.get_mut(slot as usize) else {
        return false;
    };
    let Some(mut cur) = cell.as_mut() else {
        // Assignment to an undeclared variable.
        return false;
    };
    for k in keys {
        cur = match (cur, k) {
            (Value::Map(m), Value::String(key)) => Arc::make_mut(m)
                .entry(key.to_string())
                .or_insert(Value::Null),
            (Value::List(l), Value::Number(n)) => {
                let l = Arc::make_mut(l);
                if n.fract() != 0.0 || *n < 0.0 || *n >= l.len() as f64 {
                    return false;
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                &mut l[*n as usize]
            }
            _ => return false,
        };
    }
    *cur = v;
    true
}

/// The scope expressions are evaluated in: the instance's variables, then the pseudo-variables.
struct Sc<'a> {
    model: &'a Model,
    vars: &'a [Option<Value>],
    pseudo: &'a [Option<Value>],
    state: u16,
}

impl Scope for Sc<'_> {
    fn var(&self, slot: u32) -> Option<&Value> {
        let s = slot as usize;
        match s.checked_sub(self.vars.len()) {
            None => self.vars.get(s)?.as_ref(),
            Some(p) => self.pseudo.get(p)?.as_ref(),
        }
    }
    fn var_name(&self, slot: u32) -> &str {
        self.model.names.get(slot as usize).map_or("_event", |n| n)
    }
    fn system(&self, _v: System) -> Option<Value> {
        // Rewritten away at load time.
        None
    }
    fn event_field(&self, _f: EventField) -> Option<Value> {
        None
    }
    fn in_state(&self, index: u32) -> bool {
        // The atomic state or one of its ancestors (the root is always active).
        let mut x = u32::from(self.state);
        loop {
            if x == index {
                return true;
            }
            if x == 0 {
                return false;
            }
            x = self.model.parents.get(x as usize).copied().unwrap_or(0);
        }
    }
}

/// The instance's variables as the actions' `$x` reads them.
pub(crate) struct Vars<'a> {
    model: &'a Model,
    vars: &'a [Option<Value>],
}

impl VarSource for Vars<'_> {
    fn var(&self, name: &str) -> Option<Value> {
        let slot = *self.model.map.get(name)?;
        self.vars.get(slot as usize)?.clone()
    }
}

//! Run-time support for delivery services compiled to Rust by [`codegen`](super::codegen):
//! the few pieces the generated code shares with the interpreted store, so both perform the
//! primitives and keep the history indexes the same way.

use viastack_kernel::time::Instant;

pub use super::action::{emit, Prim};
pub use foldhash::HashMap as FastMap;

/// "Never": an index time no event has set.
pub const NONE: u64 = u64::MAX;

/// Whether an index time `t` (ns) is set and, with a window, not older than `within` ns.
#[inline]
pub fn in_window(t: u64, within: Option<u64>, now: Instant) -> bool {
    super::logic::in_window(t, within, now)
}

/// Records key `k` at time `t` in a keyed index (replacing an earlier time for the key).
#[inline(always)]
pub fn key_time(v: &mut Vec<(i64, u64)>, k: i64, t: u64) {
    match v.iter_mut().find(|(kk, _)| *kk == k) {
        Some(e) => e.1 = t,
        None => v.push((k, t)),
    }
}

/// Keeps `m` as the last message of a basic event, reusing the slot's allocations.
#[inline(always)]
pub fn keep(slot: &mut Option<super::Message>, m: &super::Message) {
    match slot {
        Some(old) => old.clone_from(m),
        None => *slot = Some(m.clone()),
    }
}

/// A new message as `createMessage` starts it (HopLimit 255, seed §4.2.3.1).
#[inline]
pub fn fresh() -> super::Message {
    super::Message {
        hop_limit: 255,
        ..super::Message::default()
    }
}

// Datamodel support for generated services whose chart has variables, `cond`s, `<assign>`s
// or reads `_event` (issue 15 §2): the expression language's operations on dynamic values,
// exactly as the interpreter evaluates them (each delegates to `chart::expr`), with the error
// reduced to `()` (the generated code ends the block, or takes the `cond` as false).

pub use crate::chart::expr::{BinOp, Func};
pub use crate::chart::Value;

use crate::chart::expr::{self, EventField, Expr, Scope, System};

/// A value that cannot be computed (the interpreter would raise `error.execution`): the
/// generated code ends the block, or takes the `cond` as false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fail;

/// A scope with nothing in it (the helpers below evaluate literal operands only).
struct NoScope;

impl Scope for NoScope {
    fn var(&self, _slot: u32) -> Option<&Value> {
        None
    }
    fn var_name(&self, _slot: u32) -> &str {
        "?"
    }
    fn system(&self, _v: System) -> Option<Value> {
        None
    }
    fn event_field(&self, _f: EventField) -> Option<Value> {
        None
    }
    fn in_state(&self, _index: u32) -> bool {
        false
    }
}

fn lit(v: &Value) -> Box<Expr> {
    Box::new(Expr::Lit(v.clone()))
}

/// A number literal (by its bits, so every value survives the round trip through source).
#[inline]
pub fn num(bits: u64) -> Value {
    Value::Number(f64::from_bits(bits))
}

/// A literal list or map, from its JSON form.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).map_or(Value::Null, |j| Value::from_json(&j))
}

/// A variable's value; an error if it is unbound.
#[inline]
pub fn var(v: &Option<Value>) -> Result<Value, Fail> {
    v.clone().ok_or(Fail)
}

/// `v.name`.
pub fn member(v: &Value, name: &str) -> Result<Value, Fail> {
    expr::eval(&Expr::Member(lit(v), name.into()), &NoScope).map_err(|_| Fail)
}

/// `v[i]`.
pub fn index(v: &Value, i: &Value) -> Result<Value, Fail> {
    expr::index(v, i).cloned().map_err(|_| Fail)
}

/// `-v`.
pub fn neg(v: &Value) -> Result<Value, Fail> {
    expr::eval(&Expr::Neg(lit(v)), &NoScope).map_err(|_| Fail)
}

/// `a op b`.
pub fn bin(op: BinOp, a: &Value, b: &Value) -> Result<Value, Fail> {
    expr::binary(op, a, b).map_err(|_| Fail)
}

/// A built-in call on evaluated arguments (not `isBound`, which the generator refuses).
pub fn call(f: Func, args: &[Value]) -> Result<Value, Fail> {
    let args = args.iter().map(|a| Expr::Lit(a.clone())).collect();
    expr::eval(&Expr::Call(f, args), &NoScope).map_err(|_| Fail)
}

/// `[a, b, …]`.
pub fn list(items: Vec<Value>) -> Value {
    Value::list(items)
}

/// `{k: v, …}`.
pub fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// A value as a condition: it must be a boolean.
pub fn truth(v: &Value) -> Result<bool, Fail> {
    expr::eval_cond(&Expr::Lit(v.clone()), &NoScope).map_err(|_| Fail)
}

/// `_event.data.NAME` (`bound`: an event is being taken; `data`: events carry data).
pub fn event_member(
    bound: bool,
    data: bool,
    current: Option<&super::Message>,
    timer: u32,
    name: &str,
) -> Result<Value, Fail> {
    if !(bound && data) {
        return Err(Fail);
    }
    let ev = super::flat::Ev {
        name: "",
        current,
        timer,
    };
    super::flat::datamodel::member(&ev, name).ok_or(Fail)
}

/// `_event.data`.
pub fn event_data(
    bound: bool,
    data: bool,
    current: Option<&super::Message>,
    timer: u32,
) -> Result<Value, Fail> {
    match (bound, data) {
        (false, _) => Err(Fail),
        (true, false) => Ok(Value::Null),
        (true, true) => Ok(super::store::event_data(current, timer)),
    }
}

/// `<assign>` into variable `slot` along `keys`; false on an error.
pub fn assign(vars: &mut [Option<Value>], slot: u32, keys: &[Value], v: Value) -> bool {
    super::flat::datamodel::set(vars, slot, keys, v)
}

/// `$x` as an integer attribute (a number, or an address written as text).
pub fn var_int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(x) if x.is_finite() => Some(*x as i64),
        Value::String(t) => super::message::Addr::parse(t).map(|a| a.0 as i64),
        _ => None,
    }
}

/// `$x` as text (a payload or an extra attribute).
pub fn var_text(v: Option<&Value>) -> Option<String> {
    Some(match v? {
        Value::String(t) => t.to_string(),
        other => other.to_string(),
    })
}

/// Writes extra attribute `name` of `msg` (replacing an earlier value).
pub fn set_extra(msg: &mut super::Message, name: &str, t: Box<str>) {
    match msg.extra.iter_mut().find(|(k, _)| &**k == name) {
        Some(e) => e.1 = t,
        None => msg.extra.push((name.into(), t)),
    }
}

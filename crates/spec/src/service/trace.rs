//! The `viastack spec run` trace format: basic inputs in, actions out, both JSON Lines
//! (seed 000 §5.1.4: message arrivals, timer expiries, node information).
//!
//! # Input: one object per line, in time order
//! ```json
//! {"t_ms": 0,    "node": {"address": "1", "parent": "9", "children": ["2", "3"], "neighbours": []}}
//! {"t_ms": 5,    "message": {"ServiceID": 1, "MessageID": 7, "MessageType": -128,
//!                            "SourceAddress": "100,100", "PreviousHopAddress": 9, "Payload": "hi"}}
//! {"t_ms": 1005, "timer": {"ServiceID": 1, "MessageID": 7, "TimerIdentifier": 3}}
//! ```
//! `t_ms` is the time in milliseconds (fractions allowed). Message attributes use the seed's
//! names (§5.1.4.1): ServiceID, MessageID, MessageType (-128..255), DeliveryMode, HopLimit
//! (default 255), SourceAddress, DestinationAddress, PreviousHopAddress, RootAddress,
//! SequenceNumber, Payload (text); addresses are numbers or `"x,y"`; any other key is an extra
//! attribute (text). Empty lines and lines starting with `#` are skipped.
//!
//! With [`Options::auto_timers`], timers armed by `setTimer` (and not cancelled) also expire by
//! themselves: before each input, every armed timer due by its time fires, earliest first; after
//! the last input, the remaining ones fire (up to [`Options::end_ms`]).
//!
//! # Output: one object per line
//! ```json
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "action": "sendControlMessage", "message": {…}}
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "action": "setTimer", "timer": 3, "ms": 1000}
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "action": "cancelTimer", "timer": 3}
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "action": "terminate"}
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "action": "updateNodeInfo", "node": {…}}
//! {"t_ms": 5, "instance": {"service": 1, "message": 7}, "state": "waitack"}
//! {"t_ms": 9, "error": "no service with ServiceID 4"}
//! ```
//! Every action the service takes, in order (toApplication, sendDataMessage,
//! sendControlMessage and forwardMessage carry the message), then, after each message or timer
//! input, the instance's state (`null` once it is freed).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use viastack_kernel::time::Instant;

use super::action::{Network, Primitive};
use super::message::{Addr, Attr, InstanceKey, Message, NodeInfo};
use super::Runner;

/// One input of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A message arrives.
    Message(Instant, Message),
    /// A timer of an instance expires.
    Timer(Instant, InstanceKey, u32),
    /// The local node information changes.
    Node(Instant, NodeInfo),
}

impl Input {
    /// When.
    pub fn time(&self) -> Instant {
        match self {
            Input::Message(t, _) | Input::Timer(t, _, _) | Input::Node(t, _) => *t,
        }
    }
}

/// A trace line that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Options of [`run`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Armed timers expire by themselves.
    pub auto_timers: bool,
    /// With `auto_timers`, no timer fires after this time (ms); `None`: until none is armed
    /// (at most 100,000 expiries after the last input).
    pub end_ms: Option<u64>,
}

fn ms_to_instant(ms: f64) -> Instant {
    Instant::from_nanos((ms * 1e6).round().max(0.0) as u64)
}

fn instant_ms(t: Instant) -> Value {
    let ns = t.as_nanos();
    if ns.is_multiple_of(1_000_000) {
        json!(ns / 1_000_000)
    } else {
        json!(ns as f64 / 1e6)
    }
}

fn read_addr(v: &Value) -> Option<Addr> {
    match v {
        Value::Number(n) => n.as_u64().map(Addr),
        Value::String(s) => Addr::parse(s),
        _ => None,
    }
}

fn read_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Reads a message object.
///
/// # Errors
/// A malformed attribute.
pub fn message_from_json(v: &Value) -> Result<Message, String> {
    let Value::Object(o) = v else {
        return Err("a message is a JSON object".into());
    };
    let mut m = Message {
        hop_limit: 255,
        ..Message::default()
    };
    for (k, v) in o {
        if k == "Payload" {
            match v {
                Value::String(s) => m.payload = Some(s.as_bytes().into()),
                Value::Null => m.payload = None,
                _ => return Err("Payload: expected text".into()),
            }
            continue;
        }
        match Attr::from_name(k) {
            Some(a) => {
                let raw = if a.is_address() {
                    read_addr(v).map(|x| x.0 as i64)
                } else {
                    read_int(v)
                };
                let val = raw
                    .and_then(|r| a.parse_value(&r.to_string()))
                    .or(raw.filter(|_| a.is_address()));
                match val {
                    Some(x) => m.set(a, x),
                    None => return Err(format!("{k}: `{v}` is not a valid value")),
                }
            }
            None => {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                m.extra.push((k.as_str().into(), text.into()));
            }
        }
    }
    Ok(m)
}

fn addr_json(a: Addr) -> Value {
    if a.0 > u64::from(u32::MAX) {
        json!(a.to_string())
    } else {
        json!(a.0)
    }
}

/// A message as a JSON object (the seed's attribute names).
pub fn message_to_json(m: &Message) -> Value {
    let mut o = Map::new();
    for a in Attr::ALL {
        let v = m.get(a);
        o.insert(
            a.name().to_string(),
            if a.is_address() {
                addr_json(Addr(v as u64))
            } else {
                json!(v)
            },
        );
    }
    if let Some(p) = &m.payload {
        o.insert("Payload".into(), json!(String::from_utf8_lossy(p)));
    }
    for (k, v) in &m.extra {
        o.insert(k.to_string(), json!(&**v));
    }
    Value::Object(o)
}

fn node_from_json(v: &Value) -> Result<NodeInfo, String> {
    let Value::Object(o) = v else {
        return Err("node: expected an object".into());
    };
    let mut n = NodeInfo::default();
    for (k, v) in o {
        match k.as_str() {
            "address" => n.address = read_addr(v).ok_or("node.address: expected an address")?,
            "parent" => n.parent = read_addr(v).ok_or("node.parent: expected an address")?,
            "children" | "neighbours" => {
                let Value::Array(items) = v else {
                    return Err(format!("node.{k}: expected a list of addresses"));
                };
                let list = items
                    .iter()
                    .map(read_addr)
                    .collect::<Option<Vec<_>>>()
                    .ok_or(format!("node.{k}: expected addresses"))?;
                if k == "children" {
                    n.children = list;
                } else {
                    n.neighbours = list;
                }
            }
            other => {
                return Err(format!(
                    "unknown node key `{other}` (expected address, parent, children, neighbours)"
                ))
            }
        }
    }
    Ok(n)
}

/// Node information as JSON.
pub fn node_to_json(n: &NodeInfo) -> Value {
    json!({
        "address": addr_json(n.address),
        "parent": addr_json(n.parent),
        "children": n.children.iter().map(|&a| addr_json(a)).collect::<Vec<_>>(),
        "neighbours": n.neighbours.iter().map(|&a| addr_json(a)).collect::<Vec<_>>(),
    })
}

/// Parses a trace.
///
/// # Errors
/// The first unreadable line.
pub fn parse(src: &str) -> Result<Vec<Input>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let e = |message: String| TraceError {
            line: i + 1,
            message,
        };
        let v: Value = serde_json::from_str(l).map_err(|x| e(format!("not JSON: {x}")))?;
        let Value::Object(o) = &v else {
            return Err(e("expected a JSON object".into()));
        };
        let t = o
            .get("t_ms")
            .and_then(Value::as_f64)
            .ok_or_else(|| e("expected \"t_ms\": milliseconds".into()))?;
        if !(0.0..=1e12).contains(&t) {
            return Err(e("t_ms out of range".into()));
        }
        let t = ms_to_instant(t);
        if let Some(m) = o.get("message") {
            out.push(Input::Message(t, message_from_json(m).map_err(e)?));
        } else if let Some(tm) = o.get("timer") {
            let get = |k: &str| tm.get(k).and_then(read_int).filter(|v| *v >= 0);
            let (Some(s), Some(mid), Some(id)) =
                (get("ServiceID"), get("MessageID"), get("TimerIdentifier"))
            else {
                return Err(e(
                    "timer: expected ServiceID, MessageID and TimerIdentifier".into(),
                ));
            };
            out.push(Input::Timer(
                t,
                InstanceKey {
                    service: s as u32,
                    message: mid as u64,
                },
                id as u32,
            ));
        } else if let Some(n) = o.get("node") {
            out.push(Input::Node(t, node_from_json(n).map_err(e)?));
        } else {
            return Err(e("expected one of \"message\", \"timer\", \"node\"".into()));
        }
    }
    Ok(out)
}

/// A [`Network`] that records every primitive as a JSON line, and which timers are armed.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Output lines.
    pub lines: Vec<Value>,
    /// Armed timers: (instance, id) → deadline.
    pub armed: BTreeMap<(InstanceKey, u32), Instant>,
}

fn inst_json(k: InstanceKey) -> Value {
    json!({"service": k.service, "message": k.message})
}

impl Network for Recorder {
    fn perform(&mut self, now: Instant, key: InstanceKey, p: Primitive<'_>) {
        let mut o =
            json!({"t_ms": instant_ms(now), "instance": inst_json(key), "action": p.name()});
        match p {
            Primitive::ToApplication(m)
            | Primitive::SendData(m)
            | Primitive::SendControl(m)
            | Primitive::Forward(m) => {
                o["message"] = message_to_json(m);
            }
            Primitive::SetTimer { id, after } => {
                o["timer"] = json!(id);
                o["ms"] = json!(after.as_millis() as u64);
                self.armed.insert((key, id), now.saturating_add(after));
            }
            Primitive::CancelTimer { id } => {
                o["timer"] = json!(id);
                self.armed.remove(&(key, id));
            }
            Primitive::Terminate => {}
            Primitive::UpdateNodeInfo(n) => o["node"] = node_to_json(n),
        }
        self.lines.push(o);
    }
}

fn after_step<R: Runner>(
    r: &R,
    rec: &mut Recorder,
    t: Instant,
    key: InstanceKey,
    res: Result<(), super::RunnerError>,
) {
    if let Err(e) = res {
        rec.lines.push(
            json!({"t_ms": instant_ms(t), "instance": inst_json(key), "error": e.to_string()}),
        );
    }
    let state = r.state(key);
    if state.is_none() {
        rec.armed.retain(|(k, _), _| *k != key);
    }
    rec.lines
        .push(json!({"t_ms": instant_ms(t), "instance": inst_json(key), "state": state}));
}

fn fire_due<R: Runner>(r: &mut R, rec: &mut Recorder, until: Instant, budget: &mut u32) {
    while *budget > 0 {
        let due = rec
            .armed
            .iter()
            .filter(|(_, &at)| at <= until)
            .min_by_key(|(k, &at)| (at, **k))
            .map(|(k, &at)| (*k, at));
        let Some(((key, id), at)) = due else { break };
        rec.armed.remove(&(key, id));
        *budget -= 1;
        let res = r.handle_timer(at, key, id, rec);
        after_step(r, rec, at, key, res);
    }
}

/// Runs a trace through a runner and returns the output lines.
pub fn run<R: Runner>(r: &mut R, inputs: &[Input], opts: Options) -> Vec<Value> {
    let mut rec = Recorder::default();
    let mut budget = 100_000u32;
    for inp in inputs {
        if opts.auto_timers {
            fire_due(r, &mut rec, inp.time(), &mut budget);
        }
        match inp {
            Input::Node(_, n) => r.set_node(n.clone()),
            Input::Message(t, m) => {
                let res = r.handle_message(*t, m, &mut rec);
                after_step(r, &mut rec, *t, m.key(), res);
            }
            Input::Timer(t, key, id) => {
                rec.armed.remove(&(*key, *id));
                let res = r.handle_timer(*t, *key, *id, &mut rec);
                after_step(r, &mut rec, *t, *key, res);
            }
        }
    }
    if opts.auto_timers {
        let end = opts.end_ms.map_or(Instant::MAX, Instant::from_millis);
        fire_due(r, &mut rec, end, &mut budget);
    }
    rec.lines
}

/// Parses a multi-node trace: every line as in [`parse`], with `"at": N` naming the node it is
/// for (node lines too; a line without `"at"` is for node 0). `viastack spec explore` writes
/// its counterexamples so.
///
/// # Errors
/// The first unreadable line.
pub fn parse_nodes(src: &str) -> Result<Vec<(usize, Input)>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let at = serde_json::from_str::<Value>(l)
            .ok()
            .and_then(|v| v.get("at").cloned());
        let node = match at {
            None => 0,
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| TraceError {
                    line: i + 1,
                    message: "\"at\": expected a node number".into(),
                })?,
        };
        let mut one = parse(l).map_err(|e| TraceError {
            line: i + 1,
            message: e.message,
        })?;
        if let Some(inp) = one.pop() {
            out.push((node, inp));
        }
    }
    Ok(out)
}

/// Whether a trace names nodes (`"at"`): then it is run with [`run_nodes`].
pub fn is_multi_node(src: &str) -> bool {
    src.lines().any(|l| {
        let l = l.trim();
        !l.starts_with('#')
            && serde_json::from_str::<Value>(l)
                .ok()
                .is_some_and(|v| v.get("at").is_some())
    })
}

/// Runs a multi-node trace: one runner per node (made by `make` on the node's first line),
/// every input given to its node's runner, in order. The output lines are those of [`run`],
/// each with `"at"`. Timers fire only as the trace says (no `auto_timers`).
pub fn run_nodes<R: Runner>(mut make: impl FnMut() -> R, inputs: &[(usize, Input)]) -> Vec<Value> {
    let mut nodes: BTreeMap<usize, (R, Recorder)> = BTreeMap::new();
    let mut out = Vec::new();
    for (at, inp) in inputs {
        let (r, rec) = nodes
            .entry(*at)
            .or_insert_with(|| (make(), Recorder::default()));
        let before = rec.lines.len();
        match inp {
            Input::Node(_, n) => r.set_node(n.clone()),
            Input::Message(t, m) => {
                let res = r.handle_message(*t, m, rec);
                after_step(r, rec, *t, m.key(), res);
            }
            Input::Timer(t, key, id) => {
                rec.armed.remove(&(*key, *id));
                let res = r.handle_timer(*t, *key, *id, rec);
                after_step(r, rec, *t, *key, res);
            }
        }
        for mut l in rec.lines.drain(before..) {
            l["at"] = json!(at);
            out.push(l);
        }
    }
    out
}

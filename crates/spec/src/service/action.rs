//! The action vocabulary: the seed's overlay network primitives (seed 000 §4.2.3.1, §5.1.2.4,
//! §5.1.4.4) compiled from custom SCXML elements, and the [`Network`] trait a host implements
//! them with.
//!
//! Two spellings, freely mixed:
//!
//! - the seed's triple, one draft per primitive name, filled field by field:
//!   ```xml
//!   <action:create name="sendMessage"/>
//!   <action:set name="sendMessage" field="Message" xpath="/HistoryOfEvents/Event[@name='payloadmessage'][last()]/Message"/>
//!   <action:set name="sendMessage" field="Message/DeliveryMode" value="3"/>
//!   <action:set name="sendMessage" field="Message/DestinationAddress" expr="last(payloadmessage).PreviousHopAddress"/>
//!   <action:set name="sendMessage" field="Message/MessageType" value="2"/>
//!   <action:execute name="sendMessage"/>
//!   ```
//!   `value` is a literal; `expr` (or the seed's `xpath`, in the one shape the seed uses) is a
//!   value expression. A draft lives for one macrostep.
//! - one element per action, attributes being the fields:
//!   ```xml
//!   <action:sendControlMessage from="last(payloadmessage)" DeliveryMode="3"
//!       DestinationAddress="last(payloadmessage).PreviousHopAddress" MessageType="2"/>
//!   <action:setTimer id="2" ms="5000"/>   <action:cancelTimer id="2"/>   <action:terminate/>
//!   <action:toApplication message="last(payloadmessage)"/>
//!   <action:updateNodeInfo parent="1" children="2 3"/>
//!   ```
//!
//! Primitives: `createMessage` / `setMessage` (a named draft: `name="x"`, read back as `x` or
//! `x.Attr`), `toApplication`, `sendDataMessage`, `sendControlMessage`, `sendMessage` (the
//! seed's name: data if the type is Payload, else control), `forwardMessage`, `setTimer`,
//! `cancelTimer`, `terminate`, `updateNodeInfo`.
//!
//! Value expressions: an integer or address literal; `last(E)` (the last message of basic event
//! `E`) and `last(E).Attr`; `msg` / `msg.Attr` (the message that triggered this step); a draft
//! `x` / `x.Attr`; `node.address`, `node.parent`. Attributes are the seed's names
//! (`PreviousHopAddress`) or the short ones (`previoushop`).
//!
//! Sending follows §4.2.3.1: the ServiceID is the instance's, a MessageID of 0 becomes the
//! instance's; `sendDataMessage` and `sendControlMessage` set SourceAddress and
//! PreviousHopAddress to the local node (control messages carry no payload, data messages are of
//! type Payload); `forwardMessage` decrements HopLimit and sets PreviousHopAddress.
//!
//! # Errors
//! At load time, an unknown primitive, an unknown or missing parameter, an unknown event in
//! `last(E)`, an unreadable value: the message becomes a diagnostic at the element. At run time,
//! reading `last(E)` before any `E` arrived, or a draft never created, fails the action
//! (`error.execution` in the machine).

use std::cell::RefCell;
use std::sync::Arc;

use viastack_kernel::time::{Duration, Instant};

use super::data::ServiceData;
use super::history::{History, Layout};
use super::message::{Addr, Attr, InstanceKey, Message, NodeInfo, PAYLOAD_TYPE};

/// A primitive, as the host performs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive<'a> {
    /// Deliver to the local application.
    ToApplication(&'a Message),
    /// Send a data message (payload) to its destination with its delivery mode.
    SendData(&'a Message),
    /// Send a control message.
    SendControl(&'a Message),
    /// Forward a message not meant for the local node.
    Forward(&'a Message),
    /// Arm timer `id` of this instance (replacing an armed one).
    SetTimer {
        /// TimerIdentifier.
        id: u32,
        /// Delay.
        after: Duration,
    },
    /// Disarm timer `id` of this instance.
    CancelTimer {
        /// TimerIdentifier.
        id: u32,
    },
    /// The instance ends (the store frees it after this step).
    Terminate,
    /// The local node information changed (already applied to the store's copy).
    UpdateNodeInfo(&'a NodeInfo),
}

impl Primitive<'_> {
    /// The seed's name of the primitive.
    pub fn name(&self) -> &'static str {
        match self {
            Primitive::ToApplication(_) => "toApplication",
            Primitive::SendData(_) => "sendDataMessage",
            Primitive::SendControl(_) => "sendControlMessage",
            Primitive::Forward(_) => "forwardMessage",
            Primitive::SetTimer { .. } => "setTimer",
            Primitive::CancelTimer { .. } => "cancelTimer",
            Primitive::Terminate => "terminate",
            Primitive::UpdateNodeInfo(_) => "updateNodeInfo",
        }
    }
}

/// The host side of the primitives: MessageStore, tests and the CLI implement this.
pub trait Network {
    /// Performs one primitive for instance `key` at `now`.
    fn perform(&mut self, now: Instant, key: InstanceKey, p: Primitive<'_>);
}

/// Which primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    /// createMessage
    CreateMessage,
    /// setMessage
    SetMessage,
    /// toApplication
    ToApplication,
    /// sendDataMessage
    SendData,
    /// sendControlMessage
    SendControl,
    /// sendMessage (the seed's): by type
    Send,
    /// forwardMessage
    Forward,
    /// setTimer
    SetTimer,
    /// cancelTimer
    CancelTimer,
    /// terminate
    Terminate,
    /// updateNodeInfo
    UpdateNodeInfo,
}

impl Prim {
    fn from_name(n: &str) -> Option<Prim> {
        Some(match n {
            "createMessage" => Prim::CreateMessage,
            "setMessage" => Prim::SetMessage,
            "toApplication" => Prim::ToApplication,
            "sendDataMessage" => Prim::SendData,
            "sendControlMessage" => Prim::SendControl,
            "sendMessage" => Prim::Send,
            "forwardMessage" => Prim::Forward,
            "setTimer" => Prim::SetTimer,
            "cancelTimer" => Prim::CancelTimer,
            "terminate" => Prim::Terminate,
            "updateNodeInfo" => Prim::UpdateNodeInfo,
            _ => return None,
        })
    }
}

const PRIMS: &str = "createMessage, setMessage, toApplication, sendDataMessage, sendControlMessage, sendMessage, forwardMessage, setTimer, cancelTimer, terminate, updateNodeInfo";

/// A field a value is written to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// The whole message (copied from a message value).
    Message,
    /// A known attribute.
    Attr(Attr),
    /// The payload (text).
    Payload,
    /// Another attribute, as text.
    Extra(Box<str>),
    /// Timer/TimerIdentifier.
    TimerId,
    /// Timer/TimerValue (ms).
    TimerMs,
    /// Node address.
    NodeAddress,
    /// Node parent.
    NodeParent,
    /// Node children (addresses separated by spaces).
    NodeChildren,
    /// Node neighbours.
    NodeNeighbours,
}

/// A value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Integer (addresses packed).
    Int(i64),
    /// Text (payloads, extra attributes).
    Text(Box<str>),
    /// A list of addresses.
    Addrs(Box<[Addr]>),
    /// `last(E)` by history slot.
    Last(u8),
    /// `last(E).Attr`.
    LastAttr(u8, Attr),
    /// `msg`
    Current,
    /// `msg.Attr`
    CurrentAttr(Attr),
    /// A draft.
    Draft(u8),
    /// `draft.Attr`
    DraftAttr(u8, Attr),
    /// `node.address`
    NodeAddress,
    /// `node.parent`
    NodeParent,
    /// `$name`: a datamodel variable (number, address text or text).
    Var(Box<str>),
    /// The address a `foreach` is at (its variable, inside the element that declares it).
    Each,
}

/// One compiled custom element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `<action:create name>`: start draft `draft` (empty).
    Create {
        /// Draft slot.
        draft: u8,
    },
    /// `<action:set name field value|expr|xpath>`.
    Set {
        /// Draft slot.
        draft: u8,
        /// Field.
        field: Field,
        /// Value.
        value: Value,
    },
    /// `<action:execute name>`.
    Execute {
        /// Draft slot.
        draft: u8,
        /// Primitive.
        prim: Prim,
    },
    /// One element: build (from `base`, then `sets`) and run.
    Run {
        /// Primitive.
        prim: Prim,
        /// The draft it writes (createMessage / setMessage).
        draft: Option<u8>,
        /// The message it starts from.
        base: Option<Value>,
        /// Fields set on top.
        sets: Box<[(Field, Value)]>,
    },
    /// An element with `foreach="d in node.children [: FORMULA]"`: `action` runs once per
    /// address the selector picks, in the node set's order, with [`Value::Each`] that
    /// address; the first failure ends it (later addresses are not tried).
    Each {
        /// The nodes addressed.
        selector: super::logic::Selector,
        /// What runs per node (an [`Action::Run`] without a draft).
        action: Box<Action>,
    },
    /// One `setTimer` / `cancelTimer` element: like [`Action::Run`] but no message is built.
    Timer {
        /// [`Prim::SetTimer`] or [`Prim::CancelTimer`].
        prim: Prim,
        /// The timer fields, in order ([`Field::TimerId`], [`Field::TimerMs`]).
        sets: Box<[(Field, Value)]>,
    },
}

impl Value {
    /// Whether it reads draft `d`.
    pub fn reads_draft(&self, d: u8) -> bool {
        matches!(self, Value::Draft(x) | Value::DraftAttr(x, _) if *x == d)
    }

    fn draft(&self) -> Option<u8> {
        match self {
            Value::Draft(x) | Value::DraftAttr(x, _) => Some(*x),
            _ => None,
        }
    }
}

impl Action {
    /// The drafts it creates, fills, performs or reads.
    pub fn drafts(&self) -> Vec<u8> {
        match self {
            Action::Create { draft } | Action::Execute { draft, .. } => vec![*draft],
            Action::Set { draft, value, .. } => {
                std::iter::once(*draft).chain(value.draft()).collect()
            }
            Action::Run {
                draft, base, sets, ..
            } => draft
                .iter()
                .copied()
                .chain(base.iter().filter_map(Value::draft))
                .chain(sets.iter().filter_map(|(_, v)| v.draft()))
                .collect(),
            Action::Timer { sets, .. } => sets.iter().filter_map(|(_, v)| v.draft()).collect(),
            Action::Each { action, .. } => action.drafts(),
        }
    }

    /// Whether running it reads a datamodel variable (`$x`).
    pub fn reads_datamodel(&self) -> bool {
        let var = |v: &Value| matches!(v, Value::Var(_));
        match self {
            Action::Create { .. } | Action::Execute { .. } => false,
            Action::Set { value, .. } => var(value),
            Action::Run { base, sets, .. } => {
                base.as_ref().is_some_and(var) || sets.iter().any(|(_, v)| var(v))
            }
            Action::Timer { sets, .. } => sets.iter().any(|(_, v)| var(v)),
            Action::Each { action, .. } => action.reads_datamodel(),
        }
    }
}

/// Compiles custom elements for one service; collects what the history must keep.
#[derive(Debug)]
pub struct Compiler<'a> {
    data: &'a ServiceData,
    /// The service's logic program, which `foreach` selectors are compiled into.
    logic: Option<&'a RefCell<super::logic::Program>>,
    layout: RefCell<Layout>,
    drafts: RefCell<Vec<(String, Prim)>>,
    timers_set: RefCell<Vec<u32>>,
}

impl<'a> Compiler<'a> {
    /// A compiler for the service's basic events.
    pub fn new(data: &'a ServiceData) -> Compiler<'a> {
        Compiler {
            data,
            logic: None,
            layout: RefCell::new(Layout::new(data.basic.len())),
            drafts: RefCell::new(Vec::new()),
            timers_set: RefCell::new(Vec::new()),
        }
    }

    /// A compiler that compiles `foreach` selectors into `logic` (without one, `foreach` is
    /// refused).
    pub fn with_logic(
        data: &'a ServiceData,
        logic: &'a RefCell<super::logic::Program>,
    ) -> Compiler<'a> {
        Compiler {
            logic: Some(logic),
            ..Compiler::new(data)
        }
    }

    /// What the history must keep, and how many drafts a step needs.
    pub fn finish(self) -> (Layout, usize) {
        (self.layout.into_inner(), self.drafts.into_inner().len())
    }

    /// Timer identifiers armed by literal `setTimer`s (for verification).
    pub fn timers_set(&self) -> Vec<u32> {
        self.timers_set.borrow().clone()
    }

    fn draft(&self, name: &str, prim: Prim) -> u8 {
        let mut d = self.drafts.borrow_mut();
        if let Some(i) = d.iter().position(|(n, _)| n == name) {
            return i as u8;
        }
        d.push((name.to_string(), prim));
        (d.len() - 1) as u8
    }

    fn existing_draft(&self, name: &str) -> Option<u8> {
        self.drafts
            .borrow()
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| i as u8)
    }

    /// Compiles one custom element given its local name and attributes.
    ///
    /// # Errors
    /// What is wrong, for a diagnostic at the element.
    pub fn compile(&self, name: &str, attrs: &[(String, String)]) -> Result<Action, String> {
        let attr = |k: &str| attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        match name {
            "create" | "set" | "execute" => {
                let Some(target) = attr("name") else {
                    return Err(format!(
                        "<action:{name}> needs name=\"primitive\" (one of: {PRIMS})"
                    ));
                };
                let Some(prim) = Prim::from_name(target) else {
                    return Err(format!(
                        "unknown action `{target}` (expected one of: {PRIMS})"
                    ));
                };
                let draft = self.draft(target, prim);
                for (k, _) in attrs {
                    let ok = match name {
                        "set" => {
                            matches!(k.as_str(), "name" | "field" | "value" | "expr" | "xpath")
                        }
                        _ => k == "name",
                    };
                    if !ok {
                        return Err(format!("unknown parameter `{k}` of <action:{name}>"));
                    }
                }
                match name {
                    "create" => Ok(Action::Create { draft }),
                    "execute" => Ok(Action::Execute { draft, prim }),
                    _ => {
                        let Some(f) = attr("field") else {
                            return Err(
                                "<action:set> needs field=\"Message/…\" or \"Timer/…\"".into()
                            );
                        };
                        let field = parse_field(f)?;
                        let value = match (attr("value"), attr("expr").or(attr("xpath"))) {
                            (Some(v), None) => self.literal(&field, v)?,
                            (None, Some(e)) => self.value_expr(e)?,
                            _ => return Err("<action:set> needs exactly one of value=\"literal\" or expr=\"expression\"".into()),
                        };
                        Ok(Action::Set {
                            draft,
                            field,
                            value,
                        })
                    }
                }
            }
            _ => {
                let Some(prim) = Prim::from_name(name) else {
                    return Err(format!("unknown action `{name}` (expected create, set, execute or one of: {PRIMS})"));
                };
                self.one_element(prim, attrs)
            }
        }
    }

    fn one_element(&self, prim: Prim, attrs: &[(String, String)]) -> Result<Action, String> {
        let Some((_, sel)) = attrs.iter().find(|(k, _)| k == "foreach") else {
            return self.one_element_with(prim, attrs, None);
        };
        if !matches!(prim, Prim::SendData | Prim::SendControl | Prim::Send) {
            return Err(format!(
                "foreach is supported on sendDataMessage, sendControlMessage and sendMessage, not on {}",
                prim_name(prim)
            ));
        }
        let var = sel.split_whitespace().next().unwrap_or_default();
        if var.is_empty()
            || !var.chars().all(|c| c.is_alphanumeric() || c == '_')
            || !var.starts_with(|c: char| c.is_alphabetic() || c == '_')
        {
            return Err(format!(
                "foreach=\"{sel}\": expected `VAR in node.children [: FORMULA]`"
            ));
        }
        let Some(logic) = self.logic else {
            return Err("foreach is not available here (no logic program)".into());
        };
        let selector = logic
            .borrow_mut()
            .compile_selector(self.data, sel)
            .map_err(|e| format!("foreach=\"{sel}\": {e}"))?;
        let rest: Vec<(String, String)> = attrs
            .iter()
            .filter(|(k, _)| k != "foreach")
            .cloned()
            .collect();
        let action = self.one_element_with(prim, &rest, Some(var))?;
        Ok(Action::Each {
            selector,
            action: Box::new(action),
        })
    }

    fn one_element_with(
        &self,
        prim: Prim,
        attrs: &[(String, String)],
        each: Option<&str>,
    ) -> Result<Action, String> {
        let mut base = None;
        let mut draft = None;
        let mut sets = Vec::new();
        for (k, v) in attrs {
            let k = k.as_str();
            match (prim, k) {
                (Prim::SetTimer | Prim::CancelTimer, "id" | "TimerIdentifier") => {
                    let id: u32 = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("timer id `{v}`: expected an integer"))?;
                    if prim == Prim::SetTimer {
                        self.timers_set.borrow_mut().push(id);
                    }
                    sets.push((Field::TimerId, Value::Int(i64::from(id))));
                }
                (Prim::SetTimer, "ms" | "TimerValue") => {
                    let ms: u64 = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("timer duration `{v}`: expected milliseconds"))?;
                    sets.push((Field::TimerMs, Value::Int(ms.min(i64::MAX as u64) as i64)));
                }
                (Prim::UpdateNodeInfo, "address" | "parent" | "children" | "neighbours") => {
                    let field = match k {
                        "address" => Field::NodeAddress,
                        "parent" => Field::NodeParent,
                        "children" => Field::NodeChildren,
                        _ => Field::NodeNeighbours,
                    };
                    sets.push((
                        field.clone(),
                        self.literal(&field, v).or_else(|_| self.value_expr(v))?,
                    ));
                }
                (Prim::CreateMessage | Prim::SetMessage, "name") => draft = Some(v.as_str()),
                (
                    Prim::CreateMessage
                    | Prim::ToApplication
                    | Prim::SendData
                    | Prim::SendControl
                    | Prim::Send
                    | Prim::Forward,
                    "from" | "message",
                ) => base = Some(self.value_expr(v)?),
                (
                    Prim::CreateMessage
                    | Prim::SetMessage
                    | Prim::ToApplication
                    | Prim::SendData
                    | Prim::SendControl
                    | Prim::Send
                    | Prim::Forward,
                    _,
                ) => {
                    let field = parse_field(k)
                        .map_err(|_| format!("unknown parameter `{k}` of {}", prim_name(prim)))?;
                    if matches!(field, Field::Message | Field::TimerId | Field::TimerMs)
                        || is_node_field(&field)
                    {
                        return Err(format!("unknown parameter `{k}` of {}", prim_name(prim)));
                    }
                    let value = if each.is_some_and(|e| v.trim() == e) {
                        Value::Each
                    } else if v.trim_start().starts_with('$') {
                        self.value_expr(v)?
                    } else {
                        self.literal(&field, v).or_else(|_| self.value_expr(v))?
                    };
                    sets.push((field, value));
                }
                _ => return Err(format!("unknown parameter `{k}` of {}", prim_name(prim))),
            }
        }
        match prim {
            Prim::SetTimer
                if !sets.iter().any(|(f, _)| *f == Field::TimerId)
                    || !sets.iter().any(|(f, _)| *f == Field::TimerMs) =>
            {
                return Err("setTimer needs id=\"N\" and ms=\"milliseconds\"".into());
            }
            Prim::CancelTimer if !sets.iter().any(|(f, _)| *f == Field::TimerId) => {
                return Err("cancelTimer needs id=\"N\"".into());
            }
            Prim::CreateMessage | Prim::SetMessage => {
                let Some(n) = draft else {
                    return Err(format!("{} needs name=\"draft\"", prim_name(prim)));
                };
                if prim == Prim::SetMessage && self.existing_draft(n).is_none() {
                    return Err(format!(
                        "setMessage: no createMessage name=\"{n}\" before it"
                    ));
                }
                let d = self.draft(n, prim);
                return Ok(Action::Run {
                    prim,
                    draft: Some(d),
                    base,
                    sets: sets.into(),
                });
            }
            _ => {}
        }
        let timer_only = sets
            .iter()
            .all(|(f, _)| matches!(f, Field::TimerId | Field::TimerMs));
        if matches!(prim, Prim::SetTimer | Prim::CancelTimer) && base.is_none() && timer_only {
            return Ok(Action::Timer {
                prim,
                sets: sets.into(),
            });
        }
        Ok(Action::Run {
            prim,
            draft: None,
            base,
            sets: sets.into(),
        })
    }

    fn literal(&self, field: &Field, v: &str) -> Result<Value, String> {
        match field {
            Field::Attr(a) => a
                .parse_value(v)
                .map(Value::Int)
                .ok_or_else(|| format!("`{v}` is not a valid {}", a.name())),
            Field::Payload | Field::Extra(_) => Ok(Value::Text(v.into())),
            Field::TimerId | Field::TimerMs => v
                .trim()
                .parse::<u32>()
                .map(|n| Value::Int(i64::from(n)))
                .map_err(|_| format!("`{v}`: expected an integer")),
            Field::NodeAddress | Field::NodeParent => Addr::parse(v)
                .map(|a| Value::Int(a.0 as i64))
                .ok_or_else(|| format!("`{v}`: expected an address")),
            Field::NodeChildren | Field::NodeNeighbours => v
                .split(|c: char| c.is_whitespace() || c == ';')
                .filter(|s| !s.is_empty())
                .map(|s| Addr::parse(s).ok_or_else(|| format!("`{s}`: expected an address")))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| Value::Addrs(v.into())),
            Field::Message => {
                Err("a whole message is set from an expression (expr=\"last(E)\")".into())
            }
        }
    }

    /// Parses a value expression (see the module doc).
    fn value_expr(&self, src: &str) -> Result<Value, String> {
        let s = src.trim();
        // The seed's XPath shape.
        if let Some(rest) = s.strip_prefix("/HistoryOfEvents/Event[@name='") {
            let Some((ev, rest)) = rest.split_once("']") else {
                return Err(format!("unsupported XPath `{s}`"));
            };
            let Some(rest) = rest.strip_prefix("[last()]/Message") else {
                return Err(format!("unsupported XPath `{s}` (expected /HistoryOfEvents/Event[@name='E'][last()]/Message[/Attribute])"));
            };
            let slot = self.last_slot(ev)?;
            return match rest.strip_prefix('/') {
                None if rest.is_empty() => Ok(Value::Last(slot)),
                Some(a) => Ok(Value::LastAttr(slot, attr(a)?)),
                None => Err(format!("unsupported XPath `{s}`")),
            };
        }
        if let Some(v) = s.strip_prefix('$') {
            if v.is_empty() || !v.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return Err(format!("`{s}`: expected $variable"));
            }
            return Ok(Value::Var(v.into()));
        }
        let (head, attr_part) = match s.strip_prefix("last(") {
            Some(rest) => {
                let Some((ev, after)) = rest.split_once(')') else {
                    return Err(format!("`{s}`: expected last(EVENT)"));
                };
                let slot = self.last_slot(ev.trim())?;
                return match after.strip_prefix('.') {
                    None if after.trim().is_empty() => Ok(Value::Last(slot)),
                    Some(a) => Ok(Value::LastAttr(slot, attr(a.trim())?)),
                    None => Err(format!(
                        "`{s}`: expected last(EVENT) or last(EVENT).Attribute"
                    )),
                };
            }
            None => match s.split_once('.') {
                Some((h, a)) => (h, Some(a)),
                None => (s, None),
            },
        };
        match (head, attr_part) {
            ("msg" | "event", None) => Ok(Value::Current),
            ("msg" | "event", Some(a)) => Ok(Value::CurrentAttr(attr(a)?)),
            ("node", Some("address")) => Ok(Value::NodeAddress),
            ("node", Some("parent")) => Ok(Value::NodeParent),
            ("node", Some(a)) => Err(format!("unknown node value `node.{a}` (expected node.address or node.parent)")),
            (d, a) => match self.existing_draft(d) {
                Some(i) => match a {
                    None => Ok(Value::Draft(i)),
                    Some(a) => Ok(Value::DraftAttr(i, attr(a)?)),
                },
                None => Err(format!(
                    "`{s}`: expected a literal, last(EVENT)[.Attribute], msg[.Attribute], node.address, node.parent or a message created before"
                )),
            },
        }
    }

    fn last_slot(&self, ev: &str) -> Result<u8, String> {
        let Some(i) = self.data.basic_index(ev) else {
            let names: Vec<&str> = self.data.basic.iter().map(|b| b.name.as_str()).collect();
            return Err(format!(
                "unknown event `{ev}` in last(…) (expected a basic event: {})",
                names.join(", ")
            ));
        };
        Ok(self.layout.borrow_mut().keep(i as u16))
    }
}

fn prim_name(p: Prim) -> &'static str {
    match p {
        Prim::CreateMessage => "createMessage",
        Prim::SetMessage => "setMessage",
        Prim::ToApplication => "toApplication",
        Prim::SendData => "sendDataMessage",
        Prim::SendControl => "sendControlMessage",
        Prim::Send => "sendMessage",
        Prim::Forward => "forwardMessage",
        Prim::SetTimer => "setTimer",
        Prim::CancelTimer => "cancelTimer",
        Prim::Terminate => "terminate",
        Prim::UpdateNodeInfo => "updateNodeInfo",
    }
}

fn is_node_field(f: &Field) -> bool {
    matches!(
        f,
        Field::NodeAddress | Field::NodeParent | Field::NodeChildren | Field::NodeNeighbours
    )
}

fn attr(a: &str) -> Result<Attr, String> {
    Attr::from_name(a.trim()).ok_or_else(|| format!("unknown message attribute `{a}`"))
}

fn parse_field(f: &str) -> Result<Field, String> {
    let f = f.trim();
    let rest = f.strip_prefix("Message/").unwrap_or(f);
    Ok(match rest {
        "Message" => Field::Message,
        "Timer/TimerIdentifier" | "TimerIdentifier" => Field::TimerId,
        "Timer/TimerValue" | "TimerValue" => Field::TimerMs,
        "Payload" | "payload" => Field::Payload,
        "NodeInfo/Address" => Field::NodeAddress,
        "NodeInfo/Parent" => Field::NodeParent,
        "NodeInfo/Children" => Field::NodeChildren,
        "NodeInfo/Neighbours" => Field::NodeNeighbours,
        other => match Attr::from_name(other) {
            Some(a) => Field::Attr(a),
            None if f.starts_with("Message/") && !other.contains('/') && !other.is_empty() => Field::Extra(other.into()),
            None => return Err(format!("unknown field `{f}` (expected Message, Message/Attribute, Timer/TimerIdentifier, Timer/TimerValue)")),
        },
    })
}

/// A draft being filled by create/set (one per primitive name; cleared per step).
#[derive(Clone, Debug, Default)]
pub struct Draft {
    live: bool,
    msg: Message,
    timer_id: u32,
    timer_ms: u64,
}

impl Draft {
    /// Ends the draft (its message is rebuilt by the next create).
    #[inline]
    pub fn clear(&mut self) {
        self.live = false;
    }
}

/// Everything an action needs to run: one step of one instance.
pub struct Ctx<'a, N: Network + ?Sized> {
    /// Now.
    pub now: Instant,
    /// The instance.
    pub key: InstanceKey,
    /// The local node information (updateNodeInfo writes it).
    pub node: &'a mut NodeInfo,
    /// The instance's history.
    pub history: &'a History,
    /// The message that triggered this step.
    pub current: Option<&'a Message>,
    /// Draft slots.
    pub drafts: &'a mut [Draft],
    /// The host.
    pub net: &'a mut N,
    /// Set by terminate.
    pub terminated: bool,
    /// The address a `foreach` is at ([`Value::Each`]; 0 outside a `foreach`).
    pub each: i64,
}

/// Reads datamodel variables for `$x` values.
pub trait VarSource {
    /// Variable `name`.
    fn var(&self, name: &str) -> Option<crate::chart::Value>;
}

impl VarSource for () {
    fn var(&self, _name: &str) -> Option<crate::chart::Value> {
        None
    }
}

impl VarSource for crate::chart::Vars<'_> {
    fn var(&self, name: &str) -> Option<crate::chart::Value> {
        self.get(name).cloned()
    }
}

fn var_value(vars: &dyn VarSource, name: &str) -> Result<crate::chart::Value, String> {
    vars.var(name)
        .ok_or_else(|| format!("${name}: no such datamodel variable, or not bound"))
}

fn read_msg<'m, N: Network + ?Sized>(
    v: &Value,
    ctx: &'m Ctx<'_, N>,
) -> Result<&'m Message, String> {
    match v {
        Value::Last(s) => ctx
            .history
            .last(*s)
            .ok_or_else(|| "last(…): no such message in the history yet".to_string()),
        Value::Current => ctx
            .current
            .ok_or_else(|| "msg: this step was not triggered by a message".to_string()),
        Value::Draft(d) => match ctx.drafts.get(usize::from(*d)) {
            Some(dr) if dr.live => Ok(&dr.msg),
            _ => Err("the message was not created in this step".to_string()),
        },
        _ => Err("expected a message (last(E), msg or a created message)".to_string()),
    }
}

fn read_int<N: Network + ?Sized>(
    v: &Value,
    ctx: &Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<i64, String> {
    Ok(match v {
        Value::Var(n) => match var_value(vars, n)? {
            crate::chart::Value::Number(x) if x.is_finite() => x as i64,
            crate::chart::Value::String(t) => match Addr::parse(&t) {
                Some(a) => a.0 as i64,
                None => return Err(format!("${n} = \"{t}\" is not a number or an address")),
            },
            other => {
                return Err(format!(
                    "${n} is a {}, expected a number",
                    other.type_name()
                ))
            }
        },
        Value::Int(n) => *n,
        Value::LastAttr(s, a) => read_msg(&Value::Last(*s), ctx)?.get(*a),
        Value::CurrentAttr(a) => read_msg(&Value::Current, ctx)?.get(*a),
        Value::DraftAttr(d, a) => read_msg(&Value::Draft(*d), ctx)?.get(*a),
        Value::NodeAddress => ctx.node.address.0 as i64,
        Value::NodeParent => ctx.node.parent.0 as i64,
        Value::Each => ctx.each,
        _ => return Err("expected a number or an address".into()),
    })
}

/// The common integer values, read without the error paths of [`read_int`]; `None` sends
/// the caller to the general path (which reports why a value cannot be read).
#[inline(always)]
fn quick_int<N: Network + ?Sized>(v: &Value, ctx: &Ctx<'_, N>) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::LastAttr(s, a) => ctx.history.last(*s).map(|m| m.get(*a)),
        Value::CurrentAttr(a) => ctx.current.map(|m| m.get(*a)),
        Value::NodeAddress => Some(ctx.node.address.0 as i64),
        Value::NodeParent => Some(ctx.node.parent.0 as i64),
        Value::Each => Some(ctx.each),
        _ => None,
    }
}

fn apply<N: Network + ?Sized>(
    msg: &mut Message,
    timer: &mut (u32, u64),
    field: &Field,
    v: &Value,
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    match field {
        Field::Message => *msg = read_msg(v, ctx)?.clone(),
        Field::Attr(a) => msg.set(*a, read_int(v, ctx, vars)?),
        Field::Payload => match v {
            Value::Text(t) => msg.payload = Some(Arc::from(t.as_bytes())),
            Value::Var(n) => {
                let text = match var_value(vars, n)? {
                    crate::chart::Value::String(t) => t.to_string(),
                    other => other.to_string(),
                };
                msg.payload = Some(Arc::from(text.as_bytes()));
            }
            _ => msg.payload = read_msg(v, ctx)?.payload.clone(),
        },
        Field::Extra(n) => {
            let t: Box<str> = match v {
                Value::Text(t) => t.clone(),
                Value::Var(x) => match var_value(vars, x)? {
                    crate::chart::Value::String(t) => (*t).into(),
                    other => other.to_string().into(),
                },
                _ => read_int(v, ctx, vars)?.to_string().into(),
            };
            match msg.extra.iter_mut().find(|(k, _)| k == n) {
                Some(e) => e.1 = t,
                None => msg.extra.push((n.clone(), t)),
            }
        }
        Field::TimerId => timer.0 = read_int(v, ctx, vars)? as u32,
        Field::TimerMs => timer.1 = read_int(v, ctx, vars)?.max(0) as u64,
        Field::NodeAddress => ctx.node.address = Addr(read_int(v, ctx, vars)? as u64),
        Field::NodeParent => ctx.node.parent = Addr(read_int(v, ctx, vars)? as u64),
        Field::NodeChildren | Field::NodeNeighbours => {
            let Value::Addrs(list) = v else {
                return Err("expected a list of addresses".into());
            };
            let dst = if *field == Field::NodeChildren {
                &mut ctx.node.children
            } else {
                &mut ctx.node.neighbours
            };
            dst.clear();
            dst.extend_from_slice(list);
        }
    }
    Ok(())
}

fn perform<N: Network + ?Sized>(
    prim: Prim,
    msg: &mut Message,
    timer: (u32, u64),
    ctx: &mut Ctx<'_, N>,
) {
    if prim == Prim::UpdateNodeInfo {
        let node = ctx.node.clone();
        ctx.net
            .perform(ctx.now, ctx.key, Primitive::UpdateNodeInfo(&node));
        return;
    }
    if emit(
        prim,
        msg,
        timer,
        ctx.now,
        ctx.key,
        ctx.node.address,
        ctx.net,
    ) {
        ctx.terminated = true;
    }
}

/// Performs a primitive other than `updateNodeInfo` (§4.2.3.1: the instance's ServiceID and
/// MessageID; data and control messages leave from the local node; a forwarded one loses a
/// hop); whether it was `terminate`. The interpreted actions and the generated code
/// ([`codegen`](super::codegen)) both perform through this; always inlined, so where `prim`
/// is a constant (generated code) only its own arm remains.
#[inline(always)]
pub fn emit<N: Network + ?Sized>(
    prim: Prim,
    msg: &mut Message,
    timer: (u32, u64),
    now: Instant,
    key: InstanceKey,
    local: Addr,
    net: &mut N,
) -> bool {
    msg.service_id = key.service;
    if msg.message_id == 0 {
        msg.message_id = key.message;
    }
    match prim {
        Prim::CreateMessage | Prim::SetMessage | Prim::UpdateNodeInfo => {}
        Prim::ToApplication => net.perform(now, key, Primitive::ToApplication(msg)),
        Prim::SendData => {
            msg.source = local;
            msg.previous_hop = local;
            msg.message_type = PAYLOAD_TYPE;
            net.perform(now, key, Primitive::SendData(msg));
        }
        Prim::SendControl => {
            msg.source = local;
            msg.previous_hop = local;
            msg.payload = None;
            net.perform(now, key, Primitive::SendControl(msg));
        }
        Prim::Send => {
            msg.source = local;
            msg.previous_hop = local;
            if msg.message_type == PAYLOAD_TYPE {
                net.perform(now, key, Primitive::SendData(msg));
            } else {
                msg.payload = None;
                net.perform(now, key, Primitive::SendControl(msg));
            }
        }
        Prim::Forward => {
            msg.hop_limit = msg.hop_limit.saturating_sub(1);
            msg.previous_hop = local;
            net.perform(now, key, Primitive::Forward(msg));
        }
        Prim::SetTimer => net.perform(
            now,
            key,
            Primitive::SetTimer {
                id: timer.0,
                after: Duration::from_millis(timer.1),
            },
        ),
        Prim::CancelTimer => net.perform(now, key, Primitive::CancelTimer { id: timer.0 }),
        Prim::Terminate => {
            net.perform(now, key, Primitive::Terminate);
            return true;
        }
    }
    false
}

/// Runs one action.
///
/// # Errors
/// A value that cannot be read now (see the module doc); nothing is performed then.
#[inline]
pub fn run<N: Network + ?Sized>(
    action: &Action,
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    match action {
        Action::Run {
            prim,
            draft,
            base,
            sets,
        } => run_one(*prim, *draft, base.as_ref(), sets, ctx, vars),
        Action::Timer { prim, sets } => run_timer(*prim, sets, ctx, vars),
        Action::Each { selector, action } => run_each(selector, action, ctx, vars),
        _ => run_draft(action, ctx, vars),
    }
}

/// One element: build the message (or draft) and perform it.
fn run_one<N: Network + ?Sized>(
    prim: Prim,
    draft: Option<u8>,
    base: Option<&Value>,
    sets: &[(Field, Value)],
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    let mut msg = match (prim, draft, base) {
        (Prim::SetMessage, Some(d), _) => read_msg(&Value::Draft(d), ctx)?.clone(),
        (_, _, Some(b)) => read_msg(b, ctx)?.clone(),
        _ => Message {
            hop_limit: 255,
            ..Message::default()
        },
    };
    let mut timer = (0, 0);
    for (f, v) in sets.iter() {
        if let (Field::Attr(a), Some(x)) = (f, quick_int(v, ctx)) {
            msg.set(*a, x);
            continue;
        }
        apply(&mut msg, &mut timer, f, v, ctx, vars)?;
    }
    if let Some(d) = draft {
        let dr = ctx
            .drafts
            .get_mut(usize::from(d))
            .ok_or("draft out of range")?;
        dr.live = true;
        dr.msg = msg;
        return Ok(());
    }
    perform(prim, &mut msg, timer, ctx);
    Ok(())
}

/// `foreach`: the action once per selected node, [`Value::Each`] being its address.
#[inline(never)]
fn run_each<N: Network + ?Sized>(
    selector: &super::logic::Selector,
    action: &Action,
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    let Action::Run {
        prim,
        draft: None,
        base,
        sets,
    } = action
    else {
        return Err("foreach: expected a send".into());
    };
    // The selection is made before any action runs (an action may change the node): kept
    // on the stack for the usual few nodes, spilled to the heap beyond.
    let mut near = [Addr(0); EACH_INLINE];
    let mut n = 0;
    let mut spill = Vec::new();
    selector.for_each(&ctx.history.logic, ctx.node, ctx.now, |a| {
        if n < EACH_INLINE {
            near[n] = a;
            n += 1;
        } else {
            spill.push(a);
        }
    });
    let outer = ctx.each;
    let mut result = Ok(());
    for a in near[..n].iter().chain(&spill) {
        ctx.each = a.0 as i64;
        result = run_one(*prim, None, base.as_ref(), sets, ctx, vars);
        if result.is_err() {
            break;
        }
    }
    ctx.each = outer;
    result
}

/// Selected nodes a `foreach` keeps on the stack.
const EACH_INLINE: usize = 16;

/// `setTimer` / `cancelTimer`: no message is built.
#[inline]
fn run_timer<N: Network + ?Sized>(
    prim: Prim,
    sets: &[(Field, Value)],
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    let (mut id, mut ms) = (0, 0);
    for (f, v) in sets.iter() {
        let x = match quick_int(v, ctx) {
            Some(x) => x,
            None => read_int(v, ctx, vars)?,
        };
        match f {
            Field::TimerId => id = x as u32,
            _ => ms = x.max(0) as u64,
        }
    }
    let p = match prim {
        Prim::SetTimer => Primitive::SetTimer {
            id,
            after: Duration::from_millis(ms),
        },
        _ => Primitive::CancelTimer { id },
    };
    ctx.net.perform(ctx.now, ctx.key, p);
    Ok(())
}

/// The create / set / execute spelling.
///
/// # Errors
/// A value that cannot be read now (see the module doc); nothing is performed then.
#[inline(never)]
fn run_draft<N: Network + ?Sized>(
    action: &Action,
    ctx: &mut Ctx<'_, N>,
    vars: &dyn VarSource,
) -> Result<(), String> {
    match action {
        Action::Create { draft } => {
            let d = ctx
                .drafts
                .get_mut(usize::from(*draft))
                .ok_or("draft out of range")?;
            d.live = true;
            d.msg = Message {
                hop_limit: 255,
                ..Message::default()
            };
            d.timer_id = 0;
            d.timer_ms = 0;
            Ok(())
        }
        Action::Set {
            draft,
            field,
            value,
        } => {
            let i = usize::from(*draft);
            if !ctx.drafts.get(i).is_some_and(|d| d.live) {
                return Err(
                    "<action:set> before <action:create> of the same name in this step".into(),
                );
            }
            // The common fields without moving the draft out and back.
            match field {
                Field::Message => {
                    let src = read_msg(value, ctx)?.clone();
                    ctx.drafts[i].msg = src;
                    return Ok(());
                }
                Field::Attr(a) => {
                    let x = match quick_int(value, ctx) {
                        Some(x) => x,
                        None => read_int(value, ctx, vars)?,
                    };
                    ctx.drafts[i].msg.set(*a, x);
                    return Ok(());
                }
                _ => {}
            }
            let mut msg = std::mem::take(&mut ctx.drafts[i].msg);
            let mut timer = (ctx.drafts[i].timer_id, ctx.drafts[i].timer_ms);
            let r = apply(&mut msg, &mut timer, field, value, ctx, vars);
            let d = &mut ctx.drafts[i];
            d.msg = msg;
            (d.timer_id, d.timer_ms) = timer;
            r
        }
        Action::Execute { draft, prim } => {
            let i = usize::from(*draft);
            if !ctx.drafts.get(i).is_some_and(|d| d.live) {
                return Err(
                    "<action:execute> before <action:create> of the same name in this step".into(),
                );
            }
            let d = &mut ctx.drafts[i];
            d.live = false;
            let mut msg = std::mem::take(&mut d.msg);
            let timer = (d.timer_id, d.timer_ms);
            perform(*prim, &mut msg, timer, ctx);
            Ok(())
        }
        Action::Run { .. } | Action::Timer { .. } | Action::Each { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::service::logic;

    fn data() -> ServiceData {
        ServiceData::read(
            "t.scxml",
            r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a"><datamodel>
            <data name="service"><ServiceID>9</ServiceID></data>
            <data name="events"><Basic>
              <Event name="payloadmessage"><Message><MessageType>-128</MessageType></Message></Event>
            </Basic></data></datamodel><state id="a"/></scxml>"#,
        )
        .unwrap()
    }

    #[derive(Default)]
    struct Rec(Vec<String>);
    impl Network for Rec {
        fn perform(&mut self, _now: Instant, key: InstanceKey, p: Primitive<'_>) {
            self.0.push(match p {
                Primitive::SendControl(m) | Primitive::SendData(m) => {
                    format!(
                        "{} {} type={} dst={} mode={} src={} id={}",
                        key.message,
                        p.name(),
                        m.message_type,
                        m.destination,
                        m.delivery_mode,
                        m.source,
                        m.message_id
                    )
                }
                Primitive::SetTimer { id, after } => format!("setTimer {id} {after:?}"),
                other => other.name().to_string(),
            });
        }
    }

    fn attrs(a: &[(&str, &str)]) -> Vec<(String, String)> {
        a.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn seed_triple_and_one_element_send_the_same_ack() {
        let d = data();
        let c = Compiler::new(&d);
        let triple = [
            c.compile("create", &attrs(&[("name", "sendMessage")])).unwrap(),
            c.compile("set", &attrs(&[("name", "sendMessage"), ("field", "Message"), ("xpath", "/HistoryOfEvents/Event[@name='payloadmessage'][last()]/Message")])).unwrap(),
            c.compile("set", &attrs(&[("name", "sendMessage"), ("field", "Message/DeliveryMode"), ("value", "3")])).unwrap(),
            c.compile("set", &attrs(&[("name", "sendMessage"), ("field", "Message/DestinationAddress"), ("xpath", "/HistoryOfEvents/Event[@name='payloadmessage'][last()]/Message/PreviousHopAddress")])).unwrap(),
            c.compile("set", &attrs(&[("name", "sendMessage"), ("field", "Message/MessageType"), ("value", "2")])).unwrap(),
            c.compile("execute", &attrs(&[("name", "sendMessage")])).unwrap(),
        ];
        let one = c
            .compile(
                "sendControlMessage",
                &attrs(&[
                    ("from", "last(payloadmessage)"),
                    ("DeliveryMode", "3"),
                    (
                        "DestinationAddress",
                        "last(payloadmessage).PreviousHopAddress",
                    ),
                    ("MessageType", "2"),
                ]),
            )
            .unwrap();
        let timer = c
            .compile("setTimer", &attrs(&[("id", "2"), ("ms", "5000")]))
            .unwrap();
        assert!(c
            .compile("setTimer", &attrs(&[("id", "2")]))
            .unwrap_err()
            .contains("needs id"));
        assert!(c
            .compile("launch", &[])
            .unwrap_err()
            .contains("unknown action `launch`"));
        assert!(c
            .compile(
                "setTimer",
                &attrs(&[("id", "2"), ("ms", "1"), ("colour", "red")])
            )
            .unwrap_err()
            .contains("unknown parameter `colour`"));
        assert!(c
            .compile("toApplication", &attrs(&[("message", "last(nope)")]))
            .unwrap_err()
            .contains("unknown event `nope`"));
        let (layout, drafts) = c.finish();
        let mut h = History::new(&layout, logic::State::default());
        let p = Message {
            message_type: 0x80,
            message_id: 42,
            service_id: 9,
            previous_hop: Addr(7),
            source: Addr(1),
            payload: Some(Arc::from(&b"x"[..])),
            ..Message::default()
        };
        h.record(&layout, 0, &p);
        let mut node = NodeInfo {
            address: Addr(5),
            ..NodeInfo::default()
        };
        let mut drafts = vec![Draft::default(); drafts];
        let mut net = Rec::default();
        let key = InstanceKey {
            service: 9,
            message: 42,
        };
        let mut ctx = Ctx {
            now: Instant::ZERO,
            key,
            node: &mut node,
            history: &h,
            current: Some(&p),
            drafts: &mut drafts,
            net: &mut net,
            terminated: false,
            each: 0,
        };
        for a in triple.iter().chain([&one, &timer]) {
            run(a, &mut ctx, &()).unwrap();
        }
        assert_eq!(
            net.0,
            vec![
                "42 sendControlMessage type=2 dst=7 mode=3 src=5 id=42",
                "42 sendControlMessage type=2 dst=7 mode=3 src=5 id=42",
                "setTimer 2 5s"
            ]
        );
    }

    #[test]
    fn reading_an_empty_history_fails_the_action() {
        let d = data();
        let c = Compiler::new(&d);
        let a = c
            .compile(
                "toApplication",
                &attrs(&[("message", "last(payloadmessage)")]),
            )
            .unwrap();
        let (layout, _) = c.finish();
        let h = History::new(&layout, logic::State::default());
        let mut node = NodeInfo::default();
        let mut net = Rec::default();
        let mut ctx = Ctx {
            now: Instant::ZERO,
            key: InstanceKey::default(),
            node: &mut node,
            history: &h,
            current: None,
            drafts: &mut [],
            net: &mut net,
            terminated: false,
            each: 0,
        };
        assert!(run(&a, &mut ctx, &())
            .unwrap_err()
            .contains("no such message"));
        assert!(net.0.is_empty());
    }
}

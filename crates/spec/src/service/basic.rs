//! Message arrivals and timer expiries → basic events (seed 000 §4.2.1.1, §4.2.1.3,
//! Tables 4.1–4.3).
//!
//! Every basic event whose filters all pass fires, in declaration order:
//! - one-to-one (Table 4.1): one filter per message type;
//! - many-to-one (Table 4.2): `<Message/>` without filters matches every message;
//! - one-to-many (Table 4.3): overlapping filters (an ACK, and an ACK whose source is `local`)
//!   both fire for one message, the earlier declaration first.
//!
//! The matcher is compiled once per service: message events are pre-sorted into a table by
//! MessageType (the attribute every seed service filters on), so a message is checked only
//! against the events that can match its type.

use super::data::{BasicKind, FilterAttr, FilterValue, ServiceData};
use super::message::{Attr, Message, NodeInfo};

/// A compiled check beyond the message type.
#[derive(Clone, Debug)]
enum Check {
    Int(Attr, i64),
    Local(Attr),
    Text(Box<str>, Box<str>),
}

#[derive(Clone, Debug)]
struct MessageEvent {
    event: u16,
    checks: Box<[Check]>,
}

/// The compiled filters of one service.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// Per message type: the candidate events in declaration order.
    by_type: Vec<Box<[MessageEvent]>>,
    /// Per message type: the events it triggers when none of its candidates has a check
    /// beyond the type (the usual case), so matching is one table read.
    plain: Box<[Option<Box<[u16]>>]>,
    /// (timer id or None for any, event).
    timers: Box<[(Option<u32>, u16)]>,
    /// Per TimerIdentifier below [`TIMER_INDEX`]: the events it triggers, in declaration
    /// order (a timer expiry is one table read, not a scan of every timer event).
    timer_index: Box<[Box<[u16]>]>,
}

/// TimerIdentifiers below this are indexed; others are matched by scanning.
const TIMER_INDEX: u32 = 64;

impl Matcher {
    /// Compiles the basic events of a service.
    pub fn new(data: &ServiceData) -> Matcher {
        let mut by_type: Vec<Vec<MessageEvent>> = vec![Vec::new(); 256];
        let mut timers = Vec::new();
        for (i, b) in data.basic.iter().enumerate() {
            let event = i as u16;
            match &b.kind {
                BasicKind::Timer(id) => timers.push((*id, event)),
                BasicKind::Message(filters) => {
                    let mut types: Option<Vec<u8>> = None;
                    let mut checks = Vec::new();
                    for f in filters {
                        match (&f.attr, &f.value) {
                            (FilterAttr::Known(Attr::MessageType), FilterValue::Int(v)) => {
                                let t = *v as u8;
                                // Two MessageType filters: both must hold.
                                types = Some(match types {
                                    None => vec![t],
                                    Some(prev) => prev.into_iter().filter(|&p| p == t).collect(),
                                });
                            }
                            (FilterAttr::Known(a), FilterValue::Int(v)) => {
                                checks.push(Check::Int(*a, *v))
                            }
                            (FilterAttr::Known(a), FilterValue::Local) => {
                                checks.push(Check::Local(*a))
                            }
                            (FilterAttr::Known(a), FilterValue::Text(t)) => {
                                checks.push(Check::Text(a.name().into(), t.as_str().into()))
                            }
                            (FilterAttr::Extra(n), FilterValue::Text(t)) => {
                                checks.push(Check::Text(n.as_str().into(), t.as_str().into()))
                            }
                            (FilterAttr::Extra(n), v) => {
                                checks.push(Check::Text(n.as_str().into(), format!("{v:?}").into()))
                            }
                        }
                    }
                    let me = MessageEvent {
                        event,
                        checks: checks.into(),
                    };
                    match types {
                        Some(ts) => {
                            for t in ts {
                                by_type[usize::from(t)].push(me.clone());
                            }
                        }
                        None => {
                            for v in by_type.iter_mut() {
                                v.push(me.clone());
                            }
                        }
                    }
                }
            }
        }
        let timer_index = (0..TIMER_INDEX)
            .map(|id| {
                timers
                    .iter()
                    .filter(|(t, _)| t.is_none_or(|t| t == id))
                    .map(|&(_, e)| e)
                    .collect()
            })
            .collect();
        let plain = by_type
            .iter()
            .map(|v| {
                v.iter()
                    .all(|e| e.checks.is_empty())
                    .then(|| v.iter().map(|e| e.event).collect())
            })
            .collect();
        Matcher {
            plain,
            by_type: by_type.into_iter().map(Vec::into_boxed_slice).collect(),
            timers: timers.into(),
            timer_index,
        }
    }

    /// Appends to `out` the basic events a message triggers, in declaration order.
    #[inline]
    pub fn message(&self, m: &Message, node: &NodeInfo, out: &mut Vec<u16>) {
        for e in self.by_type[usize::from(m.message_type)].iter() {
            if e.checks.iter().all(|c| match c {
                Check::Int(a, v) => m.get(*a) == *v,
                Check::Local(a) => m.get(*a) == node.address.0 as i64,
                Check::Text(n, v) => m.extra(n) == Some(&**v),
            }) {
                out.push(e.event);
            }
        }
    }

    /// The basic events a message of type `t` triggers, in declaration order, when that does
    /// not depend on the message's other attributes (else [`Matcher::message`] decides).
    #[inline]
    pub fn message_plain(&self, t: u8) -> Option<&[u16]> {
        self.plain.get(usize::from(t))?.as_deref()
    }

    /// The basic events a timer expiry of `id` triggers, in declaration order, when `id` is
    /// indexed (else [`Matcher::timer`] scans).
    #[inline]
    pub fn timer_plain(&self, id: u32) -> Option<&[u16]> {
        self.timer_index.get(id as usize).map(|v| &**v)
    }

    /// Appends to `out` the basic events a timer expiry triggers, in declaration order.
    #[inline]
    pub fn timer(&self, id: u32, out: &mut Vec<u16>) {
        if let Some(events) = self.timer_index.get(id as usize) {
            out.extend_from_slice(events);
            return;
        }
        for &(t, e) in self.timers.iter() {
            if t.is_none_or(|t| t == id) {
                out.push(e);
            }
        }
    }

    /// Whether any message can trigger event `e` (false for an event whose filters contradict,
    /// e.g. two different MessageTypes). Used by verification.
    pub fn can_match(&self, e: u16) -> bool {
        self.by_type.iter().any(|v| v.iter().any(|m| m.event == e))
            || self.timers.iter().any(|t| t.1 == e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::message::Addr;
    use super::*;

    fn data(events: &str) -> ServiceData {
        let src = format!(
            r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a"><datamodel>
            <data name="service"><ServiceID>7</ServiceID></data>
            <data name="events"><Basic>{events}</Basic></data></datamodel><state id="a"/></scxml>"#
        );
        ServiceData::read("t.scxml", &src).unwrap()
    }

    fn msg(t: i64, src: u64) -> Message {
        Message {
            message_type: t as u8,
            source: Addr(src),
            ..Message::default()
        }
    }

    #[test]
    fn one_to_one_table_4_1() {
        let d = data(
            r#"<Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
               <Event name="payload"><Message><MessageType>-128</MessageType></Message></Event>
               <Event name="nack"><Message><MessageType>1</MessageType></Message></Event>"#,
        );
        let m = Matcher::new(&d);
        let node = NodeInfo::default();
        for (t, want) in [(2, vec![0u16]), (128, vec![1]), (1, vec![2]), (9, vec![])] {
            let mut out = Vec::new();
            m.message(&msg(t, 1), &node, &mut out);
            assert_eq!(out, want, "type {t}");
        }
    }

    #[test]
    fn many_to_one_table_4_2_and_one_to_many_table_4_3() {
        let d = data(
            r#"<Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
               <Event name="error"><Message><MessageType>2</MessageType><SourceAddress>local</SourceAddress></Message></Event>
               <Event name="any"><Message/></Event>
               <Event name="t"><Timer><TimerIdentifier>4</TimerIdentifier></Timer></Event>
               <Event name="anytimer"><Timer/></Event>"#,
        );
        let m = Matcher::new(&d);
        let node = NodeInfo {
            address: Addr(5),
            ..NodeInfo::default()
        };
        let mut out = Vec::new();
        m.message(&msg(2, 5), &node, &mut out);
        assert_eq!(out, vec![0, 1, 2]);
        out.clear();
        m.message(&msg(2, 6), &node, &mut out);
        assert_eq!(out, vec![0, 2]);
        out.clear();
        m.message(&msg(77, 6), &node, &mut out);
        assert_eq!(out, vec![2]);
        out.clear();
        m.timer(4, &mut out);
        assert_eq!(out, vec![3, 4]);
        out.clear();
        m.timer(5, &mut out);
        assert_eq!(out, vec![4]);
        // Beyond the indexed identifiers, the same answer by scanning.
        out.clear();
        m.timer(1_000_000, &mut out);
        assert_eq!(out, vec![4]);
    }

    /// The one-read path (a type whose events filter on nothing else) answers as the
    /// general matcher for every type, and is refused for a type with further filters.
    #[test]
    fn plain_matching_agrees_with_the_filters() {
        let d = data(
            r#"<Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
               <Event name="error"><Message><MessageType>3</MessageType><SourceAddress>local</SourceAddress></Message></Event>
               <Event name="ack2"><Message><MessageType>2</MessageType></Message></Event>
               <Event name="t"><Timer><TimerIdentifier>4</TimerIdentifier></Timer></Event>"#,
        );
        let m = Matcher::new(&d);
        let node = NodeInfo::default();
        for t in 0..=255u8 {
            let mut out = Vec::new();
            m.message(&msg(i64::from(t), 1), &node, &mut out);
            match m.message_plain(t) {
                Some(p) => assert_eq!(p, &out[..], "type {t}"),
                None => assert_eq!(t, 3),
            }
        }
        assert_eq!(m.message_plain(2), Some(&[0u16, 2][..]));
        assert_eq!(m.timer_plain(4), Some(&[3u16][..]));
        assert_eq!(m.timer_plain(5), Some(&[][..]));
        assert_eq!(m.timer_plain(1_000), None);
    }

    #[test]
    fn contradicting_filters_never_match() {
        let d = data(
            r#"<Event name="x"><Message><MessageType>2</MessageType><MessageType>3</MessageType></Message></Event>"#,
        );
        assert!(!Matcher::new(&d).can_match(0));
    }
}

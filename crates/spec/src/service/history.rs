//! The compact history of basic events of one instance (seed 000 §4.2.2).
//!
//! The seed keeps every basic event in a database and queries it with XPath/XQuery; that is
//! what cost the prior system ~89 KB per message. Here the history keeps only what the
//! service's actions and composite events can ever read, decided when the service is compiled:
//!
//! - for every basic event `E` that an action reads as `last(E)` (the seed's
//!   `/HistoryOfEvents/Event[@name='E'][last()]/Message`), the last message of `E`;
//! - the per-instance indexes of [`logic`](super::logic) (the composite events' incremental
//!   state: per key, the last arrival time of a satisfying event).
//!
//! Its size is therefore bounded by the specification (number of `last` slots) and by the
//! distinct keys of the composite events (at most the node's children/neighbours that answered,
//! plus other distinct values the events carry).

use super::logic;
use super::message::Message;

/// Which basic events keep their last message: `slot[event]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    slot_of: Vec<Option<u8>>,
    slots: usize,
}

impl Layout {
    /// A layout for `events` basic events, none kept.
    pub fn new(events: usize) -> Layout {
        Layout {
            slot_of: vec![None; events],
            slots: 0,
        }
    }

    /// Keeps the last message of `event`; returns its slot.
    pub fn keep(&mut self, event: u16) -> u8 {
        let e = usize::from(event);
        if e >= self.slot_of.len() {
            self.slot_of.resize(e + 1, None);
        }
        if let Some(s) = self.slot_of[e] {
            return s;
        }
        let s = self.slots as u8;
        self.slot_of[e] = Some(s);
        self.slots += 1;
        s
    }

    /// The slot of `event`, if kept.
    #[inline]
    pub fn slot(&self, event: u16) -> Option<u8> {
        self.slot_of.get(usize::from(event)).copied().flatten()
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// One instance's history.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Per slot: whether it holds a message, and the message. A recycled history keeps its
    /// messages' room (overwritten in place by the next instance) but not their payloads.
    last: Box<[(bool, Message)]>,
    /// The composite events' indexes.
    pub logic: logic::State,
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.last.len() == other.last.len()
            && (0..self.last.len()).all(|i| self.last(i as u8) == other.last(i as u8))
            && self.logic == other.logic
    }
}

impl Eq for History {}

impl History {
    /// An empty history for a layout.
    pub fn new(layout: &Layout, logic: logic::State) -> History {
        History {
            last: vec![(false, Message::default()); layout.slots()].into_boxed_slice(),
            logic,
        }
    }

    /// Empties the history, keeping its allocations (a recycled instance); payloads and extra
    /// attributes are let go.
    #[inline]
    pub fn reset(&mut self) {
        for (has, m) in self.last.iter_mut() {
            // A slot never filled holds nothing to let go.
            if std::mem::take(has) {
                m.payload = None;
                if !m.extra.is_empty() {
                    m.extra.clear();
                }
            }
        }
        self.logic.reset();
    }

    /// Records a message of `event` if the layout keeps it.
    #[inline]
    pub fn record(&mut self, layout: &Layout, event: u16, m: &Message) {
        if let Some(s) = layout.slot(event) {
            self.keep(s, m);
        }
    }

    /// Keeps `m` as the last message of `slot`'s event (a slot out of range is ignored),
    /// overwriting the slot's message in place.
    #[inline]
    pub fn keep(&mut self, slot: u8, m: &Message) {
        if let Some((has, old)) = self.last.get_mut(usize::from(slot)) {
            *has = true;
            old.clone_from(m);
        }
    }

    /// The last message kept in `slot`.
    #[inline]
    pub fn last(&self, slot: u8) -> Option<&Message> {
        match self.last.get(usize::from(slot)) {
            Some((true, m)) => Some(m),
            _ => None,
        }
    }

    /// Feeds the kept messages and the indexes to `h` (see [`logic::State::fingerprint`]).
    /// For the explorer.
    pub fn fingerprint<H: std::hash::Hasher>(&self, now_ns: u64, h: &mut H) {
        for (has, m) in self.last.iter() {
            match has.then_some(m) {
                Some(m) => {
                    h.write_u8(1);
                    m.fingerprint(h);
                }
                None => h.write_u8(0),
            }
        }
        self.logic.fingerprint(now_ns, h);
    }

    /// Bytes held on the heap, payloads excluded (for the memory figures).
    pub fn heap_bytes(&self) -> usize {
        self.last.len() * std::mem::size_of::<(bool, Message)>()
            + self
                .last
                .iter()
                .filter(|(has, _)| *has)
                .map(|(_, m)| m.heap_bytes())
                .sum::<usize>()
            + self.logic.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keeps_only_the_layout_slots() {
        let mut l = Layout::new(3);
        let s = l.keep(2);
        assert_eq!(l.keep(2), s);
        let mut h = History::new(&l, logic::State::default());
        let m1 = Message {
            seq: 1,
            ..Message::default()
        };
        let m2 = Message {
            seq: 2,
            ..Message::default()
        };
        h.record(&l, 0, &m1);
        assert!(h.last(s).is_none());
        h.record(&l, 2, &m1);
        h.record(&l, 2, &m2);
        assert_eq!(h.last(s).unwrap().seq, 2);
    }

    /// A recycled history holds no message and no payload, and is equal to a new one.
    #[test]
    fn reset_lets_go_of_messages_and_payloads() {
        let mut l = Layout::new(1);
        let s = l.keep(0);
        let mut h = History::new(&l, logic::State::default());
        let payload: std::sync::Arc<[u8]> = vec![1u8; 8].into();
        let m = Message {
            seq: 7,
            payload: Some(std::sync::Arc::clone(&payload)),
            extra: vec![("X".into(), "y".into())],
            ..Message::default()
        };
        h.keep(s, &m);
        drop(m);
        assert_eq!(std::sync::Arc::strong_count(&payload), 2);
        h.reset();
        assert!(h.last(s).is_none());
        assert_eq!(std::sync::Arc::strong_count(&payload), 1);
        assert_eq!(h, History::new(&l, logic::State::default()));
        let m2 = Message {
            seq: 8,
            ..Message::default()
        };
        h.record(&l, 0, &m2);
        assert_eq!(h.last(s), Some(&m2));
    }
}

//! Reference counts of values held by tools (seed 003 "Garbage collection" and "The
//! solution"): +1 per binding of a reference (a script variable, a queued note, message or
//! event) and +1 per delivery in flight until the receiver's ACK; when the count reaches zero
//! the owner is told it may free the value (FIN). Leases (seed 003 "Initial idea", proposed and
//! never built there) are the bus's: an owner that stops answering loses its values, and every
//! delivery still waiting on one of them fails at its consumer with a typed error.
//!
//! Sans-IO: the table says what to send (FINs, FAILs); [`crate::interp::Bus`] sends it.

use std::collections::BTreeMap;

use crate::term::RefInfo;

/// A reference's identity: owner tool and its variable id.
pub type RefKey = (u64, u64);

/// A counted reference.
#[derive(Debug, Clone)]
struct Entry {
    count: u32,
    size: u64,
}

/// A frame in flight whose references stay counted until its ACK.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The receiving tool.
    pub to: u64,
    /// The references it carries.
    pub refs: Vec<RefKey>,
}

/// What the table asks the bus to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefAction {
    /// Tell `owner` it may free `var` (FIN).
    Fin {
        /// The owner.
        owner: u64,
        /// Its variable.
        var: u64,
    },
    /// Tell `to` that `delivery` failed because an owner was lost (FAIL).
    Fail {
        /// The consumer.
        to: u64,
        /// The delivery.
        delivery: u64,
    },
}

/// Refusals and events, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RefCounters {
    /// FINs sent.
    pub fins: u64,
    /// Deliveries failed because their owner was lost.
    pub failed_deliveries: u64,
    /// References refused because their owner held too many.
    pub refused_over_limit: u64,
    /// ACKs of unknown deliveries (or from the wrong tool), ignored.
    pub stray_acks: u64,
}

/// The reference table.
#[derive(Debug, Default)]
pub struct RefTable {
    entries: BTreeMap<RefKey, Entry>,
    deliveries: BTreeMap<u64, Delivery>,
    next_delivery: u64,
    /// The most references one owner may have counted at once.
    pub max_per_owner: usize,
    /// Counters.
    pub counters: RefCounters,
}

impl RefTable {
    /// An empty table allowing `max_per_owner` references per owner.
    pub fn new(max_per_owner: usize) -> RefTable {
        RefTable {
            max_per_owner,
            ..RefTable::default()
        }
    }

    /// The count of a reference (0 when unknown).
    pub fn count(&self, key: RefKey) -> u32 {
        self.entries.get(&key).map_or(0, |e| e.count)
    }

    /// Number of references counted.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no reference is counted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held by tools on the bus's behalf (sum of the counted values' sizes).
    pub fn held_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.size).sum()
    }

    /// Deliveries in flight.
    pub fn in_flight(&self) -> usize {
        self.deliveries.len()
    }

    /// Whether a new reference of `owner` may be counted (its limit not reached).
    pub fn admits(&self, refs: &[RefInfo]) -> bool {
        refs.iter().all(|r| {
            self.entries.contains_key(&(r.owner, r.var))
                || self
                    .entries
                    .range((r.owner, 0)..=(r.owner, u64::MAX))
                    .count()
                    < self.max_per_owner
        })
    }

    /// +1 on each reference.
    pub fn bind(&mut self, refs: &[RefInfo]) {
        for r in refs {
            self.entries
                .entry((r.owner, r.var))
                .and_modify(|e| e.count += 1)
                .or_insert(Entry {
                    count: 1,
                    size: r.size,
                });
        }
    }

    /// −1 on each reference; FIN for those that reach zero.
    pub fn unbind(&mut self, refs: impl IntoIterator<Item = RefKey>, out: &mut Vec<RefAction>) {
        for key in refs {
            if let Some(e) = self.entries.get_mut(&key) {
                e.count = e.count.saturating_sub(1);
                if e.count == 0 {
                    self.entries.remove(&key);
                    self.counters.fins += 1;
                    out.push(RefAction::Fin {
                        owner: key.0,
                        var: key.1,
                    });
                }
            }
        }
    }

    /// Counts a delivery to `to` of `refs`; returns its number (never 0).
    pub fn deliver(&mut self, to: u64, refs: &[RefInfo]) -> u64 {
        self.bind(refs);
        self.next_delivery += 1;
        let id = self.next_delivery;
        self.deliveries.insert(
            id,
            Delivery {
                to,
                refs: refs.iter().map(|r| (r.owner, r.var)).collect(),
            },
        );
        id
    }

    /// A delivery still in flight (not yet acknowledged).
    pub fn delivery(&self, id: u64) -> Option<&Delivery> {
        self.deliveries.get(&id)
    }

    /// The ACK of `delivery` by `from`: its references are released.
    pub fn ack(&mut self, from: u64, delivery: u64, out: &mut Vec<RefAction>) {
        match self.deliveries.get(&delivery) {
            Some(d) if d.to == from => {
                if let Some(d) = self.deliveries.remove(&delivery) {
                    self.unbind(d.refs, out);
                }
            }
            _ => self.counters.stray_acks += 1,
        }
    }

    /// `tool` is gone (left, or silent past its lease): deliveries to it are dropped, and every
    /// delivery waiting on a value it owned fails at its consumer. Its values are forgotten
    /// (no FIN: there is no one to tell).
    pub fn tool_lost(&mut self, tool: u64, out: &mut Vec<RefAction>) {
        let to_it: Vec<u64> = self
            .deliveries
            .iter()
            .filter(|(_, d)| d.to == tool)
            .map(|(id, _)| *id)
            .collect();
        for id in to_it {
            if let Some(d) = self.deliveries.remove(&id) {
                self.unbind(d.refs, out);
            }
        }
        let failing: Vec<u64> = self
            .deliveries
            .iter()
            .filter(|(_, d)| d.refs.iter().any(|(owner, _)| *owner == tool))
            .map(|(id, _)| *id)
            .collect();
        for id in failing {
            if let Some(d) = self.deliveries.remove(&id) {
                self.counters.failed_deliveries += 1;
                out.push(RefAction::Fail {
                    to: d.to,
                    delivery: id,
                });
                let others: Vec<RefKey> = d.refs.into_iter().filter(|(o, _)| *o != tool).collect();
                self.unbind(others, out);
            }
        }
        let keys: Vec<RefKey> = self
            .entries
            .range((tool, 0)..=(tool, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.entries.remove(&k);
        }
        out.retain(|a| !matches!(a, RefAction::Fin { owner, .. } if *owner == tool));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::Arena;

    fn r(a: &mut Arena, owner: u64, var: u64) -> RefInfo {
        RefInfo {
            owner,
            var,
            size: 100,
            location: "".into(),
            sig: a.placeholder("blob"),
        }
    }

    #[test]
    fn count_reaches_zero_only_after_binding_and_ack() {
        let mut a = Arena::new();
        let x = r(&mut a, 1, 7);
        let mut t = RefTable::new(10);
        let mut out = Vec::new();
        t.bind(std::slice::from_ref(&x));
        let d = t.deliver(2, std::slice::from_ref(&x));
        assert_eq!(t.count((1, 7)), 2);
        // The variable is rebound while the transfer is in flight: the value must survive.
        t.unbind([(1, 7)], &mut out);
        assert!(out.is_empty());
        assert_eq!(t.held_bytes(), 100);
        // A wrong tool's ACK changes nothing.
        t.ack(3, d, &mut out);
        assert!(out.is_empty());
        assert_eq!(t.counters.stray_acks, 1);
        t.ack(2, d, &mut out);
        assert_eq!(out, vec![RefAction::Fin { owner: 1, var: 7 }]);
        assert!(t.is_empty());
    }

    #[test]
    fn lost_owner_fails_pending_deliveries() {
        let mut a = Arena::new();
        let x = r(&mut a, 1, 7);
        let y = r(&mut a, 4, 1);
        let mut t = RefTable::new(10);
        let mut out = Vec::new();
        let d = t.deliver(2, &[x.clone(), y.clone()]);
        t.tool_lost(1, &mut out);
        assert_eq!(
            out,
            vec![
                RefAction::Fail { to: 2, delivery: d },
                RefAction::Fin { owner: 4, var: 1 }
            ]
        );
        assert!(t.is_empty());
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn per_owner_limit() {
        let mut a = Arena::new();
        let mut t = RefTable::new(2);
        t.bind(&[r(&mut a, 1, 1), r(&mut a, 1, 2)]);
        assert!(t.admits(&[r(&mut a, 1, 1)]));
        assert!(!t.admits(&[r(&mut a, 1, 3)]));
        assert!(t.admits(&[r(&mut a, 2, 3)]));
    }
}

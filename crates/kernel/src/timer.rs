//! The kernel's timer table (seed 001 §4 timers; DESIGN.md §6.2 "timers are data").
//!
//! One-shot and periodic timers, cancellable, each carrying the setter's session, channel and an
//! opaque `token`. Deadlines live in an ordered map keyed by (deadline, id), so the next
//! deadline is exact (no stale entries after cancellation) and ties fire in the order the timers
//! were set. Periodic timers are re-armed at `deadline + period` (no drift).

use std::collections::{BTreeMap, HashMap};

use crate::event::{ChannelId, TimerId};
use crate::layer::SessionId;
use crate::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub(crate) struct TimerEntry {
    pub session: SessionId,
    pub channel: ChannelId,
    pub token: u64,
    pub period: Option<Duration>,
}

#[derive(Default)]
pub(crate) struct Timers {
    by_deadline: BTreeMap<(Instant, u64), TimerEntry>,
    deadline_of: HashMap<u64, Instant>,
    next_id: u64,
}

impl Timers {
    pub fn set(&mut self, deadline: Instant, entry: TimerEntry) -> TimerId {
        let id = self.next_id;
        self.next_id += 1;
        self.by_deadline.insert((deadline, id), entry);
        self.deadline_of.insert(id, deadline);
        TimerId(id)
    }

    /// Cancels a timer; returns whether it was pending.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        match self.deadline_of.remove(&id.0) {
            Some(d) => self.by_deadline.remove(&(d, id.0)).is_some(),
            None => false,
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.keys().next().map(|(d, _)| *d)
    }

    /// Removes and returns the earliest timer due at `now`, re-arming it if periodic.
    pub fn pop_due(&mut self, now: Instant) -> Option<(TimerId, TimerEntry)> {
        let (&(deadline, id), _) = self.by_deadline.iter().next()?;
        if deadline > now {
            return None;
        }
        let entry = self.by_deadline.remove(&(deadline, id))?;
        match entry.period {
            Some(p) if !p.is_zero() => {
                let next = deadline + p;
                self.by_deadline.insert((next, id), entry);
                self.deadline_of.insert(id, next);
            }
            _ => {
                self.deadline_of.remove(&id);
            }
        }
        Some((TimerId(id), entry))
    }

    /// Drops every timer of `session` on `channel` (used when a channel closes).
    pub fn cancel_channel(&mut self, channel: ChannelId) {
        let ids: Vec<u64> = self
            .by_deadline
            .iter()
            .filter(|(_, e)| e.channel == channel)
            .map(|((_, id), _)| *id)
            .collect();
        for id in ids {
            self.cancel(TimerId(id));
        }
    }

    pub fn len(&self) -> usize {
        self.by_deadline.len()
    }
}

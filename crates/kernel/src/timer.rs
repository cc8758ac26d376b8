//! The kernel's timer table (seed 001 §4 timers; DESIGN.md §6.2 "timers are data").
//!
//! One-shot and periodic timers, cancellable, each carrying the setter's session, channel and an
//! opaque `token`. Deadlines live in an ordered map keyed by (deadline, id), so the next
//! deadline is exact (no stale entries after cancellation) and ties fire in the order the timers
//! were set. Periodic timers are re-armed at `deadline + period` (no drift). A periodic timer
//! that fell more than one period behind (the process was stopped or starved: only a real-time
//! driver can be late) fires once and skips the periods it missed, keeping its phase: a burst of
//! catch-up ticks after a long stall would cost the CPU the node needs to be heard again, and
//! tells a session nothing one late tick does not (`viastack_protocols::stall` reads the gap).

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
                let mut next = deadline + p;
                if next <= now {
                    // Missed periods are skipped: the next deadline after `now`, in phase.
                    let behind = now.saturating_duration_since(deadline).as_nanos();
                    let periods = behind / p.as_nanos() + 1;
                    let skip =
                        u64::try_from(periods.saturating_mul(p.as_nanos())).unwrap_or(u64::MAX);
                    next = deadline.saturating_add(Duration::from_nanos(skip));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(n)
    }

    fn periodic(timers: &mut Timers, first: Instant, period: u64) -> TimerId {
        timers.set(
            first,
            TimerEntry {
                session: SessionId(0),
                channel: ChannelId(0),
                token: 1,
                period: Some(Duration::from_millis(period)),
            },
        )
    }

    #[test]
    fn a_periodic_timer_on_time_is_rearmed_one_period_later() {
        let mut t = Timers::default();
        periodic(&mut t, ms(10), 10);
        assert!(t.pop_due(ms(10)).is_some());
        assert_eq!(t.next_deadline(), Some(ms(20)));
        assert!(t.pop_due(ms(19)).is_none());
    }

    /// Stopped from 10 ms to 55 ms: one tick at 55 ms, then the next at 60 ms (in phase), not
    /// four catch-up ticks at once.
    #[test]
    fn a_periodic_timer_that_fell_behind_fires_once_and_skips_the_missed_periods() {
        let mut t = Timers::default();
        periodic(&mut t, ms(10), 10);
        assert!(t.pop_due(ms(55)).is_some());
        assert!(t.pop_due(ms(55)).is_none(), "no catch-up burst");
        assert_eq!(t.next_deadline(), Some(ms(60)));
        // Exactly one period late: the next deadline is one period on.
        assert!(t.pop_due(ms(70)).is_some());
        assert_eq!(t.next_deadline(), Some(ms(80)));
    }
}

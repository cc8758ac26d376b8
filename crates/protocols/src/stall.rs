//! Telling "a peer was silent" from "this node was not running".
//!
//! A failure detector judges peers by how long it has not heard from them. That reasoning
//! assumes the judge itself was running: a process stopped for a while (`SIGSTOP`, a debugger,
//! a virtual machine paused or starved of CPU, a laptop suspended) wakes up to find every peer
//! "silent" for the whole pause, although it was the one that could not listen. Heard from
//! nobody, it suspects everyone and splits from a healthy group.
//!
//! A session that ticks periodically can see its own pauses: its periodic timer fires late.
//! [`TickGap`] measures by how much; a detector then moves its peers' "last heard" times
//! forward by that stall (never past now), so silence during its own pause is not counted
//! against them, while silence before and after it still is. A crash of a peer during the
//! pause is therefore suspected one timeout after the node resumes instead of at once — the
//! failure is still reported, one timeout later. The same idea appears in Akka's
//! failure detector and Cassandra's gossiper ("local pause detected").
//!
//! Jitter is not a stall: a tick up to one period late counts as on time.

use viastack_kernel::{Duration, Instant};

/// The gaps between a session's periodic ticks.
#[derive(Debug, Clone, Copy)]
pub struct TickGap {
    period: Duration,
    last: Option<Instant>,
}

impl TickGap {
    /// Ticks every `period`.
    pub fn new(period: Duration) -> TickGap {
        TickGap { period, last: None }
    }

    /// The periodic timer was armed at `now`: the first tick is measured from there, so a
    /// node stopped before its first tick sees that stall too (issue 18: a member stopped
    /// right after it started suspected everyone at its first tick).
    pub fn armed(&mut self, now: Instant) {
        self.last = Some(now);
    }

    /// A tick at `now`: for how long this node was stalled before it (the time since the
    /// previous tick, or since the timer was [armed](TickGap::armed), beyond two periods;
    /// zero for a tick on time and for a first tick of a timer never said armed).
    pub fn tick(&mut self, now: Instant) -> Duration {
        let last = self.last.unwrap_or(now);
        self.last = Some(now.max(last));
        let gap = now.saturating_duration_since(last);
        if gap > self.period * 2 {
            gap - self.period
        } else {
            Duration::ZERO
        }
    }
}

/// `heard` moved forward by `stalled`, never past `now`.
pub fn discount(heard: Instant, stalled: Duration, now: Instant) -> Instant {
    heard.saturating_add(stalled).min(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ticks_on_time_or_slightly_late_are_not_a_stall() {
        let mut g = TickGap::new(ms(50));
        assert_eq!(g.tick(Instant::ZERO + ms(50)), Duration::ZERO);
        assert_eq!(g.tick(Instant::ZERO + ms(100)), Duration::ZERO);
        assert_eq!(g.tick(Instant::ZERO + ms(199)), Duration::ZERO);
    }

    #[test]
    fn a_late_tick_reports_the_time_beyond_one_period() {
        let mut g = TickGap::new(ms(50));
        g.tick(Instant::ZERO + ms(50));
        assert_eq!(g.tick(Instant::ZERO + ms(1550)), ms(1450));
        assert_eq!(g.tick(Instant::ZERO + ms(1600)), Duration::ZERO);
    }

    #[test]
    fn a_first_tick_late_after_arming_is_a_stall() {
        let mut g = TickGap::new(ms(100));
        g.armed(Instant::ZERO + ms(30));
        assert_eq!(g.tick(Instant::ZERO + ms(5030)), ms(4900));
        let mut g = TickGap::new(ms(100));
        g.armed(Instant::ZERO + ms(30));
        assert_eq!(g.tick(Instant::ZERO + ms(130)), Duration::ZERO);
    }

    #[test]
    fn discounting_never_passes_now() {
        let now = Instant::ZERO + ms(1000);
        assert_eq!(
            discount(Instant::ZERO + ms(100), ms(300), now),
            Instant::ZERO + ms(400)
        );
        assert_eq!(discount(Instant::ZERO + ms(900), ms(300), now), now);
    }
}

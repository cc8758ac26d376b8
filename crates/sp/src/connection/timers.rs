//! The connection's timers as data (DESIGN.md §6.2, quinn-proto `connection/timer.rs`): one
//! enum and a table of deadlines plus attempt counters. Handling a timeout twice is harmless:
//! [`TimerTable::expired`] clears what it returns.

use viastack_kernel::Instant;

/// The timers of seed 002 §3.1.4, plus the receiver's reassembly deadline and the CQOS/CNTRL
/// answer timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// START sent with REPLY_REQUESTED, no answer yet.
    Conn = 0,
    /// END sent (or answered, on the passive side: the linger before closing).
    End = 1,
    /// Reliable data unacknowledged: probe the peer with ACK + REPLY_REQUESTED.
    Ack = 2,
    /// Blocks retransmitted after a NACK, not yet acknowledged.
    Retrans = 3,
    /// Periodic ECHO: RTT and liveness.
    Echo = 4,
    /// The oldest incomplete received message's give-up / re-NACK deadline.
    Reassembly = 5,
    /// A CQOS or CNTRL request waits for its REPLY.
    Cntrl = 6,
    /// Blocks missing at a message's last block are NACKed when the reordering window has
    /// passed (see [`Connection`](super::Connection)'s reordering tolerance).
    Nack = 7,
}

impl Timer {
    /// Every timer, in table order.
    pub const ALL: [Timer; 8] = [
        Timer::Conn,
        Timer::End,
        Timer::Ack,
        Timer::Retrans,
        Timer::Echo,
        Timer::Reassembly,
        Timer::Cntrl,
        Timer::Nack,
    ];
}

/// Deadlines and attempt counters, one slot per [`Timer`].
#[derive(Debug, Clone, Default)]
pub struct TimerTable {
    deadline: [Option<Instant>; 8],
    attempts: [u8; 8],
}

impl TimerTable {
    /// Arms `t` for `at` (replacing any earlier deadline).
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.deadline[t as usize] = Some(at);
    }
    /// Arms `t` only if it is not armed.
    pub fn set_if_idle(&mut self, t: Timer, at: Instant) {
        if self.deadline[t as usize].is_none() {
            self.deadline[t as usize] = Some(at);
        }
    }
    /// Disarms `t` and resets its attempts.
    pub fn stop(&mut self, t: Timer) {
        self.deadline[t as usize] = None;
        self.attempts[t as usize] = 0;
    }
    /// Disarms everything.
    pub fn stop_all(&mut self) {
        *self = TimerTable::default();
    }
    /// Whether `t` is armed.
    pub fn is_armed(&self, t: Timer) -> bool {
        self.deadline[t as usize].is_some()
    }
    /// `t`'s deadline.
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.deadline[t as usize]
    }
    /// Counts one more attempt of `t` and returns the new count.
    pub fn bump(&mut self, t: Timer) -> u8 {
        let a = &mut self.attempts[t as usize];
        *a = a.saturating_add(1);
        *a
    }
    /// Attempts of `t` so far.
    pub fn attempts(&self, t: Timer) -> u8 {
        self.attempts[t as usize]
    }
    /// Resets `t`'s attempts (progress was made) without disarming it.
    pub fn reset_attempts(&mut self, t: Timer) {
        self.attempts[t as usize] = 0;
    }
    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.deadline.iter().flatten().min().copied()
    }
    /// The first timer due at `now`, disarmed (its attempts are kept).
    pub fn expired(&mut self, now: Instant) -> Option<Timer> {
        let t = Timer::ALL
            .into_iter()
            .find(|t| self.deadline[*t as usize].is_some_and(|d| d <= now))?;
        self.deadline[t as usize] = None;
        Some(t)
    }
}

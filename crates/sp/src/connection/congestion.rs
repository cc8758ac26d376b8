//! The sender's congestion window: how many bytes of messages may be unacknowledged at once,
//! besides what the receiver's WINDOW_SIZE allows (issue 4: the CB field carries explicit
//! congestion notification; the seed leaves the response open).
//!
//! The response is TCP's, at SP's granularity:
//! - **Additive increase, multiplicative decrease** (RFC 5681 §3.1): below the slow-start
//!   threshold the window grows by every acknowledged byte; above it by one block per window
//!   of acknowledged bytes.
//! - **Signals**: a NACK (a block went missing), a congestion echo (CB = 3 on an ACK or NACK:
//!   the receiver saw CB = 2, or an IP CE mark), and a timeout (the ACK probe or a failed
//!   retransmission round).
//! - **One reduction per window of data** (RFC 3168 §6.1.2): a NACK, echo or timeout about a
//!   message sent before the last reduction does not reduce again. A timeout drops the window
//!   to its minimum; the ACK timer counts as one from its second silent expiry on (the first
//!   may just be shorter than the path's round trip).
//! - **Growth only when used** (RFC 7661): acknowledgements grow the window only while at
//!   least half of it was in flight, so an idle or application-limited sender does not build
//!   up a window it never tested.
//!
//! The window admits whole messages, as the receive window does: a message is started when
//! its bytes fit in the smaller of the two windows, or when nothing is in flight (so a message
//! larger than either still goes, alone).

/// Largest window: WINDOW_SIZE's 24 bits, the most a receiver can ever advertise.
pub const MAX_WINDOW: usize = (1 << 24) - 1;

/// A congestion window in bytes.
#[derive(Debug, Clone)]
pub struct Window {
    cwnd: usize,
    ssthresh: usize,
    min: usize,
    /// Signals about messages up to this number came from before the last reduction.
    recover: u64,
}

impl Window {
    /// A window of `initial` bytes that never shrinks below `min`.
    pub fn new(initial: usize, min: usize) -> Self {
        let min = min.clamp(1, MAX_WINDOW);
        Window {
            cwnd: initial.clamp(min, MAX_WINDOW),
            ssthresh: MAX_WINDOW,
            min,
            recover: 0,
        }
    }

    /// The window in bytes.
    pub fn get(&self) -> usize {
        self.cwnd
    }

    /// `bytes` of messages were acknowledged, sent in blocks of up to `block` bytes.
    pub fn on_acked(&mut self, bytes: usize, block: usize) {
        let grow = if self.cwnd < self.ssthresh {
            bytes
        } else {
            // One block per window's worth of acknowledged bytes (at least one byte).
            (block.saturating_mul(bytes) / self.cwnd).max(1)
        };
        self.cwnd = self.cwnd.saturating_add(grow).min(MAX_WINDOW);
    }

    /// A NACK or congestion echo about message `seq`; `next_seq` is the next message number
    /// the sender will use. Halves the window unless `seq` was sent before the last reduction;
    /// true when it did.
    pub fn on_congestion(&mut self, seq: u64, next_seq: u64) -> bool {
        self.reduce(seq, next_seq, false)
    }

    /// A timeout with message `oldest` the oldest unacknowledged: the window drops to its
    /// minimum (RFC 5681 §3.1, the loss window) and the threshold to half of what it was,
    /// unless the window was reduced since `oldest` was sent; true when it did.
    pub fn on_timeout(&mut self, oldest: u64, next_seq: u64) -> bool {
        self.reduce(oldest, next_seq, true)
    }

    /// Halves the threshold and sets the window to it (or, on a `timeout`, to the minimum),
    /// unless message `seq` was sent before the last reduction.
    fn reduce(&mut self, seq: u64, next_seq: u64, timeout: bool) -> bool {
        if seq <= self.recover {
            return false;
        }
        self.ssthresh = (self.cwnd / 2).max(self.min);
        self.cwnd = if timeout { self.min } else { self.ssthresh };
        self.recover = next_seq.saturating_sub(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_then_growth_is_one_block_per_window() {
        let mut w = Window::new(4_000, 2_000);
        w.on_acked(4_000, 1_000);
        assert_eq!(w.get(), 8_000);
        // A reduction sets the threshold: from then on, one block per window.
        assert!(w.on_congestion(1, 2));
        assert_eq!(w.get(), 4_000);
        w.on_acked(4_000, 1_000);
        assert_eq!(w.get(), 5_000);
    }

    #[test]
    fn one_reduction_per_window_of_messages() {
        let mut w = Window::new(64_000, 2_000);
        assert!(w.on_congestion(3, 10));
        assert_eq!(w.get(), 32_000);
        // Messages 4..=9 were sent before the reduction: their signals are the same event.
        assert!(!w.on_congestion(9, 12));
        assert_eq!(w.get(), 32_000);
        // Message 10 was sent after it.
        assert!(w.on_congestion(10, 12));
        assert_eq!(w.get(), 16_000);
    }

    #[test]
    fn the_window_stays_between_its_bounds() {
        let mut w = Window::new(10_000, 2_000);
        for seq in 1..100 {
            w.on_congestion(seq * 10, seq * 10 + 1);
        }
        assert_eq!(w.get(), 2_000);
        assert!(w.on_timeout(2_000, 2_001));
        assert_eq!(w.get(), 2_000);
        for _ in 0..100 {
            w.on_acked(usize::MAX / 2, 64_000);
        }
        assert_eq!(w.get(), MAX_WINDOW);
        assert_eq!(Window::new(0, 0).get(), 1);
    }

    #[test]
    fn a_timeout_drops_to_the_minimum_and_slow_starts_to_half() {
        let mut w = Window::new(64_000, 2_000);
        assert!(w.on_timeout(1, 5));
        assert_eq!(w.get(), 2_000);
        // The same flight timing out again is the same event.
        assert!(!w.on_timeout(4, 5));
        w.on_acked(40_000, 1_000);
        // Slow start up to the threshold (32,000), then congestion avoidance.
        assert_eq!(w.get(), 42_000);
        w.on_acked(42_000, 1_000);
        assert_eq!(w.get(), 43_000);
    }
}

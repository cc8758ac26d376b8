//! The retransmission timer of RFC 6298 (Jacobson/Karels): a smoothed round-trip time and its
//! variation from measured samples, and the timeout derived from them.
//!
//! - before any sample, RTO = the initial value (RFC 6298 §2.1: 1 s);
//! - first sample R: SRTT = R, RTTVAR = R/2 (§2.2);
//! - later samples: RTTVAR = 3/4·RTTVAR + 1/4·|SRTT − R|, then SRTT = 7/8·SRTT + 1/8·R (§2.3,
//!   α = 1/8, β = 1/4, in that order);
//! - RTO = SRTT + max(G, K·RTTVAR) with K = 4 (G, the clock granularity, is 1 ns here), clamped
//!   to `[min, max]` (§2.4, §2.5);
//! - each expiry doubles the RTO up to `max` (§5.5); the next sample recomputes it, and so
//!   does [`Rtt::reset_backoff`], which the sender calls when an ACK makes progress even
//!   though Karn's rule forbids a sample (Linux clears its backoff on such an ACK too):
//!   otherwise, after a loss burst where every acknowledged segment was a retransmission, the
//!   RTO would stay at its backed-off maximum for as long as no fresh segment is sent.
//!
//! Karn's rule (§3) is the caller's: it samples only segments transmitted once.
//! Arithmetic is in integer nanoseconds and saturates.

use viastack_kernel::time::duration_nanos;
use viastack_kernel::Duration;

/// The estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtt {
    srtt: Option<u64>,
    rttvar: u64,
    rto: u64,
    /// Doublings since the last computation.
    backoff: u32,
    min: u64,
    max: u64,
}

impl Rtt {
    /// An estimator with no sample yet: RTO = `initial` (clamped to `min..=max`).
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        let (min, max) = (
            duration_nanos(min),
            duration_nanos(max).max(duration_nanos(min)),
        );
        Rtt {
            srtt: None,
            rttvar: 0,
            rto: duration_nanos(initial).clamp(min, max),
            backoff: 0,
            min,
            max,
        }
    }

    /// Takes a round-trip sample (RFC 6298 §2.2–§2.4).
    pub fn sample(&mut self, r: Duration) {
        let r = duration_nanos(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                self.rttvar =
                    (self.rttvar.saturating_mul(3) / 4).saturating_add(srtt.abs_diff(r) / 4);
                self.srtt = Some((srtt.saturating_mul(7) / 8).saturating_add(r / 8));
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        self.rto = srtt
            .saturating_add(self.rttvar.saturating_mul(4).max(1))
            .clamp(self.min, self.max);
        self.backoff = 0;
    }

    /// The timer expired: doubles the RTO, up to the maximum (RFC 6298 §5.5).
    pub fn backoff(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(63);
    }

    /// Forgets the doublings: the RTO is the estimate's again.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// The current retransmission timeout.
    pub fn rto(&self) -> Duration {
        let scaled = self
            .rto
            .checked_shl(self.backoff)
            .filter(|v| v >> self.backoff == self.rto);
        Duration::from_nanos(scaled.unwrap_or(u64::MAX).clamp(self.min, self.max))
    }

    /// The smoothed round-trip time, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// The round-trip time variation.
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rfc6298_initial_and_first_sample() {
        let mut r = Rtt::new(Duration::from_secs(1), ms(1), Duration::from_secs(60));
        assert_eq!(r.rto(), Duration::from_secs(1), "§2.1: RTO starts at 1 s");
        assert_eq!(r.srtt(), None);
        r.sample(ms(100));
        // §2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4·RTTVAR = 100 + 200.
        assert_eq!(r.srtt(), Some(ms(100)));
        assert_eq!(r.rttvar(), ms(50));
        assert_eq!(r.rto(), ms(300));
    }

    #[test]
    fn rfc6298_subsequent_samples() {
        let mut r = Rtt::new(Duration::from_secs(1), ms(1), Duration::from_secs(60));
        r.sample(ms(100));
        r.sample(ms(200));
        // §2.3: RTTVAR = 3/4·50 + 1/4·|100 − 200| = 62.5; SRTT = 7/8·100 + 1/8·200 = 112.5;
        // RTO = 112.5 + 4·62.5 = 362.5 ms.
        assert_eq!(r.rttvar(), Duration::from_micros(62_500));
        assert_eq!(r.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(r.rto(), Duration::from_micros(362_500));
        // A steady RTT drives RTTVAR down and RTO towards SRTT.
        for _ in 0..200 {
            r.sample(ms(100));
        }
        let srtt = r.srtt().unwrap();
        assert!(srtt >= ms(100) && srtt < ms(101), "{srtt:?}");
        assert!(r.rto() < ms(102), "{:?}", r.rto());
    }

    #[test]
    fn clamped_to_min_and_max_and_backoff_doubles() {
        let mut r = Rtt::new(Duration::from_secs(1), ms(200), Duration::from_secs(60));
        r.sample(ms(1));
        assert_eq!(
            r.rto(),
            ms(200),
            "§2.4: RTO below the minimum is rounded up"
        );
        r.backoff();
        assert_eq!(r.rto(), ms(400), "§5.5: doubled");
        for _ in 0..20 {
            r.backoff();
        }
        assert_eq!(
            r.rto(),
            Duration::from_secs(60),
            "§2.5: capped at the maximum"
        );
        r.sample(ms(1));
        assert_eq!(r.rto(), ms(200), "a new sample recomputes the RTO");
        r.backoff();
        r.backoff();
        assert_eq!(r.rto(), ms(800));
        r.reset_backoff();
        assert_eq!(
            r.rto(),
            ms(200),
            "progress without a sample forgets the backoff"
        );
        // Absurd samples saturate instead of overflowing.
        r.sample(Duration::MAX);
        r.sample(Duration::MAX);
        assert_eq!(r.rto(), Duration::from_secs(60));
    }
}

//! Virtual and real time as plain data (DESIGN.md §6.1).
//!
//! The kernel never reads a clock: every entry point takes the current [`Instant`] as an
//! argument, supplied by a driver (the simulator's virtual clock or the network driver's
//! monotonic clock). An `Instant` is a count of nanoseconds since the driver's epoch, so the
//! same protocol code runs unchanged in virtual and in real time.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

pub use core::time::Duration;

/// A point in time: nanoseconds since the driver's epoch (time zero of a simulation, or the
/// moment a network driver started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);
    /// The far future; useful as "never".
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros.saturating_mul(1_000))
    }

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(d)))
    }
}

/// A driver's wait rounded *down* to one of a few steps (50 µs … 100 ms): a driver that blocks
/// with a socket receive timeout rewrites the option only when the step changes, not on every
/// wait (a system call each time). The wait may end early — the driver loops — never late.
pub fn wait_step(wait: Duration) -> Duration {
    const STEPS_US: [u64; 9] = [100_000, 20_000, 5_000, 2_000, 1_000, 500, 200, 100, 50];
    let us = wait.as_micros();
    STEPS_US
        .iter()
        .map(|&s| Duration::from_micros(s))
        .find(|s| s.as_micros() <= us)
        .unwrap_or(Duration::from_micros(50))
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        write!(f, "{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_millis(6));
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(
            Instant::from_millis(1) - Instant::from_millis(3),
            Duration::ZERO
        );
        assert_eq!(Instant::from_micros(1500).to_string(), "0.001500000s");
    }
}

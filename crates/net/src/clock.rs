//! The real clock, the only one in viastack (DESIGN.md §6.1: `Instant::now()` only in the
//! network driver). It maps the machine's monotonic clock onto the kernel's [`Instant`]
//! (nanoseconds since the driver's epoch), so protocol code sees the same kind of time as in the
//! simulator.

#![allow(clippy::disallowed_methods)] // this module is where the clock is read

use std::time::{Duration, Instant as Monotonic, SystemTime, UNIX_EPOCH};

use viastack_kernel::{time::duration_nanos, Instant};

/// Real time since an epoch shared by every node of a run.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Monotonic,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Self {
        Clock {
            epoch: Monotonic::now(),
        }
    }

    /// A clock whose epoch is `unix_nanos` (nanoseconds since 1970): how the processes of one
    /// run agree on time zero. Falls back to now if the wall clock is before that epoch.
    pub fn from_unix_epoch(unix_nanos: u64) -> Self {
        let wall_now = Self::unix_now_nanos();
        let now = Monotonic::now();
        let epoch = if unix_nanos >= wall_now {
            // Time zero is still to come: every node waits for it.
            now + Duration::from_nanos(unix_nanos - wall_now)
        } else {
            let since = Duration::from_nanos(wall_now - unix_nanos);
            now.checked_sub(since).unwrap_or(now)
        };
        Clock { epoch }
    }

    /// The wall-clock time of now, in nanoseconds since 1970 (to hand an epoch to other
    /// processes).
    pub fn unix_now_nanos() -> u64 {
        duration_nanos(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO),
        )
    }

    /// Now, as a kernel instant.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(duration_nanos(self.epoch.elapsed()))
    }

    /// Real time left until `t` (zero if past). Exact even before the epoch, when [`now`]
    /// still reads zero.
    ///
    /// [`now`]: Clock::now
    pub fn until(&self, t: Instant) -> Duration {
        (self.epoch + Duration::from_nanos(t.as_nanos()))
            .saturating_duration_since(Monotonic::now())
    }
}

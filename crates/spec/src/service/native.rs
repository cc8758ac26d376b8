//! Run-time support for delivery services compiled to Rust by [`codegen`](super::codegen):
//! the few pieces the generated code shares with the interpreted store, so both perform the
//! primitives and keep the history indexes the same way.

use viastack_kernel::time::Instant;

pub use super::action::{emit, Prim};
pub use foldhash::HashMap as FastMap;

/// "Never": an index time no event has set.
pub const NONE: u64 = u64::MAX;

/// Whether an index time `t` (ns) is set and, with a window, not older than `within` ns.
#[inline]
pub fn in_window(t: u64, within: Option<u64>, now: Instant) -> bool {
    super::logic::in_window(t, within, now)
}

/// Records key `k` at time `t` in a keyed index (replacing an earlier time for the key).
#[inline(always)]
pub fn key_time(v: &mut Vec<(i64, u64)>, k: i64, t: u64) {
    match v.iter_mut().find(|(kk, _)| *kk == k) {
        Some(e) => e.1 = t,
        None => v.push((k, t)),
    }
}

/// Keeps `m` as the last message of a basic event, reusing the slot's allocations.
#[inline(always)]
pub fn keep(slot: &mut Option<super::Message>, m: &super::Message) {
    match slot {
        Some(old) => old.clone_from(m),
        None => *slot = Some(m.clone()),
    }
}

/// A new message as `createMessage` starts it (HopLimit 255, seed §4.2.3.1).
#[inline]
pub fn fresh() -> super::Message {
    super::Message {
        hop_limit: 255,
        ..super::Message::default()
    }
}

//! The shipped delivery services compiled to Rust when viastack is built (issue 5; seed 000
//! §6: an interpreted specification reached 25–35 % of a hand-written service).
//!
//! `build.rs` runs `viastack_spec::service::codegen` on `specs/*.scxml`; each module here holds
//! one service's `Compiled` runner, which behaves exactly as the same specification loaded
//! into a [`Store`](viastack_spec::service::Store) (tests compare them on random traces) at
//! the speed of a hand-written service (`viastack bench spec`). [`CATALOG`] lists which
//! services are compiled and, for the others, what the generator does not handle yet; those
//! run on the store's table only.

include!(concat!(env!("OUT_DIR"), "/catalog.rs"));

/// Generated code is checked by the tests that compare it with the store, not by style lints.
macro_rules! compiled {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[allow(clippy::all, clippy::pedantic, unused, unused_assignments, unused_mut, unreachable_code)]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
        }
    )*};
}

compiled! {
    /// Duplicate elimination (`specs/dupelim.scxml`).
    dupelim,
    /// End-to-end acknowledgement (`specs/e2eack.scxml`, seed Tables 3.3, 3.4, Figure 3.8).
    e2eack,
    /// Hop-by-hop acknowledgement (`specs/h2hack.scxml`, seed Tables 3.1, 3.2, Figure 3.6).
    h2hack,
    /// Connection handshake (`specs/handshake.scxml`: nested states, flattened at load time).
    handshake,
    /// InCast (`specs/incast.scxml`, seed Table 3.5: datamodel, `cond`, `_event.data`).
    incast,
    /// Leaky bucket (`specs/leakybucket.scxml`, seed §4.2.4.3: a queue in the datamodel).
    leakybucket,
    /// Best-effort ordering (`specs/ordering.scxml`, seed Table 3.5: `cond` on `_event.data`).
    ordering,
    /// Message selection (`specs/selection.scxml`, seed Table 4.7).
    selection,
    /// Synchronization (`specs/sync.scxml`).
    sync,
}

/// The generator's test specifications (`crates/spec/tests/data/codegen/*.scxml`: the
/// constructs it once refused), compiled for `tests/codegen_gaps.rs`; not a service to ship.
#[doc(hidden)]
#[allow(
    clippy::all,
    clippy::pedantic,
    unused,
    unused_assignments,
    unused_mut,
    unreachable_code,
    missing_docs
)]
pub mod gaps {
    include!(concat!(env!("OUT_DIR"), "/gaps.rs"));
}

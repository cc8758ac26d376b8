//! viastack's group communication (seed 001 §1 and §2.1: the virtual-synchrony group that
//! channels and light-weight groups are built on), as sans-IO kernel layers:
//!
//! - [`vsync`]: membership with a coordinator (join, leave, crash from the shared failure
//!   detector with suspicion confirmed before exclusion, views with ids, merge after a
//!   partition heals, primary-partition behaviour as a parameter), reliable group multicast
//!   with NAKs and stability-based garbage collection, and virtual synchrony by a flush at
//!   every view change;
//! - [`total`]: total order by a sequencer with failover at view change, a separate layer
//!   stacked above `vsync` or left out;
//! - [`causal`]: causal order by vector clocks, likewise a separate layer;
//! - [`lwg`]: light-weight groups, one channel each, over one heavy group (and order across
//!   channels over a shared `total-order`);
//! - [`state`]: state transfer to joining and merging members, above `total-order`;
//! - [`wire`]: both layers' packets (view + repr), documented in docs/WIRE.md.
//!
//! Nothing here opens a socket, reads a clock or spawns a thread (DESIGN.md §4.1): the layers
//! run unchanged in the simulator and on sockets. The history checker that judges runs of
//! these layers (view agreement, virtual synchrony, total order, liveness) lives in
//! `viastack-scenario` (`group` module), so later group layers reuse it.
#![deny(unsafe_code)]

pub mod causal;
pub mod lwg;
pub mod state;
pub mod total;
pub mod vsync;
pub mod wire;

pub use causal::CausalOrder;
pub use lwg::Lwg;
pub use state::StateTransfer;
pub use total::TotalOrder;
pub use vsync::{view_notice, Primary, ViewNotice, Vsync, REJOIN, VIEW};
pub use wire::{CausalPdu, LwgPdu, Member, Pdu, StatePdu, TotalPdu, ViewId, WireError};

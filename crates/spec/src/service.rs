//! The seed's delivery-service layer (seed 000 §4, §5.1): a service is an SCXML state chart
//! plus service data, compiled once and run per (ServiceID, MessageID).
//!
//! Data flow for one arriving message (seed §4.3.3, §5.1.4):
//!
//! 1. [`store::Store`] finds or creates the instance of (ServiceID, MessageID) (§4.3.2);
//! 2. [`basic`] maps the message (or timer expiry) to basic events, in declaration order
//!    (Tables 4.1–4.3);
//! 3. [`history`] records what the service needs of it (the last message of a basic event,
//!    the per-instance indexes of [`logic`]);
//! 4. every basic event runs one macrostep of the chart; then every composite event whose
//!    constituents include one of them and whose first-order-logic expression ([`logic`]) now
//!    holds runs one (§4.2.1.3);
//! 5. the chart's custom actions ([`action`]) call the host's [`Network`] primitives
//!    (§4.2.3.1);
//! 6. the instance is freed on `terminate` or on reaching a final state.
//!
//! [`h2hack_handwritten`] is the same hop-by-hop acknowledgement service written by hand, the
//! benchmark's reference; [`trace`] is the `viastack spec run` input/output format.

pub mod action;
pub mod basic;
pub mod codegen;
pub mod data;
pub mod diag;
pub mod explore;
mod flat;
pub mod h2hack_handwritten;
pub mod history;
pub mod load;
pub mod logic;
pub mod message;
pub mod native;
pub mod store;
pub mod trace;
pub mod xquery;

pub use action::{Network, Primitive};
pub use diag::{Diagnostic, Diagnostics, Pos, Severity};
pub use load::Service;
pub use message::{Addr, InstanceKey, Message, NodeInfo};
pub use store::{Store, StoreConfig};

use viastack_kernel::time::Instant;

/// Why a runner refused an input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunnerError {
    /// The message's ServiceID is not loaded.
    #[error("no service with ServiceID {0}")]
    UnknownService(u32),
    /// The instance's machine took more steps than allowed for one event (a transition loop);
    /// it was stopped and freed.
    #[error("instance {key:?} stopped: more than {steps} steps for one event")]
    StepLimit {
        /// The instance.
        key: InstanceKey,
        /// The limit.
        steps: u32,
    },
    /// The store is full (its configured capacity of live instances).
    #[error("store full: {0} live instances")]
    Full(usize),
}

/// What runs a service for one node: the compiled [`store::Store`] or a hand-written service
/// ([`h2hack_handwritten::H2hack`]). Traces and the benchmark drive either through this.
pub trait Runner {
    /// A message arrived (from the network or the local application).
    ///
    /// # Errors
    /// See [`RunnerError`].
    fn handle_message<N: Network>(
        &mut self,
        now: Instant,
        m: &Message,
        net: &mut N,
    ) -> Result<(), RunnerError>;
    /// Timer `id` of instance `key` expired (ignored if the instance is gone).
    ///
    /// # Errors
    /// See [`RunnerError`].
    fn handle_timer<N: Network>(
        &mut self,
        now: Instant,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), RunnerError>;
    /// The local node's information changed.
    fn set_node(&mut self, node: NodeInfo);
    /// The (first) active state of a live instance.
    fn state(&self, key: InstanceKey) -> Option<&str>;
    /// Live instances.
    fn live(&self) -> usize;
    /// Bytes held for the live instances, payloads excluded.
    fn memory_bytes(&self) -> usize;
}

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
pub mod data;
mod diag;
// pub mod h2hack_handwritten;
pub mod history;
pub mod logic;
pub mod message;

pub use action::{Network, Primitive};
pub use diag::{Diagnostic, Diagnostics, Pos, Severity};
pub use message::{Addr, InstanceKey, Message, NodeInfo};

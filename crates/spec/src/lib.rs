//! Executable specifications of delivery services (seed 000 §4, §5.1.2; issue 5).
//!
//! Two halves:
//! - [`chart`]: the SCXML state-chart language itself — reading documents with positions,
//!   validation, verification, compilation to a (state × event symbol) table and the run-time
//!   engine (W3C SCXML semantics, sans-IO, virtual time).
//! - [`service`]: the seed's delivery-service layer on top — service data, basic and composite
//!   events over the history of basic events, the overlay action vocabulary and the host trait
//!   that runs a compiled service per (ServiceID, MessageID).

pub mod chart;
pub mod service;

//! viastack's deterministic discrete-event network simulator.
//!
//! This crate realizes DESIGN.md §4.2 "deterministic simulation first". So far it holds the
//! scenario description ([`SimConfig`]) and its validation; the driver comes next.
#![deny(unsafe_code)]

pub mod config;
pub mod error;

pub use config::{CrashPlan, LinkConfig, LinkOverride, Partition, SimConfig};
pub use error::{LinkRef, SimError};

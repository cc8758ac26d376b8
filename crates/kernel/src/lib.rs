//! viastack protocol kernel (seed 001, Appia §3–§4): sans-IO and deterministic.
#![deny(unsafe_code)]

pub mod addr;
pub mod time;

pub use addr::{Dest, NodeId};
pub use time::{Duration, Instant};

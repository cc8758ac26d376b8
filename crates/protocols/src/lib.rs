//! viastack's library of micro-protocols: kernel layers usable from stack files.
//!
//! - [`fifo`]: per-sender sequence numbers; late and duplicate messages are dropped, so what
//!   arrives arrives once and in order (loss is tolerated, not repaired).
//! - [`events`]: notices shared by layers and the application (peer unreachable, suspect, alive).
#![deny(unsafe_code)]

pub mod events;
pub mod fifo;

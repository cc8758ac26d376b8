//! viastack's library of micro-protocols: kernel layers usable from stack files.
//!
//! - [`fifo`]: per-sender sequence numbers; late and duplicate messages are dropped, so what
//!   arrives arrives once and in order (loss is tolerated, not repaired).
//! - [`heartbeat`]: a heartbeat failure detector, one session shared by several channels, that
//!   raises `Suspect`/`Alive` on every channel it is bound to, in the same order on each.
//! - [`sync`]: intermedia synchronisation: a playout buffer shared by media channels that
//!   releases their messages in step, within a configured skew.
//! - [`events`]: notices shared by layers and the application (peer unreachable, suspect, alive).
#![deny(unsafe_code)]

pub mod events;
pub mod fifo;
pub mod heartbeat;
pub mod sync;

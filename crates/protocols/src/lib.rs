//! viastack's library of micro-protocols: kernel layers usable from stack files.
//!
//! - [`fifo`]: per-sender sequence numbers; late and duplicate messages are dropped, so what
//!   arrives arrives once and in order (loss is tolerated, not repaired).
//! - [`checksum`]: CRC32C over each datagram's upper bytes; damaged datagrams are dropped.
//! - [`fragment`]: splits messages above an MTU and reassembles them, within a timeout and a
//!   memory bound.
//! - [`reliable`]: reliable FIFO delivery per (channel, peer): sequence numbers, cumulative and
//!   selective ACKs, NACKs, RFC 6298 retransmission timers, flow control, and a
//!   `PeerUnreachable` report when a peer stops answering.
//! - [`events`]: notices shared by layers and the application (peer unreachable, send refused,
//!   suspect, alive).
#![deny(unsafe_code)]

pub mod checksum;
pub mod events;
pub mod fifo;
pub mod fragment;
pub mod reliable;

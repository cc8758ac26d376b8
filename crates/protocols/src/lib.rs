//! viastack's library of micro-protocols: kernel layers usable from stack files.
//!
//! - [`fifo`]: per-sender sequence numbers; late and duplicate messages are dropped, so what
//!   arrives arrives once and in order (loss is tolerated, not repaired).
//! - [`checksum`]: CRC32C over each datagram's upper bytes; damaged datagrams are dropped.
//! - [`bundle`]: packs the messages for one destination queued in one kernel call into one
//!   datagram (no added delay), and splits them on receipt.
//! - [`fragment`]: splits messages above an MTU and reassembles them, within a timeout and a
//!   memory bound.
//! - [`reliable`]: reliable FIFO delivery per (channel, peer): sequence numbers, cumulative and
//!   selective ACKs, NACKs, RFC 6298 retransmission timers, flow control, and a
//!   `PeerUnreachable` report when a peer stops answering.
//! - [`heartbeat`]: a heartbeat failure detector, one session shared by several channels, that
//!   raises `Suspect`/`Alive` on every channel it is bound to, in the same order on each.
//! - [`sync`]: intermedia synchronisation: a playout buffer shared by media channels that
//!   releases their messages in step, within a configured skew.
//! - [`dedup`]: duplicate elimination by (source, message id) in a bounded sliding window.
//! - [`ttl`]: a hop limit; expired messages are dropped and counted.
//! - [`fault`]: fault injection (`drop`, `delay`, `duplicate`, `corrupt`, `reorder`) from the
//!   kernel's seeded generator and timers, on real sockets as in the simulator.
//! - [`compress`]: LZ4 above a size threshold, marked per message, bounded decompression.
//! - [`encrypt`]: ChaCha20-Poly1305 under a pre-shared key, with a replay window.
//! - [`overlay`]: an overlay network (Delaunay triangulation or hypercube) with its forwarding
//!   engine, as a layer over a device (seed 000 §3.1.1).
//! - [`specbundle`]: delivery-service specs deployed at run time: content-addressed (SHA-256),
//!   Ed25519-signed bundles, verified before they run, and the spec-fetch wire.
//! - [`events`]: notices shared by layers and the application (peer unreachable, send refused,
//!   suspect, alive).
//! - [`peers`]: bounded per-peer state (sliding sequence window, LRU map) those layers share.
#![deny(unsafe_code)]

pub mod bundle;
pub mod checksum;
pub mod compress;
pub mod dedup;
pub mod dvmrp;
pub mod encrypt;
pub mod events;
pub mod fault;
pub mod fifo;
pub mod fragment;
pub mod heartbeat;
pub mod iface;
pub mod mcast;
pub mod mcast_reliable;
pub mod messagestore;
pub mod overlay;
pub mod peers;
pub mod reliable;
pub mod specbundle;
pub mod stall;
pub mod sync;
pub mod ttl;

//! One node of seed 004's multicast service, sans-IO: the composite protocols deployed on a
//! router or a host ("Deployment – Step 4") sharing the node's [`GlobalMemory`].
//!
//! - [`RouterNode`]: the routing composite protocol (route exchange and spanning tree
//!   [`Dvmrp`], pruning and grafting [`Pruner`]), group management ([`igmp::Router`]) and the
//!   data path ([`Forwarder`]), over one global memory. They talk only through it (the source
//!   tree, group table and prune table), except that forwarding hands pruning the (S, G) pairs
//!   nobody wants — the seed's "protocol interactions through global memory".
//! - [`HostNode`]: group management ([`igmp::Host`]: the application's join and leave) and a
//!   multicast source and receiver on interface 0.
//!
//! Every datagram on a link is one of three protocols, told apart by its first bytes
//! ([`classify`]): DVMRP (types 1, 2, 7, 8, 9 with major version 3), IGMPv2 (0x11, 0x12,
//! 0x16, 0x17) or multicast data (0x30). Time is an argument; nothing here does IO.

use std::collections::VecDeque;

use viastack_kernel::Instant;

use crate::addr::{Addr, Prefix};
use crate::dvmrp::{self, Dvmrp, Outgoing};
use crate::forward::{DataHeader, Forwarder, DEFAULT_TTL, HEADER_LEN, TYPE_DATA};
use crate::igmp;
use crate::memory::GlobalMemory;
use crate::prune::{self, Pruner};

/// Which protocol a datagram belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// DVMRP (probe, report, prune, graft, graft ack).
    Dvmrp,
    /// IGMPv2.
    Igmp,
    /// Multicast data.
    Data,
    /// Something else.
    Unknown,
}

/// The protocol of `bytes`, from its first two bytes.
pub fn classify(bytes: &[u8]) -> Kind {
    match bytes {
        [1 | 2 | 7 | 8 | 9, crate::wire::MAJOR, ..] => Kind::Dvmrp,
        [igmp::wire::TYPE_QUERY
        | igmp::wire::TYPE_REPORT_V1
        | igmp::wire::TYPE_REPORT_V2
        | igmp::wire::TYPE_LEAVE, ..] => Kind::Igmp,
        [TYPE_DATA, ..] => Kind::Data,
        _ => Kind::Unknown,
    }
}

/// The address of the host `node` on link `link`: `10.x.y.(node mod 254 + 1)` in the link's
/// network (so data from it passes the reverse-path check of the link's routers).
pub fn host_addr(link: u16, node: u16) -> Addr {
    Addr(Prefix::of_link(link).addr() | u32::from(node % 254 + 1))
}

/// A multicast router.
#[derive(Debug)]
pub struct RouterNode {
    /// The node's global memory.
    pub mem: GlobalMemory,
    /// Route exchange and spanning tree.
    pub dvmrp: Dvmrp,
    /// Pruning and grafting.
    pub pruner: Pruner,
    /// IGMP, router side.
    pub igmp: igmp::Router,
    /// Multicast forwarding.
    pub forward: Forwarder,
    out: VecDeque<Outgoing>,
    /// Datagrams of no known protocol.
    pub unknown: u64,
}

impl RouterNode {
    /// Start a router at `now`; every protocol timer scaled by `time_scale`.
    pub fn new(cfg: dvmrp::Config, time_scale: f64, now: Instant) -> Self {
        let addr = cfg.addr;
        let ifaces = u16::try_from(cfg.interfaces.len()).unwrap_or(u16::MAX);
        let mut mem = GlobalMemory::new(addr);
        let dvmrp = Dvmrp::new(cfg, now, &mut mem);
        let pruner = Pruner::new(prune::Timers::rfc().scaled(time_scale), &mut mem);
        let igmp = igmp::Router::new(
            addr,
            ifaces,
            igmp::Timers::rfc().scaled(time_scale),
            now,
            &mut mem,
        );
        let mut r = RouterNode {
            mem,
            dvmrp,
            pruner,
            igmp,
            forward: Forwarder::new(),
            out: VecDeque::new(),
            unknown: 0,
        };
        r.drain();
        r
    }

    fn drain(&mut self) {
        while let Some(o) = self.dvmrp.poll_transmit() {
            self.out.push_back(o);
        }
        while let Some(o) = self.pruner.poll_transmit() {
            self.out.push_back(o);
        }
        while let Some(o) = self.igmp.poll_transmit() {
            self.out.push_back(o);
        }
    }

    /// A datagram from `from` on `iface`.
    pub fn handle_datagram(&mut self, now: Instant, iface: u16, from: Addr, bytes: &[u8]) {
        match classify(bytes) {
            Kind::Dvmrp => {
                self.dvmrp
                    .handle_datagram(now, iface, from, bytes, &mut self.mem);
                self.pruner
                    .handle_datagram(now, iface, from, bytes, &mut self.mem);
            }
            Kind::Igmp => {
                self.igmp
                    .handle_datagram(now, iface, from, bytes, &mut self.mem);
                self.pruner.sync(now, &mut self.mem);
            }
            Kind::Data => {
                let v = self.forward.handle_data(now, iface, from, bytes, &self.mem);
                for i in v.out {
                    self.out.push_back(Outgoing {
                        iface: i,
                        to: None,
                        bytes: v.bytes.clone(),
                    });
                }
                if let Some((s, g)) = v.unwanted {
                    self.pruner.data_unwanted(now, s, g, &mut self.mem);
                }
            }
            Kind::Unknown => self.unknown += 1,
        }
        self.drain();
    }

    /// Timers of every component.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.dvmrp.poll_timeout().is_some_and(|t| t <= now) {
            self.dvmrp.handle_timeout(now, &mut self.mem);
        }
        if self.igmp.poll_timeout(&self.mem).is_some_and(|t| t <= now) {
            self.igmp.handle_timeout(now, &mut self.mem);
        }
        self.pruner.handle_timeout(now, &mut self.mem);
        self.drain();
    }

    /// The earliest deadline of any component.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.dvmrp.poll_timeout(),
            self.igmp.poll_timeout(&self.mem),
            self.pruner.poll_timeout(&self.mem),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }
}

/// A multicast packet delivered to a host's application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// When.
    pub at: Instant,
    /// The header (source, group, sequence number, TTL left).
    pub header: DataHeader,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Most deliveries a host queues for its application before it drops the oldest.
pub const MAX_DELIVERIES: usize = 65_536;

/// A host on one link (interface 0): joins, leaves, sends and receives multicast.
#[derive(Debug)]
pub struct HostNode {
    /// IGMP, host side.
    pub igmp: igmp::Host,
    addr: Addr,
    seq: u32,
    out: VecDeque<Outgoing>,
    deliveries: VecDeque<Delivery>,
    /// Deliveries dropped because the application did not take them.
    pub deliveries_dropped: u64,
    /// Datagrams that were not for this host's groups or did not decode.
    pub ignored: u64,
}

impl HostNode {
    /// A host with source address `addr` (see [`host_addr`]), IGMP timers scaled by
    /// `time_scale`, random delays from `seed`.
    pub fn new(addr: Addr, time_scale: f64, seed: u64) -> Self {
        HostNode {
            igmp: igmp::Host::new(igmp::Timers::rfc().scaled(time_scale), seed),
            addr,
            seq: 0,
            out: VecDeque::new(),
            deliveries: VecDeque::new(),
            deliveries_dropped: 0,
            ignored: 0,
        }
    }

    fn drain(&mut self) {
        while let Some(o) = self.igmp.poll_transmit() {
            self.out.push_back(o);
        }
    }

    /// The application joins `group`.
    pub fn join(&mut self, now: Instant, group: Addr) -> bool {
        let ok = self.igmp.join(now, group);
        self.drain();
        ok
    }

    /// The application leaves `group`.
    pub fn leave(&mut self, now: Instant, group: Addr) {
        self.igmp.leave(now, group);
        self.drain();
    }

    /// The application multicasts `payload` to `group`; returns its sequence number (`None`
    /// for a group that is not multicast).
    pub fn send(&mut self, group: Addr, payload: &[u8]) -> Option<u32> {
        let seq = self.seq;
        let h = DataHeader {
            ttl: DEFAULT_TTL,
            source: self.addr,
            group,
            seq,
        };
        let bytes = h.to_vec(payload).ok()?;
        self.seq = self.seq.wrapping_add(1);
        self.out.push_back(Outgoing {
            iface: 0,
            to: None,
            bytes,
        });
        Some(seq)
    }

    /// A datagram arrived.
    pub fn handle_datagram(&mut self, now: Instant, bytes: &[u8]) {
        match classify(bytes) {
            Kind::Igmp => self.igmp.handle_datagram(now, bytes),
            Kind::Data => match DataHeader::parse(bytes) {
                Ok(h) if self.igmp.is_member(h.group) && h.source != self.addr => {
                    if self.deliveries.len() >= MAX_DELIVERIES {
                        self.deliveries.pop_front();
                        self.deliveries_dropped += 1;
                    }
                    self.deliveries.push_back(Delivery {
                        at: now,
                        header: h,
                        payload: bytes.get(HEADER_LEN..).unwrap_or_default().to_vec(),
                    });
                }
                _ => self.ignored += 1,
            },
            Kind::Dvmrp | Kind::Unknown => self.ignored += 1,
        }
        self.drain();
    }

    /// Timers (IGMP reports).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.igmp.handle_timeout(now);
        self.drain();
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.igmp.poll_timeout()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// The next packet for the application.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.deliveries.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_tells_the_protocols_apart() {
        assert_eq!(classify(&[1, 3, 0xff, 0]), Kind::Dvmrp);
        assert_eq!(classify(&[9, 3]), Kind::Dvmrp);
        assert_eq!(classify(&[1, 4]), Kind::Unknown);
        assert_eq!(classify(&[0x11, 100]), Kind::Igmp);
        assert_eq!(classify(&[0x30]), Kind::Data);
        assert_eq!(classify(&[]), Kind::Unknown);
        assert_eq!(host_addr(2, 0).to_string(), "10.0.2.1");
    }
}

//! Test harness shared by the multicast tests: routers ([`RouterNode`]) and hosts
//! ([`HostNode`]) as simulator nodes on a multi-hop topology.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use viastack_kernel::{Dest, Instant, NodeId};
use viastack_mcast::dvmrp::{Config, Interface, Timers};
use viastack_mcast::node::{host_addr, Delivery, HostNode, RouterNode};
use viastack_mcast::{node_addr, Addr, Prefix};
use viastack_sim::{Node, Topology, Transmit};

/// A router or a host, with the deliveries its application got.
pub enum McNode {
    /// A router, and the data frames it sent per interface.
    Router(Box<RouterNode>, BTreeMap<u16, u64>),
    /// A host and its deliveries.
    Host(Box<HostNode>, Vec<Delivery>),
}

impl McNode {
    pub fn new(id: NodeId, now: Instant, topo: &Topology, router: bool, scale: f64) -> Self {
        let links = topo.interfaces(id);
        if router {
            let interfaces = links
                .iter()
                .map(|&l| Interface {
                    prefix: Prefix::of_link(u16::try_from(l).unwrap()),
                    metric: 1,
                })
                .collect();
            let addr = node_addr(u16::try_from(id.0).unwrap());
            let gen_id = (now.as_nanos() as u32).wrapping_mul(2_654_435_761) ^ id.0;
            let cfg = Config {
                addr,
                gen_id,
                interfaces,
                timers: Timers::rfc().scaled(scale),
            };
            McNode::Router(Box::new(RouterNode::new(cfg, scale, now)), BTreeMap::new())
        } else {
            let link = u16::try_from(links.first().copied().unwrap_or(0)).unwrap();
            let addr = host_addr(link, u16::try_from(id.0).unwrap());
            McNode::Host(
                Box::new(HostNode::new(addr, scale, u64::from(id.0) * 7919 + 1)),
                Vec::new(),
            )
        }
    }

    pub fn router(&self) -> &RouterNode {
        match self {
            McNode::Router(r, _) => r,
            McNode::Host(..) => panic!("not a router"),
        }
    }

    pub fn host(&mut self) -> &mut HostNode {
        match self {
            McNode::Host(h, _) => h,
            McNode::Router(..) => panic!("not a host"),
        }
    }

    /// Data frames sent per interface (routers).
    pub fn data_sent(&self) -> BTreeMap<u16, u64> {
        match self {
            McNode::Router(_, d) => d.clone(),
            McNode::Host(..) => BTreeMap::new(),
        }
    }

    pub fn deliveries(&self) -> &[Delivery] {
        match self {
            McNode::Host(_, d) => d,
            McNode::Router(..) => &[],
        }
    }

    fn collect(&mut self) {
        if let McNode::Host(h, log) = self {
            while let Some(d) = h.poll_delivery() {
                log.push(d);
            }
        }
    }
}

impl Node for McNode {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        match self {
            McNode::Router(r, _) => {
                let from = node_addr(u16::try_from(from.0).unwrap_or(u16::MAX));
                r.handle_datagram(now, port, from, &bytes);
            }
            McNode::Host(h, _) => h.handle_datagram(now, &bytes),
        }
        self.collect();
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            McNode::Router(r, _) => r.handle_timeout(now),
            McNode::Host(h, _) => h.handle_timeout(now),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            McNode::Router(r, _) => r.poll_timeout(),
            McNode::Host(h, _) => h.poll_timeout(),
        }
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        let o = match self {
            McNode::Router(r, sent) => {
                let o = r.poll_transmit()?;
                if o.bytes.first() == Some(&viastack_mcast::forward::TYPE_DATA) {
                    *sent.entry(o.iface).or_default() += 1;
                }
                o
            }
            McNode::Host(h, _) => h.poll_transmit()?,
        };
        Some(Transmit {
            port: o.iface,
            dest: o
                .to
                .map_or(Dest::Broadcast, |a: Addr| Dest::Node(NodeId(a.0 & 0xffff))),
            bytes: o.bytes,
        })
    }
}

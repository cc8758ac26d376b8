//! One node on real sockets: a kernel built from the stack file, the scenario's application,
//! one UDP endpoint for its device, and the real clock — the same protocol code as in the
//! simulator, driven by the same sans-IO contract (DESIGN.md §4.1).
//!
//! The loop: fire due timers and send due application messages, hand the kernel's transmits to
//! the socket, then wait for datagrams until the next deadline (kernel timer, application send
//! or the end of the run), and feed them to the device session.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use viastack_kernel::{Dest, Instant, Kernel, Message, NodeId, Output, SessionId};
use viastack_scenario::{Application, Recorder};
use viastack_stack::model::Workload;
use viastack_stack::BuiltNode;

use crate::clock::Clock;
use crate::udp::{UdpEndpoint, UdpStats};
use crate::NetError;

/// Where every node's device listens, by node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers {
    addrs: Vec<SocketAddr>,
    by_addr: HashMap<SocketAddr, NodeId>,
}

impl Peers {
    /// The table for nodes `0..addrs.len()`.
    pub fn new(addrs: Vec<SocketAddr>) -> Self {
        let by_addr = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, NodeId(i as u32)))
            .collect();
        Peers { addrs, by_addr }
    }

    /// The address of `node`.
    pub fn addr(&self, node: NodeId) -> Option<SocketAddr> {
        self.addrs.get(node.0 as usize).copied()
    }

    /// The node at `addr`.
    pub fn node(&self, addr: SocketAddr) -> Option<NodeId> {
        self.by_addr.get(&addr).copied()
    }

    /// Every node's address, in node order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

/// What a node observed, handed back when its run ends.
pub struct NodeOutcome {
    /// Its application's sends, deliveries and notices.
    pub recorder: Recorder,
    /// Its kernel's counters.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// Its socket's counters.
    pub udp: UdpStats,
    /// Datagrams from addresses that are not a node of the run (dropped).
    pub unknown_source: u64,
}

/// A node on a real UDP socket.
pub struct NetNode {
    id: NodeId,
    kernel: Kernel,
    device: SessionId,
    port: u16,
    app: Application,
    recorder: Rc<RefCell<Recorder>>,
    endpoint: UdpEndpoint,
    peers: Peers,
    clock: Clock,
    unknown_source: u64,
}

impl NetNode {
    /// A node over a built kernel and a bound endpoint.
    ///
    /// # Errors
    /// [`NetError::Devices`] unless the stack has exactly one device.
    pub fn new(
        id: NodeId,
        nodes: u32,
        built: BuiltNode,
        workloads: &[Workload],
        endpoint: UdpEndpoint,
        peers: Peers,
        clock: Clock,
    ) -> Result<Self, NetError> {
        let BuiltNode {
            kernel,
            channels,
            devices,
        } = built;
        let [(port, device)] = devices[..] else {
            return Err(NetError::Devices(devices.len()));
        };
        let recorder = Rc::new(RefCell::new(Recorder::default()));
        let app = Application::new(
            id,
            nodes,
            &channels,
            workloads,
            Rc::clone(&recorder),
            clock.now(),
        );
        Ok(NetNode {
            id,
            kernel,
            device,
            port,
            app,
            recorder,
            endpoint,
            peers,
            clock,
            unknown_source: 0,
        })
    }

    fn transmit(&mut self, port: u16, dest: Dest, bytes: &[u8]) {
        if port != self.port {
            tracing::debug!(node = %self.id, port, "transmit on a port with no socket");
            return;
        }
        match dest {
            Dest::Node(n) => match self.peers.addr(n) {
                Some(addr) => self.endpoint.send(addr, bytes),
                None => tracing::debug!(node = %self.id, dest = %n, "no such node"),
            },
            Dest::Broadcast => {
                let others: Vec<SocketAddr> = (0..self.peers.addrs().len() as u32)
                    .filter(|&n| n != self.id.0)
                    .filter_map(|n| self.peers.addr(NodeId(n)))
                    .collect();
                for addr in others {
                    self.endpoint.send(addr, bytes);
                }
            }
        }
    }

    fn drain(&mut self) {
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) => self.transmit(t.port, t.dest, t.message.as_slice()),
                Output::Deliver(ev) => self.app.on_deliver(&ev, self.clock.now()),
            }
        }
    }

    /// Runs until the clock reaches `end`.
    ///
    /// # Errors
    /// Socket errors.
    pub fn run_until(&mut self, end: Instant) -> Result<(), NetError> {
        let mut inbox: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        loop {
            let now = self.clock.now();
            if now >= end {
                return Ok(());
            }
            self.kernel.handle_timeout(now);
            self.app.send_due(&mut self.kernel, now);
            self.drain();
            let next = [self.kernel.poll_timeout(), self.app.next_send(), Some(end)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end);
            let wait = self.clock.until(next);
            self.endpoint
                .recv(wait, |src, bytes| inbox.push((src, bytes.to_vec())))?;
            let now = self.clock.now();
            for (src, bytes) in inbox.drain(..) {
                match self.peers.node(src) {
                    Some(from) => {
                        self.kernel.handle_datagram(
                            now,
                            self.device,
                            from,
                            Message::from_wire(bytes),
                        );
                    }
                    None => self.unknown_source += 1,
                }
            }
            self.drain();
        }
    }

    /// Ends the node and hands back what it observed.
    pub fn finish(self) -> NodeOutcome {
        let counters = self.kernel.counters();
        let udp = self.endpoint.stats();
        drop(self.app); // releases the application's handle on the recorder
        let recorder = Rc::try_unwrap(self.recorder)
            .map(RefCell::into_inner)
            .unwrap_or_else(|shared| shared.borrow().clone());
        NodeOutcome {
            recorder,
            counters,
            udp,
            unknown_source: self.unknown_source,
        }
    }
}

//! Multi-homed nodes on real sockets (issue 17 §3 "Real multi-hop"): a node of a stack file
//! with a `[topology]` whose `interface` layers (ports) each own one UDP socket, so a datagram
//! travels one link, never "to any node".
//!
//! Interface `k` of a node (its `k`-th link in `[[topology.link]]` order, the port of its
//! `interface` layer) is described by an [`InterfaceSpec`]: the socket to bind (on the netns
//! testbed: `0.0.0.0:PORT` bound to the interface's Linux device with `SO_BINDTODEVICE`), the
//! link's other nodes and their addresses, and the link-local broadcast address. A unicast
//! (`Dest::Node(n)`) goes to `n`'s address on that link (a node off the link: dropped and
//! counted); a broadcast goes to the broadcast address (one datagram for the whole LAN
//! segment) or, without one (loopback), to every other node of the link. A datagram is
//! attributed to the node whose address on that link sent it; the node's own broadcasts,
//! looped back by the operating system, are ignored, and datagrams from unknown addresses are
//! counted (`bad_frames`).
//!
//! Link latency and jitter: where the kernel cannot delay datagrams (no `sch_netem`), the
//! testbed asks the node to hold each datagram it sends on an interface for
//! [`InterfaceSpec::delay_ns`] plus a uniform `0..=jitter_ns` before handing it to the socket
//! (user-space emulation of the link's propagation delay, at the sender).
//!
//! The event loop is [`crate::NetNode`]'s (timers, application sends, datagrams), waiting on
//! every interface socket at once with `epoll` (mio), plus the scenario's `[[scenario.group]]`
//! joins and leaves, handed to the node's `igmp` layer at their times as in the simulator.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration as StdDuration;

use serde::{Deserialize, Serialize};
use viastack_kernel::{Dest, Duration, Instant, Kernel, Message, NodeId, Output, SessionId};
use viastack_scenario::report::NodeMemory;
use viastack_scenario::{Application, Recorder};
use viastack_stack::model::Workload;
use viastack_stack::BuiltNode;

use crate::clock::Clock;
use crate::transport::TransportStats;
use crate::udp::{canonical, UdpEndpoint};
use crate::NetError;

/// Another node on an interface's link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkPeer {
    /// Its node id.
    pub node: u32,
    /// Its address on this link.
    pub addr: SocketAddr,
}

/// One interface of a node: its socket, its link's other nodes, how it broadcasts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceSpec {
    /// The port (interface number) of the stack's `interface` layer.
    pub port: u16,
    /// The Linux device the socket is bound to (`SO_BINDTODEVICE`, needs `CAP_NET_RAW`);
    /// none on loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The address the socket binds.
    pub bind: SocketAddr,
    /// This interface's own address, as its peers see it (its looped-back broadcasts come
    /// from it and are ignored).
    pub addr: SocketAddr,
    /// The link-local broadcast address; none: a broadcast is one unicast per peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<SocketAddr>,
    /// Emulated one-way delay added to each datagram sent, in nanoseconds.
    #[serde(default)]
    pub delay_ns: u64,
    /// Emulated jitter: a further uniform `0..=jitter_ns` per datagram.
    #[serde(default)]
    pub jitter_ns: u64,
    /// The other nodes of the link.
    #[serde(default)]
    pub peers: Vec<LinkPeer>,
}

/// Binds the socket of `spec` (to its device, if it names one; broadcasts allowed).
///
/// # Errors
/// Socket errors; binding to a device needs `CAP_NET_RAW` (root).
pub fn bind_interface(spec: &InterfaceSpec) -> io::Result<UdpEndpoint> {
    let domain = socket2::Domain::for_address(spec.bind);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_broadcast(true)?;
    if let Some(dev) = &spec.device {
        let name = std::ffi::OsString::from(dev.clone());
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::BindToDevice, &name)
            .map_err(io::Error::from)?;
    }
    socket.bind(&spec.bind.into())?;
    UdpEndpoint::from_socket(UdpSocket::from(socket))
}

/// What a multi-homed node observed, handed back when its run ends.
pub struct MultiOutcome {
    /// Its application's sends, deliveries and notices.
    pub recorder: Recorder,
    /// Its kernel's counters, with the driver's own under `iface.*`.
    pub counters: BTreeMap<String, u64>,
    /// Its sockets' counters, summed over its interfaces.
    pub transport: TransportStats,
    /// Its global memory (routing tables), if it runs `dvmrp`.
    pub memory: Option<NodeMemory>,
}

/// One interface at run time.
struct Port {
    spec: InterfaceSpec,
    endpoint: UdpEndpoint,
    /// Peer address → node id.
    by_addr: BTreeMap<SocketAddr, NodeId>,
    /// The stack's bottom session for this port, if the stack has one.
    device: Option<SessionId>,
    _watch: mio::net::UdpSocket,
}

/// A datagram held back by the emulated link delay.
struct Held {
    port: usize,
    to: SocketAddr,
    bytes: Vec<u8>,
}

/// A node with one socket per interface.
pub struct MultiNode {
    id: NodeId,
    kernel: Kernel,
    sessions: Vec<(String, SessionId)>,
    ports: Vec<Port>,
    app: Application,
    recorder: std::rc::Rc<std::cell::RefCell<Recorder>>,
    clock: Clock,
    poll: mio::Poll,
    events: mio::Events,
    /// Datagrams waiting for their emulated delay, by (due, sequence).
    held: BTreeMap<(Instant, u64), Held>,
    seq: u64,
    rng: u64,
    /// Driver counters: sent to a node off the link, on a port with no socket, from an
    /// unknown address, own broadcasts ignored.
    off_link: u64,
    no_socket: u64,
    unknown_source: u64,
    own: u64,
    /// The node's first channel (where `[[scenario.group]]` commands go down).
    first_channel: Option<viastack_kernel::ChannelId>,
    /// `[[scenario.group]]` joins and leaves still to do: (when, join, group), by time.
    group_events: Vec<(Instant, bool, u32)>,
}

impl MultiNode {
    /// A node over a built kernel and its bound interfaces.
    ///
    /// # Errors
    /// [`NetError::Io`] if the sockets cannot be watched.
    pub fn new(
        id: NodeId,
        nodes: u32,
        built: BuiltNode,
        workloads: &[Workload],
        interfaces: Vec<(InterfaceSpec, UdpEndpoint)>,
        clock: Clock,
    ) -> Result<Self, NetError> {
        let BuiltNode {
            kernel,
            channels,
            devices,
            sessions,
        } = built;
        let poll = mio::Poll::new()?;
        let mut ports = Vec::with_capacity(interfaces.len());
        for (i, (spec, endpoint)) in interfaces.into_iter().enumerate() {
            // A duplicate of the socket's descriptor (the same open socket) to watch: its
            // blocking mode is left as it is (`recv` with a zero wait never blocks).
            let mut watch =
                mio::net::UdpSocket::from_std(UdpSocket::from(endpoint.readiness_fd()?));
            poll.registry()
                .register(&mut watch, mio::Token(i), mio::Interest::READABLE)?;
            let by_addr = spec
                .peers
                .iter()
                .map(|p| (canonical(p.addr), NodeId(p.node)))
                .collect();
            let device = devices
                .iter()
                .find(|(p, _)| *p == spec.port)
                .map(|&(_, s)| s);
            ports.push(Port {
                spec,
                endpoint,
                by_addr,
                device,
                _watch: watch,
            });
        }
        let first_channel = channels.first().map(|&(_, c)| c);
        let recorder = std::rc::Rc::new(std::cell::RefCell::new(Recorder::default()));
        let app = Application::new(
            id,
            nodes,
            &channels,
            workloads,
            std::rc::Rc::clone(&recorder),
            clock.now(),
        );
        Ok(MultiNode {
            id,
            kernel,
            sessions,
            ports,
            app,
            recorder,
            clock,
            poll,
            events: mio::Events::with_capacity(64),
            held: BTreeMap::new(),
            seq: 0,
            rng: 0x9e37_79b9_7f4a_7c15 ^ u64::from(id.0).wrapping_add(1),
            off_link: 0,
            no_socket: 0,
            unknown_source: 0,
            own: 0,
            first_channel,
            group_events: Vec::new(),
        })
    }

    /// Makes the application join (`join`) or leave multicast group `group` at `at` (a
    /// `[[scenario.group]]` entry), as the simulator's nodes do.
    pub fn group_at(&mut self, at: Instant, join: bool, group: u32) {
        self.group_events.push((at, join, group));
        self.group_events.sort_by_key(|e| e.0);
    }

    fn run_group_events(&mut self, now: Instant) {
        while self.group_events.first().is_some_and(|e| e.0 <= now) {
            let (_, join, group) = self.group_events.remove(0);
            if let Some(channel) = self.first_channel {
                viastack_scenario::group_command(&mut self.kernel, channel, now, join, group);
            }
        }
    }

    fn jitter(&mut self, max_ns: u64) -> u64 {
        if max_ns == 0 {
            return 0;
        }
        // xorshift64*: enough for delay jitter (not for anything secret).
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % (max_ns + 1)
    }

    /// Sends (or holds back, under an emulated delay) one datagram on port index `p`.
    fn emit(&mut self, p: usize, to: SocketAddr, bytes: Vec<u8>, now: Instant) {
        let (delay, jitter) = match self.ports.get(p) {
            Some(port) => (port.spec.delay_ns, port.spec.jitter_ns),
            None => return,
        };
        let extra = self.jitter(jitter);
        if delay == 0 && extra == 0 {
            if let Some(port) = self.ports.get_mut(p) {
                port.endpoint.send(to, &bytes);
            }
            return;
        }
        let due = now + Duration::from_nanos(delay.saturating_add(extra));
        self.seq += 1;
        self.held
            .insert((due, self.seq), Held { port: p, to, bytes });
    }

    /// Hands the kernel's outputs on: deliveries to the application, transmits to the socket
    /// of their port.
    fn drain(&mut self, now: Instant) {
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Deliver(ev) => self.app.on_deliver(&ev, now),
                Output::Transmit(t) => {
                    let Some(p) = self.ports.iter().position(|x| x.spec.port == t.port) else {
                        // A channel for an interface this node does not have (a host runs the
                        // routers' file): as the simulator's `dropped_no_route`.
                        self.no_socket += 1;
                        continue;
                    };
                    let bytes = t.message.into_vec();
                    match t.dest {
                        Dest::Node(n) => {
                            let to = self.ports[p]
                                .spec
                                .peers
                                .iter()
                                .find(|x| x.node == n.0)
                                .map(|x| x.addr);
                            match to {
                                Some(to) => self.emit(p, to, bytes, now),
                                None => self.off_link += 1,
                            }
                        }
                        Dest::Broadcast => match self.ports[p].spec.broadcast {
                            Some(to) => self.emit(p, to, bytes, now),
                            None => {
                                let peers: Vec<SocketAddr> =
                                    self.ports[p].spec.peers.iter().map(|x| x.addr).collect();
                                for to in peers {
                                    self.emit(p, to, bytes.clone(), now);
                                }
                            }
                        },
                    }
                }
            }
        }
    }

    /// Sends the held datagrams whose delay has passed; returns the next due time.
    fn release(&mut self, now: Instant) -> Option<Instant> {
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                return Some(entry.key().0);
            }
            let h = entry.remove();
            if let Some(port) = self.ports.get_mut(h.port) {
                port.endpoint.send(h.to, &h.bytes);
            }
        }
        None
    }

    /// Takes every datagram waiting on any socket and hands it to its port's device session.
    fn receive(&mut self) -> Result<(), NetError> {
        let mut inbox: Vec<(SessionId, NodeId, Vec<u8>)> = Vec::new();
        for port in &mut self.ports {
            let own = port.spec.addr;
            loop {
                let by_addr = &port.by_addr;
                let device = port.device;
                let mut unknown = 0u64;
                let mut mine = 0u64;
                let n = port.endpoint.recv(StdDuration::ZERO, |from, bytes| {
                    let from = canonical(from);
                    match by_addr.get(&from) {
                        Some(node) => {
                            if let Some(d) = device {
                                inbox.push((d, *node, bytes.to_vec()));
                            }
                        }
                        None if same_host(from, own) => mine += 1,
                        None => unknown += 1,
                    }
                })?;
                self.unknown_source += unknown;
                self.own += mine;
                if n == 0 {
                    break;
                }
            }
        }
        let now = self.clock.now();
        for (device, from, bytes) in inbox {
            self.kernel
                .handle_datagram(now, device, from, Message::from_wire(bytes));
        }
        Ok(())
    }

    /// Runs until the clock reaches `end`.
    ///
    /// # Errors
    /// Socket errors.
    pub fn run_until(&mut self, end: Instant) -> Result<(), NetError> {
        loop {
            let now = self.clock.now();
            if self.clock.until(end).is_zero() {
                return Ok(());
            }
            self.kernel.handle_timeout(now);
            self.run_group_events(now);
            self.app.send_due(&mut self.kernel, now);
            self.drain(now);
            let held = self.release(now);
            let next = [
                self.kernel.poll_timeout(),
                self.app.next_send(),
                held,
                self.group_events.first().map(|e| e.0),
                Some(end),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end);
            let wait = self.clock.until(next);
            match self.poll.poll(&mut self.events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
            self.receive()?;
            let now = self.clock.now();
            self.drain(now);
            self.release(now);
        }
    }

    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Ends the node and hands back what it observed.
    pub fn finish(self) -> MultiOutcome {
        let mut counters = self.kernel.counters();
        for (k, v) in [
            ("iface.off_link", self.off_link),
            ("iface.no_socket", self.no_socket),
            ("iface.unknown_source", self.unknown_source),
            ("iface.own_broadcast", self.own),
            ("iface.held_at_end", self.held.len() as u64),
        ] {
            if v > 0 {
                counters.insert(k.to_string(), v);
            }
        }
        let mut transport = TransportStats::default();
        for p in &self.ports {
            let s = p.endpoint.stats();
            transport.sent += s.sent;
            transport.send_failed += s.send_failed;
            transport.received += s.received;
        }
        transport.received -= self.unknown_source + self.own;
        transport.bad_frames = self.unknown_source;
        let memory = viastack_scenario::memory_of(&self.kernel, &self.sessions);
        drop(self.app); // releases the application's handle on the recorder
        let recorder = std::rc::Rc::try_unwrap(self.recorder)
            .map(std::cell::RefCell::into_inner)
            .unwrap_or_else(|shared| shared.borrow().clone());
        MultiOutcome {
            recorder,
            counters,
            transport,
            memory,
        }
    }
}

/// Whether `from` is this interface's own address (a looped-back broadcast).
fn same_host(from: SocketAddr, own: SocketAddr) -> bool {
    canonical(from) == canonical(own)
}

/// Runs a stack file with a `[topology]` on loopback, every node a thread of this process
/// (`run --net`): each node's interface `k` is a UDP socket of its own on `127.0.0.1`, whose
/// peers are the sockets of the other nodes of that link, so a datagram still travels one link
/// (a broadcast is one unicast per node of the link). Each link's latency and jitter are
/// emulated by the sending node; its other conditions, link failures and crashes are not
/// applied here (`viastack testbed up` applies them on network namespaces).
/// The report lists every router's global memory as the simulator's does.
///
/// # Errors
/// [`NetError`]: no scenario, a stack that does not build, socket errors.
pub fn run_threads_topology(
    file: &viastack_stack::StackFile,
    catalog: &viastack_stack::Catalog,
    options: &viastack_scenario::RunOptions,
) -> Result<viastack_scenario::Report, NetError> {
    use viastack_scenario::report::{self, Network, Observed, RunInfo};
    let scenario = file
        .scenario
        .clone()
        .ok_or_else(|| NetError::NoScenario(file.path.clone()))?;
    let Some(topo) = scenario.topology.clone() else {
        return crate::run_threads(file, catalog, options);
    };
    let seed = options.seed.unwrap_or(scenario.seed);
    let duration = options.duration.unwrap_or(scenario.duration);
    let nodes = scenario.nodes;
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    // Bind every interface first: (node, link) → its spec and endpoint.
    let mut ifaces: Vec<Vec<(usize, InterfaceSpec, UdpEndpoint)>> =
        (0..nodes).map(|_| Vec::new()).collect();
    for (k, link) in topo.links.iter().enumerate() {
        // The link's latency and jitter, emulated by each sender (loopback has no delay).
        let cond = link.conditions.apply(&scenario.link);
        for &n in &link.nodes {
            let Some(list) = ifaces.get_mut(n as usize) else {
                continue;
            };
            let port = u16::try_from(list.len()).unwrap_or(u16::MAX);
            let mut spec = InterfaceSpec {
                port,
                device: None,
                bind: loopback,
                addr: loopback,
                broadcast: None,
                delay_ns: cond.latency.as_nanos() as u64,
                jitter_ns: cond.jitter.as_nanos() as u64,
                peers: Vec::new(),
            };
            let endpoint = bind_interface(&spec)?;
            spec.addr = endpoint.local_addr()?;
            list.push((k, spec, endpoint));
        }
    }
    let addr_of = |ifaces: &Vec<Vec<(usize, InterfaceSpec, UdpEndpoint)>>, n: u32, k: usize| {
        ifaces
            .get(n as usize)
            .and_then(|l| l.iter().find(|(link, _, _)| *link == k))
            .map(|(_, s, _)| s.addr)
    };
    let mut peers: Vec<Vec<Vec<LinkPeer>>> = Vec::new();
    for (n, list) in ifaces.iter().enumerate() {
        let mut per = Vec::new();
        for (k, _, _) in list {
            let others = topo.links[*k]
                .nodes
                .iter()
                .filter(|&&m| m as usize != n)
                .filter_map(|&m| addr_of(&ifaces, m, *k).map(|addr| LinkPeer { node: m, addr }))
                .collect();
            per.push(others);
        }
        peers.push(per);
    }
    let mut built = Vec::new();
    for n in 0..nodes {
        let env = viastack_stack::BuildEnv {
            node: NodeId(n),
            nodes,
            seed,
            topology: Some(topo.node_view(n)),
        };
        let config = viastack_kernel::KernelConfig {
            node: NodeId(n),
            seed: crate::kernel_seed(seed, NodeId(n)),
            ..viastack_kernel::KernelConfig::default()
        };
        built.push(
            viastack_stack::build_node(file, catalog, &env, config).map_err(NetError::Build)?,
        );
    }
    let clock = Clock::start();
    let end = Instant::ZERO + duration;
    let outcomes: Vec<Result<MultiOutcome, NetError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = built
            .into_iter()
            .zip(ifaces)
            .zip(peers)
            .enumerate()
            .map(|(n, ((b, list), peers))| {
                let workloads = scenario.workloads.clone();
                let groups = scenario.groups.clone();
                let id = NodeId(n as u32);
                let interfaces: Vec<(InterfaceSpec, UdpEndpoint)> = list
                    .into_iter()
                    .zip(peers)
                    .map(|((_, mut spec, endpoint), p)| {
                        spec.peers = p;
                        (spec, endpoint)
                    })
                    .collect();
                std::thread::Builder::new()
                    .name(format!("node-{n}"))
                    .spawn_scoped(scope, move || {
                        let mut node = MultiNode::new(id, nodes, b, &workloads, interfaces, clock)?;
                        for g in groups.iter().filter(|g| g.node == id.0) {
                            node.group_at(Instant::ZERO + g.at, g.join, g.group);
                        }
                        node.run_until(end)?;
                        Ok(node.finish())
                    })
            })
            .collect();
        crate::join_nodes(handles)
    });
    let mut recorder = Recorder::default();
    let mut counters = BTreeMap::new();
    let mut network = Network {
        sent: 0,
        delivered: 0,
        lost: 0,
        duplicated: 0,
        corrupted: 0,
        dropped_partition: 0,
        dropped_down: 0,
        dropped_link_down: 0,
        dropped_no_route: 0,
    };
    let mut memory = BTreeMap::new();
    for (n, outcome) in outcomes.into_iter().enumerate() {
        let o = outcome?;
        recorder.merge(o.recorder);
        for (k, v) in o.counters {
            let c = counters.entry(k).or_insert(0u64);
            *c = c.saturating_add(v);
        }
        network.sent += o.transport.sent;
        network.delivered += o.transport.received;
        network.lost += o.transport.send_failed;
        if let Some(m) = o.memory {
            let name = topo
                .nodes
                .get(n)
                .map_or_else(|| format!("n{n}"), |d| d.name.clone());
            memory.insert(name, m);
        }
    }
    let info = RunInfo {
        file: &file.path,
        driver: "udp-threads-topology",
        seed,
        nodes,
        duration,
        expect: scenario.expect,
    };
    let observed = Observed {
        recorder: &recorder,
        crashed: std::collections::BTreeSet::new(),
        down_at_end: std::collections::BTreeSet::new(),
        reliable_workloads: std::collections::BTreeSet::new(),
        network,
        counters,
        steps: 0,
        trace_hash: "-".to_string(),
    };
    let mut report = report::build(&info, observed);
    report.memory = memory;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(port: u16, addr: SocketAddr, peers: Vec<LinkPeer>) -> InterfaceSpec {
        InterfaceSpec {
            port,
            device: None,
            bind: addr,
            addr,
            broadcast: None,
            delay_ns: 0,
            jitter_ns: 0,
            peers,
        }
    }

    #[test]
    fn interface_specs_round_trip_through_json() {
        let s = InterfaceSpec {
            broadcast: Some("10.0.3.255:5600".parse().unwrap()),
            device: Some("eth1".into()),
            delay_ns: 2_000_000,
            ..spec(
                1,
                "10.0.3.2:5600".parse().unwrap(),
                vec![LinkPeer {
                    node: 4,
                    addr: "10.0.3.1:5600".parse().unwrap(),
                }],
            )
        };
        let back: InterfaceSpec =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_loopback_interface_binds_and_sends_to_its_peer() {
        let a = bind_interface(&spec(0, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let mut b = bind_interface(&spec(0, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let mut a = a;
        a.send(b.local_addr().unwrap(), b"probe");
        let mut got = Vec::new();
        while got.is_empty() {
            b.recv(StdDuration::from_secs(5), |_, bytes| {
                got.push(bytes.to_vec())
            })
            .unwrap();
        }
        assert_eq!(got, [b"probe".to_vec()]);
    }
}

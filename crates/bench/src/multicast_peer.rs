//! The viastack side of `bench multicast`'s peer lane (issue 17 "Figures", the
//! `reliable_multicast_vs_jgroups` figure): the same shape as JGroups' `McastPeer` — one
//! sender, four receivers, loopback, 1000-byte messages — with the sender driven by
//! **back-pressure**, not a fixed pace.
//!
//! The network is one LAN segment (`A`, `H1`–`H4`: seed 004's hosts, no routers between them,
//! as JGroups' members share one loopback) running `mcast-reliable`'s host stack
//! (`interface` + `checksum` + `bundle` + `igmp` + `mcast-reliable` + `mcast-order` +
//! `mcast-forward`), every node a thread with one UDP socket; a broadcast on the segment is one
//! datagram per other node (loopback has no broadcast address). The sender hands its messages
//! over in kernel batches of 64 (`Kernel::begin_batch`), so the `bundle` component packs what
//! a batch queued into datagrams of up to `max_bytes` (loopback's MTU is 64 KiB: the path
//! allows it), the way JGroups' bundler packs its messages into one TCP write. The sender injects messages as long as the
//! service takes them; a `SendRefused` (the source's send buffer is full of unstable packets)
//! makes it wait for the next datagram from a receiver (a stability report frees room) and
//! send the refused message again. The window runs from the first send to the last delivery
//! at the slowest receiver; every receiver must get every message exactly once (checked by
//! the lane from a sequence number in each payload; any loss or duplicate is an error).

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration as WallDuration, Instant as WallClock};

use anyhow::{anyhow, bail, Context as _};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    ChannelId, Dest, Direction, Duration, Event, Instant, Kernel, Message, NodeId, Output,
    Sendable, SessionId,
};
use viastack_protocols::events::SEND_REFUSED;
use viastack_protocols::mcast_reliable::{stream_note, StreamNote};
use viastack_stack::{BuildEnv, Catalog, StackFile};

/// The receivers (node ids 1..=4 of the LAN).
pub const RECEIVERS: usize = 4;
/// Messages the sender hands over in one kernel batch.
const BURST: usize = 64;
/// Marks a lane payload: "VSPL", then the sequence number.
const MAGIC: [u8; 4] = *b"VSPL";

/// The LAN stack of the lane: `A` and four hosts on one segment.
pub fn lan_text(group: &str, max_bytes: usize, window: usize) -> String {
    format!(
        r#"# bench multicast peer lane: one sender and four receivers on one LAN (generated)
[layers.dev]
kind = "interface"
port = 0
[layers.sum]
kind = "checksum"
[layers.pack]
kind = "bundle"
max_bytes = {max_bytes}
[layers.groups]
kind = "igmp"
time_scale = 0.1
[layers.rel]
kind = "mcast-reliable"
send_capacity = {window}
window = {window}
[layers.order]
kind = "mcast-order"
capacity = {window}
[layers.data]
kind = "mcast-forward"
group = "{group}"
[qos.if0]
layers = ["dev", "sum", "pack", "groups", "rel", "order", "data"]
[sessions.membership]
layer = "groups"
[sessions.reliability]
layer = "rel"
[sessions.ordering]
layer = "order"
[sessions.forwarding]
layer = "data"
[channels.if0]
qos = "if0"
bind = {{ groups = "membership", rel = "reliability", order = "ordering", data = "forwarding" }}
[[topology.node]]
name = "A"
role = "host"
[[topology.node]]
name = "H1"
role = "host"
[[topology.node]]
name = "H2"
role = "host"
[[topology.node]]
name = "H3"
role = "host"
[[topology.node]]
name = "H4"
role = "host"
[[topology.link]]
name = "lan"
nodes = ["A", "H1", "H2", "H3", "H4"]
[scenario]
nodes = 5
seed = 1
duration = "10s"
expect = "none"
"#
    )
}

/// What one round measured.
#[derive(Debug, Clone)]
pub struct Round {
    /// Messages/s received per receiver: messages / (first send → last delivery anywhere).
    pub per_receiver: f64,
    /// Seconds of the window.
    pub secs: f64,
    /// Messages each receiver got (exactly once each).
    pub delivered: Vec<u64>,
    /// Sends the service refused (and the lane sent again).
    pub refused: u64,
    /// Datagrams sent by all nodes.
    pub datagrams: u64,
    /// CPU seconds the process used during the round (every node thread), if known.
    pub cpu_secs: Option<f64>,
}

/// Shared between the node threads of one round.
struct Shared {
    /// Wall-clock origin of the nodes' clocks.
    origin: WallClock,
    /// Messages delivered per receiver.
    delivered: Vec<AtomicU64>,
    /// When each receiver got its last message (ns since `origin`).
    done_at: Vec<AtomicU64>,
    /// Duplicates or foreign payloads seen by any receiver.
    bad: AtomicU64,
    /// Messages the receivers were told are lost (`McastUnrecoverable`).
    lost: AtomicU64,
    /// First send (ns since `origin`).
    first_send: AtomicU64,
    stop: AtomicBool,
    datagrams: AtomicU64,
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::ZERO + Duration::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }
    fn all_done(&self, messages: u64) -> bool {
        self.delivered
            .iter()
            .all(|d| d.load(Ordering::Acquire) >= messages)
    }
}

/// One node: its kernel, its socket, its link's other nodes.
struct Node {
    id: NodeId,
    kernel: Kernel,
    channel: ChannelId,
    device: SessionId,
    socket: UdpSocket,
    peers: Vec<(NodeId, SocketAddr)>,
    by_addr: HashMap<SocketAddr, NodeId>,
    buf: Vec<u8>,
    sent: u64,
    /// Messages this node's service reported lost.
    lost: u64,
}

impl Node {
    /// Hands the kernel's outputs on; returns whether a send was refused and how many
    /// deliveries it saw (passed to `deliver`).
    fn drain(&mut self, mut deliver: impl FnMut(&[u8])) -> bool {
        let mut refused = false;
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Deliver(ev) => {
                    if ev.ty() == SEND_REFUSED.id() {
                        refused = true;
                    } else if let Some(StreamNote::Unrecoverable { missing, .. }) = stream_note(&ev)
                    {
                        self.lost += u64::from(missing);
                    } else if let Some(s) = ev.sendable_ref() {
                        deliver(s.message.as_slice());
                    }
                }
                Output::Transmit(t) => {
                    let bytes = t.message.as_slice();
                    match t.dest {
                        Dest::Node(n) => {
                            if let Some((_, a)) = self.peers.iter().find(|(p, _)| *p == n) {
                                self.sent += u64::from(self.socket.send_to(bytes, a).is_ok());
                            }
                        }
                        Dest::Broadcast => {
                            for (_, a) in &self.peers {
                                self.sent += u64::from(self.socket.send_to(bytes, a).is_ok());
                            }
                        }
                    }
                }
            }
        }
        refused
    }

    /// Takes the datagrams waiting (waiting up to `wait` for the first); how many.
    fn receive(&mut self, shared: &Shared, wait: WallDuration) -> anyhow::Result<usize> {
        let mut n = 0;
        let mut first = true;
        loop {
            if first && !wait.is_zero() {
                self.socket.set_nonblocking(false)?;
                self.socket.set_read_timeout(Some(wait))?;
            } else {
                self.socket.set_nonblocking(true)?;
            }
            let got = self.socket.recv_from(&mut self.buf);
            first = false;
            match got {
                Ok((len, from)) => {
                    n += 1;
                    if let Some(&peer) = self.by_addr.get(&from) {
                        let bytes = self.buf[..len].to_vec();
                        let now = shared.now();
                        self.kernel.handle_datagram(
                            now,
                            self.device,
                            peer,
                            Message::from_wire(bytes),
                        );
                    }
                    if n >= 256 {
                        return Ok(n);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(n)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// How long to wait for a datagram before the kernel's next timer (at most `cap`).
    fn wait(&self, shared: &Shared, cap: WallDuration) -> WallDuration {
        let now = shared.now();
        match self.kernel.poll_timeout() {
            Some(t) if t <= now => WallDuration::ZERO,
            Some(t) => WallDuration::from_nanos((t - now).as_nanos() as u64)
                .min(cap)
                .max(WallDuration::from_micros(50)),
            None => cap,
        }
    }
}

fn payload(seq: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size.max(12)];
    v[..4].copy_from_slice(&MAGIC);
    v[4..12].copy_from_slice(&seq.to_be_bytes());
    v
}

fn sender(
    mut node: Node,
    shared: &Shared,
    messages: u64,
    size: usize,
    group: u32,
) -> anyhow::Result<u64> {
    let _ = group;
    let mut next = 0u64;
    let mut refused = 0u64;
    let mut blocked = false;
    let mut started = false;
    while !shared.stop.load(Ordering::Acquire) {
        let now = shared.now();
        node.kernel.handle_timeout(now);
        node.drain(|_| {});
        if !blocked {
            // A burst (one kernel batch: `bundle` packs what it queued per destination),
            // then a look at the socket.
            node.kernel.begin_batch();
            for _ in 0..BURST {
                if next >= messages {
                    break;
                }
                let now = shared.now();
                if !started {
                    started = true;
                    shared
                        .first_send
                        .store((now - Instant::ZERO).as_nanos() as u64, Ordering::Release);
                }
                let ev = Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    node.channel,
                    Sendable::new(
                        node.id,
                        Dest::Broadcast,
                        Message::from_payload(&payload(next, size)),
                    ),
                );
                node.kernel
                    .inject(now, ev)
                    .map_err(|e| anyhow!("inject: {e}"))?;
                if node.drain(|_| {}) {
                    refused += 1;
                    blocked = true;
                    break;
                }
                next += 1;
            }
            node.kernel.end_batch(shared.now());
            node.drain(|_| {});
        }
        let wait = if blocked || next >= messages {
            node.wait(shared, WallDuration::from_millis(5))
        } else {
            WallDuration::ZERO
        };
        // Room frees when a receiver's stability report arrives: try again after any
        // datagram, or after the wait (the periodic reports and heartbeats go on).
        node.receive(shared, wait)?;
        blocked = false;
        node.drain(|_| {});
        if next >= messages && shared.all_done(messages) {
            break;
        }
    }
    shared.datagrams.fetch_add(node.sent, Ordering::Relaxed);
    Ok(refused)
}

fn receiver(mut node: Node, shared: &Shared, index: usize, messages: u64) -> anyhow::Result<()> {
    let mut seen = vec![false; usize::try_from(messages).unwrap_or(0)];
    let mut count = 0u64;
    let mut bad = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        let now = shared.now();
        node.kernel.handle_timeout(now);
        let wait = node.wait(shared, WallDuration::from_millis(5));
        node.receive(shared, wait)?;
        let before = count;
        node.drain(|bytes| {
            let seq = (bytes.len() >= 12 && bytes[..4] == MAGIC)
                .then(|| u64::from_be_bytes(bytes[4..12].try_into().unwrap_or_default()));
            match seq.and_then(|s| seen.get_mut(usize::try_from(s).ok()?)) {
                Some(slot) if !*slot => {
                    *slot = true;
                    count += 1;
                }
                _ => bad += 1,
            }
        });
        if count != before {
            shared.delivered[index].store(count, Ordering::Release);
            if count >= messages {
                shared.done_at[index].store(
                    (shared.now() - Instant::ZERO).as_nanos() as u64,
                    Ordering::Release,
                );
            }
        }
        if bad > 0 {
            shared.bad.fetch_add(bad, Ordering::Relaxed);
            bad = 0;
        }
    }
    shared.datagrams.fetch_add(node.sent, Ordering::Relaxed);
    shared.lost.fetch_add(node.lost, Ordering::Relaxed);
    Ok(())
}

/// One round: `messages` of `size` bytes from `A` to the four receivers.
///
/// # Errors
/// Build or socket errors; a receiver missing messages or getting one twice; no progress for
/// 20 s.
pub fn round(
    file: &StackFile,
    catalog: &Catalog,
    messages: u64,
    size: usize,
    group: u32,
) -> anyhow::Result<Round> {
    let sc = file.scenario.as_ref().context("no scenario")?;
    let topo = sc.topology.as_ref().context("no topology")?;
    let nodes = sc.nodes;
    let sockets = (0..nodes)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let addrs = sockets
        .iter()
        .map(UdpSocket::local_addr)
        .collect::<Result<Vec<_>, _>>()?;
    for s in &sockets {
        let s = socket2::SockRef::from(s);
        let _ = s.set_recv_buffer_size(4 << 20);
        let _ = s.set_send_buffer_size(4 << 20);
    }
    let mut built = Vec::new();
    for (n, socket) in (0..nodes).zip(sockets) {
        let env = BuildEnv {
            node: NodeId(n),
            nodes,
            seed: sc.seed,
            topology: Some(topo.node_view(n)),
        };
        let config = viastack_kernel::KernelConfig {
            node: NodeId(n),
            seed: sc.seed.wrapping_mul(31).wrapping_add(u64::from(n)),
            ..viastack_kernel::KernelConfig::default()
        };
        let b = viastack_stack::build_node(file, catalog, &env, config)
            .map_err(|e| anyhow!("build node {n}: {e}"))?;
        let channel = b.channels.first().map(|&(_, c)| c).context("no channel")?;
        let device = b.devices.first().map(|&(_, s)| s).context("no device")?;
        let peers: Vec<(NodeId, SocketAddr)> = (0..nodes)
            .filter(|&m| m != n)
            .map(|m| (NodeId(m), addrs[m as usize]))
            .collect();
        built.push(Node {
            id: NodeId(n),
            kernel: b.kernel,
            channel,
            device,
            socket,
            by_addr: peers.iter().map(|&(p, a)| (a, p)).collect(),
            peers,
            buf: vec![0u8; 65_536],
            sent: 0,
            lost: 0,
        });
    }
    let shared = Shared {
        origin: WallClock::now(),
        delivered: (0..RECEIVERS).map(|_| AtomicU64::new(0)).collect(),
        done_at: (0..RECEIVERS).map(|_| AtomicU64::new(0)).collect(),
        bad: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        first_send: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        datagrams: AtomicU64::new(0),
    };
    // Every node joins the group (the receivers' applications; the sender's stack learns the
    // group from its data), then the sender starts once the joins had time to go out.
    let barrier = Barrier::new(built.len() + 1);
    let cpu_before = super::super::cpu::process_cpu(None);
    let outcome = std::thread::scope(|scope| -> anyhow::Result<u64> {
        let mut handles = Vec::new();
        let mut sender_handle = None;
        for mut node in built {
            let shared = &shared;
            let barrier = &barrier;
            let id = node.id;
            let h = std::thread::Builder::new()
                .name(format!("peer-{}", id.0))
                .spawn_scoped(scope, move || -> anyhow::Result<u64> {
                    let now = shared.now();
                    node.kernel.handle_timeout(now);
                    if id.0 != 0 {
                        viastack_scenario::group_command(
                            &mut node.kernel,
                            node.channel,
                            now,
                            true,
                            group,
                        );
                    }
                    node.drain(|_| {});
                    barrier.wait();
                    if id.0 == 0 {
                        // The receivers' joins settle while they run.
                        std::thread::sleep(WallDuration::from_millis(200));
                        sender(node, shared, messages, size, group)
                    } else {
                        receiver(node, shared, id.0 as usize - 1, messages).map(|()| 0)
                    }
                })?;
            if id.0 == 0 {
                sender_handle = Some(h);
            } else {
                handles.push(h);
            }
        }
        barrier.wait();
        // Watchdog: stop when every receiver is done, or after 20 s without progress.
        let mut last = 0u64;
        let mut since = WallClock::now();
        loop {
            std::thread::sleep(WallDuration::from_millis(2));
            if shared.all_done(messages) {
                break;
            }
            let total: u64 = shared
                .delivered
                .iter()
                .map(|d| d.load(Ordering::Relaxed))
                .sum();
            if total != last {
                last = total;
                since = WallClock::now();
            } else if since.elapsed() > WallDuration::from_secs(20) {
                break;
            }
        }
        shared.stop.store(true, Ordering::Release);
        let refused = match sender_handle {
            Some(h) => h.join().map_err(|_| anyhow!("sender panicked"))??,
            None => 0,
        };
        for h in handles {
            h.join().map_err(|_| anyhow!("receiver panicked"))??;
        }
        Ok(refused)
    })?;
    let cpu_secs = match (cpu_before, super::super::cpu::process_cpu(None)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    let delivered: Vec<u64> = shared
        .delivered
        .iter()
        .map(|d| d.load(Ordering::Acquire))
        .collect();
    let bad = shared.bad.load(Ordering::Acquire);
    let lost = shared.lost.load(Ordering::Acquire);
    if bad > 0 || lost > 0 || delivered.iter().any(|&d| d != messages) {
        bail!(
            "peer lane: not exactly once: delivered {delivered:?} of {messages} each, \
             {bad} duplicates or foreign payloads, {lost} reported lost by the service"
        );
    }
    let first = shared.first_send.load(Ordering::Acquire);
    let last = shared
        .done_at
        .iter()
        .map(|d| d.load(Ordering::Acquire))
        .max()
        .unwrap_or(first);
    let secs = (last.saturating_sub(first) as f64 / 1e9).max(1e-9);
    Ok(Round {
        per_receiver: messages as f64 / secs,
        secs,
        delivered,
        refused: outcome,
        datagrams: shared.datagrams.load(Ordering::Relaxed),
        cpu_secs,
    })
}

//! A simulated node: one kernel built from the stack file and the scenario's
//! [`Application`] on top of it, glued to the simulator's [`Node`] contract (datagrams in,
//! transmits out, timeouts).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use viastack_kernel::{ChannelId, Instant, Kernel, Message, NodeId, Output, SessionId};
use viastack_sim::{Node, Transmit};
use viastack_stack::model::Workload;
use viastack_stack::BuiltNode;

use crate::app::Application;
use crate::recorder::Recorder;

/// A kernel plus the scenario's application, driven by the simulator.
pub struct SimNode {
    id: NodeId,
    kernel: Kernel,
    devices: Vec<(u16, SessionId)>,
    app: Application,
    transmits: VecDeque<Transmit>,
    channels: Vec<(String, ChannelId)>,
    /// Named sessions, by name.
    sessions: Vec<(String, SessionId)>,
    /// When the application leaves (`[[scenario.leave]]`), until it has.
    leave_at: Option<Instant>,
    left: bool,
    /// `[[scenario.group]]` joins and leaves still to do, by time.
    group_events: Vec<(Instant, bool, u32)>,
    /// `[[scenario.move]]` light-group moves still to do, by time: (when, channel, to).
    moves: Vec<(Instant, String, String)>,
}

impl SimNode {
    /// A node over a built kernel; `now` is its boot time.
    pub fn new(
        id: NodeId,
        nodes: u32,
        built: BuiltNode,
        workloads: &[Workload],
        recorder: Rc<RefCell<Recorder>>,
        now: Instant,
    ) -> Self {
        let BuiltNode {
            kernel,
            channels,
            devices,
            sessions,
        } = built;
        let app = Application::new(id, nodes, &channels, workloads, recorder, now);
        let mut node = SimNode {
            id,
            kernel,
            devices,
            app,
            transmits: VecDeque::new(),
            channels,
            sessions,
            leave_at: None,
            left: false,
            group_events: Vec::new(),
            moves: Vec::new(),
        };
        node.drain();
        node
    }

    /// Makes the application leave at `at`: it closes every channel (its layers say goodbye)
    /// and sends nothing more.
    pub fn leave_at(&mut self, at: Instant) {
        self.leave_at = Some(at);
    }

    /// Makes the application join (`join`) or leave multicast group `group` at `at`: a
    /// `McastGroup` event down its first channel (the host's `igmp` layer acts on it).
    pub fn group_at(&mut self, at: Instant, join: bool, group: u32) {
        self.group_events.push((at, join, group));
        self.group_events.sort_by_key(|e| e.0);
    }

    /// Makes the application move light channel `channel`'s group to the heavy group of light
    /// channel `to` at `at` (an `LwgMove` command down `channel`).
    pub fn move_at(&mut self, at: Instant, channel: &str, to: &str) {
        self.moves.push((at, channel.to_owned(), to.to_owned()));
        self.moves.sort_by_key(|m| m.0);
    }

    fn run_moves(&mut self, now: Instant) {
        while self.moves.first().is_some_and(|m| m.0 <= now) {
            let (_, channel, to) = self.moves.remove(0);
            let Some(&(_, ch)) = self.channels.iter().find(|(n, _)| *n == channel) else {
                continue;
            };
            let ev = viastack_group::lwg::move_command(ch, to);
            if let Err(e) = self.kernel.inject(now, ev) {
                tracing::debug!(node = %self.id, error = %e, "move: channel not open");
            }
        }
    }

    fn run_group_events(&mut self, now: Instant) {
        while self.group_events.first().is_some_and(|e| e.0 <= now) {
            let (_, join, group) = self.group_events.remove(0);
            let Some(&(_, channel)) = self.channels.first() else {
                continue;
            };
            group_command(&mut self.kernel, channel, now, join, group);
        }
    }

    /// Whether the application has left.
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The node's channels by name, in file order.
    pub fn channels(&self) -> &[(String, ChannelId)] {
        &self.channels
    }

    /// The node's named sessions (`[sessions.NAME]`), by name.
    pub fn sessions(&self) -> &[(String, SessionId)] {
        &self.sessions
    }

    /// The node's global memory (seed 004), if a `dvmrp` session runs on it, as report rows.
    pub fn memory(&self) -> Option<crate::report::NodeMemory> {
        memory_of(&self.kernel, &self.sessions)
    }

    /// The node's kernel (for counters and inspection).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Moves the kernel's outputs to the simulator's queue and the application.
    fn drain(&mut self) {
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) => self.transmits.push_back(Transmit {
                    port: t.port,
                    dest: t.dest,
                    bytes: t.message.into_vec(),
                }),
                Output::Deliver(ev) => self.app.on_deliver(&ev, self.kernel.now()),
            }
        }
    }
}

impl Node for SimNode {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        match self.devices.iter().find(|(p, _)| *p == port) {
            Some(&(_, device)) => {
                self.kernel
                    .handle_datagram(now, device, from, Message::from_wire(bytes));
            }
            None => tracing::debug!(node = %self.id, port, "datagram for a port with no device"),
        }
        self.drain();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.kernel.handle_timeout(now);
        self.run_group_events(now);
        if !self.left {
            self.run_moves(now);
        }
        if self.leave_at.is_some_and(|t| t <= now) {
            self.leave_at = None;
            self.left = true;
            for (_, ch) in &self.channels {
                if let Err(e) = self.kernel.close_channel(*ch, now) {
                    tracing::debug!(node = %self.id, error = %e, "leaving: channel not open");
                }
            }
        }
        if !self.left {
            self.app.send_due(&mut self.kernel, now);
        }
        self.drain();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let send = if self.left {
            None
        } else {
            self.app.next_send()
        };
        let group = self.group_events.first().map(|e| e.0);
        let mv = self.moves.first().map(|m| m.0);
        [self.kernel.poll_timeout(), send, self.leave_at, group, mv]
            .into_iter()
            .flatten()
            .min()
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
}

/// The global memory (seed 004) of a node's kernel, if one of its named `sessions` is a `dvmrp`
/// session, as report rows (the simulator's nodes and the network driver's both use it).
pub fn memory_of(
    kernel: &Kernel,
    sessions: &[(String, SessionId)],
) -> Option<crate::report::NodeMemory> {
    use viastack_mcast::memory::Origin;
    use viastack_mcast::tree::Upstream;
    use viastack_protocols::dvmrp::DvmrpSession;
    let shared = sessions
        .iter()
        .find_map(|&(_, sid)| kernel.session::<DvmrpSession>(sid)?.memory())?;
    let mem = viastack_protocols::mcast::lock(&shared);
    let now = kernel.now();
    Some(crate::report::NodeMemory {
        neighbors: mem
            .neighbors
            .iter()
            .map(|n| crate::report::NeighborRow {
                iface: n.iface,
                addr: n.addr.to_string(),
                two_way: n.two_way,
            })
            .collect(),
        routes: mem
            .routes
            .iter()
            .map(|r| crate::report::RouteRow {
                prefix: r.prefix.to_string(),
                metric: r.metric,
                iface: r.iface(),
                upstream: match r.origin {
                    Origin::Learned { via, .. } => Some(via.to_string()),
                    Origin::Connected { .. } => None,
                },
                dependents: r.dependents.len(),
            })
            .collect(),
        tree: mem
            .tree
            .iter()
            .map(|t| crate::report::TreeRow {
                source: t.source.to_string(),
                upstream_iface: t.upstream_iface,
                upstream: t.upstream.map(|a| a.to_string()),
                children: t
                    .children
                    .iter()
                    .map(|(&i, d)| (i, d.iter().map(ToString::to_string).collect()))
                    .collect(),
            })
            .collect(),
        prunes: mem
            .prunes
            .iter()
            .map(|(&(s, g), e)| crate::report::PruneRow {
                source: s.to_string(),
                group: g.to_string(),
                upstream: match e.upstream {
                    Upstream::Forwarding => "forwarding",
                    Upstream::Pruned { .. } => "pruned",
                    Upstream::Grafting { .. } => "grafting",
                }
                .to_string(),
                pruned_by: e
                    .downstream
                    .iter()
                    .filter(|(_, &t)| t > now)
                    .map(|(&(i, a), _)| format!("{i}/{a}"))
                    .collect(),
            })
            .collect(),
        groups: mem
            .groups
            .iter()
            .map(|m| crate::report::GroupRow {
                iface: m.iface,
                group: m.group.to_string(),
                last_reporter: m.last_reporter.to_string(),
            })
            .collect(),
    })
}

/// Hands a host's `igmp` layer a `[[scenario.group]]` command: join (or leave) multicast group
/// `group`, as a `McastGroup` event down `channel` (the node's first). Shared by the simulator's
/// nodes and the network driver's (`viastack_net::multihop`).
pub fn group_command(
    kernel: &mut Kernel,
    channel: ChannelId,
    now: Instant,
    join: bool,
    group: u32,
) {
    use viastack_protocols::mcast::{custom_event, GroupCommand, MCAST_GROUP};
    let g = viastack_mcast::Addr(group);
    let cmd = if join {
        GroupCommand::Join(g)
    } else {
        GroupCommand::Leave(g)
    };
    let ev = custom_event(
        MCAST_GROUP.id(),
        viastack_kernel::Direction::Down,
        channel,
        cmd,
    );
    if let Err(e) = kernel.inject(now, ev) {
        tracing::debug!(node = %kernel.node(), error = %e, "group command: channel not open");
    }
}

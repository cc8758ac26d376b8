//! One node on real sockets: a kernel built from the stack file, the scenario's application,
//! a [`Transport`] (UDP or TCP) for its device, and the real clock — the same protocol code as
//! in the simulator, driven by the same sans-IO contract (DESIGN.md §4.1).
//!
//! The loop: fire due timers and send due application messages, hand the kernel's transmits to
//! the transport, then wait for datagrams until the next deadline (kernel timer, application
//! send or the end of the run), and feed them to the device session.
//!
//! [`NetNode::snapshot_reader`] hands another thread (a metrics endpoint) a function that asks
//! the loop for its counters: the request wakes the loop through the transport's waker and is
//! answered on its next turn, so a snapshot is exact at the moment it is taken.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc::{Receiver, SyncSender};

use viastack_kernel::{Dest, Instant, Kernel, Message, NodeId, Output, SessionId};
use viastack_scenario::{Application, Recorder};
use viastack_stack::model::Workload;
use viastack_stack::BuiltNode;

use crate::clock::Clock;
use crate::transport::{Transport, TransportStats};
use crate::NetError;

/// What a node observed, handed back when its run ends.
pub struct NodeOutcome {
    /// Its application's sends, deliveries and notices.
    pub recorder: Recorder,
    /// Its kernel's counters.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// Its transport's counters.
    pub transport: TransportStats,
}

/// A node's counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its kernel's counters.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// Its transport's counters.
    pub transport: TransportStats,
    /// Messages its stack holds unsettled.
    pub unsettled: usize,
}

/// Asks a running [`NetNode`] for a [`Snapshot`]; `None` once the node has finished.
pub type SnapshotReader = Box<dyn Fn() -> Option<Snapshot> + Send + Sync>;

/// A node on a real transport.
pub struct NetNode {
    id: NodeId,
    nodes: u32,
    kernel: Kernel,
    device: SessionId,
    port: u16,
    app: Application,
    recorder: Rc<RefCell<Recorder>>,
    transport: Box<dyn Transport>,
    clock: Clock,
    /// Snapshot requests from [`NetNode::snapshot_reader`]s: where to send the answer.
    snapshot_requests: Option<Receiver<SyncSender<Snapshot>>>,
}

impl NetNode {
    /// A node over a built kernel and a transport whose peers are set.
    ///
    /// # Errors
    /// [`NetError::Devices`] unless the stack has exactly one device.
    pub fn new(
        id: NodeId,
        nodes: u32,
        built: BuiltNode,
        workloads: &[Workload],
        transport: Box<dyn Transport>,
        clock: Clock,
    ) -> Result<Self, NetError> {
        let BuiltNode {
            kernel,
            channels,
            devices,
            ..
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
            nodes,
            kernel,
            device,
            port,
            app,
            recorder,
            transport,
            clock,
            snapshot_requests: None,
        })
    }

    /// A function another thread calls to read this node's counters while it runs.
    ///
    /// # Errors
    /// The transport's waker could not be made.
    pub fn snapshot_reader(&mut self) -> Result<SnapshotReader, NetError> {
        let waker = self.transport.waker()?;
        let (tx, rx) = std::sync::mpsc::channel::<SyncSender<Snapshot>>();
        self.snapshot_requests = Some(rx);
        let tx = std::sync::Mutex::new(tx);
        Ok(Box::new(move || {
            let (reply, answer) = std::sync::mpsc::sync_channel(1);
            tx.lock().ok()?.send(reply).ok()?;
            waker();
            answer.recv().ok()
        }))
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            counters: self.kernel.counters(),
            transport: self.transport.stats(),
            unsettled: self.kernel.unsettled(),
        }
    }

    fn answer_snapshot_requests(&self) {
        if let Some(requests) = &self.snapshot_requests {
            while let Ok(reply) = requests.try_recv() {
                let _ = reply.send(self.snapshot());
            }
        }
    }

    /// Hands the kernel's outputs on: deliveries to the application, transmits to the
    /// transport in one batch (one `sendmmsg` for up to 32 datagrams over UDP).
    fn drain(&mut self) {
        let mut transmits = Vec::new();
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) if t.port == self.port => transmits.push((t.dest, t.message)),
                Output::Transmit(t) => {
                    tracing::debug!(node = %self.id, port = t.port, "transmit on a port with no transport");
                }
                Output::Deliver(ev) => self.app.on_deliver(&ev, self.clock.now()),
            }
        }
        if transmits.is_empty() {
            return;
        }
        let mut batch = Vec::with_capacity(transmits.len());
        for (dest, message) in &transmits {
            match dest {
                Dest::Node(n) => batch.push((*n, message.as_slice())),
                Dest::Broadcast => batch.extend(
                    (0..self.nodes)
                        .filter(|&n| n != self.id.0)
                        .map(|n| (NodeId(n), message.as_slice())),
                ),
            }
        }
        self.transport.send_batch(&batch);
    }

    /// Runs until the clock reaches `end`.
    ///
    /// # Errors
    /// Socket errors.
    pub fn run_until(&mut self, end: Instant) -> Result<(), NetError> {
        let mut inbox: Vec<(NodeId, Vec<u8>)> = Vec::new();
        loop {
            let now = self.clock.now();
            if self.clock.until(end).is_zero() {
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
            self.transport
                .recv(wait, &mut |from, bytes| inbox.push((from, bytes.to_vec())))?;
            let now = self.clock.now();
            for (from, bytes) in inbox.drain(..) {
                self.kernel
                    .handle_datagram(now, self.device, from, Message::from_wire(bytes));
            }
            self.drain();
            self.answer_snapshot_requests();
        }
    }

    /// Ends the node and hands back what it observed.
    pub fn finish(self) -> NodeOutcome {
        let counters = self.kernel.counters();
        let transport = self.transport.stats();
        drop(self.app); // releases the application's handle on the recorder
        let recorder = Rc::try_unwrap(self.recorder)
            .map(RefCell::into_inner)
            .unwrap_or_else(|shared| shared.borrow().clone());
        NodeOutcome {
            recorder,
            counters,
            transport,
        }
    }
}

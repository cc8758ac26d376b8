//! A node on real sockets: the [`NodeCore`] in an event loop — on a thread of its own
//! ([`NodeBuilder::open`]) or as a task of the caller's tokio runtime
//! ([`NodeBuilder::open_on`]) — a UDP or TCP transport bound to the deployment's address, and
//! handles the application uses from any thread: blocking ([`Channel::send`], [`Node::recv`])
//! or async ([`Channel::send_async`], [`Node::recv_async`]), over the same loop.
//!
//! # Back-pressure, never unbounded queues
//! - Messages the application sends wait in a queue of [`NodeBuilder::send_queue`] entries:
//!   [`Channel::send`] waits for room, [`Channel::try_send`] returns [`SendError::Full`],
//!   [`Channel::send_async`] awaits room. Past the queue, the stack's own bounds apply (a full
//!   reliable send buffer answers with a [`FailureKind::SendRefused`] notice).
//! - Events for the application wait in a queue of [`NodeBuilder::event_queue`] entries; when
//!   it is full the loop stops reading the socket until the application catches up, so the
//!   peers' reliable layers slow down instead of this node dropping what it acknowledged.
//!
//! # Closing
//! [`Node::close`] stops new sends, lets the stack settle what it holds (every message
//! acknowledged or reported) for at most [`NodeBuilder::linger`], then closes the channels —
//! reliable layers report what is still unacknowledged as [`FailureKind::SendAborted`] — and
//! returns once the loop has ended. Events up to the end stay readable.
//!
//! # Wake-ups
//! The loop waits for datagrams until its next timer (`crate::event_loop`). A handle that
//! queues a message while the loop sleeps wakes it: through the transport's waker on a
//! thread (an empty datagram from a socket of its own over UDP, a `mio` waker over TCP), a
//! `tokio::sync::Notify` on a runtime; the loop announces that it is about to sleep, so a busy
//! loop costs the sender no system call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use viastack_kernel::{ChannelId, Dest, NodeId, Tag};
use viastack_net::{Clock, TcpTransport, Transport, UdpTransport};
use viastack_stack::{standard_catalog, Catalog, CatalogError, Diagnostics, LayerKind};

use crate::deployment::{Deployment, DeploymentError};
use crate::engine::{NodeCore, SendError};
#[cfg(doc)]
use crate::event::FailureKind;
use crate::event::NodeEvent;
use crate::event_loop::{Command, Control, EventLoop, Shared};
use crate::metrics::Metrics;

/// Why a node could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The stack file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// The stack file has problems (each with `file:line`).
    #[error("{0}")]
    Stack(Diagnostics),
    /// The deployment file has a problem.
    #[error(transparent)]
    Deployment(#[from] DeploymentError),
    /// No deployment, or it does not say which node this is.
    #[error("{0}")]
    Deploy(String),
    /// An application layer kind could not be registered.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The transport could not bind its address.
    #[error("cannot bind {addr} (node {node}'s address): {source}; is this the right node id, and is the address one of this machine's?")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The node.
        node: u32,
        /// What the system said.
        source: std::io::Error,
    },
    /// Other socket or thread errors.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why [`Node::recv_timeout`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// Nothing arrived in time.
    #[error("no event within the timeout")]
    Timeout,
    /// The node has closed and every event has been read.
    #[error("the node is closed")]
    Closed,
}

/// What [`Node::close`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReport {
    /// Messages still unsettled when the linger ran out (each reported in a
    /// [`FailureKind::SendAborted`] notice); 0 after a clean close.
    pub aborted: usize,
    /// The node's counters at the end.
    pub metrics: Metrics,
}

/// Options for opening a node; [`Node::builder`].
pub struct NodeBuilder {
    stack: Option<(String, Option<String>)>,
    deployment: Option<Deployment>,
    catalog: Catalog,
    send_queue: usize,
    event_queue: usize,
    linger: Duration,
    seed: Option<u64>,
    max_unsettled: usize,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("stack", &self.stack.as_ref().map(|s| &s.0))
            .field("deployment", &self.deployment)
            .field("send_queue", &self.send_queue)
            .field("event_queue", &self.event_queue)
            .field("linger", &self.linger)
            .finish_non_exhaustive()
    }
}

impl NodeBuilder {
    /// The stack file to build the node from.
    pub fn stack_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.stack = Some((path.into().display().to_string(), None));
        self
    }

    /// A stack given as text; `name` stands for the file in diagnostics.
    pub fn stack_text(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        self.stack = Some((name.into(), Some(text.into())));
        self
    }

    /// Where the nodes are, and which one this is.
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.deployment = Some(deployment);
        self
    }

    /// Adds an application-defined layer kind, usable as `kind = "…"` in the stack file.
    ///
    /// # Errors
    /// [`CatalogError`]: a name already taken, a malformed parameter declaration.
    pub fn register(mut self, kind: LayerKind) -> Result<Self, CatalogError> {
        self.catalog.register(kind)?;
        Ok(self)
    }

    /// Messages that may wait for the loop (default 1024).
    pub fn send_queue(mut self, n: usize) -> Self {
        self.send_queue = n.max(1);
        self
    }

    /// Events that may wait for the application before the node stops reading (default 4096).
    pub fn event_queue(mut self, n: usize) -> Self {
        self.event_queue = n.max(2);
        self
    }

    /// Messages the stack may hold unsettled before the node stops taking new ones from the
    /// send queue (default 512): past it, `send` waits as a TCP write waits for the window,
    /// instead of the stack's own buffer refusing messages. Keep it below the reliable
    /// layer's `send_buffer` (in segments).
    pub fn max_unsettled(mut self, n: usize) -> Self {
        self.max_unsettled = n.max(1);
        self
    }

    /// How long [`Node::close`] waits for unsettled messages (default 5 s).
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self
    }

    /// The seed of the node's random choices (default: from the clock and process id, so a
    /// restarted node is a new incarnation to its peers).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Builds the stack, binds the transport and starts the event loop on a thread of its own.
    ///
    /// # Errors
    /// [`OpenError`].
    pub fn open(self) -> Result<Node, OpenError> {
        let (mut event_loop, mut node) = self.prepare()?;
        let waker = event_loop.transport.waker()?;
        let _ = node.shared.waker.set(waker);
        let thread = std::thread::Builder::new()
            .name(format!("viastack-node-{}", node.id.0))
            .spawn(move || event_loop.run_thread())?;
        let _ = node.shared.loop_thread.set(thread.thread().clone());
        node.thread = Some(thread);
        Ok(node)
    }

    /// Builds the stack, binds the transport and starts the event loop as a task of the
    /// tokio runtime `runtime` (no thread of its own). The handles work as with
    /// [`NodeBuilder::open`]; from inside the runtime, close the node with
    /// [`Node::close_async`] and read counters with [`Node::metrics_async`] (their blocking
    /// forms would wait for the task they block).
    ///
    /// # Errors
    /// [`OpenError`]; [`OpenError::Io`] if the runtime has no IO driver
    /// (`enable_io`/`enable_all`).
    pub fn open_on(self, runtime: &tokio::runtime::Handle) -> Result<Node, OpenError> {
        let (event_loop, mut node) = self.prepare()?;
        let notify = Arc::new(tokio::sync::Notify::new());
        let signal = Arc::clone(&notify);
        let _ = node.shared.waker.set(Box::new(move || signal.notify_one()));
        // `AsyncFd` registers with the runtime it is created in: enter it first.
        let _entered = runtime.enter();
        runtime.spawn(event_loop.run_tokio(notify));
        node.on_runtime = true;
        Ok(node)
    }

    /// The loop and the node's handles, before the loop runs.
    fn prepare(self) -> Result<(EventLoop, Node), OpenError> {
        let (name, text) = self
            .stack
            .ok_or_else(|| OpenError::Deploy("no stack: call stack_file or stack_text".into()))?;
        let text = match text {
            Some(t) => t,
            None => std::fs::read_to_string(&name).map_err(|e| OpenError::Read(name.clone(), e))?,
        };
        let file = viastack_stack::parse(&name, &text, &self.catalog).map_err(OpenError::Stack)?;
        let deployment = self
            .deployment
            .ok_or_else(|| OpenError::Deploy("no deployment: say where the nodes are".into()))?;
        let id = deployment.id.ok_or_else(|| {
            OpenError::Deploy("the deployment does not say which node this is (give an id)".into())
        })?;
        let nodes = u32::try_from(deployment.nodes.len())
            .map_err(|_| OpenError::Deploy("too many nodes".into()))?;
        let addr = deployment
            .bind_addr(id)
            .ok_or_else(|| OpenError::Deploy(format!("node {} is not in the deployment", id.0)))?;
        let clock = Clock::start();
        let seed = self.seed.unwrap_or_else(|| {
            Clock::unix_now_nanos() ^ u64::from(std::process::id()).rotate_left(32)
        });
        let core = NodeCore::build(&file, &self.catalog, id, nodes, seed, clock.now())
            .map_err(OpenError::Stack)?;
        let [(port, _)] = core.devices()[..] else {
            return Err(OpenError::Deploy(format!(
                "a node on real sockets needs exactly one device layer; the stack has {}",
                core.devices().len()
            )));
        };
        let bind = |source| OpenError::Bind {
            addr,
            node: id.0,
            source,
        };
        let mut transport: Box<dyn Transport> = match viastack_net::transport_kind(&file) {
            "tcp" => Box::new(TcpTransport::bind(id, addr).map_err(bind)?),
            _ => Box::new(UdpTransport::bind(addr).map_err(bind)?),
        };
        transport.set_peers(deployment.nodes.clone());
        let shared = Arc::new(Shared {
            waker: std::sync::OnceLock::new(),
            loop_thread: std::sync::OnceLock::new(),
            sleeping: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            next_tag: AtomicU64::new(1),
            event_queue: self.event_queue,
        });
        let channels: Vec<(Arc<str>, ChannelId)> =
            core.channels().map(|(n, c)| (Arc::from(n), c)).collect();
        let (command_tx, command_rx) = flume::bounded(self.send_queue);
        let (control_tx, control_rx) = flume::unbounded();
        let (event_tx, event_rx) = flume::unbounded();
        let (done_tx, done_rx) = flume::bounded(1);
        let event_loop = EventLoop {
            core,
            port,
            transport,
            commands: command_rx,
            control: control_rx,
            max_unsettled: self.max_unsettled,
            events: event_tx,
            shared: Arc::clone(&shared),
            clock,
            linger: self.linger,
            closing: None,
            done: done_tx,
        };
        let node = Node {
            id,
            nodes,
            local_addr: addr,
            channels,
            commands: command_tx,
            control: control_tx,
            events: event_rx,
            shared,
            done: done_rx,
            thread: None,
            on_runtime: false,
        };
        Ok((event_loop, node))
    }
}

/// A running node: its channels, its events, its counters.
pub struct Node {
    id: NodeId,
    nodes: u32,
    local_addr: std::net::SocketAddr,
    channels: Vec<(Arc<str>, ChannelId)>,
    commands: flume::Sender<Command>,
    control: flume::Sender<Control>,
    events: flume::Receiver<NodeEvent>,
    shared: Arc<Shared>,
    /// The loop's result, sent once when it ends.
    done: flume::Receiver<Result<CloseReport, std::io::Error>>,
    /// The loop's thread ([`NodeBuilder::open`]).
    thread: Option<JoinHandle<()>>,
    /// The loop is a task of a tokio runtime ([`NodeBuilder::open_on`]).
    on_runtime: bool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("nodes", &self.nodes)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

/// A handle for sending on one channel of a node; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Channel {
    name: Arc<str>,
    id: ChannelId,
    nodes: u32,
    commands: flume::Sender<Command>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").field("name", &self.name).finish()
    }
}

impl Node {
    /// Options for opening a node.
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            stack: None,
            deployment: None,
            catalog: standard_catalog(),
            send_queue: 1024,
            event_queue: 4096,
            linger: Duration::from_secs(5),
            seed: None,
            max_unsettled: 512,
        }
    }

    /// Opens node `deployment.id` of the stack in `stack_file` with the default options.
    ///
    /// # Errors
    /// [`OpenError`].
    pub fn open(stack_file: impl Into<PathBuf>, deployment: Deployment) -> Result<Node, OpenError> {
        Node::builder()
            .stack_file(stack_file)
            .deployment(deployment)
            .open()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// How many nodes the deployment has.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// The address the node's transport is bound to.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// The names of the stack's channels, in file order.
    pub fn channel_names(&self) -> impl Iterator<Item = &str> {
        self.channels.iter().map(|(n, _)| &**n)
    }

    /// A handle for the channel `name`.
    ///
    /// # Errors
    /// [`SendError::UnknownChannel`].
    pub fn channel(&self, name: &str) -> Result<Channel, SendError> {
        let (name, id) = self
            .channels
            .iter()
            .find(|(n, _)| &**n == name)
            .ok_or_else(|| SendError::UnknownChannel(name.to_string()))?;
        Ok(Channel {
            name: Arc::clone(name),
            id: *id,
            nodes: self.nodes,
            commands: self.commands.clone(),
            shared: Arc::clone(&self.shared),
        })
    }

    fn taken(&self) {
        if self.shared.paused.load(Ordering::SeqCst)
            && self.events.len() < self.shared.event_queue / 2
        {
            self.shared.wake();
        }
    }

    /// Waits for the next event; `None` once the node has closed and every event was read.
    pub fn recv(&self) -> Option<NodeEvent> {
        let e = self.events.recv().ok();
        self.taken();
        e
    }

    /// Waits at most `timeout` for the next event.
    ///
    /// # Errors
    /// [`RecvError::Timeout`], [`RecvError::Closed`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<NodeEvent, RecvError> {
        let e = self.events.recv_timeout(timeout).map_err(|e| match e {
            flume::RecvTimeoutError::Timeout => RecvError::Timeout,
            flume::RecvTimeoutError::Disconnected => RecvError::Closed,
        });
        self.taken();
        e
    }

    /// The next event if one is waiting.
    pub fn try_recv(&self) -> Option<NodeEvent> {
        let e = self.events.try_recv().ok();
        self.taken();
        e
    }

    /// Awaits the next event; `None` once the node has closed and every event was read.
    pub async fn recv_async(&self) -> Option<NodeEvent> {
        let e = self.events.recv_async().await.ok();
        self.taken();
        e
    }

    /// The node's counters now (per layer, per channel, transport).
    ///
    /// # Errors
    /// [`SendError::Closed`] once the loop has ended.
    pub fn metrics(&self) -> Result<Metrics, SendError> {
        self.metrics_request()?
            .recv()
            .map_err(|_| SendError::Closed)
    }

    /// Awaits the node's counters ([`Node::metrics`] for async code).
    ///
    /// # Errors
    /// [`SendError::Closed`] once the loop has ended.
    pub async fn metrics_async(&self) -> Result<Metrics, SendError> {
        self.metrics_request()?
            .recv_async()
            .await
            .map_err(|_| SendError::Closed)
    }

    fn metrics_request(&self) -> Result<flume::Receiver<Metrics>, SendError> {
        let (tx, rx) = flume::bounded(1);
        self.control
            .send(Control::Metrics(tx))
            .map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(rx)
    }

    /// Runs `f` on the node's event loop with its [`NodeCore`] and returns what it returns: a
    /// snapshot of a layer's state (`crate::overlay` reads the overlay's neighbours and the
    /// MessageStore's instances this way). Keep `f` short: the loop waits for it.
    ///
    /// # Errors
    /// [`SendError::Closed`] once the loop has ended.
    pub fn inspect<R: Send + 'static>(
        &self,
        f: impl FnOnce(&NodeCore) -> R + Send + 'static,
    ) -> Result<R, SendError> {
        let (tx, rx) = flume::bounded(1);
        let run: crate::event_loop::Inspect = Box::new(move |core| {
            let _ = tx.send(f(core));
        });
        self.control
            .send(Control::Inspect(run))
            .map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        rx.recv().map_err(|_| SendError::Closed)
    }

    /// A function that reads the node's counters from any thread (for a metrics endpoint).
    pub fn metrics_reader(&self) -> impl Fn() -> Option<Metrics> + Send + Sync + 'static {
        let control = self.control.clone();
        let shared = Arc::clone(&self.shared);
        move || {
            let (tx, rx) = flume::bounded(1);
            control.send(Control::Metrics(tx)).ok()?;
            shared.nudge();
            rx.recv().ok()
        }
    }

    /// Closes the node: no new sends; what the stack holds settles for at most the linger,
    /// then the channels close and what is left is reported. Waits for the loop to end.
    ///
    /// # Errors
    /// Socket errors of the loop. Called from inside a tokio runtime on a node whose loop is
    /// a task ([`NodeBuilder::open_on`]), an error saying to use [`Node::close_async`]
    /// (waiting here could block the very thread the loop needs).
    pub fn close(mut self) -> Result<CloseReport, std::io::Error> {
        if self.on_runtime && tokio::runtime::Handle::try_current().is_ok() {
            return Err(std::io::Error::other(
                "inside the runtime that drives the node, close it with close_async",
            ));
        }
        self.begin_close();
        let result = self.done.recv();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        result.unwrap_or_else(|_| Err(std::io::Error::other("the node's event loop panicked")))
    }

    /// Closes the node as [`Node::close`] does, awaiting the loop's end.
    ///
    /// # Errors
    /// Socket errors of the loop.
    pub async fn close_async(self) -> Result<CloseReport, std::io::Error> {
        self.begin_close();
        self.done
            .recv_async()
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("the node's event loop panicked")))
    }

    /// Events still waiting after [`Node::close`] are read from a handle obtained before it:
    /// a clone of the event receiver.
    pub fn events(&self) -> Events {
        Events {
            rx: self.events.clone(),
        }
    }

    fn begin_close(&self) {
        if !self.shared.closing.swap(true, Ordering::SeqCst)
            && self.control.send(Control::Close).is_ok()
        {
            self.shared.nudge();
        }
    }
}

impl Drop for Node {
    /// Starts a close (with the linger) and lets the loop finish it on its own.
    fn drop(&mut self) {
        self.begin_close();
    }
}

/// The node's events, readable after the node itself was closed.
#[derive(Debug, Clone)]
pub struct Events {
    rx: flume::Receiver<NodeEvent>,
}

impl Events {
    /// The next event, waiting for it; `None` once the loop has ended and all were read.
    pub fn recv(&self) -> Option<NodeEvent> {
        self.rx.recv().ok()
    }

    /// Waits at most `timeout` for the next event.
    ///
    /// # Errors
    /// [`RecvError::Timeout`], [`RecvError::Closed`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<NodeEvent, RecvError> {
        self.rx.recv_timeout(timeout).map_err(|e| match e {
            flume::RecvTimeoutError::Timeout => RecvError::Timeout,
            flume::RecvTimeoutError::Disconnected => RecvError::Closed,
        })
    }

    /// The next event if one is waiting.
    pub fn try_recv(&self) -> Option<NodeEvent> {
        self.rx.try_recv().ok()
    }
}

impl Channel {
    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn command(&self, to: Option<NodeId>, payload: Vec<u8>) -> Result<(Command, Tag), SendError> {
        if self.shared.closing.load(Ordering::SeqCst) {
            return Err(SendError::Closed);
        }
        let dest = match to {
            Some(n) if n.0 >= self.nodes => return Err(SendError::UnknownPeer(n.0, self.nodes)),
            Some(n) => Dest::Node(n),
            None => Dest::Broadcast,
        };
        let tag = Tag(self.shared.next_tag.fetch_add(1, Ordering::Relaxed));
        Ok((
            Command {
                channel: self.id,
                dest,
                payload,
                tag,
                event: None,
            },
            tag,
        ))
    }

    /// Moves this light channel's light group to the heavy group of light channel `to` (both
    /// bound to one `lwg` session; crates/group/src/lwg.rs, "Mapping light groups to heavy
    /// groups"): every member of the light group moves, without closing the channel. Its
    /// views go on (a switch view on the new heavy group); messages sent meanwhile wait and go
    /// on the new heavy group. A move the `lwg` session cannot carry out comes back as an
    /// `LwgRefused` notice on this channel (`LwgError::MoveRefused`).
    ///
    /// # Errors
    /// [`SendError::Closed`] once the node is closing.
    pub fn move_light_group(&self, to: &str) -> Result<(), SendError> {
        let to = to.to_owned();
        self.send_event(Dest::Broadcast, |ch, _| {
            viastack_group::lwg::move_command(ch, to)
        })
        .map(|_| ())
    }

    /// Queues `event` (built by `make` with the channel and the message's tag) to be injected
    /// as it is, waiting while the send queue is full (`crate::overlay`).
    pub(crate) fn send_event(
        &self,
        dest: Dest,
        make: impl FnOnce(ChannelId, Tag) -> viastack_kernel::Event,
    ) -> Result<Tag, SendError> {
        if self.shared.closing.load(Ordering::SeqCst) {
            return Err(SendError::Closed);
        }
        let tag = Tag(self.shared.next_tag.fetch_add(1, Ordering::Relaxed));
        let c = Command {
            channel: self.id,
            dest,
            payload: Vec::new(),
            tag,
            event: Some(make(self.id, tag)),
        };
        self.commands.send(c).map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(tag)
    }

    fn event_command(
        &self,
        dest: Dest,
        make: impl FnOnce(ChannelId, Tag) -> viastack_kernel::Event,
    ) -> Result<(Command, Tag), SendError> {
        if self.shared.closing.load(Ordering::SeqCst) {
            return Err(SendError::Closed);
        }
        let tag = Tag(self.shared.next_tag.fetch_add(1, Ordering::Relaxed));
        let c = Command {
            channel: self.id,
            dest,
            payload: Vec::new(),
            tag,
            event: Some(make(self.id, tag)),
        };
        Ok((c, tag))
    }

    /// [`Channel::send_event`] if the send queue has room (`crate::group`).
    pub(crate) fn try_send_event(
        &self,
        dest: Dest,
        make: impl FnOnce(ChannelId, Tag) -> viastack_kernel::Event,
    ) -> Result<Tag, SendError> {
        let (c, tag) = self.event_command(dest, make)?;
        self.commands.try_send(c).map_err(|e| match e {
            flume::TrySendError::Full(_) => SendError::Full,
            flume::TrySendError::Disconnected(_) => SendError::Closed,
        })?;
        self.shared.nudge();
        Ok(tag)
    }

    /// [`Channel::send_event`], awaiting room in the send queue (`crate::group`).
    pub(crate) async fn send_event_async(
        &self,
        dest: Dest,
        make: impl FnOnce(ChannelId, Tag) -> viastack_kernel::Event,
    ) -> Result<Tag, SendError> {
        let (c, tag) = self.event_command(dest, make)?;
        self.commands
            .send_async(c)
            .await
            .map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(tag)
    }

    /// The channel's id in the node's kernel.
    pub fn id(&self) -> ChannelId {
        self.id
    }

    /// Sends `payload` to node `to`, waiting while the send queue is full. Returns the tag
    /// that names the message in failure notices.
    ///
    /// # Errors
    /// [`SendError::UnknownPeer`], [`SendError::Closed`].
    pub fn send(&self, to: NodeId, payload: impl Into<Vec<u8>>) -> Result<Tag, SendError> {
        let (c, tag) = self.command(Some(to), payload.into())?;
        self.commands.send(c).map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(tag)
    }

    /// Sends `payload` to every other node of the deployment, waiting while the queue is full.
    ///
    /// # Errors
    /// [`SendError::Closed`].
    pub fn send_to_all(&self, payload: impl Into<Vec<u8>>) -> Result<Tag, SendError> {
        let (c, tag) = self.command(None, payload.into())?;
        self.commands.send(c).map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(tag)
    }

    /// Sends `payload` to `to`, waiting at most `timeout` for room in the send queue.
    ///
    /// # Errors
    /// [`SendError::Full`] if the queue stayed full that long, [`SendError::UnknownPeer`],
    /// [`SendError::Closed`].
    pub fn send_timeout(
        &self,
        to: NodeId,
        payload: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Tag, SendError> {
        let (c, tag) = self.command(Some(to), payload.into())?;
        self.commands
            .send_timeout(c, timeout)
            .map_err(|e| match e {
                flume::SendTimeoutError::Timeout(_) => SendError::Full,
                flume::SendTimeoutError::Disconnected(_) => SendError::Closed,
            })?;
        self.shared.nudge();
        Ok(tag)
    }

    /// Sends `payload` to `to` if the send queue has room.
    ///
    /// # Errors
    /// [`SendError::Full`], [`SendError::UnknownPeer`], [`SendError::Closed`].
    pub fn try_send(&self, to: NodeId, payload: impl Into<Vec<u8>>) -> Result<Tag, SendError> {
        let (c, tag) = self.command(Some(to), payload.into())?;
        self.commands.try_send(c).map_err(|e| match e {
            flume::TrySendError::Full(_) => SendError::Full,
            flume::TrySendError::Disconnected(_) => SendError::Closed,
        })?;
        self.shared.nudge();
        Ok(tag)
    }

    /// Sends `payload` to `to`, awaiting room in the send queue.
    ///
    /// # Errors
    /// [`SendError::UnknownPeer`], [`SendError::Closed`].
    pub async fn send_async(
        &self,
        to: NodeId,
        payload: impl Into<Vec<u8>>,
    ) -> Result<Tag, SendError> {
        let (c, tag) = self.command(Some(to), payload.into())?;
        self.commands
            .send_async(c)
            .await
            .map_err(|_| SendError::Closed)?;
        self.shared.nudge();
        Ok(tag)
    }
}

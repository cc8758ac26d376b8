//! A node's event loop: the [`NodeCore`], its transport and the queues it shares with the
//! application's handles, driven either on a thread of its own ([`EventLoop::run_thread`]) or
//! as a task of the caller's tokio runtime ([`EventLoop::run_tokio`]).
//!
//! Both drivers repeat one [`EventLoop::turn`] — fire timers, answer control requests, take
//! messages from the send queue while the stack has room, flush transmits and events, check
//! the close — and differ only in how they wait for the next reason to turn:
//! - the thread blocks in the transport's `recv` until its next timer, or parks while the
//!   event queue is full; handles wake it through the transport's waker;
//! - the task awaits the transport's readiness descriptor (`AsyncFd`), a [`tokio::sync::Notify`]
//!   that handles signal, and the next timer, then takes datagrams with zero-timeout `recv`s.
//!
//! The loop announces that it is about to sleep (`Shared::sleeping`), so a busy loop costs a
//! sending handle no wake-up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use viastack_kernel::{ChannelId, Dest, Instant, NodeId, Tag};
use viastack_net::{Clock, Transport, Waker};

use crate::engine::NodeCore;
use crate::event::{FailureKind, NodeEvent};
use crate::metrics::Metrics;
use crate::node::CloseReport;

/// A message the application handed over (the bounded queue).
pub(crate) struct Command {
    pub(crate) channel: ChannelId,
    pub(crate) dest: Dest,
    pub(crate) payload: Vec<u8>,
    pub(crate) tag: Tag,
    /// An event injected as it is instead of the message (`payload` unused): an overlay send
    /// with its delivery mode, a broadcast that must reach the stack as one event.
    pub(crate) event: Option<viastack_kernel::Event>,
}

/// A function run on the loop with the node's core (`Node::inspect`).
pub(crate) type Inspect = Box<dyn FnOnce(&NodeCore) + Send>;

/// Requests that must not wait behind messages (an unbounded queue, a few entries at most).
pub(crate) enum Control {
    Metrics(flume::Sender<Metrics>),
    Inspect(Inspect),
    Close,
}

/// State the handles share with the loop.
pub(crate) struct Shared {
    /// Wakes the loop wherever it waits (the transport's waker, or the task's `Notify`); set
    /// before the loop starts.
    pub(crate) waker: std::sync::OnceLock<Waker>,
    /// The loop's thread, unparked when it waits for the application to read events.
    pub(crate) loop_thread: std::sync::OnceLock<std::thread::Thread>,
    /// The loop is (about to be) blocked: a new command must wake it.
    pub(crate) sleeping: AtomicBool,
    /// The loop stopped reading because the event queue is full.
    pub(crate) paused: AtomicBool,
    /// Set by `close`: no new sends.
    pub(crate) closing: AtomicBool,
    pub(crate) next_tag: AtomicU64,
    pub(crate) event_queue: usize,
}

impl Shared {
    /// Wakes the loop if it sleeps (in the transport, or parked on a full event queue).
    pub(crate) fn nudge(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    pub(crate) fn wake(&self) {
        if let Some(waker) = self.waker.get() {
            waker();
        }
        if let Some(t) = self.loop_thread.get() {
            t.unpark();
        }
    }
}

/// The loop's state, moved onto its thread or task.
pub(crate) struct EventLoop {
    pub(crate) core: NodeCore,
    pub(crate) port: u16,
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) commands: flume::Receiver<Command>,
    pub(crate) control: flume::Receiver<Control>,
    pub(crate) max_unsettled: usize,
    pub(crate) events: flume::Sender<NodeEvent>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: Clock,
    pub(crate) linger: Duration,
    /// When the close began to wait for unsettled messages, plus the linger.
    pub(crate) closing: Option<Instant>,
    /// Where the loop's result goes when it ends (read by `close` in either flavour).
    pub(crate) done: flume::Sender<Result<CloseReport, std::io::Error>>,
}

/// Commands taken per turn of the loop at most (one kernel batch).
const COMMAND_BATCH: usize = 256;
/// Longest sleep without a timer: the loop rechecks its queues at least this often.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Zero-timeout receives per wake-up of the tokio driver at most before it turns again (so
/// timers and sends are not starved by a flood).
const READS_PER_WAKE: usize = 8;

/// What the loop does after a turn.
enum Next {
    /// Wait at most this long; read the transport unless the event queue is full.
    Wait { wait: Duration, read: bool },
    /// Work is already waiting: turn again at once.
    Turn,
    /// The close has finished.
    Done(CloseReport),
}

impl EventLoop {
    /// Runs the loop on the calling thread until the node has closed.
    pub(crate) fn run_thread(mut self) {
        let result = self.thread_loop();
        let _ = self.done.send(result);
    }

    fn thread_loop(&mut self) -> Result<CloseReport, std::io::Error> {
        let mut inbox: Vec<(NodeId, Vec<u8>)> = Vec::new();
        loop {
            let (wait, read) = match self.turn() {
                Next::Done(report) => return Ok(report),
                Next::Turn => continue,
                Next::Wait { wait, read } => (wait, read),
            };
            if read {
                self.transport
                    .recv(wait, &mut |from, bytes| inbox.push((from, bytes.to_vec())))?;
            } else if self.pause() {
                std::thread::park_timeout(wait);
                self.shared.paused.store(false, Ordering::SeqCst);
            }
            self.shared.sleeping.store(false, Ordering::SeqCst);
            self.deliver(&mut inbox);
        }
    }

    /// Runs the loop as a task of the current tokio runtime until the node has closed;
    /// `notify` is what the handles' waker signals.
    pub(crate) async fn run_tokio(mut self, notify: Arc<tokio::sync::Notify>) {
        let result = self.tokio_loop(&notify).await;
        let _ = self.done.send(result);
    }

    async fn tokio_loop(
        &mut self,
        notify: &tokio::sync::Notify,
    ) -> Result<CloseReport, std::io::Error> {
        let ready = watch(self.transport.readiness_fd()?)?;
        let mut inbox: Vec<(NodeId, Vec<u8>)> = Vec::new();
        // Datagrams may wait that no readiness edge will announce again (a read budget ran
        // out): read them before waiting.
        let mut backlog = false;
        loop {
            let (wait, read) = match self.turn() {
                Next::Done(report) => return Ok(report),
                Next::Turn => continue,
                Next::Wait { wait, read } => (wait, read),
            };
            let timer = tokio::time::sleep(wait);
            if read && !backlog {
                tokio::select! {
                    guard = ready.readable() => {
                        // Cleared before reading: what arrives from now on makes it ready
                        // again, so nothing is left behind unannounced.
                        guard?.clear_ready();
                        backlog = true;
                    }
                    () = notify.notified() => {}
                    () = timer => {}
                }
            } else if !read && self.pause() {
                tokio::select! {
                    () = notify.notified() => {}
                    () = timer => {}
                }
                self.shared.paused.store(false, Ordering::SeqCst);
            }
            self.shared.sleeping.store(false, Ordering::SeqCst);
            if read && backlog {
                // Still set if the budget ends the reads while they find datagrams.
                backlog = true;
                for _ in 0..READS_PER_WAKE {
                    let n = self.transport.recv(Duration::ZERO, &mut |from, bytes| {
                        inbox.push((from, bytes.to_vec()))
                    })?;
                    if n == 0 {
                        backlog = false;
                        break;
                    }
                }
            }
            self.deliver(&mut inbox);
            // A loop that never waits (a flood) still lets other tasks run.
            tokio::task::yield_now().await;
        }
    }

    /// Stops reading while the event queue is full; whether the loop should wait for the
    /// application (it may have caught up meanwhile).
    fn pause(&self) -> bool {
        self.shared.paused.store(true, Ordering::SeqCst);
        if self.events.len() >= self.shared.event_queue / 2 {
            return true;
        }
        self.shared.paused.store(false, Ordering::SeqCst);
        false
    }

    /// One turn: timers, control requests, messages from the send queue, flush, the close.
    /// On `Wait`, the loop is marked sleeping: handles will wake it.
    fn turn(&mut self) -> Next {
        let now = self.clock.now();
        self.core.handle_timeout(now);
        loop {
            match self.control.try_recv() {
                Ok(Control::Metrics(reply)) => {
                    let _ = reply.send(self.metrics());
                }
                Ok(Control::Inspect(f)) => f(&self.core),
                // Every handle gone is a close too.
                Ok(Control::Close) | Err(flume::TryRecvError::Disconnected) => {
                    self.closing.get_or_insert(now + self.linger);
                    break;
                }
                Err(flume::TryRecvError::Empty) => break,
            }
        }
        self.core.begin_batch();
        for _ in 0..COMMAND_BATCH {
            if !self.has_room() {
                break;
            }
            match self.commands.try_recv() {
                Ok(c) => self.send(now, c),
                Err(_) => break,
            }
        }
        self.core.end_batch(now);
        self.flush();
        if let Some(deadline) = self.closing {
            let settled = self.commands.is_empty() && self.core.unsettled() == 0;
            if settled || now >= deadline {
                return Next::Done(self.close(now));
            }
        }
        let next = [self.core.poll_timeout(), self.closing]
            .into_iter()
            .flatten()
            .min();
        let wait = next.map_or(IDLE_WAIT, |t| self.clock.until(t).min(IDLE_WAIT));
        self.shared.sleeping.store(true, Ordering::SeqCst);
        if !self.control.is_empty() || (!self.commands.is_empty() && self.has_room()) {
            self.shared.sleeping.store(false, Ordering::SeqCst);
            return Next::Turn;
        }
        Next::Wait {
            wait,
            read: self.events.len() < self.shared.event_queue,
        }
    }

    /// Hands received datagrams to the stack, in one batch.
    fn deliver(&mut self, inbox: &mut Vec<(NodeId, Vec<u8>)>) {
        if inbox.is_empty() {
            return;
        }
        let now = self.clock.now();
        self.core.begin_batch();
        for (from, bytes) in inbox.drain(..) {
            self.core.handle_datagram(now, self.port, from, bytes);
        }
        self.core.end_batch(now);
        self.flush();
    }

    /// Whether the stack may take another message (see
    /// [`crate::NodeBuilder::max_unsettled`]).
    fn has_room(&self) -> bool {
        self.core.unsettled() < self.max_unsettled
    }

    /// The end: messages still queued are reported, the channels close (reliable layers
    /// report what they hold), the last events go out.
    fn close(&mut self, now: Instant) -> CloseReport {
        let mut aborted = self.core.unsettled();
        while let Ok(c) = self.commands.try_recv() {
            aborted += 1;
            self.refuse(c, FailureKind::SendAborted);
        }
        self.core.close(now);
        self.flush();
        CloseReport {
            aborted,
            metrics: self.metrics(),
        }
    }

    fn send(&mut self, now: Instant, mut c: Command) {
        let result = match c.event.take() {
            Some(event) => self.core.inject_event(now, event),
            None => self.core.send(now, c.channel, c.dest, &c.payload, c.tag),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "message refused");
            self.refuse(c, FailureKind::SendRefused);
        }
    }

    /// Tells the application that message `c` will not be delivered (with the next flush).
    fn refuse(&mut self, c: Command, kind: FailureKind) {
        self.core.report_undelivered(c.channel, c.dest, c.tag, kind);
    }

    /// Transmits to the transport in one batch, events to the application.
    fn flush(&mut self) {
        let mut out = Vec::new();
        while let Some(t) = self.core.poll_transmit() {
            out.push(t);
        }
        if !out.is_empty() {
            let me = self.core.id();
            let nodes = self.core.nodes();
            let mut batch = Vec::with_capacity(out.len());
            for t in &out {
                match t.dest {
                    Dest::Node(n) => batch.push((n, t.message.as_slice())),
                    Dest::Broadcast => batch.extend(
                        (0..nodes)
                            .filter(|&n| n != me.0)
                            .map(|n| (NodeId(n), t.message.as_slice())),
                    ),
                }
            }
            self.transport.send_batch(&batch);
        }
        while let Some(e) = self.core.poll_event() {
            // The application dropped every receiver: nobody to tell.
            let _ = self.events.send(e);
        }
    }

    fn metrics(&self) -> Metrics {
        Metrics {
            node: self.core.id(),
            counters: self.core.counters(),
            channels: self
                .core
                .channel_stats()
                .map(|(n, s)| (n.to_string(), s))
                .collect(),
            transport: self.transport.stats(),
            unsettled: self.core.unsettled() as u64,
            events_waiting: self.events.len() as u64,
            sends_waiting: self.commands.len() as u64,
        }
    }
}

/// Registers the transport's readiness descriptor with the current runtime's reactor.
#[allow(unsafe_code)]
fn watch(
    fd: std::os::fd::OwnedFd,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    // SAFETY: the `AsyncFd` owns the `OwnedFd`, so the descriptor stays open and names the
    // same file for the `AsyncFd`'s whole life, and `as_raw_fd` always returns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}

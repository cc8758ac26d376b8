//! One SP connection, sans-IO in the quinn-proto style (DESIGN.md §6): the driver feeds it
//! datagrams ([`Connection::handle_packet`]) and expiries ([`Connection::handle_timeout`]) with
//! the current time, then drains [`Connection::poll_transmit`] (packets to send),
//! [`Connection::poll_event`] (what the application should learn) and asks
//! [`Connection::poll_timeout`] when to call again. The application's commands are
//! [`Connection::send_message`], [`Connection::set_reliability`] and [`Connection::close`].
//! Nothing here reads a clock, opens a socket or allocates per packet on the data path (a
//! message buffer per message, written once).
//!
//! # Protocol (seed 002 §3.1)
//! - **States** (§3.1.5): `NOT_IN_USE` → `CONN_REQUESTED` (START + REPLY_REQUESTED sent, CONN
//!   timer) → `CONNECTED` (START + REPLY received) → on [`close`](Connection::close): `CLOSING`
//!   (draining queued and unacknowledged data) → `END_REQUEST_LOCAL` (END sent, END timer) →
//!   `CLOSED`. The passive side answers END, enters `END_REQUEST_REMOTE` for one END-timer
//!   period (to answer a retransmitted END whose answer was lost) and closes. REJ refuses a
//!   START; END + REMOTE_RESET resets.
//! - **Timers** (§3.1.4) CONN, END, ACK, RETRANS, ECHO are each tried
//!   [`Config::attempts`] times (3, as in the seed) before the application is told why
//!   ([`FailReason`]). The seed's Java port hung when an END was lost (§6.2); here the END timer
//!   gives up and closes, and the passive side closes after its linger, or — if every END was
//!   lost — when ECHO finds the peer silent.
//! - **Messages** are split into TBLOCK = ⌈len / [`Config::block_size`]⌉ blocks of equal length
//!   ⌈len / TBLOCK⌉ (the last holds the rest; PBLOCK/TBLOCK, the last carries END_MESSAGE and
//!   REPLY_REQUESTED) and delivered whole and in MESS_SEQ_NO order. Equal blocks, as a UDP
//!   application splits a message into datagrams: a 64 KiB message leaves as 2 × 32 KiB, not
//!   64,000 + 1,536 bytes, so the receiver starts on a smaller first block. The receiver learns
//!   a message's block length from its blocks ([`reassembly`]), so it needs no agreement on it
//!   beyond the maximum the peer announced in its START. A
//!   message takes its number when its first block leaves, so the four priorities
//!   ([`send_queue`]) reorder whole messages.
//! - **Reliability** ([`Reliability`], §3.1.6) travels in every DATA packet's flags and changes
//!   with a CQOS exchange: UNRELIABLE (header checksum only, nothing resent), RETRANSMIT-ON-ERROR
//!   (ST_RTR: missing blocks are NACKed and resent a bounded number of times), CHECKSUMMED
//!   (ST_CKS: whole-packet checksum, XOR parity per `k` blocks, see [`fec`]), RELIABLE (both:
//!   ACK/NACK and retransmission until every block arrives intact). Outside RELIABLE a message
//!   the receiver gives up is reported as [`Event::Dropped`]. In every mode, when the peer's
//!   END arrives, this side's own messages still queued or unacknowledged are reported as
//!   [`Event::Dropped`] too ([`DropReason::NotSent`], [`DropReason::Unacknowledged`]).
//! - **Flow control**: every packet advertises WINDOW_SIZE (bytes the receiver can still hold);
//!   the sender keeps the bytes of unacknowledged messages within it (one message may exceed
//!   it when nothing is in flight) and probes a closed window with CNTRL + REPLY_REQUESTED.
//! - **Congestion control**: the sender also keeps a congestion window ([`congestion`]),
//!   halved on NACKs and CB = 3 echoes, dropped on timeouts; data goes out with CB = 1 and a
//!   receiver echoes CB = 2 / IP CE marks with CB = 3. NACKs wait for a reordering window once
//!   the path has shown it reorders ([`Stats::reordered`]).
//! - **ECHO** measures RTT every [`Config::echo_interval`] ([`Stats::rtt`]).
//!
//! # Limits
//! A message has at most 255 blocks (PBLOCK/TBLOCK are 8 bits; CHECKSUMMED also needs a PBLOCK
//! for each parity block), so at most `255 × block_size` bytes: 16,320,000 bytes with the
//! default 64,000-byte blocks. Larger messages are refused with [`SendError::TooLarge`].

use std::collections::VecDeque;

use viastack_kernel::{Duration, Instant};

use crate::wire::{Flags, Packet, PacketType, Repr, MAX_WINDOW};

/// Most NACK rounds waiting for the reordering window at once; beyond, NACKs leave at once.
const NACKS_WAITING: usize = 64;

/// Timer-driven NACK rounds without reordering after which the reordering window halves
/// (RFC 8985 §6.2.4 resets its multiplier after 16 recoveries).
const REORDER_DECAY_ROUNDS: u8 = 16;

/// CB = 1: the sender can take congestion marks (issue 4's CB values).
pub const CB_CAPABLE: u8 = 1;
/// CB = 2: congestion experienced on the way.
pub const CB_CONGESTION_EXPERIENCED: u8 = 2;
/// CB = 3: the receiver echoes a congestion mark back to the sender.
pub const CB_ECHO: u8 = 3;

mod config;
pub mod congestion;
mod events;
pub mod fec;
pub mod reassembly;
mod receiver;
pub mod send_queue;
mod sender;
pub mod timers;

pub use reassembly::Slot;
use reassembly::{Block, BlockBytes, BlockOutcome, BlockSet, Reassembly};
pub use send_queue::Payload;
use send_queue::{Queued, SendQueue};
use timers::{Timer, TimerTable};

pub use config::{Config, Reliability, MAX_BLOCK_SIZE};
pub use events::{CloseReason, DropReason, Event, FailReason, SendError, Stats};

/// The seven connection states of seed §3.1.5, with their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Created, not started.
    NotInUse,
    /// START sent, waiting for its reply.
    ConnRequested,
    /// Open.
    Connected,
    /// [`Connection::close`] called: draining queued and unacknowledged data before END.
    Closing,
    /// END sent, waiting for the peer's END reply.
    EndRequestLocal,
    /// The peer's END answered; lingering to answer a retransmitted END.
    EndRequestRemote,
    /// Closed; only its events remain.
    Closed,
}

/// A message whose blocks are being sent or wait for acknowledgement.
#[derive(Debug)]
struct OutMessage {
    seq: u64,
    data: Payload,
    priority: u8,
    mode: Reliability,
    tblock: u8,
    /// Length of every block but the last (which may be shorter): ⌈len / TBLOCK⌉.
    stride: usize,
    /// Next first-time block to send (data blocks, then parity in CHECKSUMMED).
    next_block: u16,
    /// Total first-time packets (data + parity).
    total_packets: u16,
    /// Blocks to send again.
    resend: BlockSet,
    resend_pending: bool,
    /// When it was fully sent (for forgetting non-RELIABLE messages).
    sent_at: Option<Instant>,
    /// Blocks of it were sent again since the last RETRANS expiry.
    retransmitted: bool,
    /// RETRANS expiries with retransmitted blocks still unacknowledged.
    retries: u8,
}

impl OutMessage {
    /// Where data block `i` lies in the message.
    fn block_range(&self, i: usize) -> std::ops::Range<usize> {
        let start = (i * self.stride).min(self.data.len());
        let end = ((i + 1) * self.stride).min(self.data.len());
        start..end
    }
    fn block(&self, i: usize) -> &[u8] {
        &self.data[self.block_range(i)]
    }
    fn fully_sent(&self) -> bool {
        self.next_block >= self.total_packets
    }
}

/// A control packet waiting to leave.
#[derive(Debug)]
struct Ctrl {
    repr: Repr,
    payload: Vec<u8>,
}

/// One SP connection. See the module documentation for the call order.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    state: State,
    local_id: u16,
    peer_id: u16,
    mode: Reliability,
    peer_block_size: usize,
    timers: TimerTable,
    queue: SendQueue,
    inflight: VecDeque<OutMessage>,
    in_flight_bytes: usize,
    next_seq: u64,
    ctrl: VecDeque<Ctrl>,
    recv: Reassembly,
    /// Highest message number the peer has announced (MESS_SEQ_NO of its packets).
    peer_last_sent: u64,
    events: VecDeque<Event>,
    pending_cqos: Option<Reliability>,
    echo_outstanding: bool,
    heard_since_echo: bool,
    window_was_low: bool,
    close_requested: bool,
    /// The sender's congestion window.
    cwnd: congestion::Window,
    /// A data packet arrived marked "congestion experienced" since the last ACK or NACK.
    ce_pending: bool,
    /// The packet about to be handled arrived with an IP CE mark (set by the driver).
    ip_ce: bool,
    /// How long blocks missing at a message's last block are waited for before they are
    /// NACKed: zero until a NACKed block turns up late by itself (reordering, not loss).
    reorder_window: Duration,
    /// NACK rounds waiting for the reordering window: (when, up to which message), in time
    /// order; at most [`NACKS_WAITING`].
    nacks_due: VecDeque<(Instant, u64)>,
    /// Timer-driven NACK rounds since reordering was last seen: after
    /// [`REORDER_DECAY_ROUNDS`] the reordering window halves.
    rounds_since_reorder: u8,
    /// When our START left (its answer gives the first RTT sample, unless it was resent).
    start_sent_at: Option<Instant>,
    stats: Stats,
}

/// Where the data block of a packet lies in its connection (see
/// [`Connection::poll_transmit_ref`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadRef {
    message: usize,
    range: std::ops::Range<usize>,
}

/// A packet [`Connection::poll_transmit`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes appended to the caller's buffer.
    pub size: usize,
    /// PRI of the packet.
    pub priority: u8,
}

impl Connection {
    /// A connection in NOT_IN_USE with local id `local_id`.
    pub fn new(config: Config, local_id: u16) -> Self {
        let mode = config.reliability;
        let mut config = config;
        config.block_size = config.block_size.clamp(1, MAX_BLOCK_SIZE);
        config.fec_group = config.fec_group.max(1);
        config.attempts = config.attempts.max(1);
        config.recv_window = config.recv_window.min(MAX_WINDOW);
        let cwnd = congestion::Window::new(
            usize::from(config.initial_window_blocks).saturating_mul(config.block_size),
            2 * config.block_size,
        );
        Connection {
            stats: Stats {
                peer_window: MAX_WINDOW,
                congestion_window: cwnd.get() as u64,
                ..Stats::default()
            },
            cwnd,
            ce_pending: false,
            ip_ce: false,
            reorder_window: Duration::ZERO,
            nacks_due: VecDeque::new(),
            rounds_since_reorder: 0,
            start_sent_at: None,
            config,
            state: State::NotInUse,
            local_id,
            peer_id: 0,
            mode,
            peer_block_size: 0,
            timers: TimerTable::default(),
            queue: SendQueue::default(),
            inflight: VecDeque::new(),
            in_flight_bytes: 0,
            next_seq: 1,
            ctrl: VecDeque::new(),
            recv: Reassembly::default(),
            peer_last_sent: 0,
            events: VecDeque::new(),
            pending_cqos: None,
            echo_outstanding: false,
            heard_since_echo: false,
            window_was_low: false,
            close_requested: false,
        }
    }

    /// Starts an active open: START with REPLY_REQUESTED, CONN timer.
    pub fn connect(&mut self, now: Instant) {
        if self.state != State::NotInUse {
            return;
        }
        self.state = State::ConnRequested;
        self.send_start(false);
        self.start_sent_at = Some(now);
        self.timers.set(Timer::Conn, now + self.config.conn_timeout);
    }

    /// Completes a passive open: the peer's START (`peer_id`, its block size) is answered.
    pub fn accept(&mut self, now: Instant, peer_id: u16, peer_block_size: usize) {
        if self.state != State::NotInUse {
            return;
        }
        self.peer_id = peer_id;
        self.peer_block_size = peer_block_size;
        self.send_start(true);
        self.enter_connected(now);
    }

    fn enter_connected(&mut self, now: Instant) {
        self.state = State::Connected;
        self.timers.stop(Timer::Conn);
        self.timers
            .set(Timer::Echo, now + self.config.echo_interval);
        self.events.push_back(Event::Connected);
        if self.close_requested {
            self.state = State::Closing;
            self.maybe_send_end(now);
        }
    }

    fn send_start(&mut self, reply: bool) {
        let flags = if reply {
            Flags::REPLY
        } else {
            Flags::REPLY_REQUESTED
        };
        let bs = (self.config.block_size as u16).to_be_bytes();
        self.push_ctrl(
            PacketType::Start,
            flags,
            0,
            0,
            vec![bs[0], bs[1], self.config.fec_group],
        );
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// This side's connection id (SRC_ID of its packets).
    pub fn local_id(&self) -> u16 {
        self.local_id
    }

    /// The peer's connection id (DEST_ID of this side's packets).
    pub fn peer_id(&self) -> u16 {
        self.peer_id
    }

    /// Reliability new messages are sent with.
    pub fn reliability(&self) -> Reliability {
        self.mode
    }

    /// Counters and RTT.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the connection reached CLOSED.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Whether all submitted messages left and (RELIABLE ones) were acknowledged.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.inflight.is_empty() && self.ctrl.is_empty()
    }

    /// Bytes queued or unacknowledged.
    pub fn pending_bytes(&self) -> usize {
        self.queue.bytes() + self.in_flight_bytes
    }

    /// Queues a message with priority 0–3 (higher values are served first).
    ///
    /// # Errors
    /// [`SendError::TooLarge`] beyond 255 blocks, [`SendError::QueueFull`], or
    /// [`SendError::NotOpen`] once closing.
    pub fn send_message(
        &mut self,
        data: impl Into<Payload>,
        priority: u8,
    ) -> Result<(), SendError> {
        let data = data.into();
        if !matches!(
            self.state,
            State::NotInUse | State::ConnRequested | State::Connected
        ) {
            return Err(SendError::NotOpen);
        }
        let max = self.config.max_message(self.mode);
        if data.len() > max {
            return Err(SendError::TooLarge {
                len: data.len(),
                max,
            });
        }
        if self.queue.bytes() + data.len() > self.config.send_buffer && !self.queue.is_empty() {
            return Err(SendError::QueueFull {
                queued: self.queue.bytes(),
            });
        }
        self.queue.push(Queued {
            data,
            priority: priority.min(3),
            mode: self.mode,
        });
        Ok(())
    }

    /// Changes the reliability of messages submitted from now on, and asks the peer (CQOS +
    /// REPLY_REQUESTED) to do the same; [`Event::ReliabilityChanged`] follows on both sides.
    pub fn set_reliability(&mut self, now: Instant, mode: Reliability) {
        self.mode = mode;
        if self.state == State::Connected || self.state == State::ConnRequested {
            self.pending_cqos = Some(mode);
            self.push_ctrl(
                PacketType::Cqos,
                mode.flags() | Flags::REPLY_REQUESTED,
                0,
                0,
                Vec::new(),
            );
            self.timers.set(Timer::Cntrl, now + self.config.ack_timeout);
        }
    }

    /// Closes gracefully: queued and unacknowledged data first, then END.
    pub fn close(&mut self, now: Instant) {
        match self.state {
            State::NotInUse => self.finish(Event::Closed {
                reason: CloseReason::Local,
            }),
            // Close once open: the queued messages go first.
            State::ConnRequested => self.close_requested = true,
            State::Connected => {
                self.state = State::Closing;
                self.maybe_send_end(now);
            }
            _ => {}
        }
    }

    /// Abandons the connection at once (no END).
    pub fn abort(&mut self) {
        if self.state != State::Closed {
            self.finish(Event::Closed {
                reason: CloseReason::Local,
            });
        }
    }

    fn maybe_send_end(&mut self, now: Instant) {
        if self.state == State::Closing && self.queue.is_empty() && self.inflight.is_empty() {
            self.state = State::EndRequestLocal;
            self.timers.stop(Timer::Ack);
            self.timers.stop(Timer::Retrans);
            self.push_ctrl(PacketType::End, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
            self.timers.set(Timer::End, now + self.config.end_timeout);
        }
    }

    /// Reports every message of this side still queued or unacknowledged as
    /// [`Event::Dropped`] (queued ones with the numbers they would have taken) and forgets
    /// them: the peer closed, so none of them will be sent or acknowledged.
    fn abandon_outgoing(&mut self) {
        for m in std::mem::take(&mut self.inflight) {
            let reason = if m.fully_sent() {
                DropReason::Unacknowledged
            } else {
                DropReason::NotSent
            };
            self.stats.messages_abandoned += 1;
            self.events.push_back(Event::Dropped { seq: m.seq, reason });
        }
        self.in_flight_bytes = 0;
        while self.queue.pop().is_some() {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.stats.messages_abandoned += 1;
            self.events.push_back(Event::Dropped {
                seq,
                reason: DropReason::NotSent,
            });
        }
    }

    /// Closes the connection with `ev`, after reporting each message of this side it will not
    /// deliver ([`Event::Dropped`]: queued ones as not sent, sent ones as unacknowledged), so
    /// the application learns every message's fate, also when the connection fails.
    fn finish(&mut self, ev: Event) {
        self.abandon_outgoing();
        self.state = State::Closed;
        self.timers.stop_all();
        self.queue.clear();
        self.inflight.clear();
        self.in_flight_bytes = 0;
        self.events.push_back(ev);
    }

    fn fail(&mut self, reason: FailReason) {
        self.finish(Event::Failed { reason });
    }

    /// Gives a delivered message's buffer back for reuse by later messages (optional; saves
    /// an allocation and its page faults per message).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.recv.recycle(buf);
    }

    /// The number of this side's oldest message the peer has not acknowledged yet (the next
    /// number a message will take when none is in flight): every message numbered below it was
    /// delivered.
    pub fn first_unacknowledged(&self) -> u64 {
        self.inflight.front().map_or(self.next_seq, |m| m.seq)
    }

    /// Whether events wait for [`poll_event`](Self::poll_event).
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    fn our_window(&self) -> u32 {
        let held = self.recv.buffered + self.undelivered_bytes();
        (self.config.recv_window as usize).saturating_sub(held) as u32
    }

    fn undelivered_bytes(&self) -> usize {
        self.events
            .iter()
            .map(|e| match e {
                Event::Message { data, .. } => data.len(),
                _ => 0,
            })
            .sum()
    }

    fn push_ctrl(&mut self, t: PacketType, flags: Flags, seq: u64, tblock: u8, payload: Vec<u8>) {
        let flags = if payload.is_empty() || t == PacketType::Cqos {
            flags
        } else {
            flags | Flags::ST_CKS
        };
        self.ctrl.push_back(Ctrl {
            repr: Repr {
                packet_type: t,
                flags,
                mess_seq_no: seq as u16,
                tblock,
                ..Repr::default()
            },
            payload,
        });
    }

    /// Reads the peer's SYNC_NO (the ACKs it has received, modulo 256; seed 002 §3.1.1) into
    /// [`Stats::peer_acks_received`]. The true count lies between the last reading and the
    /// ACKs we have sent, so it is unwrapped to the largest value in that range with these
    /// low bits: exact while fewer than 256 of our ACKs are lost or in flight between two
    /// readings (a burst of ACKs between two packets of the peer's is fine); a packet overtaken
    /// by a later one reads below the last reading and is ignored.
    fn note_sync_no(&mut self, sync_no: u8) {
        let sent = self.stats.acks_sent;
        let back = u64::from((sent as u8).wrapping_sub(sync_no));
        if let Some(count) = sent.checked_sub(back) {
            if count >= self.stats.peer_acks_received {
                self.stats.peer_acks_received = count;
            }
        }
    }

    fn fill_common(&mut self, r: &mut Repr) {
        r.dest_id = self.peer_id;
        r.src_id = self.local_id;
        r.mess_ack_no = self.recv.acked() as u16;
        r.sync_no = self.stats.acks_received as u8;
        if r.packet_type == PacketType::Ack {
            self.stats.acks_sent += 1;
        }
        r.window_size = self.our_window();
        r.flags = r.flags | Flags::WINDOW_VALID;
        if self.ce_pending && matches!(r.packet_type, PacketType::Ack | PacketType::Nack) {
            // RFC 3168 §6.1.3, in SP's CB field: the mark goes back to the data's sender.
            r.cb = CB_ECHO;
            self.ce_pending = false;
        }
    }

    /// The packet handed over next arrived with an IP "congestion experienced" mark (the
    /// driver read it from the IP header): if it is a valid data packet of this connection,
    /// it counts as CB = 2. Call just before handing the packet over.
    pub fn note_congestion_experienced(&mut self) {
        self.ip_ce = true;
    }

    /// A congestion signal about message `seq` (a NACK or an echo): halves the congestion
    /// window once per window of messages.
    fn on_congestion_signal(&mut self, seq: u64) {
        if self.config.congestion_control && self.cwnd.on_congestion(seq, self.next_seq) {
            self.stats.congestion_reductions += 1;
            self.stats.congestion_window = self.cwnd.get() as u64;
        }
    }

    /// A timeout: the congestion window drops to its minimum, once for the messages in
    /// flight.
    fn on_congestion_timeout(&mut self) {
        let Some(oldest) = self.inflight.front().map(|m| m.seq) else {
            return;
        };
        if self.config.congestion_control && self.cwnd.on_timeout(oldest, self.next_seq) {
            self.stats.congestion_reductions += 1;
            self.stats.congestion_window = self.cwnd.get() as u64;
        }
    }

    /// Appends the next packet to `buf` (which the caller clears and reuses: no allocation
    /// per packet once it has grown). Order: control packets, retransmissions, then new
    /// blocks of the message being sent, then the next queued message if the peer's window
    /// allows.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (t, payload) = self.poll_transmit_parts(now, buf)?;
        buf.extend_from_slice(payload);
        Some(t)
    }

    /// Like [`poll_transmit`](Self::poll_transmit), without copying a data block: the header
    /// (with its checksum over header and block) is appended to `head` and the block is
    /// returned as a slice of the message, for a vectored send (`sendmsg` with two iovecs).
    /// Control and parity packets come whole in `head` with an empty slice. The packet is
    /// `head`'s new bytes followed by the slice; [`Transmit::size`] counts both.
    pub fn poll_transmit_parts<'a>(
        &'a mut self,
        now: Instant,
        head: &mut Vec<u8>,
    ) -> Option<(Transmit, &'a [u8])> {
        let (t, r) = self.poll_transmit_ref(now, head)?;
        Some((t, self.payload(&r)))
    }

    /// The block a [`PayloadRef`] from [`poll_transmit_ref`](Self::poll_transmit_ref) names
    /// (empty if it is gone).
    pub fn payload(&self, r: &PayloadRef) -> &[u8] {
        self.inflight
            .get(r.message)
            .and_then(|m| m.data.get(r.range.clone()))
            .unwrap_or(&[])
    }

    /// Handles one datagram addressed to this connection (the endpoint already checked
    /// DEST_ID). Bad packets are counted in [`Stats`] and dropped; nothing panics.
    pub fn handle_packet(&mut self, now: Instant, bytes: &[u8]) {
        let Ok(packet) = Packet::new_checked(bytes) else {
            self.stats.bad_packet += 1;
            return;
        };
        let Ok(repr) = Repr::parse(&packet) else {
            self.stats.bad_checksum += 1;
            return;
        };
        self.handle_repr(now, &repr, packet.payload());
    }

    /// Handles a parsed, checksum-verified packet.
    pub fn handle_repr(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
        self.handle_body(now, repr, BlockBytes::Copy(payload));
    }

    /// Lends the region where the next DATA block from the peer will probably land
    /// (one block; see [`reassembly`]), for a driver that receives the payload of its
    /// next datagram straight into it. `None` when no block is expected. Nothing is stored
    /// until [`handle_in_place`](Self::handle_in_place) says the block is there.
    pub fn recv_slot(&mut self) -> Option<(Slot, &mut [u8])> {
        if !matches!(
            self.state,
            State::Connected | State::Closing | State::EndRequestLocal
        ) {
            return None;
        }
        self.recv.slot_mut(self.peer_block_size)
    }

    /// Whether the peer is in the middle of a message (its last block stored is followed by
    /// blocks not yet here): the next ones are a few microseconds away.
    pub fn mid_message(&self) -> bool {
        self.recv.mid_message()
    }

    /// The bytes of a region [`recv_slot`](Self::recv_slot) lent: the payload of a datagram
    /// received there (check its header with
    /// [`Repr::parse_split`](crate::wire::Repr::parse_split) over them).
    pub fn slot_bytes(&self, slot: Slot) -> &[u8] {
        self.recv.slot_bytes(slot)
    }

    /// Whether the checked header `repr` of a datagram whose payload landed in `slot`
    /// describes the block `slot` was lent for (then
    /// [`handle_in_place`](Self::handle_in_place) takes it; otherwise the driver copies the
    /// datagram out and calls [`handle_packet`](Self::handle_packet) as usual).
    pub fn fits_slot(&self, repr: &Repr, slot: Slot) -> bool {
        repr.packet_type == PacketType::Data
            && repr.src_id == self.peer_id
            && repr.pblock == slot.pblock
            && repr.payload_len <= self.peer_block_size
            && self.recv.expand(repr.mess_seq_no) == slot.seq
    }

    /// Handles a parsed, checksum-verified DATA packet whose payload (`repr.payload_len`
    /// bytes) was received into `slot` and for which [`fits_slot`](Self::fits_slot) holds:
    /// exactly as [`handle_repr`](Self::handle_repr) with the payload, without copying it.
    pub fn handle_in_place(&mut self, now: Instant, repr: &Repr, slot: Slot) {
        if !self.fits_slot(repr, slot) {
            self.stats.bad_packet += 1;
            self.ip_ce = false;
            return;
        }
        let len = repr.payload_len;
        self.handle_body(now, repr, BlockBytes::InPlace { slot, len });
    }

    fn handle_body(&mut self, now: Instant, repr: &Repr, body: BlockBytes<'_>) {
        let payload = match body {
            BlockBytes::Copy(p) => p,
            BlockBytes::InPlace { .. } => &[],
        };
        let ip_ce = std::mem::take(&mut self.ip_ce);
        if self.state == State::Closed || self.state == State::NotInUse {
            return;
        }
        if self.state != State::ConnRequested && repr.src_id != self.peer_id {
            // Not from our peer's connection (a stale or damaged id): never act on it, above
            // all not on a REMOTE_RESET.
            self.stats.bad_packet += 1;
            return;
        }
        self.stats.packets_received += 1;
        self.note_sync_no(repr.sync_no);
        self.heard_since_echo = true;
        match repr.cb {
            // A mark in the SP header or in the IP header: one mark either way.
            cb if repr.packet_type == PacketType::Data
                && (ip_ce || cb == CB_CONGESTION_EXPERIENCED) =>
            {
                self.stats.ce_received += 1;
                self.ce_pending = true;
            }
            CB_ECHO if matches!(repr.packet_type, PacketType::Ack | PacketType::Nack) => {
                self.stats.ecn_echoes += 1;
                if let Some(front) = self.inflight.front() {
                    // The mark was on data up to what this packet acknowledges (or, when it
                    // acknowledges nothing in flight, on the oldest message in flight):
                    // RFC 3168 responds once that is past the last reduction.
                    let acked = reassembly::expand(front.seq, repr.mess_ack_no);
                    self.on_congestion_signal(acked.max(front.seq));
                }
            }
            _ => {}
        }
        if repr.flags.contains(Flags::WINDOW_VALID) {
            let was_closed = self.stats.peer_window == 0;
            self.stats.peer_window = repr.window_size;
            if was_closed && repr.window_size > 0 && self.pending_cqos.is_none() {
                self.timers.stop(Timer::Cntrl);
            }
        }
        if repr.flags.contains(Flags::REMOTE_RESET) {
            if self.state == State::EndRequestLocal {
                self.finish(Event::Closed {
                    reason: CloseReason::Local,
                });
            } else {
                self.fail(FailReason::Reset);
            }
            return;
        }
        match repr.packet_type {
            PacketType::Start => self.on_start(now, repr, payload),
            PacketType::Rej => {
                if self.state == State::ConnRequested {
                    self.finish(Event::Rejected);
                }
            }
            PacketType::Data => self.on_data(now, repr, body),
            PacketType::Ack => self.on_ack(now, repr),
            PacketType::Nack => self.on_nack(now, repr, payload),
            PacketType::Echo => self.on_echo(now, repr, payload),
            PacketType::End => self.on_end(now, repr),
            PacketType::Cqos => self.on_cqos(now, repr),
            PacketType::Cntrl => self.on_cntrl(now, repr),
        }
        if repr.packet_type != PacketType::Start && repr.packet_type != PacketType::Rej {
            self.on_cumulative_ack(now, repr.mess_ack_no);
        }
        self.maybe_send_end(now);
    }

    fn on_start(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
        let bs = match payload {
            [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])),
            _ => 0,
        };
        if repr.flags.contains(Flags::REPLY) {
            if self.state == State::ConnRequested {
                if bs == 0 {
                    self.stats.bad_packet += 1;
                    return;
                }
                self.peer_id = repr.src_id;
                self.peer_block_size = bs;
                // The first RTT sample, so that the ACK timer fits the path from the first
                // message on (Karn: not from a START that was sent again).
                if let Some(sent) = self.start_sent_at.take() {
                    if self.timers.attempts(Timer::Conn) == 0 {
                        self.note_rtt(now.saturating_duration_since(sent));
                    }
                }
                self.enter_connected(now);
                if let Some(mode) = self.pending_cqos {
                    // Asked before the connection opened: ask again now.
                    self.set_reliability(now, mode);
                }
            }
        } else if repr.flags.contains(Flags::REPLY_REQUESTED) && repr.src_id == self.peer_id {
            // Our START reply was lost: answer again.
            self.send_start(true);
        }
    }

    fn on_ack(&mut self, now: Instant, repr: &Repr) {
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            // A probe: the sender's last message number, then our state.
            let seq = self.recv.expand(repr.mess_seq_no);
            if seq >= self.recv.next {
                let mode = Reliability::Reliable;
                if self.recv.learn(now, seq, mode) {
                    self.peer_last_sent = self.peer_last_sent.max(seq);
                }
            }
            self.push_ctrl(PacketType::Ack, Flags::REPLY, 0, 0, Vec::new());
            self.push_nacks(now, seq, true);
            self.arm_reassembly(now);
            return;
        }
        self.stats.acks_received += 1;
        if repr.flags.contains(Flags::REPLY) {
            // The peer is alive: the ACK timer starts over.
            self.timers.reset_attempts(Timer::Ack);
        }
    }

    fn on_echo(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            self.push_ctrl(PacketType::Echo, Flags::REPLY, 0, 0, payload.to_vec());
            return;
        }
        let Ok(ts) = <[u8; 8]>::try_from(payload) else {
            self.stats.bad_packet += 1;
            return;
        };
        let sent = Instant::from_nanos(u64::from_be_bytes(ts));
        if sent > now {
            return;
        }
        self.echo_outstanding = false;
        let rtt = now.saturating_duration_since(sent);
        self.note_rtt(rtt);
        self.events.push_back(Event::RttSample(rtt));
    }

    /// Takes one round-trip sample into the RTT statistics (RFC 6298 weights).
    fn note_rtt(&mut self, rtt: Duration) {
        self.stats.rtt = Some(rtt);
        self.stats.min_rtt = Some(self.stats.min_rtt.map_or(rtt, |m| m.min(rtt)));
        self.stats.srtt = Some(match self.stats.srtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
    }

    fn on_end(&mut self, now: Instant, repr: &Repr) {
        if repr.flags.contains(Flags::REPLY) {
            if self.state == State::EndRequestLocal {
                self.finish(Event::Closed {
                    reason: CloseReason::Local,
                });
            }
            return;
        }
        match self.state {
            State::Connected | State::Closing | State::EndRequestLocal => {
                // The peer's last message number: everything up to it is now final.
                let last = self.recv.expand(repr.mess_seq_no);
                self.settle_until(now, last);
                // Ours that it did not acknowledge will never reach it: reported, not lost
                // silently.
                self.on_cumulative_ack(now, repr.mess_ack_no);
                self.abandon_outgoing();
                self.push_ctrl(PacketType::End, Flags::REPLY, 0, 0, Vec::new());
                self.timers.stop_all();
                self.state = State::EndRequestRemote;
                self.timers.set(Timer::End, now + self.config.end_timeout);
            }
            State::EndRequestRemote => {
                self.push_ctrl(PacketType::End, Flags::REPLY, 0, 0, Vec::new());
            }
            _ => {}
        }
    }

    fn on_cqos(&mut self, now: Instant, repr: &Repr) {
        let mode = Reliability::from_flags(repr.flags);
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            let changed = self.mode != mode;
            self.mode = mode;
            self.push_ctrl(
                PacketType::Cqos,
                mode.flags() | Flags::REPLY,
                0,
                0,
                Vec::new(),
            );
            if changed {
                self.events.push_back(Event::ReliabilityChanged(mode));
            }
        } else if repr.flags.contains(Flags::REPLY) && self.pending_cqos == Some(mode) {
            self.pending_cqos = None;
            self.timers.stop(Timer::Cntrl);
            self.events.push_back(Event::ReliabilityChanged(mode));
        }
        let _ = now;
    }

    fn on_cntrl(&mut self, now: Instant, repr: &Repr) {
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            self.push_ctrl(PacketType::Cntrl, Flags::REPLY, 0, 0, Vec::new());
        } else if repr.flags.contains(Flags::REPLY) {
            // The peer is alive; its window (already read) decides whether probing goes on.
            self.timers.reset_attempts(Timer::Cntrl);
        }
        let _ = now;
    }

    /// Handles every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(t) = self.timers.expired(now) {
            self.on_timer(now, t);
            if self.state == State::Closed {
                return;
            }
        }
        // The receive window reopened after being low: tell the sender.
        self.check_window_update();
    }

    fn check_window_update(&mut self) {
        let win = self.our_window() as usize;
        let low = win < self.config.recv_window as usize / 4;
        if self.window_was_low && !low && self.state == State::Connected {
            self.push_ctrl(PacketType::Cntrl, Flags::REPLY, 0, 0, Vec::new());
        }
        self.window_was_low = low;
    }

    /// Tells the connection the application consumed events, so a reopened window can be
    /// announced (CNTRL). Drivers call this after draining [`poll_event`](Self::poll_event).
    pub fn events_consumed(&mut self) {
        self.check_window_update();
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        let attempts = self.config.attempts;
        match t {
            Timer::Conn => {
                if self.state != State::ConnRequested {
                    return;
                }
                if self.timers.bump(Timer::Conn) >= attempts {
                    self.fail(FailReason::ConnectTimeout);
                } else {
                    self.send_start(false);
                    self.timers.set(Timer::Conn, now + self.config.conn_timeout);
                }
            }
            Timer::End => match self.state {
                State::EndRequestLocal => {
                    if self.timers.bump(Timer::End) >= attempts {
                        self.fail(FailReason::EndTimeout);
                    } else {
                        self.push_ctrl(PacketType::End, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
                        self.timers.set(Timer::End, now + self.config.end_timeout);
                    }
                }
                State::EndRequestRemote => self.finish(Event::Closed {
                    reason: CloseReason::Peer,
                }),
                _ => {}
            },
            Timer::Ack => {
                if !self
                    .inflight
                    .iter()
                    .any(|m| m.mode == Reliability::Reliable)
                {
                    return;
                }
                if self.timers.bump(Timer::Ack) > attempts {
                    self.fail(FailReason::AckTimeout);
                    return;
                }
                // Probe: "what do you have up to my last message?" A second silent ACK timer
                // in a row means loss rather than a timer shorter than the path's RTT.
                if self.timers.attempts(Timer::Ack) >= 2 {
                    self.on_congestion_timeout();
                }
                self.push_ctrl(PacketType::Ack, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
                let t = self.ack_timeout();
                self.timers.set(Timer::Ack, now + t);
            }
            Timer::Retrans => self.on_retrans_timer(now),
            Timer::Nack => self.on_nack_timer(now),
            Timer::Echo => {
                if self.state != State::Connected && self.state != State::Closing {
                    return;
                }
                if self.heard_since_echo {
                    self.timers.reset_attempts(Timer::Echo);
                } else if self.echo_outstanding && self.timers.bump(Timer::Echo) >= attempts {
                    self.fail(FailReason::EchoTimeout);
                    return;
                }
                self.heard_since_echo = false;
                self.echo_outstanding = true;
                let ts = now.as_nanos().to_be_bytes().to_vec();
                self.push_ctrl(PacketType::Echo, Flags::REPLY_REQUESTED, 0, 0, ts);
                self.timers
                    .set(Timer::Echo, now + self.config.echo_interval);
            }
            Timer::Reassembly => self.on_reassembly_timer(now),
            Timer::Cntrl => {
                if let Some(mode) = self.pending_cqos {
                    if self.timers.bump(Timer::Cntrl) >= attempts {
                        self.fail(FailReason::CntrlTimeout);
                        return;
                    }
                    self.push_ctrl(
                        PacketType::Cqos,
                        mode.flags() | Flags::REPLY_REQUESTED,
                        0,
                        0,
                        Vec::new(),
                    );
                    self.timers.set(Timer::Cntrl, now + self.ack_timeout());
                } else if self.stats.peer_window == 0 {
                    if self.timers.bump(Timer::Cntrl) > attempts.saturating_mul(4) {
                        self.fail(FailReason::CntrlTimeout);
                        return;
                    }
                    self.push_ctrl(PacketType::Cntrl, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
                    self.timers.set(Timer::Cntrl, now + self.ack_timeout());
                }
            }
        }
    }
}

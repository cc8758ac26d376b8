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
//! - **Messages** are split into blocks of [`Config::block_size`] bytes (PBLOCK/TBLOCK, the last
//!   carries END_MESSAGE and REPLY_REQUESTED) and delivered whole and in MESS_SEQ_NO order. A
//!   message takes its number when its first block leaves, so the four priorities
//!   ([`send_queue`]) reorder whole messages.
//! - **Reliability** ([`Reliability`], §3.1.6) travels in every DATA packet's flags and changes
//!   with a CQOS exchange: UNRELIABLE (header checksum only, nothing resent), RETRANSMIT-ON-ERROR
//!   (ST_RTR: missing blocks are NACKed and resent a bounded number of times), CHECKSUMMED
//!   (ST_CKS: whole-packet checksum, XOR parity per `k` blocks, see [`fec`]), RELIABLE (both:
//!   ACK/NACK and retransmission until every block arrives intact). Outside RELIABLE a message
//!   the receiver gives up is reported as [`Event::Dropped`].
//! - **Flow control**: every packet advertises WINDOW_SIZE (bytes the receiver can still hold);
//!   the sender keeps the bytes of unacknowledged messages within it (one message may exceed
//!   it when nothing is in flight) and probes a closed window with CNTRL + REPLY_REQUESTED.
//! - **ECHO** measures RTT every [`Config::echo_interval`] ([`Stats::rtt`]).
//!
//! # Limits
//! A message has at most 255 blocks (PBLOCK/TBLOCK are 8 bits; CHECKSUMMED also needs a PBLOCK
//! for each parity block), so at most `255 × block_size` bytes: 8,355,840 bytes with the
//! default 32 KiB blocks. Larger messages are refused with [`SendError::TooLarge`].

use std::collections::VecDeque;

use viastack_kernel::{Duration, Instant};

use crate::wire::{Flags, Packet, PacketType, Repr, HEADER_LEN, MAX_WINDOW};

pub mod fec;
pub mod reassembly;
pub mod send_queue;
pub mod timers;

use reassembly::{Block, BlockOutcome, BlockSet, Reassembly};
pub use send_queue::Payload;
use send_queue::{Queued, SendQueue};
use timers::{Timer, TimerTable};

/// Largest block: a UDP datagram (65,507 bytes) minus the header minus the 2-byte length a
/// parity block adds.
pub const MAX_BLOCK_SIZE: usize = 65_507 - HEADER_LEN - 2;

/// How much a connection promises (seed §3.1.6: the ST_CKS and ST_RTR flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Reliability {
    /// Neither flag: header checksum only, nothing retransmitted.
    Unreliable,
    /// ST_RTR: header checksum; missing blocks are requested again.
    RetransmitOnError,
    /// ST_CKS: whole-packet checksum, forward error correction, otherwise dropped.
    Checksummed,
    /// ST_CKS + ST_RTR: every block arrives intact, every message exactly once in order.
    #[default]
    Reliable,
}

impl Reliability {
    /// All modes.
    pub const ALL: [Reliability; 4] = [
        Reliability::Unreliable,
        Reliability::RetransmitOnError,
        Reliability::Checksummed,
        Reliability::Reliable,
    ];

    /// The flags that announce this mode.
    pub const fn flags(self) -> Flags {
        match self {
            Reliability::Unreliable => Flags::EMPTY,
            Reliability::RetransmitOnError => Flags::ST_RTR,
            Reliability::Checksummed => Flags::ST_CKS,
            Reliability::Reliable => Flags(Flags::ST_CKS.0 | Flags::ST_RTR.0),
        }
    }

    /// The mode `flags` announce.
    pub const fn from_flags(flags: Flags) -> Self {
        match (flags.contains(Flags::ST_CKS), flags.contains(Flags::ST_RTR)) {
            (false, false) => Reliability::Unreliable,
            (false, true) => Reliability::RetransmitOnError,
            (true, false) => Reliability::Checksummed,
            (true, true) => Reliability::Reliable,
        }
    }

    /// Name used by the CLI and stack files.
    pub const fn name(self) -> &'static str {
        match self {
            Reliability::Unreliable => "unreliable",
            Reliability::RetransmitOnError => "retransmit-on-error",
            Reliability::Checksummed => "checksummed",
            Reliability::Reliable => "reliable",
        }
    }

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    fn resends(self) -> bool {
        matches!(self, Reliability::RetransmitOnError | Reliability::Reliable)
    }
}

/// Connection parameters; `Default` is the seed's values where it gives them.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes per block: 64,000, so a block is one UDP datagram just under the 65,507-byte
    /// limit (the seed's Java port used 32 KB packets, §5.1; larger blocks halve the datagrams
    /// per message on loopback and jumbo-frame LANs). A 256 KiB message is 5 blocks. Use
    /// ≤ 1,452 on paths where IP fragmentation loses datagrams.
    pub block_size: usize,
    /// Data blocks per XOR parity block in CHECKSUMMED mode (issue 4: "k configurable").
    pub fec_group: u8,
    /// Tries per timer before giving up. Seed §3.1.4: "the process is repeated 3 times".
    pub attempts: u8,
    /// CONN timer. The seed gives no value; 200 ms is many LAN round trips.
    pub conn_timeout: Duration,
    /// END timer (and the passive side's linger). Not in the seed; 200 ms.
    pub end_timeout: Duration,
    /// ACK timer: silence after the last block before probing. Not in the seed; 50 ms, or
    /// 4 × the smoothed RTT if larger.
    pub ack_timeout: Duration,
    /// RETRANS timer: a retransmission unacknowledged this long counts as failed. Not in the
    /// seed; 100 ms, or 4 × the smoothed RTT if larger.
    pub retrans_timeout: Duration,
    /// ECHO period. Not in the seed; 1 s.
    pub echo_interval: Duration,
    /// How long a non-RELIABLE incomplete message is waited for (per NACK round with
    /// ST_RTR). Not in the seed; 100 ms.
    pub reassembly_timeout: Duration,
    /// Receive window in bytes (WINDOW_SIZE is 24 bits: ≤ 16 MiB − 1). 8 MiB.
    pub recv_window: u32,
    /// Bytes the send queue may hold before [`SendError::QueueFull`]. 64 MiB.
    pub send_buffer: usize,
    /// Reliability of a new connection.
    pub reliability: Reliability,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: 64_000,
            fec_group: 4,
            attempts: 3,
            conn_timeout: Duration::from_millis(200),
            end_timeout: Duration::from_millis(200),
            ack_timeout: Duration::from_millis(50),
            retrans_timeout: Duration::from_millis(100),
            echo_interval: Duration::from_secs(1),
            reassembly_timeout: Duration::from_millis(100),
            recv_window: 8 << 20,
            send_buffer: 64 << 20,
            reliability: Reliability::Reliable,
        }
    }
}

impl Config {
    /// Largest message in `mode` (255 blocks, parity blocks included for CHECKSUMMED).
    pub fn max_message(&self, mode: Reliability) -> usize {
        let bs = self.block_size.clamp(1, MAX_BLOCK_SIZE);
        let k = usize::from(self.fec_group.max(1));
        let blocks = if mode == Reliability::Checksummed {
            // blocks + ceil(blocks / k) ≤ 255 (the highest parity PBLOCK is 255 − 1 + … ).
            (1..=255usize)
                .rev()
                .find(|&b| b + fec::groups(b, k) <= 256)
                .unwrap_or(1)
        } else {
            255
        };
        blocks * bs
    }
}

/// Why a connection failed (the application's reason, issue 4 "after which the application
/// is told the reason").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// START unanswered `attempts` times (CONN timer).
    ConnectTimeout,
    /// END unanswered `attempts` times (END timer): closed anyway.
    EndTimeout,
    /// Probes for an acknowledgement unanswered `attempts` times (ACK timer).
    AckTimeout,
    /// A message retransmitted `attempts` times without acknowledgement (RETRANS timer).
    RetransmitExhausted,
    /// ECHO unanswered `attempts` times and nothing else heard (ECHO timer).
    EchoTimeout,
    /// A CQOS or CNTRL request unanswered `attempts` times.
    CntrlTimeout,
    /// The peer reset the connection (REMOTE_RESET).
    Reset,
}

/// How a connection closed normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// [`Connection::close`] and the peer answered the END.
    Local,
    /// The peer sent END.
    Peer,
}

/// Why the receiver gave up a message (non-RELIABLE modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Some blocks never arrived (or arrived damaged), and FEC/NACKs did not repair them.
    Incomplete,
    /// No block of it ever arrived.
    Lost,
}

/// What the application learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The connection is open.
    Connected,
    /// A whole message, in order.
    Message {
        /// Its number (1, 2, …).
        seq: u64,
        /// PRI it was sent with.
        priority: u8,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// The peer refused the connection (REJ).
    Rejected,
    /// Closed normally.
    Closed {
        /// Who closed.
        reason: CloseReason,
    },
    /// Closed by a failure.
    Failed {
        /// Why.
        reason: FailReason,
    },
    /// A received message given up (only outside RELIABLE).
    Dropped {
        /// Its number.
        seq: u64,
        /// Why.
        reason: DropReason,
    },
    /// The connection's reliability changed (CQOS exchange).
    ReliabilityChanged(Reliability),
    /// A round-trip time measured by ECHO.
    RttSample(Duration),
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// More than 255 blocks.
    #[error(
        "message of {len} bytes exceeds the SP limit of {max} bytes (255 blocks of the block size)"
    )]
    TooLarge {
        /// The message's length.
        len: usize,
        /// The largest message in the current mode.
        max: usize,
    },
    /// The send queue holds [`Config::send_buffer`] bytes already.
    #[error("send queue full ({queued} bytes queued)")]
    QueueFull {
        /// Bytes queued.
        queued: usize,
    },
    /// The connection is closing or closed.
    #[error("connection is not open")]
    NotOpen,
}

/// Counters and measurements of one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handed to the driver.
    pub packets_sent: u64,
    /// Packets accepted from the driver (valid and for this connection).
    pub packets_received: u64,
    /// Data blocks sent again (after NACK or timeout).
    pub retransmits: u64,
    /// Messages whose first block was sent.
    pub messages_sent: u64,
    /// Messages delivered.
    pub messages_delivered: u64,
    /// Messages given up by the receiver.
    pub messages_dropped: u64,
    /// Blocks rebuilt from parity.
    pub fec_repairs: u64,
    /// ACKs received (SYNC_NO is this modulo 256).
    pub acks_received: u64,
    /// NACKs received.
    pub nacks_received: u64,
    /// NACKs sent.
    pub nacks_sent: u64,
    /// Packets dropped for a bad checksum.
    pub bad_checksum: u64,
    /// Packets dropped as inconsistent (block length, TBLOCK, sequence range).
    pub bad_packet: u64,
    /// Blocks received twice.
    pub duplicates: u64,
    /// Latest ECHO round trip.
    pub rtt: Option<Duration>,
    /// Smoothed round trip (RFC 6298 weights).
    pub srtt: Option<Duration>,
    /// Smallest round trip seen.
    pub min_rtt: Option<Duration>,
    /// Largest number of unacknowledged bytes in flight.
    pub max_in_flight: u64,
    /// The peer's last advertised window.
    pub peer_window: u32,
}

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
    fn block(&self, i: usize, bs: usize) -> &[u8] {
        let start = (i * bs).min(self.data.len());
        let end = ((i + 1) * bs).min(self.data.len());
        &self.data[start..end]
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
        Connection {
            stats: Stats {
                peer_window: MAX_WINDOW,
                ..Stats::default()
            },
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

    fn finish(&mut self, ev: Event) {
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

    fn fill_common(&mut self, r: &mut Repr) {
        r.dest_id = self.peer_id;
        r.src_id = self.local_id;
        r.mess_ack_no = self.recv.acked() as u16;
        r.sync_no = self.stats.acks_received as u8;
        r.window_size = self.our_window();
        r.flags = r.flags | Flags::WINDOW_VALID;
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

    /// [`poll_transmit_parts`](Self::poll_transmit_parts) returning where the block lies
    /// instead of borrowing it (valid until the connection is next changed).
    pub fn poll_transmit_ref(
        &mut self,
        now: Instant,
        head: &mut Vec<u8>,
    ) -> Option<(Transmit, PayloadRef)> {
        let none = PayloadRef {
            message: usize::MAX,
            range: 0..0,
        };
        if self.state == State::NotInUse {
            return None;
        }
        if let Some(mut c) = self.ctrl.pop_front() {
            if c.repr.packet_type != PacketType::Nack {
                c.repr.mess_seq_no = (self.next_seq - 1) as u16;
            }
            self.fill_common(&mut c.repr);
            if matches!(c.repr.packet_type, PacketType::Start | PacketType::Rej) {
                c.repr.mess_ack_no = 0;
            }
            let start = head.len();
            c.repr.emit_into(&c.payload, head).ok()?;
            return Some((self.sent(head.len() - start, c.repr.priority), none));
        }
        if !matches!(self.state, State::Connected | State::Closing) {
            return None;
        }
        // Retransmissions first, then the message being sent, then the next queued one.
        let (idx, i, resend) = match self.next_resend() {
            Some((idx, i)) => (idx, i, true),
            None => {
                if self.inflight.back().is_none_or(|m| m.fully_sent()) {
                    self.start_next_message(now);
                }
                let idx = self.inflight.iter().rposition(|m| !m.fully_sent())?;
                let m = &mut self.inflight[idx];
                let i = usize::from(m.next_block);
                m.next_block += 1;
                (idx, i, false)
            }
        };
        let bs = self.config.block_size;
        let k = usize::from(self.config.fec_group);
        let win = self.our_window();
        let acked = self.recv.acked() as u16;
        let sync = self.stats.acks_received as u8;
        let (peer, local) = (self.peer_id, self.local_id);
        let m = &mut self.inflight[idx];
        let tblock = usize::from(m.tblock);
        let mut flags = m.mode.flags() | Flags::WINDOW_VALID;
        if i + 1 == tblock {
            flags = flags | Flags::END_MESSAGE;
        }
        let last_of_message = if resend {
            flags = flags | Flags::ST_RETRANS;
            m.retransmitted = true;
            !m.resend_pending
        } else {
            m.fully_sent()
        };
        if last_of_message {
            flags = flags | Flags::REPLY_REQUESTED;
        }
        let repr = Repr {
            dest_id: peer,
            src_id: local,
            packet_type: PacketType::Data,
            priority: m.priority,
            cb: 0,
            flags,
            pblock: i as u8,
            tblock: m.tblock,
            mess_seq_no: m.seq as u16,
            mess_ack_no: acked,
            sync_no: sync,
            window_size: win,
            payload_len: 0,
        };
        let priority = m.priority;
        let start = head.len();
        let range = if i < tblock {
            let range = (i * bs).min(m.data.len())..((i + 1) * bs).min(m.data.len());
            repr.emit_header(&m.data[range.clone()], head).ok()?;
            range
        } else {
            let g = i - tblock;
            let mut parity = Vec::with_capacity(bs + 2);
            for j in fec::group_range(g, tblock, k) {
                fec::xor_block(&mut parity, m.block(j, bs));
            }
            repr.emit_into(&parity, head).ok()?;
            0..0
        };
        let size = head.len() - start + range.len();
        if resend {
            self.stats.retransmits += 1;
            let t = self.retrans_timeout();
            self.timers.set_if_idle(Timer::Retrans, now + t);
        } else if last_of_message {
            self.inflight[idx].sent_at = Some(now);
            self.after_message_sent(now, idx);
        }
        let t = self.sent(size, priority);
        Some((
            t,
            PayloadRef {
                message: idx,
                range,
            },
        ))
    }

    /// The next block to send again: (message index, block), taken out of its resend set.
    fn next_resend(&mut self) -> Option<(usize, usize)> {
        loop {
            let idx = self.inflight.iter().position(|m| m.resend_pending)?;
            let m = &mut self.inflight[idx];
            match (0..m.tblock).find(|&i| m.resend.contains(i)) {
                Some(i) => {
                    m.resend.remove(i);
                    m.resend_pending = (0..m.tblock).any(|j| m.resend.contains(j));
                    return Some((idx, usize::from(i)));
                }
                None => m.resend_pending = false,
            }
        }
    }

    fn sent(&mut self, size: usize, priority: u8) -> Transmit {
        self.stats.packets_sent += 1;
        Transmit { size, priority }
    }

    fn after_message_sent(&mut self, now: Instant, idx: usize) {
        let mode = self.inflight[idx].mode;
        if mode == Reliability::Reliable {
            let t = self.ack_timeout();
            self.timers.set_if_idle(Timer::Ack, now + t);
        } else {
            // Kept for NACKs (ST_RTR) and counted against the window until the receiver's ACK
            // or the RETRANS timeout, whichever comes first.
            let t = self.retrans_timeout();
            self.timers.set_if_idle(Timer::Retrans, now + t);
        }
    }

    fn ack_timeout(&self) -> Duration {
        self.stats.srtt.map_or(self.config.ack_timeout, |s| {
            self.config.ack_timeout.max(s * 4)
        })
    }

    fn retrans_timeout(&self) -> Duration {
        self.stats.srtt.map_or(self.config.retrans_timeout, |s| {
            self.config.retrans_timeout.max(s * 4)
        })
    }

    fn start_next_message(&mut self, now: Instant) {
        let Some(next) = self.queue.peek() else {
            return;
        };
        let window = self.stats.peer_window as usize;
        if !self.inflight.is_empty()
            && (self.in_flight_bytes + next.data.len() > window || self.inflight.len() >= 1024)
        {
            return;
        }
        if self.inflight.is_empty() && window == 0 {
            // Closed window: the CNTRL timer probes it.
            self.timers
                .set_if_idle(Timer::Cntrl, now + self.ack_timeout());
            return;
        }
        let Some(q) = self.queue.pop() else { return };
        let bs = self.config.block_size;
        let tblock = q.data.len().div_ceil(bs).max(1);
        let total = if q.mode == Reliability::Checksummed {
            tblock + fec::groups(tblock, usize::from(self.config.fec_group))
        } else {
            tblock
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight_bytes += q.data.len();
        self.stats.max_in_flight = self.stats.max_in_flight.max(self.in_flight_bytes as u64);
        self.stats.messages_sent += 1;
        self.inflight.push_back(OutMessage {
            seq,
            data: q.data,
            priority: q.priority,
            mode: q.mode,
            tblock: tblock as u8,
            next_block: 0,
            total_packets: total as u16,
            resend: BlockSet::default(),
            resend_pending: false,
            sent_at: None,
            retransmitted: false,
            retries: 0,
        });
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
        self.heard_since_echo = true;
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
            PacketType::Data => self.on_data(now, repr, payload),
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

    fn on_data(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
        if !matches!(
            self.state,
            State::Connected | State::Closing | State::EndRequestLocal
        ) {
            return;
        }
        let seq = self.recv.expand(repr.mess_seq_no);
        let mode = Reliability::from_flags(repr.flags);
        self.peer_last_sent = self.peer_last_sent.max(seq);
        let outcome = self.recv.on_block(
            now,
            Block {
                seq,
                pblock: repr.pblock,
                tblock: repr.tblock,
                priority: repr.priority,
                mode,
                payload,
            },
            self.peer_block_size,
            usize::from(self.config.fec_group),
        );
        match outcome {
            BlockOutcome::Stored => {}
            BlockOutcome::Duplicate => self.stats.duplicates += 1,
            BlockOutcome::Invalid => self.stats.bad_packet += 1,
        }
        self.deliver_ready();
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            // The sender's last block of a message: acknowledge, and NACK what is missing up
            // to it in the modes that resend.
            self.push_ack(false);
            self.push_nacks(now, seq, false);
        }
        self.arm_reassembly(now);
    }

    fn deliver_ready(&mut self) {
        while let Some((seq, mut p)) = self.recv.pop_complete() {
            self.stats.fec_repairs += u64::from(p.repaired);
            self.stats.messages_delivered += 1;
            let data = p.take_data();
            self.events.push_back(Event::Message {
                seq,
                priority: p.priority,
                data,
            });
        }
    }

    fn push_ack(&mut self, reply: bool) {
        // One ACK in the queue is enough: it is filled in when it leaves.
        if self.ctrl.iter().any(|c| {
            c.repr.packet_type == PacketType::Ack && !c.repr.flags.contains(Flags::REPLY_REQUESTED)
        }) {
            return;
        }
        let flags = if reply { Flags::REPLY } else { Flags::EMPTY };
        self.push_ctrl(PacketType::Ack, flags, 0, 0, Vec::new());
    }

    /// NACKs every incomplete message from the next expected up to `upto` whose mode resends
    /// (whole-message NACK, TBLOCK = 0, when nothing of it arrived).
    fn push_nacks(&mut self, now: Instant, upto: u64, force: bool) {
        let mut list = Vec::new();
        let quiet = self.config.reassembly_timeout;
        for (&seq, p) in self.recv.partial.range(..=upto) {
            if !p.mode.resends() || p.is_complete() {
                continue;
            }
            if seq != upto
                && p.last_nack
                    .is_some_and(|t| now.saturating_duration_since(t) < quiet / 2)
            {
                // NACKed recently: the repair is on its way.
                continue;
            }
            if !force && seq == upto && p.seen && p.last_len.is_none() {
                // Blocks still arriving in order; its last block will tell.
                continue;
            }
            list.push((seq, p.tblock, p.missing()));
            if list.len() >= 32 {
                break;
            }
        }
        for (seq, tblock, missing) in list {
            if let Some(p) = self.recv.partial.get_mut(&seq) {
                p.nacks = p.nacks.saturating_add(1);
                p.last_nack = Some(now);
            }
            self.stats.nacks_sent += 1;
            self.push_ctrl(PacketType::Nack, Flags::EMPTY, seq, tblock, missing);
        }
    }

    fn arm_reassembly(&mut self, now: Instant) {
        if let Some(p) = self.recv.partial.values().next() {
            let at = p.known_at + self.config.reassembly_timeout;
            if self.timers.get(Timer::Reassembly).is_none_or(|d| d > at) {
                self.timers.set(Timer::Reassembly, at.max(now));
            }
        } else {
            self.timers.stop(Timer::Reassembly);
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

    fn on_cumulative_ack(&mut self, now: Instant, wire: u16) {
        let Some(front) = self.inflight.front() else {
            return;
        };
        let acked = reassembly::expand(front.seq, wire);
        if acked >= self.next_seq {
            return;
        }
        let mut progressed = false;
        while self
            .inflight
            .front()
            .is_some_and(|m| m.seq <= acked && m.fully_sent())
        {
            if let Some(m) = self.inflight.pop_front() {
                self.in_flight_bytes -= m.data.len();
                progressed = true;
            }
        }
        if progressed {
            self.timers.stop(Timer::Ack);
            self.timers.stop(Timer::Retrans);
            if self.inflight.iter().any(|m| m.sent_at.is_some()) {
                self.rearm_after_progress(now);
            }
        }
    }

    fn rearm_after_progress(&mut self, now: Instant) {
        if self
            .inflight
            .iter()
            .any(|m| m.mode == Reliability::Reliable && m.sent_at.is_some())
        {
            let t = self.ack_timeout();
            self.timers.set(Timer::Ack, now + t);
        }
        if self
            .inflight
            .iter()
            .any(|m| m.mode != Reliability::Reliable && m.sent_at.is_some())
        {
            let t = self.retrans_timeout();
            self.timers.set(Timer::Retrans, now + t);
        }
    }

    fn on_nack(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
        self.stats.nacks_received += 1;
        self.timers.reset_attempts(Timer::Ack);
        let Some(front) = self.inflight.front() else {
            return;
        };
        let seq = reassembly::expand(front.seq, repr.mess_seq_no);
        let Some(m) = self.inflight.iter_mut().find(|m| m.seq == seq) else {
            return;
        };
        if !m.mode.resends() {
            return;
        }
        if payload.is_empty() {
            for i in 0..m.tblock {
                m.resend.insert(i);
            }
        } else {
            for &i in payload {
                if i < m.tblock {
                    m.resend.insert(i);
                }
            }
        }
        m.resend_pending = true;
        let t = self.retrans_timeout();
        self.timers.set_if_idle(Timer::Retrans, now + t);
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
        self.stats.rtt = Some(rtt);
        self.stats.min_rtt = Some(self.stats.min_rtt.map_or(rtt, |m| m.min(rtt)));
        self.stats.srtt = Some(match self.stats.srtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
        self.events.push_back(Event::RttSample(rtt));
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

    /// The peer sent everything up to `last`: deliver what is whole, report the rest.
    fn settle_until(&mut self, now: Instant, last: u64) {
        if last >= self.recv.next {
            self.recv.learn(now, last, Reliability::Unreliable);
        }
        loop {
            self.deliver_ready();
            if self.recv.next > last {
                break;
            }
            let Some((seq, p)) = self.recv.drop_next() else {
                break;
            };
            self.report_drop(seq, &p);
        }
    }

    fn report_drop(&mut self, seq: u64, p: &reassembly::Partial) {
        self.stats.messages_dropped += 1;
        let reason = if p.seen {
            DropReason::Incomplete
        } else {
            DropReason::Lost
        };
        self.events.push_back(Event::Dropped { seq, reason });
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
                // Probe: "what do you have up to my last message?"
                self.push_ctrl(PacketType::Ack, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
                let t = self.ack_timeout();
                self.timers.set(Timer::Ack, now + t);
            }
            Timer::Retrans => self.on_retrans_timer(now),
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

    fn on_retrans_timer(&mut self, now: Instant) {
        // Non-RELIABLE messages fully sent long enough ago are forgotten (no ACK promised).
        let base = self.retrans_timeout();
        let keep_rtr = base * (u32::from(self.config.attempts) + 1);
        while let Some(m) = self.inflight.front() {
            let horizon = if m.mode == Reliability::RetransmitOnError {
                keep_rtr
            } else {
                base
            };
            let old = m
                .sent_at
                .is_some_and(|s| now.saturating_duration_since(s) >= horizon);
            if m.mode != Reliability::Reliable && old && !m.resend_pending {
                if let Some(m) = self.inflight.pop_front() {
                    self.in_flight_bytes -= m.data.len();
                }
            } else {
                break;
            }
        }
        // RELIABLE messages with retransmitted blocks still unacknowledged: one failed round.
        let attempts = self.config.attempts;
        let mut exhausted = false;
        let mut any = false;
        for m in self.inflight.iter_mut() {
            if m.mode == Reliability::Reliable && m.retransmitted {
                m.retransmitted = false;
                m.retries += 1;
                any = true;
                if m.retries > attempts {
                    exhausted = true;
                }
            }
        }
        if exhausted {
            self.fail(FailReason::RetransmitExhausted);
            return;
        }
        if any {
            // Ask again what is missing.
            self.push_ctrl(PacketType::Ack, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
        }
        if !self.inflight.is_empty() {
            let t = self.retrans_timeout();
            self.timers.set(Timer::Retrans, now + t);
        }
        self.maybe_send_end(now);
    }

    fn on_reassembly_timer(&mut self, now: Instant) {
        let timeout = self.config.reassembly_timeout;
        let attempts = self.config.attempts;
        loop {
            self.deliver_ready();
            let next = self.recv.next;
            let Some(p) = self.recv.partial.get(&next) else {
                break;
            };
            if now.saturating_duration_since(p.known_at) < timeout {
                break;
            }
            match p.mode {
                Reliability::Reliable => {
                    // Never given up: NACK again; the sender's timers decide.
                    if let Some(p) = self.recv.partial.get_mut(&next) {
                        p.known_at = now;
                    }
                    let upto = self.peer_last_sent.max(next);
                    self.push_nacks(now, upto, true);
                    break;
                }
                Reliability::RetransmitOnError if p.nacks < attempts => {
                    if let Some(p) = self.recv.partial.get_mut(&next) {
                        p.known_at = now;
                    }
                    self.push_nacks(now, next, true);
                    break;
                }
                _ => {
                    if let Some((seq, p)) = self.recv.drop_next() {
                        self.report_drop(seq, &p);
                        // Let the sender know how far we got (it forgets what we gave up).
                        self.push_ack(false);
                    }
                }
            }
        }
        self.timers.stop(Timer::Reassembly);
        self.arm_reassembly(now);
    }
}

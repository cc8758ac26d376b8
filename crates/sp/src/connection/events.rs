//! What a connection tells the application: events, failure and close reasons, refusals and
//! counters.

use viastack_kernel::Duration;

use super::Reliability;

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
    /// [`Connection::close`](super::Connection::close) and the peer answered the END.
    Local,
    /// The peer sent END.
    Peer,
}

/// Why a message was given up: a received one by the receiver (non-RELIABLE modes), or one of
/// this side's own when the peer closed first (any mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Received: some blocks never arrived (or arrived damaged), and FEC/NACKs did not repair
    /// them.
    Incomplete,
    /// Received: no block of it ever arrived.
    Lost,
    /// Ours: the peer's END came before it was sent whole (still queued, or partly sent);
    /// the peer cannot have delivered it.
    NotSent,
    /// Ours: sent whole, but the peer's END did not acknowledge it; it may or may not have
    /// been delivered.
    Unacknowledged,
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
    /// A message given up: a received one (only outside RELIABLE), or one of this side's own
    /// that the peer's END left unsent or unacknowledged (any mode; see [`DropReason`]).
    Dropped {
        /// Its number (for a queued message of ours, the one it would have taken).
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
    /// The send queue holds [`Config::send_buffer`](super::Config::send_buffer) bytes already.
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
    /// Messages of ours given up because the peer closed first (reported as
    /// [`Event::Dropped`] with [`DropReason::NotSent`] or [`DropReason::Unacknowledged`]).
    pub messages_abandoned: u64,
    /// Blocks rebuilt from parity.
    pub fec_repairs: u64,
    /// ACKs received (SYNC_NO is this modulo 256).
    pub acks_received: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// ACKs of ours the peer says it received: its SYNC_NO, read on every packet from it and
    /// unwrapped. `acks_sent − peer_acks_received` are ACKs lost on the way back (or still in
    /// flight, or duplicated by the network when negative).
    pub peer_acks_received: u64,
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
    /// Blocks dropped because their message would have gone beyond the advertised receive
    /// window (a sender that ignores it).
    pub over_window: u64,
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
    /// The congestion window in bytes (see [`congestion`](super::congestion)).
    pub congestion_window: u64,
    /// Times the congestion window was halved (NACK or echo) or dropped (timeout).
    pub congestion_reductions: u64,
    /// NACKed blocks that then arrived without being sent again (the path reorders; NACKs
    /// wait for a reordering window from then on).
    pub reordered: u64,
    /// Data packets that arrived marked "congestion experienced" (CB = 2 or IP CE).
    pub ce_received: u64,
    /// Packets that arrived carrying the peer's congestion echo (CB = 3).
    pub ecn_echoes: u64,
}

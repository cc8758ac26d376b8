//! Connection parameters and the four reliability modes (seed 002 §3.1.6); every default cites
//! where it comes from.

use viastack_kernel::Duration;

use super::fec;
use crate::wire::{Flags, HEADER_LEN};

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

    pub(super) fn resends(self) -> bool {
        matches!(self, Reliability::RetransmitOnError | Reliability::Reliable)
    }
}

/// Connection parameters; `Default` is the seed's values where it gives them.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest block: 64,000, so a block is one UDP datagram just under the 65,507-byte
    /// limit (the seed's Java port used 32 KB packets, §5.1; larger blocks halve the datagrams
    /// per message on loopback and jumbo-frame LANs). A message is cut into the fewest blocks
    /// of at most this size, all of one length but the last: a 256 KiB message is 5 blocks of
    /// 52,429 bytes, a 64 KiB one 2 of 32,768. Use ≤ 1,452 on paths where IP fragmentation
    /// loses datagrams.
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
    /// Bytes the send queue may hold before [`SendError::QueueFull`](super::SendError::QueueFull). 64 MiB.
    pub send_buffer: usize,
    /// Reliability of a new connection.
    pub reliability: Reliability,
    /// Whether the sender keeps a congestion window besides the peer's receive window (see
    /// [`congestion`](super::congestion)). On by default: SP must not flood a shared path.
    pub congestion_control: bool,
    /// The congestion window at the start, in blocks of `block_size`. RFC 6928's initial
    /// window of 10 segments; 640,000 bytes with the default blocks.
    pub initial_window_blocks: u16,
    /// Whether DATA packets announce ECN capability (CB = 1) and the socket marks its
    /// datagrams ECT(0), so that a congested path can mark them instead of dropping them
    /// (RFC 3168). Either way, a receiver echoes the marks it sees (CB = 3): CB = 2, and IP CE
    /// where its driver reads the TOS byte (`SpSocket` does).
    pub ecn: bool,
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
            congestion_control: true,
            initial_window_blocks: 10,
            ecn: true,
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

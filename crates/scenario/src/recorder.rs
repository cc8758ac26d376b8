//! What the simulated applications sent and received, shared by every node of a run (and by
//! every incarnation of a node that crashes and restarts), and the delivery accounting derived
//! from it: per stream (workload, source, destination) the messages sent, which arrived, how
//! often, in what order, and with what latency.

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;
use viastack_kernel::{Instant, NodeId};

use crate::payload::Stamp;

/// One (workload, source, destination) stream.
#[derive(Debug, Default, Clone)]
pub struct Stream {
    /// Messages sent (the next sequence number).
    pub sent: u64,
    /// Times each sequence number was delivered.
    pub deliveries: Vec<u32>,
    /// Highest sequence number delivered so far.
    pub highest: Option<u64>,
    /// Deliveries of a sequence number below the highest already delivered.
    pub out_of_order: u64,
    /// Smallest and largest latency of a first delivery, ns of virtual time (to measure the
    /// skew between streams, e.g. audio and video of one sender).
    pub latency_range: Option<(u64, u64)>,
}

/// One notice as a node's application saw it: a non-sendable event leaving the top of a
/// channel, with its position among what that application received, so that tests can check
/// that several channels see a notice at the same point of their event streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeRecord {
    /// When it arrived.
    pub at: Instant,
    /// The channel it left.
    pub channel: String,
    /// Its event type's name (`Suspect`, `Alive`, `PeerUnreachable`, …).
    pub name: String,
    /// The peer it is about, if it is a peer notice.
    pub peer: Option<NodeId>,
    /// Sendables the node's application had received on `channel` before it.
    pub channel_index: u64,
    /// Events (sendables and notices, every channel) the node's application had received
    /// before it.
    pub position: u64,
}

/// Everything the applications observed.
#[derive(Debug)]
pub struct Recorder {
    /// Streams by (workload, source, destination).
    pub streams: BTreeMap<(u16, NodeId, NodeId), Stream>,
    /// Messages a sender has sent, per (workload, node) — survives restarts.
    pub progress: BTreeMap<(u16, NodeId), u64>,
    /// Delivered payloads that failed their integrity check.
    pub corrupted: u64,
    /// Intact payloads delivered at a node other than their addressee.
    pub misdelivered: u64,
    /// Latency of first deliveries, in ns of virtual time.
    pub latency: Histogram<u64>,
    /// (reporter, peer) pairs for which a reliable layer told the application it gave up.
    pub unreachable: BTreeSet<(NodeId, NodeId)>,
    /// Notices (non-sendable events) that reached applications, by event type name.
    pub notices: BTreeMap<String, u64>,
    /// Every notice each node's application received, in order (across restarts).
    pub notice_log: BTreeMap<NodeId, Vec<NoticeRecord>>,
    /// Sendables each node's application received, per channel name.
    pub channel_deliveries: BTreeMap<(NodeId, String), u64>,
    /// Events (sendables and notices) each node's application received.
    pub app_events: BTreeMap<NodeId, u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            streams: BTreeMap::new(),
            progress: BTreeMap::new(),
            corrupted: 0,
            misdelivered: 0,
            // Three significant digits up to an hour: ample for simulated latencies.
            latency: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .unwrap_or_else(|_| unreachable!("these bounds are valid")),
            unreachable: BTreeSet::new(),
            notices: BTreeMap::new(),
            notice_log: BTreeMap::new(),
            channel_deliveries: BTreeMap::new(),
            app_events: BTreeMap::new(),
        }
    }
}

impl Recorder {
    /// Records a message about to be sent; returns its sequence number in the stream.
    pub fn next_seq(&mut self, workload: u16, src: NodeId, dst: NodeId) -> u64 {
        let s = self.streams.entry((workload, src, dst)).or_default();
        let seq = s.sent;
        s.sent += 1;
        s.deliveries.push(0);
        seq
    }

    /// Records a notice (a non-sendable event leaving the top of a channel) at node `node`;
    /// `unreachable_peer` is set when it says a reliable layer gave up on that peer.
    pub fn notice(&mut self, node: NodeId, name: &str, unreachable_peer: Option<NodeId>) {
        *self.notices.entry(name.to_string()).or_insert(0) += 1;
        if let Some(peer) = unreachable_peer {
            self.unreachable.insert((node, peer));
        }
    }

    /// Counts a sendable that left the top of `channel` at node `node` (whatever its payload),
    /// for the positions of [`NoticeRecord`]s.
    pub fn received_on(&mut self, node: NodeId, channel: &str) {
        *self
            .channel_deliveries
            .entry((node, channel.to_string()))
            .or_insert(0) += 1;
        *self.app_events.entry(node).or_insert(0) += 1;
    }

    /// Logs a notice that left the top of `channel` at node `node` at `at` (in addition to
    /// [`Recorder::notice`], which counts it).
    pub fn log_notice(
        &mut self,
        node: NodeId,
        at: Instant,
        channel: &str,
        name: &str,
        peer: Option<NodeId>,
    ) {
        let channel_index = self
            .channel_deliveries
            .get(&(node, channel.to_string()))
            .copied()
            .unwrap_or(0);
        let events = self.app_events.entry(node).or_insert(0);
        let position = *events;
        *events += 1;
        self.notice_log.entry(node).or_default().push(NoticeRecord {
            at,
            channel: channel.to_string(),
            name: name.to_string(),
            peer,
            channel_index,
            position,
        });
    }

    /// Records a delivery at `at` of node `node`.
    pub fn delivered(&mut self, node: NodeId, stamp: Option<Stamp>, at: Instant) {
        let Some(stamp) = stamp else {
            self.corrupted += 1;
            return;
        };
        if stamp.dst != node {
            self.misdelivered += 1;
            return;
        }
        let Some(stream) = self
            .streams
            .get_mut(&(stamp.workload, stamp.src, stamp.dst))
        else {
            // An intact payload nobody sent: treat as corruption that fooled the digest.
            self.corrupted += 1;
            return;
        };
        let Some(count) = stream.deliveries.get_mut(stamp.seq as usize) else {
            self.corrupted += 1;
            return;
        };
        *count += 1;
        if *count > 1 {
            return; // a duplicate; counted from `deliveries`
        }
        let ns = at
            .as_nanos()
            .saturating_sub(stamp.sent_at.as_nanos())
            .max(1);
        // Saturate rather than fail on absurd values.
        let _ = self.latency.record(ns.min(self.latency.high()));
        stream.latency_range = Some(match stream.latency_range {
            Some((lo, hi)) => (lo.min(ns), hi.max(ns)),
            None => (ns, ns),
        });
        match stream.highest {
            Some(h) if stamp.seq < h => stream.out_of_order += 1,
            _ => stream.highest = Some(stamp.seq),
        }
    }
}

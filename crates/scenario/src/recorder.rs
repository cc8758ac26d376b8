//! What the simulated applications sent and received, shared by every node of a run (and by
//! every incarnation of a node that crashes and restarts), and the delivery accounting derived
//! from it: per stream (workload, source, destination) the messages sent, which arrived, how
//! often, in what order, and with what latency.

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use viastack_kernel::{Instant, NodeId};

use crate::payload::Stamp;

/// Sequence numbers at or above this are treated as corrupted (bounds the recorder's memory).
pub const MAX_TRACKED_SEQ: u64 = 1 << 28;

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
    /// Sequence numbers the sender's stack reported it will not deliver, or may not have
    /// (their tags came back in a `SendFailed` notice).
    pub reported: BTreeSet<u64>,
    /// Messages numbered below this were sent by an incarnation of the sender that crashed
    /// afterwards: its stack's state, and any notice it would have raised, died with it.
    pub sender_crashed_below: u64,
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
#[derive(Debug, Clone)]
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
    /// Notices (non-sendable events) that reached applications, by event type name.
    pub notices: BTreeMap<String, u64>,
    /// Every notice each node's application received, in order (across restarts).
    pub notice_log: BTreeMap<NodeId, Vec<NoticeRecord>>,
    /// Sendables each node's application received, per channel name.
    pub channel_deliveries: BTreeMap<(NodeId, String), u64>,
    /// Events (sendables and notices) each node's application received.
    pub app_events: BTreeMap<NodeId, u64>,
    /// Nodes whose application has started at least once.
    pub booted: BTreeSet<NodeId>,
    /// Deliveries of each `multicast` workload message, keyed by (workload, source, sequence
    /// number): how many times each node received it.
    pub multicast: BTreeMap<(u16, NodeId, u64), BTreeMap<NodeId, u32>>,
    /// The highest sequence number of each `multicast` workload's sender delivered at each
    /// node, keyed by (workload, source, node): FIFO order of a broadcast holds per receiver.
    pub multicast_highest: BTreeMap<(u16, NodeId, NodeId), u64>,
    /// Per member incarnation: views installed and `multicast` messages sent and delivered,
    /// in order (what the group checker judges, [`crate::group`]).
    pub group: crate::group::History,
    /// The same, per channel (a light-weight group's, `stacks/lwg.toml`): what the group
    /// checker judges per channel when several channels install views.
    pub group_channels: BTreeMap<String, crate::group::History>,
}

/// The addressee written in the stamp of a `multicast` workload message: every node.
pub const BROADCAST: NodeId = NodeId(u32::MAX);

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
            notices: BTreeMap::new(),
            notice_log: BTreeMap::new(),
            channel_deliveries: BTreeMap::new(),
            app_events: BTreeMap::new(),
            booted: BTreeSet::new(),
            multicast: BTreeMap::new(),
            multicast_highest: BTreeMap::new(),
            group: crate::group::History::default(),
            group_channels: BTreeMap::new(),
        }
    }
}

impl Recorder {
    /// Messages node `node` has sent for workload `workload` (survives restarts).
    pub fn progress(&self, workload: u16, node: NodeId) -> u64 {
        self.progress.get(&(workload, node)).copied().unwrap_or(0)
    }

    /// Records a message about to be sent; returns its sequence number in the stream.
    pub fn next_seq(&mut self, workload: u16, src: NodeId, dst: NodeId) -> u64 {
        *self.progress.entry((workload, src)).or_insert(0) += 1;
        let s = self.streams.entry((workload, src, dst)).or_default();
        let seq = s.sent;
        s.sent += 1;
        if s.deliveries.len() < s.sent as usize {
            s.deliveries.resize(s.sent as usize, 0);
        }
        seq
    }

    /// Adds what another node's recorder saw (drivers that keep one recorder per node merge
    /// them at the end: the sender knows what it sent, the addressee what it received).
    pub fn merge(&mut self, other: Recorder) {
        for (key, o) in other.streams {
            let s = self.streams.entry(key).or_default();
            s.sent += o.sent;
            if s.deliveries.len() < o.deliveries.len() {
                s.deliveries.resize(o.deliveries.len(), 0);
            }
            let broadcast = key.2 == BROADCAST;
            for (a, b) in s.deliveries.iter_mut().zip(&o.deliveries) {
                // A multicast counts once, plus every node's extra copies (see `delivered`).
                *a += b - u32::from(broadcast && *a > 0 && *b > 0);
            }
            s.out_of_order += o.out_of_order;
            s.highest = s.highest.max(o.highest);
            s.reported.extend(o.reported);
            s.sender_crashed_below = s.sender_crashed_below.max(o.sender_crashed_below);
            s.latency_range = match (s.latency_range, o.latency_range) {
                (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                (x, y) => x.or(y),
            };
        }
        for (node, log) in other.notice_log {
            self.notice_log.entry(node).or_default().extend(log);
        }
        for (key, n) in other.channel_deliveries {
            *self.channel_deliveries.entry(key).or_insert(0) += n;
        }
        for (node, n) in other.app_events {
            *self.app_events.entry(node).or_insert(0) += n;
        }
        self.booted.extend(other.booted);
        for (node, incs) in other.group.nodes {
            self.group.nodes.entry(node).or_default().extend(incs);
        }
        for (channel, h) in other.group_channels {
            let mine = self.group_channels.entry(channel).or_default();
            for (node, incs) in h.nodes {
                mine.nodes.entry(node).or_default().extend(incs);
            }
        }
        for (key, per_node) in other.multicast {
            let m = self.multicast.entry(key).or_default();
            for (node, n) in per_node {
                *m.entry(node).or_insert(0) += n;
            }
        }
        for (key, n) in other.progress {
            *self.progress.entry(key).or_insert(0) += n;
        }
        self.corrupted += other.corrupted;
        self.misdelivered += other.misdelivered;
        let _ = self.latency.add(&other.latency);
        for (k, n) in other.notices {
            *self.notices.entry(k).or_insert(0) += n;
        }
    }

    /// Counts a notice (a non-sendable event leaving the top of a channel) by its type name.
    pub fn notice(&mut self, name: &str) {
        *self.notices.entry(name.to_string()).or_insert(0) += 1;
    }

    /// Records that node `src`'s stack reported message `seq` of workload `workload` to `dst`
    /// as not delivered, or possibly not (a `SendFailed` notice named it).
    pub fn reported(&mut self, workload: u16, src: NodeId, dst: NodeId, seq: u64) {
        if seq < MAX_TRACKED_SEQ {
            self.streams
                .entry((workload, src, dst))
                .or_default()
                .reported
                .insert(seq);
        }
    }

    /// Node `node`'s application starts; a second start is a restart after a crash, which
    /// lost the stack's state ([`Recorder::sender_crashed`]).
    pub fn boot(&mut self, node: NodeId) {
        if !self.booted.insert(node) {
            self.sender_crashed(node);
        }
    }

    /// Node `node` lost its state (it crashed; it restarts now, or stays down): what it has
    /// sent so far and not delivered is lost with its stack, and is not held against
    /// reliability.
    pub fn sender_crashed(&mut self, node: NodeId) {
        for ((_, src, _), s) in &mut self.streams {
            if *src == node {
                s.sender_crashed_below = s.sent;
            }
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
        let broadcast = stamp.dst == BROADCAST;
        if !broadcast && stamp.dst != node {
            self.misdelivered += 1;
            return;
        }
        if stamp.seq >= MAX_TRACKED_SEQ {
            // No workload sends that many: corruption that fooled the digest.
            self.corrupted += 1;
            return;
        }
        // The stream may be unknown here when each node keeps its own recorder.
        let stream = self
            .streams
            .entry((stamp.workload, stamp.src, stamp.dst))
            .or_default();
        let index = stamp.seq as usize;
        if stream.deliveries.len() <= index {
            stream.deliveries.resize(index + 1, 0);
        }
        let count = &mut stream.deliveries[index];
        if broadcast {
            // The stream counts the message delivered once, plus every node's extra copy.
            let at_node = self
                .multicast
                .entry((stamp.workload, stamp.src, stamp.seq))
                .or_default()
                .entry(node)
                .or_insert(0);
            *at_node += 1;
            if *at_node == 1 {
                // Order is per receiver: another node's earlier copy says nothing here.
                let highest = self
                    .multicast_highest
                    .entry((stamp.workload, stamp.src, node))
                    .or_insert(stamp.seq);
                if stamp.seq < *highest {
                    stream.out_of_order += 1;
                } else {
                    *highest = stamp.seq;
                }
            }
            if *at_node > 1 || *count > 0 {
                *count += u32::from(*at_node > 1);
                return;
            }
        }
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
        if broadcast {
            return; // ordered per receiver above
        }
        match stream.highest {
            Some(h) if stamp.seq < h => stream.out_of_order += 1,
            _ => stream.highest = Some(stamp.seq),
        }
    }
}

/// A [`Recorder`] as plain data, for drivers whose nodes are separate processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecorderSnapshot {
    streams: Vec<StreamSnapshot>,
    progress: Vec<(u16, u32, u64)>,
    corrupted: u64,
    misdelivered: u64,
    /// (value in ns, count) pairs of the latency histogram.
    latency: Vec<(u64, u64)>,
    notices: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StreamSnapshot {
    workload: u16,
    src: u32,
    dst: u32,
    sent: u64,
    deliveries: Vec<u32>,
    highest: Option<u64>,
    out_of_order: u64,
    latency_range: Option<(u64, u64)>,
    reported: Vec<u64>,
    sender_crashed_below: u64,
}

impl Recorder {
    /// This recorder as plain data (the per-node notice log, a simulator aid, is not included).
    pub fn snapshot(&self) -> RecorderSnapshot {
        RecorderSnapshot {
            streams: self
                .streams
                .iter()
                .map(|(&(workload, src, dst), s)| StreamSnapshot {
                    workload,
                    src: src.0,
                    dst: dst.0,
                    sent: s.sent,
                    deliveries: s.deliveries.clone(),
                    highest: s.highest,
                    out_of_order: s.out_of_order,
                    latency_range: s.latency_range,
                    reported: s.reported.iter().copied().collect(),
                    sender_crashed_below: s.sender_crashed_below,
                })
                .collect(),
            progress: self
                .progress
                .iter()
                .map(|(&(w, n), &c)| (w, n.0, c))
                .collect(),
            corrupted: self.corrupted,
            misdelivered: self.misdelivered,
            latency: self
                .latency
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
            notices: self.notices.clone(),
        }
    }

    /// A recorder from a snapshot. Absurd sequence numbers are clamped as in
    /// [`Recorder::delivered`].
    pub fn from_snapshot(snap: RecorderSnapshot) -> Recorder {
        let mut r = Recorder::default();
        for s in snap.streams {
            let mut deliveries = s.deliveries;
            deliveries.truncate(MAX_TRACKED_SEQ as usize);
            r.streams.insert(
                (s.workload, NodeId(s.src), NodeId(s.dst)),
                Stream {
                    sent: s.sent.min(MAX_TRACKED_SEQ),
                    deliveries,
                    highest: s.highest,
                    out_of_order: s.out_of_order,
                    latency_range: s.latency_range,
                    reported: s
                        .reported
                        .into_iter()
                        .filter(|&q| q < MAX_TRACKED_SEQ)
                        .collect(),
                    sender_crashed_below: s.sender_crashed_below.min(MAX_TRACKED_SEQ),
                },
            );
        }
        for (w, n, c) in snap.progress {
            r.progress.insert((w, NodeId(n)), c);
        }
        r.corrupted = snap.corrupted;
        r.misdelivered = snap.misdelivered;
        for (value, count) in snap.latency {
            let _ = r.latency.record_n(value.clamp(1, r.latency.high()), count);
        }
        r.notices = snap.notices;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::Stamp;

    fn stamp(src: u32, dst: u32, seq: u64) -> Option<Stamp> {
        Some(Stamp {
            workload: 0,
            src: NodeId(src),
            dst: NodeId(dst),
            seq,
            sent_at: Instant::from_millis(1),
        })
    }

    /// FIFO of a broadcast is per receiver: node 1 getting 1 before node 2 gets 0 is in order;
    /// node 2 getting 1 before 0 is not.
    #[test]
    fn broadcast_order_is_checked_per_receiver() {
        let mut r = Recorder::default();
        for _ in 0..2 {
            r.next_seq(0, NodeId(0), BROADCAST);
        }
        let at = Instant::from_millis(3);
        r.delivered(NodeId(1), stamp(0, BROADCAST.0, 0), at);
        r.delivered(NodeId(1), stamp(0, BROADCAST.0, 1), at);
        r.delivered(NodeId(2), stamp(0, BROADCAST.0, 0), at);
        assert_eq!(r.streams[&(0, NodeId(0), BROADCAST)].out_of_order, 0);
        r.delivered(NodeId(3), stamp(0, BROADCAST.0, 1), at);
        r.delivered(NodeId(3), stamp(0, BROADCAST.0, 0), at);
        assert_eq!(r.streams[&(0, NodeId(0), BROADCAST)].out_of_order, 1);
    }

    #[test]
    fn per_node_recorders_merge_into_the_shared_view() {
        // The shared view: one recorder sees both ends.
        let mut shared = Recorder::default();
        // Per node: the sender's and the receiver's recorders.
        let (mut sender, mut receiver) = (Recorder::default(), Recorder::default());
        for seq in 0..5 {
            assert_eq!(shared.next_seq(0, NodeId(0), NodeId(1)), seq);
            assert_eq!(sender.next_seq(0, NodeId(0), NodeId(1)), seq);
        }
        for seq in [0, 2, 1, 2] {
            shared.delivered(NodeId(1), stamp(0, 1, seq), Instant::from_millis(3));
            receiver.delivered(NodeId(1), stamp(0, 1, seq), Instant::from_millis(3));
        }
        receiver.notice("Suspect");
        sender.reported(0, NodeId(0), NodeId(1), 4);
        let mut merged = Recorder::default();
        merged.merge(Recorder::from_snapshot(sender.snapshot()));
        merged.merge(Recorder::from_snapshot(receiver.snapshot()));
        let key = (0, NodeId(0), NodeId(1));
        assert_eq!(merged.streams[&key].sent, shared.streams[&key].sent);
        assert_eq!(merged.streams[&key].deliveries, vec![1, 1, 2, 0, 0]);
        assert_eq!(
            merged.streams[&key].deliveries,
            shared.streams[&key].deliveries
        );
        assert_eq!(merged.streams[&key].out_of_order, 1);
        assert_eq!(merged.progress, shared.progress);
        assert_eq!(merged.latency.len(), shared.latency.len());
        assert_eq!(merged.notices.get("Suspect"), Some(&1));
        assert_eq!(
            merged.streams[&key].reported,
            BTreeSet::from([4]),
            "reports survive the snapshot"
        );
    }
}

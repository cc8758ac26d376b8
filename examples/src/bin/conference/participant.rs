//! One participant as an [`Application`]: it joins, talks for a while on the three channels,
//! says goodbye, waits for the others to finish, and keeps the figures of what it received.
//!
//! # Phases
//! 1. **Joining**: a hello (on text, reliable) to every peer; a peer's first hello is answered
//!    with another, whose arrival makes the reliable layer repair a first hello the peer missed
//!    because it was not up yet. The participant talks once every peer has said hello, or
//!    after `wait`, so frames are not sent to processes that have not started.
//! 2. **Talking** for `duration`: audio, video and text frames, each when due by the
//!    participant's clock ([`Stream::due`]); media to every other node with `send_to_all`,
//!    text to the peers present (joined, and not both gone quiet and said goodbye). Text to a
//!    peer that leaves before it is acknowledged is reported when the node closes.
//! 3. **Draining**: a bye on text (after every text line: it carries the counts sent), then
//!    waiting for every peer's bye, or for its suspicion by the failure detector, for at most
//!    `drain`.
//! 4. **Settling** for [`SETTLE`]: media the `sync` layer still holds for their playout time
//!    come up; then [`AppNode::stop`].
//!
//! Notices are recorded and printed as they come: a peer that leaves is suspected by the ONE
//! failure detector the three channels share, so its `Suspect` arrives on audio, video and
//! text alike.
//!
//! Time is what [`AppNode::now`] says, never read otherwise: the application runs on sockets
//! (real time) and would run unchanged in the simulator harness.

use std::collections::BTreeMap;

use serde::Serialize;
use viastack::{AppNode, Application, Duration, Instant, NodeEvent, NodeId, Notice};

use crate::frame::{self, Counts, Frame, Kind, Stream};
use crate::stats::{self, Skew, StreamReport, StreamStats};

/// How long media still arrive after the last bye: the sync layer holds them for its playout
/// delay (stacks/conference.toml: 100 ms) and lets them be up to `max_skew` late (80 ms), plus
/// room for scheduling.
pub const SETTLE: Duration = Duration::from_millis(400);

/// How long each phase may last.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Longest wait for the peers' hellos.
    pub wait: Duration,
    /// How long to talk.
    pub duration: Duration,
    /// Longest wait for the peers' byes.
    pub drain: Duration,
}

/// Where live lines (phases, notices) go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    /// Standard output (the table follows them).
    Stdout,
    /// Standard error (standard output carries only the JSON report).
    Stderr,
    /// Nowhere (the simulator).
    #[cfg_attr(not(test), allow(dead_code))]
    Quiet,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Joining { until: Instant },
    Talking { start: Instant, until: Instant },
    Draining { until: Instant },
    Settling { until: Instant },
    Done,
}

/// What this node knows of another.
#[derive(Debug, Default)]
struct Peer {
    joined: bool,
    bye: Option<Counts>,
    suspected: bool,
    streams: [StreamStats; 3],
    /// Payloads that were not frames of this program, or had a wrong body.
    malformed: u64,
}

impl Peer {
    /// Whether this node should still send it text: it joined and has not left. A peer that
    /// said goodbye may still be waiting for the others' text; once the failure detector
    /// suspects it too, it has gone.
    fn present(&self) -> bool {
        self.joined && !(self.bye.is_some() && self.suspected)
    }

    /// Whether this node need not wait for it any longer.
    fn finished(&self) -> bool {
        self.bye.is_some() || self.suspected
    }
}

/// A notice as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoticeRecord {
    /// ms since this participant started.
    pub at_ms: f64,
    /// `suspect`, `alive`, `send_failed` or the event type's name.
    pub kind: String,
    /// The channel it arrived on.
    pub channel: String,
    /// The peer it concerns.
    pub peer: Option<u32>,
    /// Messages concerned (`send_failed`).
    pub messages: usize,
}

/// One conference participant.
#[derive(Debug)]
pub struct Participant {
    config: Config,
    echo: Echo,
    /// This participant's clock starts here: capture times count from it.
    t0: Instant,
    phase: Phase,
    /// Frames sent per stream (the next frame's number).
    sent: Counts,
    /// How long it talked.
    talked: Duration,
    peers: BTreeMap<NodeId, Peer>,
    notices: Vec<NoticeRecord>,
    /// Sends the node refused (closed, unknown channel).
    send_errors: u64,
}

/// What one participant reports at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// This node.
    pub node: u32,
    /// How long it talked, ms.
    pub talked_ms: f64,
    /// Frames sent per stream.
    pub sent: Sent,
    /// What it received from each peer.
    pub peers: Vec<PeerReport>,
    /// Notices, in arrival order.
    pub notices: Vec<NoticeRecord>,
    /// Sends the node refused.
    pub send_errors: u64,
    /// Messages unacknowledged when the node closed (set by the caller).
    pub aborted_at_close: usize,
    /// The stack's counters at the end, `layer.counter` (set by the caller).
    pub counters: BTreeMap<String, u64>,
}

/// Frames per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sent {
    /// Audio frames.
    pub audio: u32,
    /// Video frames.
    pub video: u32,
    /// Text lines.
    pub text: u32,
}

impl From<Counts> for Sent {
    fn from([audio, video, text]: Counts) -> Self {
        Sent { audio, video, text }
    }
}

/// What one participant received from one peer.
#[derive(Debug, Clone, Serialize)]
pub struct PeerReport {
    /// The peer.
    pub peer: u32,
    /// Whether it said hello.
    pub joined: bool,
    /// What it said it sent (its bye), if its bye arrived.
    pub announced: Option<Sent>,
    /// Audio from it.
    pub audio: StreamReport,
    /// Video from it.
    pub video: StreamReport,
    /// Text from it.
    pub text: StreamReport,
    /// Its audio/video skew as presented here.
    pub skew: Option<Skew>,
    /// Payloads from it that were not intact frames.
    pub malformed: u64,
}

impl Participant {
    /// A participant of a conference of `nodes` nodes, this one `me`.
    pub fn new(config: Config, echo: Echo, me: NodeId, nodes: u32) -> Self {
        Participant {
            config,
            echo,
            t0: Instant::ZERO,
            // Until `start`.
            phase: Phase::Done,
            sent: [0; 3],
            talked: Duration::ZERO,
            peers: (0..nodes)
                .map(NodeId)
                .filter(|&n| n != me)
                .map(|n| (n, Peer::default()))
                .collect(),
            notices: Vec::new(),
            send_errors: 0,
        }
    }

    /// The figures so far.
    pub fn report(&self, me: NodeId) -> Report {
        Report {
            node: me.0,
            talked_ms: self.talked.as_secs_f64() * 1000.0,
            sent: self.sent.into(),
            peers: self
                .peers
                .iter()
                .map(|(id, p)| {
                    let announced = |s: Stream| p.bye.map(|c| c[s.index()]);
                    let stream = |s: Stream| p.streams[s.index()].report(announced(s));
                    PeerReport {
                        peer: id.0,
                        joined: p.joined,
                        announced: p.bye.map(Sent::from),
                        audio: stream(Stream::Audio),
                        video: stream(Stream::Video),
                        text: stream(Stream::Text),
                        skew: stats::skew(
                            &p.streams[Stream::Audio.index()],
                            &p.streams[Stream::Video.index()],
                        ),
                        malformed: p.malformed,
                    }
                })
                .collect(),
            notices: self.notices.clone(),
            send_errors: self.send_errors,
            aborted_at_close: 0,
            counters: BTreeMap::new(),
        }
    }

    fn since_start(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.t0)
    }

    fn say(&self, node: &AppNode<'_>, line: &str) {
        let at = self.since_start(node.now()).as_secs_f64();
        match self.echo {
            Echo::Stdout => println!("[{at:7.3} s] {line}"),
            Echo::Stderr => eprintln!("[{at:7.3} s] {line}"),
            Echo::Quiet => {}
        }
    }

    fn tally(&mut self, result: Result<viastack::Tag, viastack::SendError>) {
        if result.is_err() {
            self.send_errors += 1;
        }
    }

    fn send_text(&mut self, node: &mut AppNode<'_>, to: NodeId, payload: &[u8]) {
        let result = node.send(Stream::Text.channel(), to, payload);
        self.tally(result);
    }

    fn hello(&mut self, node: &mut AppNode<'_>, to: NodeId) {
        let capture = self.since_start(node.now()).as_micros() as u64;
        self.send_text(node, to, &frame::emit(Kind::Hello, 0, capture, &[]));
    }

    fn start_talking(&mut self, node: &mut AppNode<'_>) {
        let now = node.now();
        let absent: Vec<String> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.joined)
            .map(|(id, _)| id.to_string())
            .collect();
        let line = if absent.is_empty() {
            format!(
                "{} participants present; talking for {:?}",
                self.peers.len() + 1,
                self.config.duration
            )
        } else {
            format!(
                "talking for {:?} without {}",
                self.config.duration,
                absent.join(", ")
            )
        };
        self.say(node, &line);
        self.phase = Phase::Talking {
            start: now,
            until: now + self.config.duration,
        };
    }

    /// Sends every frame due by now and before `until`.
    fn talk(&mut self, node: &mut AppNode<'_>, start: Instant, until: Instant) {
        let now = node.now();
        for stream in Stream::ALL {
            loop {
                let seq = self.sent[stream.index()];
                let due = start + stream.due(seq);
                if due > now || due >= until {
                    break;
                }
                let capture = self.since_start(due).as_micros() as u64;
                let payload = frame::emit(
                    Kind::Media(stream),
                    seq,
                    capture,
                    &stream.body(node.id(), seq),
                );
                if stream == Stream::Text {
                    let present: Vec<NodeId> = self
                        .peers
                        .iter()
                        .filter(|(_, p)| p.present())
                        .map(|(id, _)| *id)
                        .collect();
                    for to in present {
                        self.send_text(node, to, &payload);
                    }
                } else {
                    let result = node.send_to_all(stream.channel(), &payload);
                    self.tally(result);
                }
                self.sent[stream.index()] += 1;
            }
        }
    }

    fn stop_talking(&mut self, node: &mut AppNode<'_>, start: Instant) {
        let now = node.now();
        self.talked = now.saturating_duration_since(start);
        let bye = frame::bye(self.since_start(now).as_micros() as u64, &self.sent);
        let present: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.joined)
            .map(|(id, _)| *id)
            .collect();
        for to in present {
            self.send_text(node, to, &bye);
        }
        let [a, v, t] = self.sent;
        self.say(
            node,
            &format!("sent {a} audio, {v} video, {t} text frames; waiting for the others"),
        );
        self.phase = Phase::Draining {
            until: now + self.config.drain,
        };
    }

    /// Moves through the phases whose condition holds, then asks to be woken for the next.
    fn advance(&mut self, node: &mut AppNode<'_>) {
        let now = node.now();
        loop {
            match self.phase {
                Phase::Joining { until } => {
                    if now < until && self.peers.values().any(|p| !p.joined) {
                        break;
                    }
                    self.start_talking(node);
                }
                Phase::Talking { start, until } => {
                    self.talk(node, start, until);
                    if now < until {
                        break;
                    }
                    self.stop_talking(node, start);
                }
                Phase::Draining { until } => {
                    if now < until && !self.peers.values().all(Peer::finished) {
                        break;
                    }
                    self.phase = Phase::Settling {
                        until: now + SETTLE,
                    };
                }
                Phase::Settling { until } => {
                    if now < until {
                        break;
                    }
                    self.phase = Phase::Done;
                }
                Phase::Done => {
                    node.stop();
                    return;
                }
            }
        }
        let wake = match self.phase {
            Phase::Joining { until } | Phase::Draining { until } | Phase::Settling { until } => {
                until
            }
            Phase::Talking { start, until } => Stream::ALL
                .into_iter()
                .map(|s| start + s.due(self.sent[s.index()]))
                .fold(until, Instant::min),
            Phase::Done => return,
        };
        node.wake_at(wake);
    }

    fn on_frame(&mut self, node: &mut AppNode<'_>, from: NodeId, payload: &[u8]) {
        let arrival = self.since_start(node.now()).as_micros() as u64;
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        let Ok(frame) = Frame::parse(payload) else {
            peer.malformed += 1;
            return;
        };
        match frame.kind {
            Kind::Hello if !peer.joined => {
                peer.joined = true;
                self.say(node, &format!("{from} joined"));
                self.hello(node, from);
            }
            Kind::Hello => {}
            Kind::Bye => {
                let [a, v, t] = frame.counts();
                peer.bye = Some([a, v, t]);
                self.say(
                    node,
                    &format!("{from} said goodbye after {a} audio, {v} video, {t} text frames"),
                );
            }
            Kind::Media(stream) => {
                let intact = frame.body == stream.body(from, frame.seq).as_slice();
                let stats = &mut peer.streams[stream.index()];
                if !intact || stats.record(frame.seq, frame.capture_us, arrival).is_err() {
                    peer.malformed += 1;
                }
            }
        }
    }

    fn on_notice(&mut self, node: &mut AppNode<'_>, notice: Notice) {
        let at_ms = self.since_start(node.now()).as_secs_f64() * 1000.0;
        let channel = notice.channel().to_string();
        let (kind, peer, messages, line) = match &notice {
            Notice::Suspect { peer, .. } | Notice::Alive { peer, .. } => {
                let suspected = matches!(notice, Notice::Suspect { .. });
                if let Some(p) = self.peers.get_mut(peer) {
                    p.suspected = suspected;
                }
                let (kind, what) = if suspected {
                    ("suspect", "suspected")
                } else {
                    ("alive", "alive again")
                };
                (
                    kind.to_string(),
                    Some(*peer),
                    0,
                    format!("{peer} {what} on {channel}"),
                )
            }
            Notice::SendFailed {
                kind, peer, tags, ..
            } => (
                "send_failed".to_string(),
                Some(*peer),
                tags.len(),
                format!(
                    "{} message(s) on {channel} to {peer} not delivered: {kind:?}",
                    tags.len()
                ),
            ),
            Notice::View { id, members, .. } => (
                "view".to_string(),
                None,
                0,
                format!("view {id} on {channel}: {} member(s)", members.len()),
            ),
            Notice::Other { kind, peer, .. } => (
                kind.to_string(),
                *peer,
                0,
                format!(
                    "{kind} on {channel}{}",
                    peer.map(|p| format!(" about {p}")).unwrap_or_default()
                ),
            ),
        };
        self.say(node, &line);
        self.notices.push(NoticeRecord {
            at_ms,
            kind,
            channel,
            peer: peer.map(|p| p.0),
            messages,
        });
    }
}

impl Application for Participant {
    fn start(&mut self, node: &mut AppNode<'_>) {
        self.t0 = node.now();
        self.phase = Phase::Joining {
            until: self.t0 + self.config.wait,
        };
        let peers: Vec<NodeId> = self.peers.keys().copied().collect();
        for to in peers {
            self.hello(node, to);
        }
        if !self.peers.is_empty() {
            self.say(node, "waiting for the other participants");
        }
        self.advance(node);
    }

    fn handle(&mut self, event: NodeEvent, node: &mut AppNode<'_>) {
        match event {
            NodeEvent::Message(m) => self.on_frame(node, m.from, &m.payload),
            NodeEvent::Notice(n) => self.on_notice(node, n),
        }
        self.advance(node);
    }

    fn wake(&mut self, node: &mut AppNode<'_>) {
        self.advance(node);
    }
}

#[cfg(test)]
mod tests {
    use viastack::sim::{CrashPlan, Harness, SimConfig};

    use super::*;

    const STACK: &str = include_str!("../../../../stacks/conference.toml");
    const CONFIG: Config = Config {
        wait: Duration::from_secs(5),
        duration: Duration::from_secs(3),
        drain: Duration::from_secs(5),
    };

    /// Three participants in the simulator over links with `loss` and 20 ms of jitter, node 2
    /// crashing at `crash` if given; the reports once everything has settled.
    fn simulate(seed: u64, loss: f64, crash: Option<Instant>) -> Vec<Option<Report>> {
        let mut config = SimConfig::new(seed, 3);
        config.link.latency = Duration::from_millis(5);
        config.link.jitter = Duration::from_millis(20);
        config.link.loss = loss;
        config.crashes = crash
            .map(|at| CrashPlan {
                node: NodeId(2),
                at,
                restart: None,
            })
            .into_iter()
            .collect();
        let mut h = Harness::new("conference.toml", STACK, config, |id| {
            Participant::new(CONFIG, Echo::Quiet, id, 3)
        })
        .unwrap();
        h.run_for(Duration::from_secs(15)).unwrap();
        (0..3)
            .map(|id| h.app(NodeId(id)).map(|p| p.report(NodeId(id))))
            .collect()
    }

    #[test]
    fn over_lossy_links_text_is_exact_media_accounted_for_and_in_step() {
        for seed in 0..8 {
            let reports: Vec<Report> = simulate(seed, 0.01, None).into_iter().flatten().collect();
            assert_eq!(reports.len(), 3, "seed {seed}");
            for r in &reports {
                assert_eq!(r.peers.len(), 2);
                for p in &r.peers {
                    let sent = reports[p.peer as usize].sent;
                    assert_eq!(p.announced, Some(sent), "seed {seed}");
                    assert_eq!(
                        sent,
                        Sent {
                            audio: 150,
                            video: 90,
                            text: 6
                        },
                        "seed {seed}"
                    );
                    // Reliable text: all of it, once, in order, despite the loss.
                    assert_eq!((p.text.received, p.text.lost), (6, 0), "seed {seed}");
                    assert_eq!((p.text.duplicates, p.text.out_of_order), (0, 0));
                    // Media: every frame either received or counted lost (a video frame is lost
                    // with any of its 7 fragments).
                    for (m, n) in [(&p.audio, sent.audio), (&p.video, sent.video)] {
                        assert_eq!(m.received + m.lost, u64::from(n), "seed {seed}: {p:?}");
                        assert!(m.received * 10 >= u64::from(n) * 8, "seed {seed}: {p:?}");
                        assert_eq!(m.duplicates, 0);
                    }
                    // Every node reads the one virtual clock and the jitter (up to 25 ms with
                    // the latency) stays within the playout delay (100 ms): sync presents every
                    // frame at exactly its capture time + the sender's offset, so audio and
                    // video agree to the µs; unsynchronised, video (the latest of 7 fragments)
                    // would trail audio by several ms.
                    let skew = p.skew.expect("both media");
                    assert!(skew.skew_p95_ms <= 0.01, "seed {seed}: {skew:?}");
                    assert_eq!(p.malformed, 0);
                }
            }
        }
    }

    #[test]
    fn a_crashed_participant_is_suspected_on_every_channel_at_once() {
        for seed in 0..4 {
            let reports = simulate(seed, 0.0, Some(Instant::from_millis(1500)));
            assert!(reports[2].is_none(), "node 2 stays down");
            for r in reports.iter().flatten() {
                let suspects: Vec<&NoticeRecord> = r
                    .notices
                    .iter()
                    .filter(|n| n.kind == "suspect" && n.peer == Some(2))
                    .collect();
                let channels: Vec<&str> = suspects.iter().map(|n| n.channel.as_str()).collect();
                assert_eq!(channels, ["audio", "video", "text"], "seed {seed}");
                // In one step of the one detector: the same instant on every channel.
                assert!(suspects.iter().all(|n| n.at_ms == suspects[0].at_ms));
                let crashed = &r.peers[r.peers.len() - 1];
                assert_eq!((crashed.peer, crashed.announced), (2, None));
            }
        }
    }
}

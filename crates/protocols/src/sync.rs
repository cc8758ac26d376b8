//! `sync`: intermedia synchronisation (seed 001 §2.1 "Synchronized streams with different QoS",
//! §5.1). ONE session shared by the media channels of a node (audio and video): going down it
//! stamps every message with the sender's presentation time; going up it holds each message in a
//! playout buffer and releases the media of every channel in step.
//!
//! # Algorithm: a playout buffer with one clock mapping per sender
//!
//! Down, the session pushes its incarnation `epoch` and the presentation time `pts` = the
//! sender's `ctx.now()` in ns. One session stamps every channel of the sender, so audio and
//! video share one media clock.
//!
//! Up, for a message from source `s` (any channel of the session):
//! - the first message of an incarnation of `s` fixes the clock mapping
//!   `base(s) = arrival − pts` (transit time plus the clocks' offset: the nodes' clocks need not
//!   agree), and so the presentation offset `D(s) = base(s) + playout_delay`;
//! - the message is due at `release = pts + D(s)`. Arriving before then, it is held and
//!   released at exactly `release` (a one-shot timer); held messages of all channels are
//!   released in order of `release` (ties: in arrival order), so audio and video leave in
//!   presentation order;
//! - arriving after `release` but by `release + max_skew`, it is delivered at once (counted
//!   `late`); later than that it is dropped (`too_late`).
//!
//! # Guarantee
//!
//! For every message from one incarnation of a source that the session delivers, on any of its
//! channels, `delivery time − pts` lies in `[D(s), D(s) + max_skew]`, so two media streams of one
//! sender are presented with a relative skew of at most `max_skew`; media arriving on time are
//! presented at exactly `pts + D(s)`, with no skew at all. In the simulator, where every node
//! reads the same clock, `pts` is the application's send time and `delivery − send` is the
//! latency the application sees: its spread over the audio and video of one (sender, receiver)
//! pair is at most `max_skew`. Media whose transit exceeds the first message's by more than
//! `playout_delay + max_skew` are dropped; choose `playout_delay` above the expected jitter.
//!
//! # Automatic binding
//!
//! Media in step need one failure detector and one device beneath them: when a channel that
//! starts has this session bound and slots still empty, the session fills every empty slot whose
//! layer it already shares a channel with, with that same session (seed 001 §4 automatic
//! binding; §5.1: "an alternative implementation could rely on this protocol to bind the shared
//! sessions when requested by the channel. In this case, the only bounded session would be the
//! Intermedia Sync"). Explicit bindings win; layers it does not share stay to default binding.
//!
//! Nothing else is held: notices and channel events do not pass through this layer. Do not bind
//! it to a reliable channel: it drops too-late messages (counted, but not reported up).
//!
//! # Wire format (network byte order)
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 4 | `epoch` | the sending session's incarnation: random, non-zero, drawn at its first send |
//! | 4 | 8 | `pts` | presentation time: the sender's clock when it sent the message, ns |
//!
//! A new epoch from a source resets its clock mapping (counted `source_restarted`: a restarted
//! node's clock may start anywhere); messages of its last [`RETIRED_EPOCHS`] epochs are dropped
//! (`stale_epoch`).
//!
//! # Counters
//!
//! `sync.held` (messages buffered), `sync.late` (delivered late, within `max_skew`),
//! `sync.too_late` (dropped), `sync.overflow` (dropped: the buffer held `capacity` messages),
//! `sync.truncated`, `sync.bad_epoch` (epoch 0), `sync.stale_epoch`, `sync.source_restarted`,
//! `sync.flushed` (held messages dropped because their channel closed).
//!
//! # Memory
//!
//! At most `capacity` held messages, plus one entry per source node.
//!
//! # Limits
//!
//! - The mapping is fixed by the first message of an incarnation: clock drift between nodes
//!   slowly moves the presentation offset (both streams alike, so the skew is unaffected).
//! - Held messages wait on a timer set on some channel of the session; if that channel closes,
//!   the remaining held messages wait for the next event the session handles on another open
//!   channel, which re-arms the timer.

use std::collections::{BTreeMap, HashMap};

use rand::RngCore;

use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Direction, Duration, Event, EventType, Instant, Layer,
    NodeId, Session, TimerId,
};

/// Bytes of the header.
pub const HEADER_LEN: usize = 4 + 8;
/// Incarnations of a source remembered after it restarted.
pub const RETIRED_EPOCHS: usize = 4;

/// Timer token of the release timer.
const RELEASE: u64 = 1;

/// Playout settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Added to the first message's transit: how long on-time media wait.
    pub playout_delay: Duration,
    /// How late (after its due time) a message may still be delivered.
    pub max_skew: Duration,
    /// Most messages held at once.
    pub capacity: usize,
}

impl Default for Config {
    /// 100 ms, 80 ms, 4096: see the stack-file kind (`sync`) for sources.
    fn default() -> Self {
        Config {
            playout_delay: Duration::from_millis(100),
            max_skew: Duration::from_millis(80),
            capacity: 4096,
        }
    }
}

/// The `sync` layer.
#[derive(Debug, Clone)]
pub struct Sync {
    name: String,
    config: Config,
}

impl Sync {
    /// A sync layer named `name`.
    pub fn new(name: impl Into<String>, config: Config) -> Self {
        Sync {
            name: name.into(),
            config,
        }
    }
}

impl Layer for Sync {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// A playout deadline: a message later than `max_skew` is dropped (`too_late`), by design
    /// of a media stream. Per source, messages leave in send order.
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: false,
            fifo: below.fifo,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(SyncSession::new(self.config))
    }
}

/// The clock mapping of one source incarnation.
#[derive(Debug, Default)]
struct Source {
    epoch: u32,
    retired: [u32; RETIRED_EPOCHS],
    /// `arrival − pts` of the incarnation's first message, ns.
    base: i128,
}

/// Session of [`Sync`]: the playout buffer and the mapping per source.
#[derive(Debug)]
pub struct SyncSession {
    config: Config,
    epoch: u32,
    sources: HashMap<NodeId, Source>,
    /// Held up-going events by (release time ns, arrival number).
    held: BTreeMap<(u64, u64), Event>,
    arrivals: u64,
    /// The pending release timer: its id, deadline and channel.
    timer: Option<(TimerId, Instant, ChannelId)>,
}

impl SyncSession {
    fn new(config: Config) -> Self {
        SyncSession {
            config,
            epoch: 0,
            sources: HashMap::new(),
            held: BTreeMap::new(),
            arrivals: 0,
            timer: None,
        }
    }

    /// Messages held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn epoch(&mut self, ctx: &mut Context<'_>) -> u32 {
        while self.epoch == 0 {
            let x = ctx.rng().next_u64() ^ ctx.now().as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.epoch = (x ^ (x >> 32)) as u32;
        }
        self.epoch
    }

    /// Delivers every held message due by now, in release order.
    fn release_due(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.now().as_nanos();
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            ctx.go(entry.remove());
        }
    }

    /// Makes the timer fire at the earliest held release (set on the current channel).
    fn arm(&mut self, ctx: &mut Context<'_>) {
        let Some(&(due, _)) = self.held.keys().next() else {
            if let Some((id, _, _)) = self.timer.take() {
                ctx.cancel_timer(id);
            }
            return;
        };
        let due = Instant::from_nanos(due);
        match self.timer {
            Some((_, at, _)) if at <= due => {}
            _ => {
                let channel = ctx.channel();
                if !ctx.is_bound(channel) {
                    return;
                }
                if let Some((id, _, _)) = self.timer.take() {
                    ctx.cancel_timer(id);
                }
                let id = ctx.set_timer_at(due, RELEASE);
                self.timer = Some((id, due, channel));
            }
        }
    }

    fn up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let header = s
            .message
            .pop_u32()
            .and_then(|epoch| Ok((epoch, s.message.pop_u64()?)));
        let Ok((epoch, pts)) = header else {
            ctx.count("truncated");
            return;
        };
        if epoch == 0 {
            ctx.count("bad_epoch");
            return;
        }
        let now = ctx.now().as_nanos();
        let source = self.sources.entry(s.source).or_default();
        if epoch != source.epoch {
            if source.retired.contains(&epoch) {
                ctx.count("stale_epoch");
                return;
            }
            if source.epoch != 0 {
                ctx.count("source_restarted");
                source.retired.rotate_right(1);
                source.retired[0] = source.epoch;
            }
            source.epoch = epoch;
            source.base = i128::from(now) - i128::from(pts);
        }
        let delay = i128::from(viastack_kernel::time::duration_nanos(
            self.config.playout_delay,
        ));
        let release = i128::from(pts) + source.base + delay;
        let release = u64::try_from(release.max(0)).unwrap_or(u64::MAX);
        // Whatever is due first leaves first.
        self.release_due(ctx);
        if release > now {
            if self.held.len() >= self.config.capacity {
                ctx.count("overflow");
                return;
            }
            ctx.count("held");
            self.held.insert((release, self.arrivals), event);
            self.arrivals = self.arrivals.wrapping_add(1);
            self.arm(ctx);
            return;
        }
        let lateness = now - release;
        if lateness > viastack_kernel::time::duration_nanos(self.config.max_skew) {
            ctx.count("too_late");
            return;
        }
        if lateness > 0 {
            ctx.count("late");
        }
        ctx.go(event);
    }
}

impl Session for SyncSession {
    /// Brings the sessions this one already shares a channel with (see "Automatic binding").
    fn auto_bind(&mut self, request: &mut viastack_kernel::AutoBind<'_>) {
        request.bind_companions();
    }

    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            if let (Body::Timer(t), Some((id, _, _))) = (&event.body, self.timer) {
                if t.token == RELEASE && t.id == id {
                    self.timer = None;
                    self.release_due(ctx);
                    self.arm(ctx);
                }
            }
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            let before = self.held.len();
            self.held.retain(|_, e| e.channel() != channel);
            let flushed = before - self.held.len();
            if flushed > 0 {
                ctx.count_n("flushed", flushed as u64);
            }
            if let Some((id, _, ch)) = self.timer {
                if ch == channel {
                    ctx.cancel_timer(id);
                    self.timer = None;
                }
            }
            ctx.go(event);
            return;
        }
        // A timer lost with a closed channel is re-armed on this one (see Limits).
        if self.timer.is_none() && !self.held.is_empty() {
            self.release_due(ctx);
            self.arm(ctx);
        }
        match event.dir() {
            Direction::Down => {
                let epoch = self.epoch(ctx);
                let pts = ctx.now().as_nanos();
                if let Some(s) = event.sendable_mut() {
                    s.message.push_u64(pts);
                    s.message.push_u32(epoch);
                }
                ctx.go(event);
            }
            Direction::Up if event.sendable_ref().is_some() => self.up(event, ctx),
            Direction::Up => ctx.go(event),
        }
    }
}

//! The receiving half of one (channel, peer) stream: duplicate suppression, in-order delivery
//! through a bounded reorder ring, and the ACK/NACK policy.
//!
//! The ring holds slot `i` for sequence number `expected + i`; slot 0 is always empty (that
//! segment would have been delivered). A segment at `expected` is delivered at once, followed
//! by every buffered segment it makes contiguous. Segments within the advertised window but
//! above `expected` are buffered, bounded by `receive_window` slots and `reorder_bytes` bytes.
//!
//! ACK policy (RFC 1122 §4.2.3.2, RFC 5681 §4.2): in-order segments are acknowledged at once
//! when at least `ack_every` of them and `ack_bytes` bytes wait (TCP's "every second
//! full-sized segment"), or [`SMALL_SEGMENTS_FACTOR`] × `ack_every` of any size; otherwise
//! after `ack_delay` — unless a DATA segment to the same peer leaves first and carries the ACK
//! ([`Receiver::take_ack`], piggybacking: a request/response exchange then sends no ACK of its
//! own). A duplicate, a segment beyond the window, one that fills a gap or one out of order is
//! acknowledged at once; a segment that opens a new gap (above every sequence number seen) is
//! answered at once by a NACK naming the holes. "At once" is at the end of the kernel's current
//! input (its `Flush`, in the same driver call): the segments of one bundle or one batch of
//! datagrams are answered by one cumulative ACK, unless DATA to the peer leaves first and
//! carries it.

use std::collections::VecDeque;

use viastack_kernel::{Context, Dest, Direction, Event, Instant, Sendable};

use super::wire::{Ack, Data, Range, MAX_RANGES};
use super::{Config, Link};

/// Epochs of a peer remembered after it restarted, so its late segments are recognised.
pub const RETIRED_EPOCHS: usize = 4;

/// Ranges an ACK or NACK carries at most (TCP carries 3–4 SACK blocks, RFC 2018 §3).
pub const SENT_RANGES: usize = 4;

const _: () = assert!(SENT_RANGES <= MAX_RANGES);

/// In-order segments smaller than `ack_bytes` in total are acknowledged at once when this many
/// times `ack_every` of them wait (so a stream of small messages is still clocked by ACKs).
pub const SMALL_SEGMENTS_FACTOR: u32 = 8;

/// What the session must do after a segment arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Nothing now (a delayed ACK may be due at `ack_deadline`).
    Later,
    /// An ACK now.
    Ack,
    /// A NACK now.
    Nack,
    /// The segment was not addressed to this incarnation: tell its sender who answers, with an
    /// ACK of its stream that acknowledges nothing (`cum` is the segment's `first`).
    Introduce {
        /// The segment's stream.
        epoch: u32,
        /// Its `first`.
        cum: u64,
    },
}

/// The receiving state for one (channel, peer).
#[derive(Debug)]
pub(crate) struct Receiver {
    /// Who this receiving state is (random, never 0): a sender's segments are delivered only
    /// when addressed to it, so a receiver that lost its state (a restart) never delivers what
    /// its previous incarnation may already have delivered.
    incarnation: u32,
    epoch: u32,
    retired: [u32; RETIRED_EPOCHS],
    expected: u64,
    /// One past the highest sequence number received in this epoch.
    highest: u64,
    ring: VecDeque<Option<Event>>,
    ring_bytes: usize,
    unacked: u32,
    unacked_bytes: usize,
    /// When the delayed ACK is due.
    pub ack_deadline: Option<Instant>,
    /// An ACK is owed at the end of the kernel's current input (its `Flush`): the segments
    /// of one bundle or one batch of datagrams are answered by one ACK.
    pub ack_due: bool,
}

impl Receiver {
    /// A receiving state with no stream yet, known to senders as `incarnation` (non-zero).
    pub fn new(incarnation: u32) -> Self {
        Receiver {
            incarnation,
            epoch: 0,
            retired: [0; RETIRED_EPOCHS],
            expected: 0,
            highest: 0,
            ring: VecDeque::new(),
            ring_bytes: 0,
            unacked: 0,
            unacked_bytes: 0,
            ack_deadline: None,
            ack_due: false,
        }
    }

    /// The peer's current stream epoch (0: none heard yet).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Bytes buffered out of order.
    pub fn buffered_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Slots of the reorder ring.
    pub fn buffered_slots(&self) -> usize {
        self.ring.len()
    }

    fn clear_ring(&mut self) -> u64 {
        let dropped = self.ring.iter().filter(|s| s.is_some()).count() as u64;
        self.ring.clear();
        self.ring_bytes = 0;
        dropped
    }

    /// Handles a DATA segment whose header was popped from `event`.
    pub fn on_data(&mut self, d: Data, event: Event, cfg: &Config, ctx: &mut Context<'_>) -> Reply {
        if d.to != self.incarnation {
            // A sender that does not know us yet (0), or that addresses a previous incarnation
            // of this receiving state: whatever it holds may have been delivered by that one.
            ctx.count(if d.to == 0 {
                "unintroduced"
            } else {
                "other_incarnation"
            });
            if d.epoch == self.epoch {
                return Reply::Ack; // a late copy of a stream we know: its state answers
            }
            return Reply::Introduce {
                epoch: d.epoch,
                cum: d.first,
            };
        }
        let expected = if d.epoch == self.epoch {
            self.expected
        } else {
            0
        };
        if d.first > expected {
            // The sender claims we acknowledged what we never received (every stream starts
            // at 0, and only this incarnation acknowledges what is addressed to it): the peer
            // is broken or hostile. Nothing changes, above all no stream is reset.
            ctx.count("inconsistent");
            return Reply::Later;
        }
        if d.epoch != self.epoch {
            if self.retired.contains(&d.epoch) {
                ctx.count("stale_epoch");
                return Reply::Later;
            }
            if self.epoch != 0 {
                ctx.count("peer_restarted");
                let dropped = self.clear_ring();
                ctx.count_n("reset_dropped", dropped);
                self.retired.rotate_right(1);
                self.retired[0] = self.epoch;
            }
            self.epoch = d.epoch;
            self.expected = 0;
            self.highest = 0;
            self.unacked = 0;
            self.unacked_bytes = 0;
            self.ack_deadline = None;
        }
        if d.seq < self.expected {
            ctx.count("duplicate");
            return Reply::Ack;
        }
        let off = d.seq - self.expected;
        if off >= u64::from(cfg.receive_window.max(1)) {
            ctx.count("beyond_window");
            return Reply::Ack;
        }
        let off = off as usize;
        let new_gap = d.seq > self.highest;
        self.highest = self.highest.max(d.seq + 1);
        if off == 0 {
            self.unacked_bytes += len_of(&event);
            ctx.go(event);
            self.expected += 1;
            self.ring.pop_front();
            let filled = self.deliver_ready(ctx);
            self.unacked += 1;
            let full = self.unacked >= cfg.ack_every && self.unacked_bytes >= cfg.ack_bytes;
            if filled || full || self.unacked >= cfg.ack_every * SMALL_SEGMENTS_FACTOR {
                return Reply::Ack;
            }
            if self.ack_deadline.is_none() {
                self.ack_deadline = Some(ctx.now() + cfg.ack_delay);
            }
            return Reply::Later;
        }
        if self.ring.get(off).is_some_and(Option::is_some) {
            ctx.count("duplicate");
            return Reply::Ack;
        }
        let len = len_of(&event);
        if self.ring_bytes + len > cfg.reorder_bytes {
            ctx.count("reorder_full");
            return Reply::Ack;
        }
        if self.ring.len() <= off {
            self.ring.resize_with(off + 1, || None);
        }
        self.ring[off] = Some(event);
        self.ring_bytes += len;
        if new_gap {
            Reply::Nack
        } else {
            Reply::Ack
        }
    }

    /// Delivers the buffered segments now contiguous with `expected`; whether there were any.
    fn deliver_ready(&mut self, ctx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(Some(_)) = self.ring.front() {
            if let Some(Some(e)) = self.ring.pop_front() {
                self.ring_bytes -= len_of(&e);
                ctx.go(e);
                self.expected += 1;
                any = true;
            }
        }
        any
    }

    /// Whether something received waits to be acknowledged (at once, or by a delayed ACK).
    pub fn owes_ack(&self) -> bool {
        self.epoch != 0 && (self.unacked > 0 || self.ack_deadline.is_some() || self.ack_due)
    }

    /// The pending ACK, for a DATA segment leaving for the peer to carry (and so none is due
    /// any more); None when nothing waits to be acknowledged.
    pub fn take_ack(&mut self, cfg: &Config, ctx: &mut Context<'_>) -> Option<Ack> {
        if !self.owes_ack() {
            return None;
        }
        ctx.count("acks_piggybacked");
        Some(self.build(false, cfg))
    }

    /// Builds and sends an ACK (SACK blocks: buffered runs) or a NACK (holes below the highest
    /// buffered segment).
    pub fn reply(&mut self, nack: bool, cfg: &Config, link: Link, ctx: &mut Context<'_>) {
        if self.epoch == 0 {
            return;
        }
        let ack = self.build(nack, cfg);
        ctx.count(if nack { "nacks_sent" } else { "acks_sent" });
        ctx.go(Event::sendable(
            viastack_kernel::event::SENDABLE.id(),
            Direction::Down,
            link.channel,
            Sendable::new(ctx.node(), Dest::Node(link.peer), ack.to_message()),
        ));
    }

    /// Tells the sender of a segment not addressed to this incarnation who answers: an ACK of
    /// its stream `epoch` with this incarnation, acknowledging nothing (`cum`: its `first`).
    pub fn introduce(&self, epoch: u32, cum: u64, cfg: &Config, link: Link, ctx: &mut Context<'_>) {
        ctx.count("introductions");
        let ack = Ack::new(false, epoch, self.incarnation, cum, cfg.receive_window);
        ctx.go(Event::sendable(
            viastack_kernel::event::SENDABLE.id(),
            Direction::Down,
            link.channel,
            Sendable::new(ctx.node(), Dest::Node(link.peer), ack.to_message()),
        ));
    }

    /// The ACK or NACK of the current state; nothing is due after it.
    fn build(&mut self, nack: bool, cfg: &Config) -> Ack {
        let mut ack = Ack::new(
            nack,
            self.epoch,
            self.incarnation,
            self.expected,
            cfg.receive_window,
        );
        let mut run: Option<u64> = None;
        let mut n = 0;
        for (i, slot) in self.ring.iter().enumerate() {
            let seq = self.expected + i as u64;
            // A NACK lists runs of empty slots, an ACK runs of full ones.
            let wanted = slot.is_some() != nack;
            match (wanted, run) {
                (true, None) => run = Some(seq),
                (false, Some(start)) => {
                    ack.push_range(Range { start, end: seq });
                    run = None;
                    n += 1;
                    if n == SENT_RANGES {
                        break;
                    }
                }
                _ => {}
            }
        }
        if let (Some(start), true) = (run, n < SENT_RANGES) {
            ack.push_range(Range {
                start,
                end: self.expected + self.ring.len() as u64,
            });
        }
        self.unacked = 0;
        self.unacked_bytes = 0;
        self.ack_deadline = None;
        self.ack_due = false;
        ack
    }
}

fn len_of(e: &Event) -> usize {
    e.sendable_ref().map_or(0, |s| s.message.len())
}

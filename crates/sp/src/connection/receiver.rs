//! The receiving half of a [`Connection`]: blocks into whole messages delivered in order,
//! ACKs and NACKs out, and the give-up rules outside RELIABLE (seed 002 §3.1.6): an incomplete
//! message is reported as dropped after the reassembly timeout (after `attempts` NACK rounds
//! with ST_RTR), never in RELIABLE.

use viastack_kernel::{Duration, Instant};

use super::{
    reassembly, Block, BlockBytes, BlockOutcome, Connection, DropReason, Event, Flags, PacketType,
    Reliability, Repr, State, Timer, NACKS_WAITING, REORDER_DECAY_ROUNDS,
};

impl Connection {
    pub(super) fn on_data(&mut self, now: Instant, repr: &Repr, payload: BlockBytes<'_>) {
        if !matches!(
            self.state,
            State::Connected | State::Closing | State::EndRequestLocal
        ) {
            return;
        }
        let seq = self.recv.expand(repr.mess_seq_no);
        let mode = Reliability::from_flags(repr.flags);
        self.peer_last_sent = self.peer_last_sent.max(seq);
        let limit = (self.config.recv_window as usize).saturating_sub(self.undelivered_bytes());
        // A block NACKed as missing that now arrives as an original (not ST_RETRANS) was
        // reordered, not lost: how late it came sets the reordering window.
        let nacked_at = self.recv.partial.get(&seq).and_then(|p| {
            let missing = !p.have.contains(repr.pblock) && repr.pblock < p.tblock;
            p.last_nack.filter(|_| missing)
        });
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
            limit,
        );
        match outcome {
            BlockOutcome::Stored => {
                if let Some(t) = nacked_at.filter(|_| !repr.flags.contains(Flags::ST_RETRANS)) {
                    self.on_reordered(now.saturating_duration_since(t));
                }
            }
            BlockOutcome::Duplicate => self.stats.duplicates += 1,
            BlockOutcome::Invalid => self.stats.bad_packet += 1,
            BlockOutcome::OverWindow => self.stats.over_window += 1,
        }
        let delivered = self.stats.messages_delivered;
        self.deliver_ready();
        if self.stats.messages_delivered > delivered && !repr.flags.contains(Flags::REPLY_REQUESTED)
        {
            // A late or repaired block completed messages after their last block asked for
            // an ACK: acknowledge now, or the sender waits for its ACK timer.
            self.push_ack(false);
        }
        if repr.flags.contains(Flags::REPLY_REQUESTED) {
            // The sender's last block of a message: acknowledge, and NACK what is missing up
            // to it in the modes that resend — at once, or once the reordering window has
            // passed on a path that reorders.
            self.push_ack(false);
            if self.reorder_window.is_zero() || self.nacks_due.len() >= NACKS_WAITING {
                self.push_nacks(now, seq, false);
            } else {
                let due = now + self.reorder_window;
                self.nacks_due.push_back((due, seq));
                self.timers.set_if_idle(Timer::Nack, due);
            }
        }
        self.arm_reassembly(now);
    }

    /// A NACKed block arrived `late` after its NACK without being sent again: the path
    /// reorders by at least `late` + the window the NACK waited. NACKs wait 1.5 × that from
    /// now on (RFC 8985 §6.2 widens its window on spurious retransmissions likewise), at most
    /// a quarter of the reassembly timeout, until [`REORDER_DECAY_ROUNDS`] NACK rounds pass
    /// without reordering.
    fn on_reordered(&mut self, late: Duration) {
        self.stats.reordered += 1;
        let extent = late + self.reorder_window;
        let cap = self.config.reassembly_timeout / 4;
        self.reorder_window = self.reorder_window.max(extent + extent / 2).min(cap);
        self.rounds_since_reorder = 0;
    }

    /// NACKs what is still missing of the messages whose reordering window has passed.
    pub(super) fn on_nack_timer(&mut self, now: Instant) {
        let mut upto = None;
        while let Some(&(due, seq)) = self.nacks_due.front() {
            if due > now {
                self.timers.set(Timer::Nack, due);
                break;
            }
            self.nacks_due.pop_front();
            upto = upto.max(Some(seq));
        }
        if let Some(upto) = upto {
            let sent = self.stats.nacks_sent;
            self.push_nacks(now, upto, false);
            if self.stats.nacks_sent > sent {
                // A round that found real gaps. Many in a row without reordering: the path
                // may have stopped reordering, so the window halves (RFC 8985 §6.2.4).
                self.rounds_since_reorder += 1;
                if self.rounds_since_reorder >= REORDER_DECAY_ROUNDS {
                    self.rounds_since_reorder = 0;
                    self.reorder_window /= 2;
                }
            }
        }
    }

    pub(super) fn deliver_ready(&mut self) {
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

    pub(super) fn push_ack(&mut self, reply: bool) {
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
    pub(super) fn push_nacks(&mut self, now: Instant, upto: u64, force: bool) {
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

    pub(super) fn arm_reassembly(&mut self, now: Instant) {
        if let Some(p) = self.recv.partial.values().next() {
            let at = p.known_at + self.config.reassembly_timeout;
            if self.timers.get(Timer::Reassembly).is_none_or(|d| d > at) {
                self.timers.set(Timer::Reassembly, at.max(now));
            }
        } else {
            self.timers.stop(Timer::Reassembly);
        }
    }

    /// The peer sent everything up to `last`: deliver what is whole, report the rest.
    pub(super) fn settle_until(&mut self, now: Instant, last: u64) {
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

    pub(super) fn report_drop(&mut self, seq: u64, p: &reassembly::Partial) {
        self.stats.messages_dropped += 1;
        let reason = if p.seen {
            DropReason::Incomplete
        } else {
            DropReason::Lost
        };
        self.events.push_back(Event::Dropped { seq, reason });
    }

    pub(super) fn on_reassembly_timer(&mut self, now: Instant) {
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

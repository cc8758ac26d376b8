//! The sending half of a [`Connection`]: packets out in order (control, retransmissions, the
//! message being sent, the next queued message within the peer's window), acknowledgements
//! and NACKs in, and the ACK/RETRANS timers (seed 002 §3.1.4). A block is never copied here:
//! its header is written with a checksum over the block where it lies.

use viastack_kernel::{Duration, Instant};

use super::{
    fec, reassembly, BlockSet, Connection, FailReason, Flags, OutMessage, PacketType, PayloadRef,
    Reliability, Repr, State, Timer, Transmit, CB_CAPABLE,
};

impl Connection {
    /// [`poll_transmit_parts`](Self::poll_transmit_parts) returning where the block lies
    /// instead of borrowing it: valid until the connection next handles a packet, a timeout or
    /// a command (further `poll_transmit_ref` calls only append to what it indexes, so a
    /// driver may gather several packets for one batched send).
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
            cb: if self.config.ecn { CB_CAPABLE } else { 0 },
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
            let range = m.block_range(i);
            repr.emit_header(&m.data[range.clone()], head).ok()?;
            range
        } else {
            let g = i - tblock;
            let mut parity = Vec::with_capacity(m.stride + 2);
            for j in fec::group_range(g, tblock, k) {
                fec::xor_block(&mut parity, m.block(j));
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
    pub(super) fn next_resend(&mut self) -> Option<(usize, usize)> {
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

    pub(super) fn sent(&mut self, size: usize, priority: u8) -> Transmit {
        self.stats.packets_sent += 1;
        Transmit { size, priority }
    }

    pub(super) fn after_message_sent(&mut self, now: Instant, idx: usize) {
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

    pub(super) fn ack_timeout(&self) -> Duration {
        self.stats.srtt.map_or(self.config.ack_timeout, |s| {
            self.config.ack_timeout.max(s * 4)
        })
    }

    pub(super) fn retrans_timeout(&self) -> Duration {
        self.stats.srtt.map_or(self.config.retrans_timeout, |s| {
            self.config.retrans_timeout.max(s * 4)
        })
    }

    pub(super) fn start_next_message(&mut self, now: Instant) {
        let Some(next) = self.queue.peek() else {
            return;
        };
        let mut window = self.stats.peer_window as usize;
        if self.config.congestion_control {
            window = window.min(self.cwnd.get());
        }
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
        let stride = q.data.len().div_ceil(tblock);
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
            stride,
            next_block: 0,
            total_packets: total as u16,
            resend: BlockSet::default(),
            resend_pending: false,
            sent_at: None,
            retransmitted: false,
            retries: 0,
        });
    }

    pub(super) fn on_cumulative_ack(&mut self, now: Instant, wire: u16) {
        let Some(front) = self.inflight.front() else {
            return;
        };
        let acked = reassembly::expand(front.seq, wire);
        if acked >= self.next_seq {
            return;
        }
        let mut progressed = false;
        let mut bytes = 0;
        while self
            .inflight
            .front()
            .is_some_and(|m| m.seq <= acked && m.fully_sent())
        {
            if let Some(m) = self.inflight.pop_front() {
                self.in_flight_bytes -= m.data.len();
                bytes += m.data.len();
                progressed = true;
            }
        }
        if progressed {
            // RFC 7661: grow only a window that was used (half of it in flight at least).
            if (self.in_flight_bytes + bytes) * 2 >= self.cwnd.get() {
                self.cwnd.on_acked(bytes, self.config.block_size);
                self.stats.congestion_window = self.cwnd.get() as u64;
            }
            self.timers.stop(Timer::Ack);
            self.timers.stop(Timer::Retrans);
            if self.inflight.iter().any(|m| m.sent_at.is_some()) {
                self.rearm_after_progress(now);
            }
        }
    }

    pub(super) fn rearm_after_progress(&mut self, now: Instant) {
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

    pub(super) fn on_nack(&mut self, now: Instant, repr: &Repr, payload: &[u8]) {
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
        let seq = m.seq;
        self.on_congestion_signal(seq);
        let Some(m) = self.inflight.iter_mut().find(|m| m.seq == seq) else {
            return;
        };
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

    pub(super) fn on_retrans_timer(&mut self, now: Instant) {
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
            self.on_congestion_timeout();
            // Ask again what is missing.
            self.push_ctrl(PacketType::Ack, Flags::REPLY_REQUESTED, 0, 0, Vec::new());
        }
        if !self.inflight.is_empty() {
            let t = self.retrans_timeout();
            self.timers.set(Timer::Retrans, now + t);
        }
        self.maybe_send_end(now);
    }
}

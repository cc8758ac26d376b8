//! Many SP connections behind one address, sans-IO (quinn-proto's `Endpoint`): datagrams in
//! through [`Endpoint::handle_datagram`], packets out through [`Endpoint::poll_transmit`],
//! application events through [`Endpoint::poll_event`], timers through
//! [`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`].
//!
//! Demultiplexing: a packet's DEST_ID names the local connection, whose peer address must
//! match the datagram's source. A START with DEST_ID 0 and REPLY_REQUESTED asks for a new
//! connection: it is accepted (when accepting, below [`Endpoint::max_connections`]) or refused
//! with REJ; a repeated START (its reply was lost) reaches the connection it created, keyed by
//! (peer address, peer's SRC_ID). A packet for an unknown connection is answered with END +
//! REMOTE_RESET, except an END + REPLY_REQUESTED, answered with END + REPLY so a peer whose END
//! reply was lost after this side forgot the connection still closes cleanly.
//!
//! Bad datagrams (truncated, TOTAL_LEN mismatch, bad type, bad checksum) are counted in
//! [`EndpointStats`] and dropped.
//!
//! **Receiving in place** (for drivers with vectored receives): [`Endpoint::recv_slot`] lends
//! the region where the next DATA block of the connection that last received one will
//! probably go; the driver receives the next datagram as header + that region + an overflow
//! buffer and calls [`Endpoint::handle_received`]. A datagram that is that block is handled
//! where it lies; any other is copied out whole and handled as by
//! [`Endpoint::handle_datagram`]. Both paths count and decide alike.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;

use viastack_kernel::Instant;

use crate::connection::{
    Config, Connection, Event, PayloadRef, Slot as BlockSlot, State, Stats, Transmit,
    MAX_BLOCK_SIZE,
};
use crate::wire::{Flags, Packet, PacketType, Repr, WireError, HEADER_LEN};

/// A region [`Endpoint::recv_slot`] lent: the connection and its [`Slot`](crate::connection::Slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSlot {
    /// The connection the block is expected on.
    pub handle: ConnectionHandle,
    /// Where in it.
    pub slot: BlockSlot,
}

/// Where the data block of a packet from [`Endpoint::poll_transmit_ref`] lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransmitRef {
    block: Option<(u16, PayloadRef)>,
}

/// A datagram received as header + lent region + overflow (see
/// [`Endpoint::handle_received`]).
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// Its length.
    pub len: usize,
    /// The buffer its first [`HEADER_LEN`] bytes went to.
    pub head: &'a [u8],
    /// The lent region its next bytes went to.
    pub slot: RecvSlot,
    /// The buffer the bytes beyond the region went to.
    pub overflow: &'a [u8],
    /// The IP header said "congestion experienced" (ECN CE).
    pub ce: bool,
}

/// A connection of an endpoint: its local id (SRC_ID of its packets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub u16);

/// An event of one connection, with its peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointEvent<A> {
    /// The connection.
    pub handle: ConnectionHandle,
    /// Its peer's address.
    pub peer: A,
    /// What happened.
    pub event: Event,
}

/// Datagrams the endpoint dropped or answered itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Shorter than the header.
    pub truncated: u64,
    /// TOTAL_LEN differs from the datagram length.
    pub bad_total_len: u64,
    /// PK_TYPE 9–15.
    pub bad_type: u64,
    /// CHKSUM mismatch.
    pub bad_checksum: u64,
    /// DEST_ID names no connection (answered with a reset).
    pub unknown_connection: u64,
    /// DEST_ID's connection has another peer address.
    pub wrong_peer: u64,
    /// STARTs refused with REJ.
    pub rejected: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// DATA blocks received in place (see [`Endpoint::handle_received`]): not copied.
    pub in_place: u64,
    /// Datagrams received around a lent region that were not its block: copied out whole.
    pub copied_out: u64,
}

impl EndpointStats {
    /// Every bad datagram.
    pub fn bad_packets(&self) -> u64 {
        self.truncated + self.bad_total_len + self.bad_type + self.bad_checksum
    }
}

/// Drop and repair counters summed over every connection an endpoint has had, reaped ones
/// included (see [`Endpoint::connection_totals`]): what the `sp` layer reports as stack
/// counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionTotals {
    /// Data blocks sent again ([`Stats::retransmits`]).
    pub retransmits: u64,
    /// Blocks received twice ([`Stats::duplicates`]).
    pub duplicates: u64,
    /// Blocks refused beyond the advertised window ([`Stats::over_window`]).
    pub over_window: u64,
    /// Packets dropped as inconsistent ([`Stats::bad_packet`]).
    pub inconsistent: u64,
    /// Blocks rebuilt from parity ([`Stats::fec_repairs`]).
    pub fec_repairs: u64,
    /// NACKs sent ([`Stats::nacks_sent`]).
    pub nacks_sent: u64,
    /// Congestion window reductions ([`Stats::congestion_reductions`]).
    pub congestion_reductions: u64,
    /// Data packets marked "congestion experienced" ([`Stats::ce_received`]).
    pub ce_received: u64,
    /// NACKed blocks that turned up by themselves ([`Stats::reordered`]).
    pub reordered: u64,
}

impl ConnectionTotals {
    fn add(&mut self, s: &Stats) {
        self.retransmits += s.retransmits;
        self.duplicates += s.duplicates;
        self.over_window += s.over_window;
        self.inconsistent += s.bad_packet;
        self.fec_repairs += s.fec_repairs;
        self.nacks_sent += s.nacks_sent;
        self.congestion_reductions += s.congestion_reductions;
        self.ce_received += s.ce_received;
        self.reordered += s.reordered;
    }
}

struct Slot<A> {
    peer: A,
    conn: Connection,
}

/// Many connections over one datagram socket whose addresses are `A`.
pub struct Endpoint<A> {
    config: Config,
    accepting: bool,
    /// Most connections at once; STARTs beyond are refused.
    pub max_connections: usize,
    conns: BTreeMap<u16, Slot<A>>,
    by_peer: HashMap<(A, u16), u16>,
    next_id: u16,
    stateless: VecDeque<(A, Repr)>,
    accepted: VecDeque<ConnectionHandle>,
    cursor: u16,
    stats: EndpointStats,
    /// Counters of the connections [`reap`](Self::reap) removed.
    retired: ConnectionTotals,
    /// The connection that last received a DATA packet (whose next block is predicted).
    receiving: Option<u16>,
}

impl<A: Clone + Eq + Hash + Debug> Endpoint<A> {
    /// An endpoint whose connections use `config`; `accepting` lets peers open connections.
    pub fn new(config: Config, accepting: bool) -> Self {
        Endpoint {
            config,
            accepting,
            max_connections: 1024,
            conns: BTreeMap::new(),
            by_peer: HashMap::new(),
            next_id: 1,
            stateless: VecDeque::new(),
            accepted: VecDeque::new(),
            cursor: 0,
            stats: EndpointStats::default(),
            retired: ConnectionTotals::default(),
            receiving: None,
        }
    }

    /// Whether STARTs are accepted.
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    /// Counters of dropped and self-answered datagrams.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Drop and repair counters of every connection, live or reaped: O(connections).
    pub fn connection_totals(&self) -> ConnectionTotals {
        let mut t = self.retired;
        for s in self.conns.values() {
            t.add(s.conn.stats());
        }
        t
    }

    /// The configuration new connections get.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn alloc_id(&mut self) -> Option<u16> {
        for _ in 0..=u16::MAX {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if id != 0 && !self.conns.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Opens a connection to `peer` (START + REPLY_REQUESTED); `None` when every id is taken.
    pub fn connect(&mut self, now: Instant, peer: A) -> Option<ConnectionHandle> {
        self.connect_with(now, peer, self.config.clone())
    }

    /// [`connect`](Self::connect) with a connection-specific configuration.
    pub fn connect_with(
        &mut self,
        now: Instant,
        peer: A,
        config: Config,
    ) -> Option<ConnectionHandle> {
        let id = self.alloc_id()?;
        let mut conn = Connection::new(config, id);
        conn.connect(now);
        self.conns.insert(id, Slot { peer, conn });
        Some(ConnectionHandle(id))
    }

    /// The next connection a peer opened, if any.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        self.accepted.pop_front()
    }

    /// The connection `h`.
    pub fn connection(&self, h: ConnectionHandle) -> Option<&Connection> {
        self.conns.get(&h.0).map(|s| &s.conn)
    }

    /// The connection `h`, to give it commands.
    pub fn connection_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        self.conns.get_mut(&h.0).map(|s| &mut s.conn)
    }

    /// Gives a message buffer of `h` back for reuse (see [`Connection::recycle`]).
    pub fn recycle(&mut self, h: ConnectionHandle, buf: Vec<u8>) {
        if let Some(s) = self.conns.get_mut(&h.0) {
            s.conn.recycle(buf);
        }
    }

    /// The peer of `h`.
    pub fn peer(&self, h: ConnectionHandle) -> Option<&A> {
        self.conns.get(&h.0).map(|s| &s.peer)
    }

    /// Handles live connections.
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.conns.keys().map(|&k| ConnectionHandle(k))
    }

    /// Handles one datagram from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: A, bytes: &[u8]) {
        self.handle_datagram_ecn(now, from, bytes, false);
    }

    /// [`handle_datagram`](Self::handle_datagram) for a datagram whose IP header carried the
    /// ECN mark "congestion experienced" when `ce` (a data packet then counts as CB = 2).
    pub fn handle_datagram_ecn(&mut self, now: Instant, from: A, bytes: &[u8], ce: bool) {
        let packet = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(e) => {
                match e {
                    WireError::Truncated { .. } => self.stats.truncated += 1,
                    WireError::TotalLen { .. } => self.stats.bad_total_len += 1,
                    _ => self.stats.bad_type += 1,
                }
                return;
            }
        };
        let Ok(repr) = Repr::parse(&packet) else {
            self.stats.bad_checksum += 1;
            return;
        };
        let payload = packet.payload();
        if repr.dest_id == 0 {
            if repr.packet_type == PacketType::Start && repr.flags.contains(Flags::REPLY_REQUESTED)
            {
                self.on_start(now, from, &repr, payload);
            } else {
                self.stats.unknown_connection += 1;
            }
            return;
        }
        match self.conns.get_mut(&repr.dest_id) {
            Some(slot) if slot.peer == from => {
                if repr.packet_type == PacketType::Data {
                    self.receiving = Some(repr.dest_id);
                    if ce {
                        slot.conn.note_congestion_experienced();
                    }
                }
                slot.conn.handle_repr(now, &repr, payload)
            }
            Some(_) => self.stats.wrong_peer += 1,
            None => {
                self.stats.unknown_connection += 1;
                self.answer_unknown(from, &repr);
            }
        }
    }

    /// Lends the region where the next DATA block of the connection that last received one
    /// will probably land (see [`Connection::recv_slot`]); `None` when nothing is expected.
    pub fn recv_slot(&mut self) -> Option<(RecvSlot, &mut [u8])> {
        let id = self.receiving?;
        let (slot, region) = self.conns.get_mut(&id)?.conn.recv_slot()?;
        let handle = ConnectionHandle(id);
        Some((RecvSlot { handle, slot }, region))
    }

    /// Whether the connection that last received a DATA packet is in the middle of a
    /// message (see [`Connection::mid_message`]).
    pub fn mid_message(&self) -> bool {
        self.receiving
            .and_then(|id| self.conns.get(&id))
            .is_some_and(|s| s.conn.mid_message())
    }

    /// Handles a whole datagram the way a driver that receives in place would (as `SpSocket`
    /// does): its header, then as much as fits into the region [`recv_slot`](Self::recv_slot)
    /// lends, the rest as overflow, into [`handle_received`](Self::handle_received); a plain
    /// [`handle_datagram`](Self::handle_datagram) when no region is lent. For simulators and
    /// fuzz targets, which hold datagrams whole but must drive the in-place path.
    pub fn handle_split(
        &mut self,
        now: Instant,
        from: A,
        bytes: &[u8],
        ce: bool,
        scratch: &mut Vec<u8>,
    ) {
        let Some((slot, region)) = self.recv_slot() else {
            self.handle_datagram_ecn(now, from, bytes, ce);
            return;
        };
        let mut head = [0u8; HEADER_LEN];
        let h = bytes.len().min(HEADER_LEN);
        head[..h].copy_from_slice(&bytes[..h]);
        let rest = &bytes[h..];
        let k = rest.len().min(region.len());
        region[..k].copy_from_slice(&rest[..k]);
        let received = Received {
            len: bytes.len(),
            head: &head,
            slot,
            overflow: &rest[k..],
            ce,
        };
        self.handle_received(now, from, received, scratch);
    }

    /// Handles a datagram received as header + the region [`recv_slot`](Self::recv_slot)
    /// lent + overflow: in place if it is the block the region was lent for, else copied into
    /// `scratch` and handled as [`handle_datagram`](Self::handle_datagram) would (the region's
    /// bytes are never taken for a block unless the header, checksum included, says so).
    pub fn handle_received(
        &mut self,
        now: Instant,
        from: A,
        r: Received<'_>,
        scratch: &mut Vec<u8>,
    ) {
        let id = r.slot.handle.0;
        if r.len >= HEADER_LEN && r.head.len() >= HEADER_LEN {
            let payload_len = r.len - HEADER_LEN;
            if let Some(s) = self.conns.get_mut(&id) {
                let region = s.conn.slot_bytes(r.slot.slot);
                if s.peer == from && payload_len <= region.len() {
                    let head = &r.head[..HEADER_LEN];
                    if let Ok(repr) = Repr::parse_split(head, &region[..payload_len]) {
                        if repr.dest_id == id && s.conn.fits_slot(&repr, r.slot.slot) {
                            if r.ce {
                                s.conn.note_congestion_experienced();
                            }
                            s.conn.handle_in_place(now, &repr, r.slot.slot);
                            self.stats.in_place += 1;
                            return;
                        }
                    }
                }
            }
        }
        // Not the predicted block: the datagram laid end to end, then the usual path.
        self.stats.copied_out += 1;
        scratch.clear();
        scratch.extend_from_slice(&r.head[..r.len.min(r.head.len())]);
        let mut rest = r.len.saturating_sub(r.head.len());
        if rest > 0 {
            let region = self
                .conns
                .get(&id)
                .map_or(&[][..], |s| s.conn.slot_bytes(r.slot.slot));
            let k = rest.min(region.len());
            scratch.extend_from_slice(&region[..k]);
            rest -= k;
        }
        scratch.extend_from_slice(&r.overflow[..rest.min(r.overflow.len())]);
        self.handle_datagram_ecn(now, from, scratch, r.ce);
    }

    fn on_start(&mut self, now: Instant, from: A, repr: &Repr, payload: &[u8]) {
        if let Some(&id) = self.by_peer.get(&(from.clone(), repr.src_id)) {
            if let Some(slot) = self.conns.get_mut(&id) {
                slot.conn.handle_repr(now, repr, payload);
                return;
            }
        }
        let bs = match payload {
            [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])),
            _ => 0,
        };
        let full = self.conns.len() >= self.max_connections;
        if !self.accepting || full || bs == 0 || bs > MAX_BLOCK_SIZE {
            self.stats.rejected += 1;
            self.stateless.push_back((
                from,
                Repr {
                    dest_id: repr.src_id,
                    packet_type: PacketType::Rej,
                    flags: Flags::REPLY,
                    ..Repr::default()
                },
            ));
            return;
        }
        let Some(id) = self.alloc_id() else {
            return;
        };
        let mut conn = Connection::new(self.config.clone(), id);
        conn.accept(now, repr.src_id, bs);
        self.by_peer.insert((from.clone(), repr.src_id), id);
        self.conns.insert(id, Slot { peer: from, conn });
        self.accepted.push_back(ConnectionHandle(id));
        self.stats.accepted += 1;
    }

    fn answer_unknown(&mut self, from: A, repr: &Repr) {
        let reply = match repr.packet_type {
            PacketType::End if repr.flags.contains(Flags::REPLY_REQUESTED) => Flags::REPLY,
            PacketType::End | PacketType::Rej => return,
            _ if repr.flags.contains(Flags::REMOTE_RESET) => return,
            _ => Flags::REMOTE_RESET,
        };
        self.stateless.push_back((
            from,
            Repr {
                dest_id: repr.src_id,
                src_id: repr.dest_id,
                packet_type: PacketType::End,
                flags: reply,
                ..Repr::default()
            },
        ));
    }

    /// Appends the next packet to `buf` and says where it goes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(A, Transmit)> {
        let (to, t, payload) = self.poll_transmit_parts(now, buf)?;
        buf.extend_from_slice(payload);
        Some((to, t))
    }

    /// The next packet as a header appended to `head` plus a data block borrowed from its
    /// message (see [`Connection::poll_transmit_parts`]): for vectored sends without a copy.
    pub fn poll_transmit_parts<'a>(
        &'a mut self,
        now: Instant,
        head: &mut Vec<u8>,
    ) -> Option<(A, Transmit, &'a [u8])> {
        let (to, t, r) = self.poll_transmit_ref(now, head)?;
        Some((to, t, self.payload(&r)))
    }

    /// Like [`poll_transmit_parts`](Self::poll_transmit_parts), naming the data block
    /// instead of borrowing it, so that several packets can be gathered for one batched send
    /// (`sendmmsg`): each [`TransmitRef`] stays valid through further `poll_transmit_ref`
    /// calls, until the endpoint next handles a datagram, a timeout or a command.
    pub fn poll_transmit_ref(
        &mut self,
        now: Instant,
        head: &mut Vec<u8>,
    ) -> Option<(A, Transmit, TransmitRef)> {
        if let Some((to, repr)) = self.stateless.pop_front() {
            let start = head.len();
            repr.emit_into(&[], head).ok()?;
            let size = head.len() - start;
            let r = TransmitRef { block: None };
            return Some((to, Transmit { size, priority: 0 }, r));
        }
        // Round robin from the cursor, so one busy connection does not starve the others.
        let cursor = self.cursor;
        let mut found = None;
        for (id, slot) in self.conns.range_mut(cursor..) {
            if let Some((t, r)) = slot.conn.poll_transmit_ref(now, head) {
                found = Some((*id, t, r));
                break;
            }
        }
        if found.is_none() {
            for (id, slot) in self.conns.range_mut(..cursor) {
                if let Some((t, r)) = slot.conn.poll_transmit_ref(now, head) {
                    found = Some((*id, t, r));
                    break;
                }
            }
        }
        let (id, t, r) = found?;
        self.cursor = id.wrapping_add(1);
        let slot = self.conns.get(&id)?;
        let r = TransmitRef {
            block: Some((id, r)),
        };
        Some((slot.peer.clone(), t, r))
    }

    /// The data block a [`TransmitRef`] names (empty for a packet that is all header, or if
    /// it is gone).
    pub fn payload(&self, r: &TransmitRef) -> &[u8] {
        match &r.block {
            Some((id, p)) => self.conns.get(id).map_or(&[], |s| s.conn.payload(p)),
            None => &[],
        }
    }

    /// The earliest timer of any connection.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|s| s.conn.poll_timeout())
            .min()
    }

    /// Runs every connection's due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        for slot in self.conns.values_mut() {
            if slot.conn.poll_timeout().is_some_and(|d| d <= now) {
                slot.conn.handle_timeout(now);
            }
        }
    }

    /// The next application event of any connection. A closed connection is forgotten once
    /// its last event was taken.
    pub fn poll_event(&mut self) -> Option<EndpointEvent<A>> {
        let mut found = None;
        let mut dead = None;
        for (&id, slot) in self.conns.iter_mut() {
            if let Some(event) = slot.conn.poll_event() {
                found = Some(EndpointEvent {
                    handle: ConnectionHandle(id),
                    peer: slot.peer.clone(),
                    event,
                });
                break;
            }
            slot.conn.events_consumed();
            if slot.conn.state() == State::Closed && dead.is_none() {
                dead = Some(id);
            }
        }
        if found.is_none() {
            if let Some(id) = dead {
                self.retire(id);
                return self.poll_event();
            }
        }
        found
    }

    /// The next application event of connection `h` only.
    pub fn poll_connection_event(&mut self, h: ConnectionHandle) -> Option<Event> {
        let slot = self.conns.get_mut(&h.0)?;
        let ev = slot.conn.poll_event();
        if ev.is_none() {
            slot.conn.events_consumed();
        }
        ev
    }

    /// Forgets closed connections whose events were all taken.
    pub fn reap(&mut self) {
        if !self.conns.values().any(|s| s.conn.state() == State::Closed) {
            return;
        }
        let dead: Vec<u16> = self
            .conns
            .iter()
            .filter(|(_, s)| s.conn.state() == State::Closed)
            .map(|(k, _)| *k)
            .collect();
        for id in dead {
            if self.conns.get(&id).is_some_and(|s| s.conn.has_events()) {
                continue;
            }
            self.retire(id);
        }
    }

    /// Forgets connection `id`, keeping its counters in the totals.
    fn retire(&mut self, id: u16) {
        if let Some(slot) = self.conns.remove(&id) {
            self.retired.add(slot.conn.stats());
            let peer_id = slot.conn.peer_id();
            self.by_peer.remove(&(slot.peer, peer_id));
        }
    }
}

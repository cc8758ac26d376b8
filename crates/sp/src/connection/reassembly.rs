//! The receiver's half: blocks gathered into whole messages, delivered in MESS_SEQ_NO order
//! (seed 002 §3.1: PBLOCK/TBLOCK, END_MESSAGE). One buffer per message, allocated when its first
//! block arrives and handed to the application as is: a block is copied once, from the datagram
//! into its place — or not at all when the driver received it in place.
//!
//! **Receiving in place.** [`Reassembly::slot_mut`] predicts where the next block will go (the
//! block after the last one stored, else block 0 of the next message) and lends that region: of
//! the message's buffer, or of a spare buffer that becomes the next message's. A driver
//! receives the datagram's payload straight into it (`recvmsg` with the header in a separate
//! iovec) and, when the header names that block, hands it over with [`BlockBytes::InPlace`]
//! instead of a slice: the same checks follow, with no copy. A lent region holds no block yet
//! (it is not in `have`), so whatever lands there when the prediction is wrong is never read.
//!
//! **Block length.** A sender splits a message into blocks of equal length (the last holds the
//! rest), at most the block size its START announced; the length of a message's blocks is not
//! on the wire, so each message learns it (`stride`) from its first non-final block to arrive,
//! or from one rebuilt by FEC. Until then a last block that arrived first has no known offset:
//! it is held aside (`held_last`) and placed when the stride is known. A receiver that learns
//! the stride this way also takes messages cut into fixed-size blocks.
//!
//! Buffers keep their initialised length when recycled (their old bytes are garbage that
//! `have` never vouches for), so reusing one costs neither a copy nor a zero-fill.
//!
//! Memory bound: at most [`MAX_AHEAD`] messages past the next one to deliver, and the bytes of
//! incomplete messages count against the advertised receive window — and are held to it: a
//! block that would start (or, by revealing the block length, grow) a message past the next
//! one beyond the `limit` [`Reassembly::on_block`] is given is refused
//! ([`BlockOutcome::OverWindow`]). An honest sender keeps within the window it was told, so
//! only a peer that ignores it meets this; without it, one block per message with a high
//! PBLOCK would make the receiver allocate and zero-fill up to 255 blocks for each of 4,096
//! messages. Parity blocks are held to the same limit, on their own count. The next message
//! to deliver is always taken (a sender may send one message
//! larger than the window when nothing else is in flight). Besides the partial messages, one
//! spare buffer of at most one message (or one block) and [`POOL_MAX`] recycled ones.

use std::collections::BTreeMap;

use viastack_kernel::Instant;

use super::{fec, Reliability};

/// How far (in messages) past the next expected one the receiver keeps state.
pub const MAX_AHEAD: u64 = 4096;

/// A set of block indices 0–255.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockSet([u64; 4]);

impl BlockSet {
    /// Adds `i`; false if it was there.
    pub fn insert(&mut self, i: u8) -> bool {
        let (w, b) = (usize::from(i >> 6), i & 63);
        let had = self.0[w] & (1 << b) != 0;
        self.0[w] |= 1 << b;
        !had
    }
    /// Removes `i`.
    pub fn remove(&mut self, i: u8) {
        self.0[usize::from(i >> 6)] &= !(1 << (i & 63));
    }
    /// Whether `i` is in the set.
    pub fn contains(&self, i: u8) -> bool {
        self.0[usize::from(i >> 6)] & (1 << (i & 63)) != 0
    }
    /// Members below `n`.
    pub fn count_below(&self, n: usize) -> usize {
        (0..n).filter(|&i| self.contains(i as u8)).count()
    }
}

/// A message being received (or only known to exist, when `tblock == 0`).
#[derive(Debug)]
pub struct Partial {
    /// Reliability of its blocks (of the message that revealed it, until a block arrives).
    pub mode: Reliability,
    /// Whether a block of it arrived (else only its number is known).
    pub seen: bool,
    /// PRI of its blocks.
    pub priority: u8,
    /// TBLOCK.
    pub tblock: u8,
    /// Largest block the sender announced (its START).
    pub block_size: usize,
    /// Length of every block but the last, learned from the first non-final block; 0 while
    /// unknown (for TBLOCK = 1 it stays 0: block 0 is at offset 0 either way).
    pub stride: usize,
    /// The last block, when it arrived before the stride was known (its offset depends on it).
    pub held_last: Option<Vec<u8>>,
    /// Blocks at `pblock × stride`. Its initialised length may run past the blocks
    /// present (a recycled buffer, a region lent for receiving in place); only `have` says
    /// which bytes are blocks.
    pub buf: Vec<u8>,
    /// Bytes reserved for it in the receive window.
    pub reserved: usize,
    /// Bytes it is held to against the `limit` (its size as far as known: the exact size, or
    /// the least a message of its TBLOCK and block length can be).
    pub committed: usize,
    /// Blocks present.
    pub have: BlockSet,
    /// Length of the last block, once it arrived.
    pub last_len: Option<usize>,
    /// Parity payloads by group (CHECKSUMMED).
    pub parity: Vec<Option<Vec<u8>>>,
    /// Bytes of `parity`.
    pub parity_bytes: usize,
    /// When it became known.
    pub known_at: Instant,
    /// NACKs sent for it.
    pub nacks: u8,
    /// When it was last NACKed.
    pub last_nack: Option<Instant>,
    /// Blocks recovered by FEC.
    pub repaired: u32,
}

impl Partial {
    fn placeholder(now: Instant, mode: Reliability) -> Self {
        Partial {
            mode,
            seen: false,
            priority: 0,
            tblock: 0,
            block_size: 0,
            stride: 0,
            held_last: None,
            buf: Vec::new(),
            reserved: 0,
            committed: 0,
            have: BlockSet::default(),
            last_len: None,
            parity: Vec::new(),
            parity_bytes: 0,
            known_at: now,
            nacks: 0,
            last_nack: None,
            repaired: 0,
        }
    }

    /// Whether every block is present.
    pub fn is_complete(&self) -> bool {
        self.seen
            && self.last_len.is_some()
            && self.held_last.is_none()
            && self.have.count_below(usize::from(self.tblock)) == usize::from(self.tblock)
    }

    /// Indices of missing data blocks (all of them if nothing arrived: empty list = "whole").
    pub fn missing(&self) -> Vec<u8> {
        if !self.seen {
            return Vec::new();
        }
        (0..self.tblock)
            .filter(|&i| !self.have.contains(i))
            .collect()
    }

    /// The message bytes, once complete.
    pub fn take_data(&mut self) -> Vec<u8> {
        let len = match self.last_len {
            Some(l) => usize::from(self.tblock).saturating_sub(1) * self.stride + l,
            None => 0,
        };
        let mut b = std::mem::take(&mut self.buf);
        b.truncate(len);
        b
    }

    fn block(&self, i: usize) -> &[u8] {
        let last = i + 1 == usize::from(self.tblock);
        if let (true, Some(h)) = (last, &self.held_last) {
            return h;
        }
        let start = i * self.stride;
        let len = if last {
            self.last_len.unwrap_or(0)
        } else {
            self.stride
        };
        self.buf.get(start..start + len).unwrap_or(&[])
    }

    /// Whether a block's offset is known: the stride is, or there is one block only.
    fn offsets_known(&self) -> bool {
        self.tblock <= 1 || self.stride > 0
    }

    /// Takes `stride` as the message's block length (from a non-final block) and places a
    /// held last block; one longer than the stride was not the sender's and is forgotten (to
    /// be asked for again).
    fn learn_stride(&mut self, stride: usize) {
        self.stride = stride;
        let Some(held) = self.held_last.take() else {
            return;
        };
        let last = self.tblock.saturating_sub(1);
        if held.len() <= stride {
            place(&mut self.buf, usize::from(last) * stride, &held);
        } else {
            self.have.remove(last);
            self.last_len = None;
        }
    }

    /// Tries to rebuild the one missing block of group `g` from its parity.
    fn try_repair(&mut self, g: usize, k: usize) -> bool {
        let tblock = usize::from(self.tblock);
        let range = fec::group_range(g, tblock, k);
        let missing: Vec<usize> = range
            .clone()
            .filter(|&i| !self.have.contains(i as u8))
            .collect();
        let [m] = missing[..] else { return false };
        let Some(Some(parity)) = self.parity.get(g) else {
            return false;
        };
        // A missing block's length comes back from the parity: a non-final one's is the
        // stride (learnt here if no other non-final block arrived).
        let others: Vec<&[u8]> = range
            .clone()
            .filter(|&i| i != m)
            .map(|i| self.block(i))
            .collect();
        let max = if self.stride > 0 {
            self.stride
        } else {
            self.block_size
        };
        let Some(data) = fec::recover(parity.clone(), &others, max) else {
            return false;
        };
        if m + 1 != tblock {
            if data.is_empty() || (self.stride > 0 && data.len() != self.stride) {
                return false;
            }
            if self.stride == 0 {
                self.learn_stride(data.len());
            }
        } else if !self.offsets_known() {
            // Every other block of the message is missing or the last: nowhere to put it.
            return false;
        }
        place(&mut self.buf, m * self.stride, &data);
        if m + 1 == tblock {
            self.last_len = Some(data.len());
        }
        self.have.insert(m as u8);
        self.repaired += 1;
        true
    }
}

/// What became of one arriving block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOutcome {
    /// Stored (possibly completing its message).
    Stored,
    /// Already had it, or its message was delivered or dropped.
    Duplicate,
    /// Inconsistent with what is known (TBLOCK, length, range): dropped.
    Invalid,
    /// It would take partial messages past the next one beyond the receive window: dropped.
    OverWindow,
}

/// A region [`Reassembly::slot_mut`] lent for receiving one block in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Message number the block is expected to belong to.
    pub seq: u64,
    /// Its expected PBLOCK.
    pub pblock: u8,
    /// Whether the region is the spare buffer (block 0 of a message not seen yet) rather than
    /// the message's own buffer.
    spare: bool,
    /// Length of the region.
    len: usize,
}

/// Where a block's bytes are.
#[derive(Debug, Clone, Copy)]
pub enum BlockBytes<'a> {
    /// In the datagram: copied into place.
    Copy(&'a [u8]),
    /// Already in the region `slot` names (its first `len` bytes).
    InPlace {
        /// The region, from [`Reassembly::slot_mut`].
        slot: Slot,
        /// Payload bytes received.
        len: usize,
    },
}

impl BlockBytes<'_> {
    /// Payload length.
    pub fn len(&self) -> usize {
        match self {
            BlockBytes::Copy(b) => b.len(),
            BlockBytes::InPlace { len, .. } => *len,
        }
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One block as the connection hands it over.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// Full message number.
    pub seq: u64,
    /// PBLOCK (≥ TBLOCK for a parity block).
    pub pblock: u8,
    /// TBLOCK.
    pub tblock: u8,
    /// PRI.
    pub priority: u8,
    /// Reliability from the packet's flags.
    pub mode: Reliability,
    /// Block bytes.
    pub payload: BlockBytes<'a>,
}

/// Where [`Reassembly::on_block`] finds a block's bytes.
enum Source<'a> {
    Datagram(&'a [u8]),
    Spare,
    InPlace,
}

/// Messages in reception, by number.
#[derive(Debug)]
pub struct Reassembly {
    /// Next message to deliver or drop.
    pub next: u64,
    /// Incomplete (or complete, waiting for an older one) messages at `next` or later.
    pub partial: BTreeMap<u64, Partial>,
    /// Bytes held in `partial`.
    pub buffered: usize,
    /// Sum of the partial messages' `committed` bytes.
    pub committed: usize,
    /// Sum of the partial messages' `parity_bytes`, held to the same limit (parity blocks are
    /// outside the sender's window accounting, so apart from the data).
    pub parity_held: usize,
    /// Message buffers the application gave back, reused before allocating (a fresh buffer
    /// costs page faults on every message of tens of KiB).
    pub pool: Vec<Vec<u8>>,
    /// The buffer lent for block 0 of the next message (see [`slot_mut`](Self::slot_mut)).
    spare: Vec<u8>,
    /// (message, PBLOCK, TBLOCK) of the last data block stored: the base of the prediction.
    last: Option<(u64, u8, u8)>,
    /// Bytes reserved for the last message that began: the size the spare is given.
    expect: usize,
}

/// Most buffers kept for reuse.
pub const POOL_MAX: usize = 8;

/// Bytes zero-filled past a recycled buffer's initialised length when its last block's
/// region is lent: messages a little longer than the buffer's last one still land in place.
const LAST_BLOCK_SLACK: usize = 4096;

/// Shortest region lent for block 0 of a message: smaller messages are copied out of it (a
/// copy of under 1 KiB costs less than a buffer of its own).
const MIN_SLOT: usize = 1024;

impl Default for Reassembly {
    fn default() -> Self {
        Reassembly {
            next: 1,
            partial: BTreeMap::new(),
            buffered: 0,
            committed: 0,
            parity_held: 0,
            pool: Vec::new(),
            spare: Vec::new(),
            last: None,
            expect: 0,
        }
    }
}

impl Reassembly {
    /// The full message number closest to `next` whose low 16 bits are `wire`.
    pub fn expand(&self, wire: u16) -> u64 {
        expand(self.next, wire)
    }

    /// The last message received in order (MESS_ACK_NO).
    pub fn acked(&self) -> u64 {
        self.next - 1
    }

    /// Makes sure every message up to `seq` is known (placeholders inherit `mode`).
    /// False if `seq` is too far ahead.
    pub fn learn(&mut self, now: Instant, seq: u64, mode: Reliability) -> bool {
        if seq < self.next {
            return true;
        }
        if seq - self.next >= MAX_AHEAD {
            return false;
        }
        let from = self
            .partial
            .last_key_value()
            .map_or(self.next, |(k, _)| (k + 1).max(self.next));
        for s in from..=seq {
            self.partial.insert(s, Partial::placeholder(now, mode));
        }
        true
    }

    /// Stores one block. `limit`: the bytes partial messages other than the next one may
    /// commit in all (the receive window less what the application has not taken yet).
    pub fn on_block(
        &mut self,
        now: Instant,
        b: Block<'_>,
        block_size: usize,
        fec_k: usize,
        limit: usize,
    ) -> BlockOutcome {
        let len = b.payload.len();
        if let BlockBytes::InPlace { slot, .. } = b.payload {
            // The driver checked the header against the slot; a mismatch here is a bug in
            // it, refused rather than trusted.
            if slot.seq != b.seq || slot.pblock != b.pblock || len > block_size {
                return BlockOutcome::Invalid;
            }
        }
        if b.seq < self.next {
            return BlockOutcome::Duplicate;
        }
        if b.tblock == 0 || block_size == 0 || !self.learn(now, b.seq, b.mode) {
            return BlockOutcome::Invalid;
        }
        let Some(p) = self.partial.get_mut(&b.seq) else {
            return BlockOutcome::Invalid;
        };
        let tblock = usize::from(b.tblock);
        let pb = usize::from(b.pblock);
        let last = pb + 1 == tblock;
        // A data block is at most the announced size, and only the last may be empty.
        if pb < tblock && (len > block_size || (!last && len == 0)) {
            return BlockOutcome::Invalid;
        }
        let in_spare = matches!(
            b.payload,
            BlockBytes::InPlace {
                slot: Slot { spare: true, .. },
                ..
            }
        );
        // Bytes still to copy into place: the datagram's, or the spare's when it cannot
        // become this message's buffer.
        let mut copy = match b.payload {
            BlockBytes::Copy(payload) => Source::Datagram(payload),
            BlockBytes::InPlace { .. } if in_spare && p.seen => Source::Spare,
            BlockBytes::InPlace { .. } if !in_spare && !p.seen => return BlockOutcome::Invalid,
            BlockBytes::InPlace { .. } => Source::InPlace,
        };
        // Held to the window: the size this block shows the message has at least.
        let exempt = b.seq == self.next;
        let fits = |committed: usize, more: usize| exempt || committed + more <= limit;
        if !p.seen {
            let need = if pb >= tblock {
                0 // a parity block: counted below, as parity
            } else if pb + 1 < tblock {
                (tblock - 1) * len + 1
            } else {
                len
            };
            if !fits(self.committed, need) {
                return BlockOutcome::OverWindow;
            }
            p.committed = need;
            self.committed += need;
            let cap = if tblock == 1 {
                len.min(block_size)
            } else if pb + 1 < tblock {
                // A non-final block: its length is the message's stride.
                tblock * len
            } else {
                // The last block or a parity block: at most this.
                tblock * block_size
            };
            if in_spare && cap >= self.spare.capacity() / 2 {
                // The spare holds block 0 already: it becomes the message's buffer (grown if
                // the message is larger than the one it was sized for).
                p.buf = std::mem::take(&mut self.spare);
                p.buf.reserve(cap.saturating_sub(p.buf.len()));
            } else {
                if tblock == 1 || pb + 1 < tblock {
                    p.buf = take_buffer(&mut self.pool, cap);
                }
                // (A last or parity block first: the buffer waits for the stride, and is
                // then as long as the message, not as the most it could be.)
                if in_spare {
                    // A small message in a large spare: copied out (cheap), the spare kept
                    // for the next large one.
                    copy = Source::Spare;
                }
            }
            p.seen = true;
            p.mode = b.mode;
            p.priority = b.priority;
            p.tblock = b.tblock;
            p.block_size = block_size;
            p.reserved = cap;
            self.buffered += cap;
            self.expect = cap;
        } else if p.tblock != b.tblock {
            return BlockOutcome::Invalid;
        }
        if pb >= tblock {
            // Parity block (never received in place: it is longer than a block).
            let Source::Datagram(payload) = copy else {
                return BlockOutcome::Invalid;
            };
            let g = pb - tblock;
            if g >= fec::groups(tblock, fec_k) || payload.len() > block_size + 2 {
                return BlockOutcome::Invalid;
            }
            if p.parity.len() <= g {
                p.parity.resize(g + 1, None);
            }
            if p.parity[g].is_some() {
                return BlockOutcome::Duplicate;
            }
            if !fits(self.parity_held, payload.len()) {
                return BlockOutcome::OverWindow;
            }
            p.parity_bytes += payload.len();
            self.parity_held += payload.len();
            p.parity[g] = Some(payload.to_vec());
            p.try_repair(g, fec_k);
            return BlockOutcome::Stored;
        }
        if p.stride > 0 && (len > p.stride || (!last && len != p.stride)) {
            return BlockOutcome::Invalid;
        }
        if p.have.contains(b.pblock) {
            return BlockOutcome::Duplicate;
        }
        if !last && p.stride == 0 {
            // The stride becomes known: the message is at least this long (more than counted
            // so far if the last block or a parity block came first).
            let need = (tblock - 1) * len + p.last_len.unwrap_or(1).min(len);
            let more = need.saturating_sub(p.committed);
            if more > 0 && !fits(self.committed, more) {
                return BlockOutcome::OverWindow;
            }
            p.committed += more;
            self.committed += more;
            if p.buf.capacity() == 0 {
                p.buf = take_buffer(&mut self.pool, tblock * len);
            }
            p.learn_stride(len);
        }
        let bytes = match copy {
            Source::Datagram(payload) => Some(payload),
            Source::Spare => Some(self.spare.get(..len).unwrap_or(&[])),
            // Already at pb × stride of this buffer (the spare's bytes moved with it).
            Source::InPlace if p.offsets_known() => None,
            Source::InPlace => return BlockOutcome::Invalid,
        };
        match bytes {
            Some(bytes) if !p.offsets_known() => p.held_last = Some(bytes.to_vec()),
            Some(bytes) => place(&mut p.buf, pb * p.stride, bytes),
            None => {}
        }
        p.have.insert(b.pblock);
        if last {
            p.last_len = Some(len);
        }
        self.last = Some((b.seq, b.pblock, b.tblock));
        if !p.parity.is_empty() {
            p.try_repair(pb / fec_k.max(1), fec_k);
        }
        BlockOutcome::Stored
    }

    /// Lends the region where the next data block will probably go: the block after the last
    /// one stored if its message still lacks it (one stride), else block 0 of the next
    /// message, in the spare buffer, as long as the last message (1 KiB to `block_size`).
    /// `None` when there is nothing to predict. See the module documentation.
    pub fn slot_mut(&mut self, block_size: usize) -> Option<(Slot, &mut [u8])> {
        if block_size == 0 {
            return None;
        }
        if let Some((seq, pb, tb)) = self.last {
            // Its message gone (delivered, or given up): the next one's block 0, below.
            if pb + 1 < tb && self.partial.contains_key(&seq) {
                // Its message still lacks the next block: lend that block's region.
                let next_pb = pb + 1;
                let p = self.partial.get_mut(&seq)?;
                let start = usize::from(next_pb) * p.stride;
                let end = start + p.stride;
                if !p.seen || p.stride == 0 || p.have.contains(next_pb) || p.buf.capacity() < end {
                    return None;
                }
                let end = if pb + 2 == tb && p.buf.len() > start && p.buf.len() < end {
                    // The last block, in a recycled buffer: its initialised part plus a
                    // little (not a whole block of zero-fill for a last block that is usually
                    // as long as the buffer's last message's); a longer last block spills over
                    // and is copied out.
                    (p.buf.len() + LAST_BLOCK_SLACK).min(end)
                } else {
                    end
                };
                if p.buf.len() < end {
                    // Initialised up to the region (a recycled buffer mostly is already).
                    p.buf.resize(end, 0);
                }
                let slot = Slot {
                    seq,
                    pblock: next_pb,
                    spare: false,
                    len: end - start,
                };
                return Some((slot, &mut p.buf[start..end]));
            }
        }
        let seq = self.last.map_or(self.next, |(s, ..)| s + 1).max(self.next);
        if seq - self.next >= MAX_AHEAD || self.partial.get(&seq).is_some_and(|p| p.seen) {
            return None;
        }
        // As long as the last message (or one block, for a multi-block one): a message of the
        // same size lands whole and the buffer becomes it without waste; a longer one spills
        // over the region and is copied out.
        let len = self.expect.clamp(MIN_SLOT.min(block_size), block_size);
        let want = self.expect.max(len);
        if self.spare.capacity() < want {
            let new = take_buffer(&mut self.pool, want);
            let old = std::mem::replace(&mut self.spare, new);
            self.recycle(old);
        }
        if self.spare.len() < len {
            self.spare.resize(len, 0);
        }
        let slot = Slot {
            seq,
            pblock: 0,
            spare: true,
            len,
        };
        Some((slot, &mut self.spare[..len]))
    }

    /// Whether the message of the last block stored still lacks blocks after it (more are
    /// on their way: a driver may poll for them briefly instead of sleeping).
    pub fn mid_message(&self) -> bool {
        self.last.is_some_and(|(seq, pb, tb)| {
            pb + 1 < tb && self.partial.get(&seq).is_some_and(|p| !p.is_complete())
        })
    }

    /// The bytes of a lent region (to copy a datagram out of it when it did not belong
    /// there); empty if the region is gone.
    pub fn slot_bytes(&self, slot: Slot) -> &[u8] {
        if slot.spare {
            return self.spare.get(..slot.len).unwrap_or(&[]);
        }
        self.partial
            .get(&slot.seq)
            .and_then(|p| {
                let start = usize::from(slot.pblock) * p.stride;
                p.buf.get(start..start + slot.len.min(p.stride))
            })
            .unwrap_or(&[])
    }

    /// Takes back a delivered message's buffer for reuse. Its bytes stay (initialised
    /// garbage: reusing it needs no zero-fill).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX && buf.capacity() > 0 {
            self.pool.push(buf);
        }
    }

    /// Removes the next message if it is complete.
    pub fn pop_complete(&mut self) -> Option<(u64, Partial)> {
        let entry = self.partial.first_entry()?;
        if *entry.key() != self.next || !entry.get().is_complete() {
            return None;
        }
        let (seq, p) = entry.remove_entry();
        self.buffered -= p.reserved;
        self.committed -= p.committed;
        self.parity_held -= p.parity_bytes;
        self.next += 1;
        Some((seq, p))
    }

    /// Gives up the next message (incomplete): returns it.
    pub fn drop_next(&mut self) -> Option<(u64, Partial)> {
        let p = self.partial.remove(&self.next)?;
        self.buffered -= p.reserved;
        self.committed -= p.committed;
        self.parity_held -= p.parity_bytes;
        let seq = self.next;
        self.next += 1;
        Some((seq, p))
    }
}

/// A buffer of at least `cap` bytes: a recycled one if the pool has one, else a new one.
fn take_buffer(pool: &mut Vec<Vec<u8>>, cap: usize) -> Vec<u8> {
    match pool.iter().position(|b| b.capacity() >= cap) {
        Some(i) => pool.swap_remove(i),
        None => Vec::with_capacity(cap),
    }
}

/// Writes `data` at `start` in `buf`: over initialised bytes, or appended when it reaches
/// past them (no zero-fill but for a gap before `start`).
fn place(buf: &mut Vec<u8>, start: usize, data: &[u8]) {
    let end = start + data.len();
    if end <= buf.len() {
        buf[start..end].copy_from_slice(data);
        return;
    }
    if start > buf.len() {
        buf.resize(start, 0);
    }
    buf.truncate(start);
    buf.extend_from_slice(data);
}

/// The full number closest to `reference` whose low 16 bits are `wire`.
pub fn expand(reference: u64, wire: u16) -> u64 {
    let base = reference & !0xffff;
    let cand = base | u64::from(wire);
    let diff = cand as i64 - reference as i64;
    if diff > 0x8000 && cand >= 0x10000 {
        cand - 0x10000
    } else if diff < -0x8000 {
        cand + 0x10000
    } else {
        cand
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_is_closest() {
        assert_eq!(expand(1, 5), 5);
        assert_eq!(expand(0xfff0, 3), 0x1_0003);
        assert_eq!(expand(0x1_0003, 0xfff0), 0xfff0);
        assert_eq!(expand(0, 0xffff), 0xffff);
    }

    #[test]
    fn blocks_out_of_order_make_one_message() {
        let mut r = Reassembly::default();
        let mut on = |pblock, payload: &[u8]| put(&mut r, (1, pblock, 3), payload, 4);
        assert_eq!(on(2, b"xy"), BlockOutcome::Stored);
        assert_eq!(on(0, b"abcd"), BlockOutcome::Stored);
        assert!(r.pop_complete().is_none());
        let mut on = |pblock, payload: &[u8]| put(&mut r, (1, pblock, 3), payload, 4);
        assert_eq!(on(0, b"abcd"), BlockOutcome::Duplicate);
        assert_eq!(on(1, b"efg"), BlockOutcome::Invalid);
        assert_eq!(on(1, b"efgh"), BlockOutcome::Stored);
        let (seq, mut p) = r.pop_complete().unwrap();
        assert_eq!(seq, 1);
        assert_eq!(p.take_data(), b"abcdefghxy");
        assert_eq!(r.buffered, 0);
    }

    /// Stores block `pblock` of `tblock` of message `seq` (CHECKSUMMED, k = 4), the sender
    /// having announced blocks of at most `max` bytes.
    fn put(
        r: &mut Reassembly,
        (seq, pblock, tblock): (u64, u8, u8),
        payload: &[u8],
        max: usize,
    ) -> BlockOutcome {
        r.on_block(
            Instant::ZERO,
            block(seq, pblock, tblock, payload),
            max,
            4,
            usize::MAX,
        )
    }

    fn block(seq: u64, pblock: u8, tblock: u8, payload: &[u8]) -> Block<'_> {
        Block {
            seq,
            pblock,
            tblock,
            priority: 0,
            mode: Reliability::Checksummed,
            payload: BlockBytes::Copy(payload),
        }
    }

    #[test]
    fn the_stride_is_learnt_from_a_non_final_block_and_a_last_block_waits_for_it() {
        // 7 bytes in three equal blocks of 3 (the last holds 1), under a 4-byte maximum: the
        // last block arrives first and has no offset until block 1 says the stride is 3.
        let mut r = Reassembly::default();
        assert_eq!(put(&mut r, (1, 2, 3), b"g", 4), BlockOutcome::Stored);
        assert!(r.partial[&1].held_last.is_some());
        assert_eq!(put(&mut r, (1, 1, 3), b"def", 4), BlockOutcome::Stored);
        assert!(
            r.partial[&1].held_last.is_none(),
            "placed once the stride is known"
        );
        // A non-final block of another length, or a last one longer than the stride, is not
        // the sender's.
        assert_eq!(put(&mut r, (1, 0, 3), b"abcd", 4), BlockOutcome::Invalid);
        assert!(r.pop_complete().is_none());
        assert_eq!(put(&mut r, (1, 0, 3), b"abc", 4), BlockOutcome::Stored);
        let (_, mut p) = r.pop_complete().unwrap();
        assert_eq!(p.take_data(), b"abcdefg");
        // A held last block longer than the stride learnt later is forgotten, not placed.
        assert_eq!(put(&mut r, (2, 1, 2), b"xyzw", 4), BlockOutcome::Stored);
        assert_eq!(put(&mut r, (2, 0, 2), b"ab", 4), BlockOutcome::Stored);
        assert_eq!(r.partial[&2].missing(), vec![1]);
        assert_eq!(put(&mut r, (2, 1, 2), b"c", 4), BlockOutcome::Stored);
        assert_eq!(r.pop_complete().unwrap().1.take_data(), b"abc");
        // A non-final block may not be empty.
        assert_eq!(put(&mut r, (3, 0, 2), b"", 4), BlockOutcome::Invalid);
    }

    #[test]
    fn a_message_whose_last_block_comes_first_reuses_a_buffer_of_its_own_size() {
        // Its buffer is taken when the stride is known, as long as the message: a recycled
        // one of 16 bytes fits, where the most the message could be (3 blocks × 8) would not.
        let mut r = Reassembly::default();
        r.recycle(Vec::with_capacity(16));
        assert_eq!(put(&mut r, (1, 2, 3), b"g", 8), BlockOutcome::Stored);
        assert_eq!(
            r.partial[&1].buf.capacity(),
            0,
            "no buffer before the stride"
        );
        assert_eq!(put(&mut r, (1, 0, 3), b"abc", 8), BlockOutcome::Stored);
        assert_eq!(put(&mut r, (1, 1, 3), b"def", 8), BlockOutcome::Stored);
        let data = r.pop_complete().unwrap().1.take_data();
        assert_eq!(data, b"abcdefg");
        assert_eq!(
            data.capacity(),
            16,
            "the recycled buffer, not 3 × 8 new bytes"
        );
        assert!(r.pool.is_empty());
    }

    #[test]
    fn partial_messages_past_the_next_are_held_to_the_window() {
        // Blocks of at most 8 bytes, 20 bytes of window for messages other than the next (1).
        let mut r = Reassembly::default();
        let mut on = |seq, pblock, tblock, payload: &[u8]| {
            r.on_block(Instant::ZERO, block(seq, pblock, tblock, payload), 8, 4, 20)
        };
        // Block 5 of 10 shows a message of at least 9 × 8 + 1 bytes: refused, nothing kept.
        assert_eq!(on(3, 5, 10, &[1; 8]), BlockOutcome::OverWindow);
        // Two messages of at least 9 bytes fit, a third does not.
        assert_eq!(on(2, 0, 2, &[2; 8]), BlockOutcome::Stored);
        assert_eq!(on(4, 0, 2, &[4; 8]), BlockOutcome::Stored);
        assert_eq!(on(5, 0, 2, &[5; 8]), BlockOutcome::OverWindow);
        // A last block that comes first counts its own bytes; the block that then reveals the
        // stride counts the rest (2 × 8 + 1), which no longer fits.
        assert_eq!(on(6, 2, 3, &[6; 1]), BlockOutcome::Stored);
        assert_eq!(on(6, 0, 3, &[6; 8]), BlockOutcome::OverWindow);
        // The next message is always taken, however large.
        assert_eq!(on(1, 5, 10, &[1; 8]), BlockOutcome::Stored);
        assert_eq!(r.committed, 9 + 9 + 1 + 73);
        assert!(!r.partial[&3].seen && !r.partial[&5].seen);
    }

    #[test]
    fn parity_blocks_past_the_next_message_are_held_to_the_window_too() {
        // Parity of 10 bytes (8-byte blocks + 2), 20 bytes of window: two fit, a third not.
        let mut r = Reassembly::default();
        let mut parity = |seq| r.on_block(Instant::ZERO, block(seq, 2, 2, &[9; 10]), 8, 4, 20);
        assert_eq!(parity(2), BlockOutcome::Stored);
        assert_eq!(parity(3), BlockOutcome::Stored);
        assert_eq!(parity(4), BlockOutcome::OverWindow);
        assert_eq!(
            parity(1),
            BlockOutcome::Stored,
            "the next message is always taken"
        );
        assert_eq!((r.parity_held, r.committed), (30, 0));
    }

    #[test]
    fn fec_rebuilds_a_first_block_and_so_learns_the_stride() {
        // 5 bytes in two blocks of 3 and 2; block 0 lost: the last block is held until the
        // parity of the group gives block 0 back, whose length is the stride.
        let mut parity = Vec::new();
        fec::xor_block(&mut parity, b"abc");
        fec::xor_block(&mut parity, b"de");
        let mut r = Reassembly::default();
        assert_eq!(put(&mut r, (1, 1, 2), b"de", 4), BlockOutcome::Stored);
        assert_eq!(put(&mut r, (1, 2, 2), &parity, 4), BlockOutcome::Stored);
        let (_, mut p) = r.pop_complete().expect("repaired");
        assert_eq!(p.repaired, 1);
        assert_eq!(p.stride, 3);
        assert_eq!(p.take_data(), b"abcde");
    }
}

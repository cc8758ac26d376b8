//! Sequence-number arithmetic for the data composite protocol's per-source streams (seed 004's
//! "in-order delivery" component; the `0x30` data header's 32-bit sequence number): serial
//! number comparison after RFC 1982 §3.2 (SERIAL_BITS = 32), so that a stream that runs past
//! `u32::MAX` keeps its order — `u32::MAX` comes before 0 — and [`InOrder`], the wrap-safe
//! in-order buffer the `mcast-order` layer delivers through.
//!
//! RFC 1982 leaves two numbers exactly 2^31 apart undefined: [`cmp`] returns `None` for them
//! and none of [`lt`], [`gt`] holds; [`InOrder`] treats such a packet as out of its window
//! (stale).

use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Half the sequence space: numbers this far apart do not compare.
pub const HALF: u32 = 1 << 31;

/// `a` before `b` (RFC 1982 §3.2: `(a < b and b − a < 2^31) or (a > b and a − b > 2^31)`).
pub fn lt(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a);
    d != 0 && d < HALF
}

/// `a` after `b`.
pub fn gt(a: u32, b: u32) -> bool {
    lt(b, a)
}

/// `a` before or equal to `b`.
pub fn le(a: u32, b: u32) -> bool {
    a == b || lt(a, b)
}

/// `a` after or equal to `b`.
pub fn ge(a: u32, b: u32) -> bool {
    a == b || lt(b, a)
}

/// Their order, `None` when they are exactly 2^31 apart (undefined in RFC 1982).
pub fn cmp(a: u32, b: u32) -> Option<Ordering> {
    if a == b {
        Some(Ordering::Equal)
    } else if lt(a, b) {
        Some(Ordering::Less)
    } else if lt(b, a) {
        Some(Ordering::Greater)
    } else {
        None
    }
}

/// The later of the two (`a` when they do not compare).
pub fn max(a: u32, b: u32) -> u32 {
    if lt(a, b) {
        b
    } else {
        a
    }
}

/// The earlier of the two (`a` when they do not compare).
pub fn min(a: u32, b: u32) -> u32 {
    if lt(b, a) {
        b
    } else {
        a
    }
}

/// What [`InOrder::offer`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer<T> {
    /// Before the stream's position (already delivered or skipped): dropped.
    Stale,
    /// It was the next one: it and the packets held after it, in order.
    Deliver(Vec<T>),
    /// Held until the packets before it arrive.
    Held,
    /// The buffer is full: handed back to go up out of order rather than grow or be lost.
    Overflow(T),
}

/// One stream's in-order buffer: the next sequence number to deliver and the packets held
/// after it, by sequence number. Every comparison is serial, so the stream may wrap.
#[derive(Debug, Clone)]
pub struct InOrder<T> {
    next: u32,
    held: BTreeMap<u32, T>,
}

impl<T> InOrder<T> {
    /// A stream whose next packet is `next`.
    pub fn new(next: u32) -> Self {
        InOrder {
            next,
            held: BTreeMap::new(),
        }
    }

    /// The next sequence number to deliver.
    pub fn next(&self) -> u32 {
        self.next
    }

    /// Packets held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Packet `seq` arrives; the buffer holds at most `capacity` packets.
    pub fn offer(&mut self, seq: u32, item: T, capacity: usize) -> Offer<T> {
        if seq == self.next {
            self.next = self.next.wrapping_add(1);
            let mut out = vec![item];
            self.release(&mut out);
            return Offer::Deliver(out);
        }
        if !gt(seq, self.next) || self.held.contains_key(&seq) {
            return Offer::Stale;
        }
        if self.held.len() >= capacity {
            return Offer::Overflow(item);
        }
        self.held.insert(seq, item);
        Offer::Held
    }

    /// The stream's position moves to `to` (the packets before it will not come: skipped or
    /// unrecoverable) unless it is already past it; returns what goes up: the packets held
    /// before the new position, then those that follow on from it, in order.
    pub fn move_to(&mut self, to: u32) -> Vec<T> {
        self.next = max(self.next, to);
        let mut out = Vec::new();
        self.release(&mut out);
        out
    }

    /// Appends the held packets before the position (in serial order), then the consecutive
    /// run from it.
    fn release(&mut self, out: &mut Vec<T>) {
        let next = self.next;
        // Keys before `next`, oldest first: the farthest behind has the largest distance.
        let mut below: Vec<u32> = self
            .held
            .keys()
            .copied()
            .filter(|&k| !gt(k, next) && k != next)
            .collect();
        below.sort_by_key(|&k| std::cmp::Reverse(next.wrapping_sub(k)));
        for k in below {
            if let Some(e) = self.held.remove(&k) {
                out.push(e);
            }
        }
        while let Some(e) = self.held.remove(&self.next) {
            self.next = self.next.wrapping_add(1);
            out.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1982_comparison_across_the_wrap() {
        assert!(lt(u32::MAX, 0));
        assert!(lt(u32::MAX - 5, 3));
        assert!(gt(2, u32::MAX));
        assert!(lt(0, 1) && !lt(1, 0));
        assert!(lt(0, HALF - 1));
        // 2^31 apart: undefined, neither before nor after.
        assert_eq!(cmp(0, HALF), None);
        assert!(!lt(0, HALF) && !gt(0, HALF));
        assert_eq!(cmp(7, 7), Some(Ordering::Equal));
        assert_eq!(max(u32::MAX, 1), 1);
        assert_eq!(min(u32::MAX, 1), u32::MAX);
        assert!(le(u32::MAX, 0) && ge(0, u32::MAX) && le(4, 4));
    }

    #[test]
    fn in_order_delivery_runs_through_u32_max() {
        let start = u32::MAX - 2;
        let mut s = InOrder::new(start);
        // Arrivals: MAX, 0, MAX-2, 1, MAX-1 (numbers around the wrap, shuffled).
        let seqs = [u32::MAX, 0, start, 1, u32::MAX - 1];
        let mut got = Vec::new();
        for q in seqs {
            match s.offer(q, q, 16) {
                Offer::Deliver(v) => got.extend(v),
                Offer::Held => {}
                other => panic!("{q}: {other:?}"),
            }
        }
        assert_eq!(got, [start, u32::MAX - 1, u32::MAX, 0, 1]);
        assert_eq!(s.next(), 2);
        assert_eq!(s.held(), 0);
        // Before the position, across the wrap: stale.
        assert_eq!(s.offer(u32::MAX, u32::MAX, 16), Offer::Stale);
        assert_eq!(s.offer(1, 1, 16), Offer::Stale);
    }

    #[test]
    fn move_to_across_the_wrap_releases_in_serial_order() {
        let mut s = InOrder::new(u32::MAX - 3);
        for q in [u32::MAX - 1, 1, 0, 3] {
            assert_eq!(s.offer(q, q, 16), Offer::Held);
        }
        // MAX-3 and MAX-2 are lost: skip to MAX-1.
        assert_eq!(s.move_to(u32::MAX - 1), [u32::MAX - 1]);
        // MAX lost too: skip to 0 (0 and 1 follow on); 2 may still come, 3 waits for it.
        assert_eq!(s.move_to(0), [0, 1]);
        assert_eq!((s.next(), s.held()), (2, 1));
        // 2 lost: skip to 3, which goes up.
        assert_eq!(s.move_to(3), [3]);
        assert_eq!(s.next(), 4);
        // Skipping past held packets releases them first, oldest first, across the wrap.
        let mut w = InOrder::new(u32::MAX - 1);
        for q in [u32::MAX, 0, 2] {
            assert_eq!(w.offer(q, q, 16), Offer::Held);
        }
        assert_eq!(w.move_to(5), [u32::MAX, 0, 2]);
        assert_eq!(w.next(), 5);
        // A move backwards (across the wrap) changes nothing.
        assert!(s.move_to(u32::MAX).is_empty());
        assert_eq!(s.next(), 4);
    }

    #[test]
    fn a_full_buffer_hands_the_packet_back() {
        let mut s = InOrder::new(u32::MAX);
        assert_eq!(s.offer(1, 1, 1), Offer::Held);
        assert_eq!(s.offer(2, 2, 1), Offer::Overflow(2));
        assert_eq!(
            s.offer(u32::MAX, u32::MAX, 1),
            Offer::Deliver(vec![u32::MAX])
        );
        assert_eq!(s.offer(0, 0, 1), Offer::Deliver(vec![0, 1]));
    }
}

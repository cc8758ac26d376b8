//! The deterministic event queue: a min-heap on (time, insertion sequence number).
//!
//! Part of the deterministic simulator, which realizes DESIGN.md §4.2 "deterministic simulation
//! first". Events due at the same instant come out in the order they were pushed, so a run never
//! depends on heap internals. Entries are kept small (the payload is a `Copy` tag; datagram bytes
//! live elsewhere) so that heap moves are cheap.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use viastack_kernel::Instant;

struct Entry<E> {
    time: Instant,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest entry first. Sequence
    /// numbers are unique, so no two entries compare equal.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .cmp(&self.time)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Events ordered by time, ties in insertion order.
pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedule `event` at `time`, after every event already scheduled at that time.
    pub fn push(&mut self, time: Instant, event: E) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.heap.push(Entry { time, seq, event });
    }

    /// The earliest event, ties broken by insertion order.
    pub fn pop(&mut self) -> Option<(Instant, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }

    /// When the earliest event is due.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.time)
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_insertion_order() {
        let mut q = EventQueue::default();
        let t = Instant::from_millis;
        q.push(t(5), 'a');
        q.push(t(1), 'b');
        q.push(t(5), 'c');
        q.push(t(3), 'd');
        q.push(t(1), 'e');
        q.push(t(5), 'f');
        assert_eq!(q.peek_time(), Some(t(1)));
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['b', 'e', 'd', 'a', 'c', 'f']);
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn many_ties_keep_insertion_order() {
        let mut q = EventQueue::default();
        for i in 0..1000u32 {
            q.push(Instant::from_nanos(u64::from(i % 7)), i);
        }
        let mut last = (Instant::ZERO, 0u32);
        let mut first = true;
        while let Some((t, i)) = q.pop() {
            if !first {
                assert!((t, i) > last, "{t} {i} after {last:?}");
            }
            first = false;
            last = (t, i);
        }
    }
}

//! The send queue: four FIFO queues, one per priority (seed 002 §3.1.1 PRI), always served
//! highest priority first. A message leaves the queue when its first block is sent; only then
//! does it get its MESS_SEQ_NO, so a priority-3 message overtakes queued priority-0 ones.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::Arc;

use super::Reliability;

/// A message's bytes: owned, or shared with the application (sending the same buffer again
/// costs no copy).
#[derive(Debug, Clone)]
pub enum Payload {
    /// Handed over.
    Owned(Vec<u8>),
    /// Shared.
    Shared(Arc<[u8]>),
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Shared(a) => a,
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload::Owned(v)
    }
}

impl From<Arc<[u8]>> for Payload {
    fn from(a: Arc<[u8]>) -> Self {
        Payload::Shared(a)
    }
}

impl From<&[u8]> for Payload {
    fn from(s: &[u8]) -> Self {
        Payload::Owned(s.to_vec())
    }
}

/// A message waiting for its first transmission.
#[derive(Debug)]
pub struct Queued {
    /// The message.
    pub data: Payload,
    /// 0 (lowest) … 3 (highest).
    pub priority: u8,
    /// The reliability in force when it was submitted.
    pub mode: Reliability,
}

/// Four FIFO queues.
#[derive(Debug, Default)]
pub struct SendQueue {
    queues: [VecDeque<Queued>; 4],
    bytes: usize,
}

impl SendQueue {
    /// Appends `m` to its priority's queue.
    pub fn push(&mut self, m: Queued) {
        self.bytes += m.data.len();
        let p = usize::from(m.priority.min(3));
        self.queues[p].push_back(m);
    }
    /// The next message to start: the oldest of the highest non-empty priority.
    pub fn peek(&self) -> Option<&Queued> {
        self.queues.iter().rev().find_map(|q| q.front())
    }
    /// Removes and returns [`peek`](Self::peek)'s message.
    pub fn pop(&mut self) -> Option<Queued> {
        let m = self.queues.iter_mut().rev().find_map(|q| q.pop_front())?;
        self.bytes -= m.data.len();
        Some(m)
    }
    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Messages queued.
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }
    /// Empties the queue, returning how many messages it held.
    pub fn clear(&mut self) -> usize {
        let n = self.len();
        for q in &mut self.queues {
            q.clear();
        }
        self.bytes = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_priority_first_fifo_within_one() {
        let mut q = SendQueue::default();
        for (i, p) in [0u8, 0, 3, 1, 3].into_iter().enumerate() {
            q.push(Queued {
                data: vec![i as u8].into(),
                priority: p,
                mode: Reliability::Reliable,
            });
        }
        let order: Vec<u8> = std::iter::from_fn(|| q.pop()).map(|m| m.data[0]).collect();
        assert_eq!(order, vec![2, 4, 3, 0, 1]);
        assert_eq!(q.bytes(), 0);
    }
}

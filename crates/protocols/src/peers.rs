//! Bounded per-peer state shared by the layers that remember what they have seen: a sliding
//! window over sequence numbers ([`SeqWindow`]), a map that keeps at most N entries and evicts
//! the least recently used one ([`LruMap`]), and the random incarnation number a sending session
//! draws once ([`draw_epoch`]).
//!
//! Both structures have a fixed worst-case size chosen at construction (DESIGN.md §6.6:
//! capacities are configuration), so no input can make a layer's memory grow without bound.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use rand::RngCore;
use viastack_kernel::Context;

/// What a [`SeqWindow`] says of a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not seen before and inside (or ahead of) the window.
    Fresh,
    /// Already seen.
    Duplicate,
    /// Left behind the window: it cannot be told from a duplicate any more.
    TooOld,
}

/// The set of sequence numbers seen recently, as a bitmap sliding behind the highest one
/// (the anti-replay window of RFC 4303 §3.4.3 and RFC 6347 §4.1.2.6, kept as a ring of words
/// as in RFC 6479).
///
/// With `size` bits and highest number seen `top`, numbers in `top - size + 1 ..= top` are
/// remembered exactly; anything below is [`Seen::TooOld`]. Memory: `size / 8` bytes, fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqWindow {
    /// Highest number seen, if any.
    top: Option<u64>,
    /// Bit `s % size` is set when `s` (inside the window) was seen.
    bits: Box<[u64]>,
}

impl SeqWindow {
    /// A window of `size` numbers, rounded up to a multiple of 64 (at least 64).
    pub fn new(size: usize) -> Self {
        let words = size.div_ceil(64).max(1);
        SeqWindow {
            top: None,
            bits: vec![0; words].into_boxed_slice(),
        }
    }

    /// How many numbers the window remembers.
    pub fn size(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    /// The highest number seen.
    pub fn top(&self) -> Option<u64> {
        self.top
    }

    fn slot(&self, seq: u64) -> (usize, u64) {
        let bit = seq % self.size();
        ((bit / 64) as usize, 1u64 << (bit % 64))
    }

    /// What `seq` is, without recording it.
    pub fn check(&self, seq: u64) -> Seen {
        let Some(top) = self.top else {
            return Seen::Fresh;
        };
        if seq > top {
            return Seen::Fresh;
        }
        if top - seq >= self.size() {
            return Seen::TooOld;
        }
        let (w, m) = self.slot(seq);
        if self.bits[w] & m != 0 {
            Seen::Duplicate
        } else {
            Seen::Fresh
        }
    }

    /// Records `seq` if it is fresh; returns what it was.
    pub fn insert(&mut self, seq: u64) -> Seen {
        let seen = self.check(seq);
        if seen != Seen::Fresh {
            return seen;
        }
        match self.top {
            Some(top) if seq <= top => {}
            Some(top) => {
                // Slide: forget the numbers that leave the window (their slots are reused).
                let advance = seq - top;
                if advance >= self.size() {
                    self.bits.fill(0);
                } else {
                    for s in top + 1..seq {
                        let (w, m) = self.slot(s);
                        self.bits[w] &= !m;
                    }
                }
                self.top = Some(seq);
            }
            None => {
                self.bits.fill(0);
                self.top = Some(seq);
            }
        }
        let (w, m) = self.slot(seq);
        self.bits[w] |= m;
        Seen::Fresh
    }
}

/// A map of at most `capacity` entries; inserting into a full map evicts the least recently
/// used entry. Lookups through [`LruMap::get_mut`] count as use. Deterministic: recency is a
/// counter, not a clock, and no iteration order of a hash map reaches the outside.
#[derive(Debug, Clone)]
pub struct LruMap<K, V> {
    entries: HashMap<K, (u64, V)>,
    by_use: BTreeMap<u64, K>,
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> LruMap<K, V> {
    /// An empty map holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        LruMap {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry for `key`, marked as just used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let (used, _) = self.entries.get(key)?;
        self.by_use.remove(used);
        self.tick += 1;
        self.by_use.insert(self.tick, key.clone());
        let entry = self.entries.get_mut(key)?;
        entry.0 = self.tick;
        Some(&mut entry.1)
    }

    /// Whether `key` has an entry (not counted as use).
    pub fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Inserts or replaces the entry for `key`; returns the entry evicted to make room.
    pub fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        let mut evicted = None;
        if let Some((used, _)) = self.entries.get(&key) {
            self.by_use.remove(used);
        } else if self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_use.pop_first() {
                evicted = self.entries.remove(&oldest).map(|(_, v)| (oldest, v));
            }
        }
        self.tick += 1;
        self.by_use.insert(self.tick, key.clone());
        self.entries.insert(key, (self.tick, value));
        evicted
    }

    /// Removes the entry for `key`.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (used, v) = self.entries.remove(key)?;
        self.by_use.remove(&used);
        Some(v)
    }

    /// Keeps only the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let by_use = &mut self.by_use;
        self.entries.retain(|k, (used, _)| {
            let kept = keep(k);
            if !kept {
                by_use.remove(used);
            }
            kept
        });
    }
}

/// A sending session's incarnation number: random, non-zero, drawn from the kernel's seeded
/// generator mixed with the time (a restarted node's generator starts over from the same seed in
/// the simulator, but its clock does not).
pub fn draw_epoch(ctx: &mut Context<'_>) -> u32 {
    loop {
        let x = ctx.rng().next_u64() ^ ctx.now().as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let epoch = (x ^ (x >> 32)) as u32;
        if epoch != 0 {
            return epoch;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_remembers_exactly_its_size_behind_the_top() {
        let mut w = SeqWindow::new(64);
        assert_eq!(w.size(), 64);
        assert_eq!(w.insert(100), Seen::Fresh);
        assert_eq!(w.insert(100), Seen::Duplicate);
        assert_eq!(w.insert(37), Seen::Fresh, "100 - 37 = 63 < 64");
        assert_eq!(w.insert(36), Seen::TooOld, "100 - 36 = 64");
        assert_eq!(w.insert(37), Seen::Duplicate);
        assert_eq!(w.insert(101), Seen::Fresh);
        assert_eq!(w.check(37), Seen::TooOld, "slid out");
        assert_eq!(w.check(38), Seen::Fresh);
        // A jump past the whole window forgets everything.
        assert_eq!(w.insert(1000), Seen::Fresh);
        assert_eq!(w.check(999), Seen::Fresh);
        assert_eq!(w.check(1000), Seen::Duplicate);
        assert_eq!(w.check(936), Seen::TooOld);
        // The extremes of u64 neither overflow nor panic.
        assert_eq!(w.insert(u64::MAX), Seen::Fresh);
        assert_eq!(w.insert(u64::MAX), Seen::Duplicate);
        assert_eq!(w.insert(0), Seen::TooOld);
        let mut z = SeqWindow::new(1);
        assert_eq!(z.size(), 64);
        assert_eq!(z.insert(0), Seen::Fresh);
        assert_eq!(z.insert(0), Seen::Duplicate);
    }

    #[test]
    fn window_agrees_with_a_set_model() {
        // Random-looking walk (xorshift) compared with an exact model over the last `size`.
        let mut w = SeqWindow::new(128);
        let mut seen = std::collections::BTreeSet::new();
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut top = None::<u64>;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let base = top.unwrap_or(500);
            let seq = (base + x % 40).saturating_sub(x % 200);
            let want = match top {
                Some(t) if seq <= t && t - seq >= 128 => Seen::TooOld,
                _ if seen.contains(&seq) => Seen::Duplicate,
                _ => Seen::Fresh,
            };
            assert_eq!(w.insert(seq), want, "seq {seq} top {top:?}");
            if want == Seen::Fresh {
                seen.insert(seq);
                top = Some(top.map_or(seq, |t: u64| t.max(seq)));
            }
        }
    }

    #[test]
    fn lru_map_evicts_the_least_recently_used() {
        let mut m = LruMap::new(2);
        assert!(m.insert("a", 1).is_none());
        assert!(m.insert("b", 2).is_none());
        assert_eq!(m.get_mut(&"a"), Some(&mut 1));
        assert_eq!(
            m.insert("c", 3),
            Some(("b", 2)),
            "b was used least recently"
        );
        assert_eq!(m.len(), 2);
        assert!(m.insert("a", 10).is_none(), "replacing does not evict");
        assert_eq!(m.insert("d", 4), Some(("c", 3)));
        m.retain(|k| *k != "a");
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(&"d"), Some(4));
        assert!(m.is_empty());
        assert!(m.insert("e", 5).is_none());
        assert!(m.insert("f", 6).is_none());
        assert_eq!(m.len(), 2);
    }
}

//! A deterministic test network for overlay engines (quinn-proto `tests/util.rs` style): N
//! nodes with [`SimAddr`] substrate addresses, virtual time that jumps to the next message
//! arrival, timer or node start; loss, duplication and reordering (extra delay) drawn from one
//! seeded ChaCha8 generator; partitions by group; a step cap that catches livelock.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_kernel::{Duration, Instant};
use viastack_overlay::SimAddr;

/// The group of a node every partition reaches.
pub const EVERYWHERE: u8 = 255;

/// A sans-IO overlay engine as the harness drives it.
pub trait Engine {
    type Msg;
    fn handle_message(&mut self, now: Instant, from: SimAddr, msg: Self::Msg);
    fn handle_timeout(&mut self, now: Instant);
    fn poll_transmit(&mut self) -> Option<(SimAddr, Self::Msg)>;
    fn poll_timeout(&self) -> Option<Instant>;
    /// Drains the engine's events; returns how many there were (topology changes).
    fn drain_events(&mut self) -> usize;
}

/// Link faults, as probabilities per message.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
}

pub struct Net<E: Engine> {
    pub rng: ChaCha8Rng,
    pub now: Instant,
    /// `None` until started, and after a crash.
    pub nodes: Vec<Option<E>>,
    pending_start: Vec<(Instant, usize, Option<E>)>,
    /// Partition group per node: messages between different groups are dropped, except to or
    /// from a node of group [`EVERYWHERE`] (a server all partitions reach).
    pub group: Vec<u8>,
    pub faults: Faults,
    /// Base one-way latency and jitter.
    pub latency: Duration,
    pub jitter: Duration,
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    in_flight: HashMap<u64, (usize, usize, E::Msg)>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    deadline: Vec<Option<Instant>>,
    seq: u64,
    /// When some node last reported a topology change.
    pub last_change: Instant,
    pub steps: u64,
    pub delivered: u64,
}

impl<E: Engine> Net<E>
where
    E::Msg: Clone,
{
    pub fn new(seed: u64, n: usize) -> Self {
        Net {
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Instant::ZERO,
            nodes: (0..n).map(|_| None).collect(),
            pending_start: Vec::new(),
            group: vec![0; n],
            faults: Faults::default(),
            latency: Duration::from_millis(10),
            jitter: Duration::from_millis(20),
            queue: BinaryHeap::new(),
            in_flight: HashMap::new(),
            timers: BinaryHeap::new(),
            deadline: vec![None; n],
            seq: 0,
            last_change: Instant::ZERO,
            steps: 0,
            delivered: 0,
        }
    }

    /// Whether a message from `a` can reach `b` (same group, or either reachable from all).
    pub fn connected(&self, a: usize, b: usize) -> bool {
        self.group[a] == self.group[b] || self.group[a] == EVERYWHERE || self.group[b] == EVERYWHERE
    }

    /// Schedules node `i` to start at `at` (the engine was built for that instant).
    pub fn start_at(&mut self, i: usize, at: Instant, engine: E) {
        self.pending_start.push((at, i, Some(engine)));
        self.pending_start
            .sort_by_key(|(t, i, _)| Reverse((*t, *i)));
    }

    /// Crashes node `i` (no goodbye).
    pub fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
        self.deadline[i] = None;
    }

    /// Lets the test act on node `i` (a command such as leaving), then collects its output.
    pub fn with_node(&mut self, i: usize, f: impl FnOnce(&mut E, Instant)) {
        let now = self.now;
        if let Some(node) = self.nodes[i].as_mut() {
            f(node, now);
        }
        self.after_io(i);
    }

    fn after_io(&mut self, i: usize) {
        let Some(node) = self.nodes[i].as_mut() else {
            return;
        };
        if node.drain_events() > 0 {
            self.last_change = self.now;
        }
        let mut out = Vec::new();
        while let Some(t) = node.poll_transmit() {
            out.push(t);
        }
        let d = node.poll_timeout();
        if d != self.deadline[i] {
            self.deadline[i] = d;
            if let Some(d) = d {
                self.timers.push(Reverse((d, i)));
            }
        }
        for (to, msg) in out {
            let to = to.0 as usize;
            if to >= self.nodes.len() || !self.connected(i, to) {
                continue;
            }
            let f = self.faults;
            if f.loss > 0.0 && self.rng.gen_bool(f.loss) {
                continue;
            }
            let copies = if f.duplicate > 0.0 && self.rng.gen_bool(f.duplicate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let mut delay = self.latency
                    + Duration::from_nanos(self.rng.gen_range(0..=self.jitter.as_nanos() as u64));
                if f.reorder > 0.0 && self.rng.gen_bool(f.reorder) {
                    delay += Duration::from_millis(self.rng.gen_range(0..200));
                }
                self.seq += 1;
                self.queue.push(Reverse((self.now + delay, self.seq)));
                self.in_flight.insert(self.seq, (i, to, msg.clone()));
            }
        }
    }

    fn next_event_time(&mut self) -> Option<Instant> {
        // Drop stale timer entries.
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if self.deadline[i] == Some(t) && self.nodes[i].is_some() {
                break;
            }
            self.timers.pop();
        }
        let a = self.queue.peek().map(|Reverse((t, _))| *t);
        let b = self.timers.peek().map(|Reverse((t, _))| *t);
        let c = self.pending_start.last().map(|(t, _, _)| *t);
        [a, b, c].into_iter().flatten().min()
    }

    /// Runs one instant: starts, deliveries and timeouts due at the next event time. Returns
    /// false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.next_event_time() else {
            return false;
        };
        self.steps += 1;
        self.now = self.now.max(t);
        let now = self.now;
        while self.pending_start.last().is_some_and(|(t, _, _)| *t <= now) {
            if let Some((_, i, e)) = self.pending_start.pop() {
                self.nodes[i] = e;
                self.deadline[i] = None;
                self.after_io(i);
            }
        }
        while let Some(&Reverse((t, id))) = self.queue.peek() {
            if t > now {
                break;
            }
            self.queue.pop();
            let Some((from, to, msg)) = self.in_flight.remove(&id) else {
                continue;
            };
            if !self.connected(from, to) {
                continue;
            }
            if let Some(node) = self.nodes[to].as_mut() {
                node.handle_message(now, SimAddr(from as u32), msg);
                self.delivered += 1;
                self.after_io(to);
            }
        }
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if self.deadline[i] != Some(t) {
                continue;
            }
            self.deadline[i] = None;
            if let Some(node) = self.nodes[i].as_mut() {
                node.handle_timeout(now);
                self.after_io(i);
            }
        }
        true
    }

    /// Runs until virtual time `until` (or the step cap).
    pub fn run_until(&mut self, until: Instant, step_cap: u64) -> Result<(), String> {
        while self.next_event_time().is_some_and(|t| t <= until) {
            if self.steps >= step_cap {
                return Err(format!("step cap {step_cap} reached at {}", self.now));
            }
            self.step();
        }
        self.now = self.now.max(until);
        Ok(())
    }

    /// Runs until no topology change for `quiet` (checked in slices of `quiet / 4`), from at
    /// least `from`, failing past `deadline` or the step cap. Returns the time of the last
    /// change.
    pub fn run_until_quiet(
        &mut self,
        from: Instant,
        quiet: Duration,
        deadline: Instant,
        step_cap: u64,
    ) -> Result<Instant, String> {
        self.run_until(from, step_cap)?;
        loop {
            let until = self.now + quiet / 4;
            self.run_until(until, step_cap)?;
            if self.now >= self.last_change + quiet {
                return Ok(self.last_change);
            }
            if self.now >= deadline {
                return Err(format!(
                    "not quiet by {deadline} (last change {})",
                    self.last_change
                ));
            }
        }
    }
}

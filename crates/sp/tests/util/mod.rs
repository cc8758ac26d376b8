//! A small deterministic lossy network for SP endpoints (quinn-proto `tests/util.rs` style):
//! virtual time jumps to the next datagram arrival or timer; loss, duplication, reordering
//! (extra delay) and one-bit corruption come from one seeded ChaCha8 generator; a step cap
//! catches livelock.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_kernel::{Duration, Instant};
use viastack_sp::wire::{Packet, PacketType, HEADER_LEN};
use viastack_sp::{Config, Endpoint, EndpointEvent};

/// Link faults, as probabilities per datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// Marks a datagram "congestion experienced" (IP ECN CE) instead of dropping it, as a
    /// congested ECN router would (drawn only when non-zero, so other tests' random streams
    /// stay as they were).
    pub ce_mark: f64,
}

/// What the test wants to drop on purpose: a predicate over (from node, packet bytes).
pub type Filter = Box<dyn FnMut(usize, &[u8]) -> bool>;

/// A datagram in flight: (arrival, tie-break sequence, from, to, bytes, CE mark).
type InFlight = Reverse<(Instant, u64, usize, usize, Vec<u8>, bool)>;

pub struct Net {
    pub rng: ChaCha8Rng,
    pub now: Instant,
    pub nodes: Vec<Endpoint<usize>>,
    pub events: Vec<Vec<EndpointEvent<usize>>>,
    pub faults: Faults,
    /// Returns true to drop a datagram (before faults).
    pub filter: Option<Filter>,
    queue: BinaryHeap<InFlight>,
    seq: u64,
    /// (to node, MESS_SEQ_NO) of DATA packets whose payload (not header) was corrupted.
    pub tainted: HashSet<(usize, u16)>,
    pub latency: Duration,
    /// Uniform extra delay per datagram, 0 to this many µs.
    pub jitter_us: u64,
    /// Whether nodes drain their events themselves each step (else the test does).
    pub auto_events: bool,
    pub sent_datagrams: u64,
    /// Deliver as `SpSocket` does: header, the region the endpoint lends, overflow
    /// (`recv_slot` + `handle_received`), instead of one contiguous datagram.
    pub in_place: bool,
    scratch: Vec<u8>,
}

impl Net {
    pub fn new(seed: u64, configs: Vec<(Config, bool)>, faults: Faults) -> Self {
        let n = configs.len();
        Net {
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Instant::ZERO,
            nodes: configs
                .into_iter()
                .map(|(c, accept)| Endpoint::new(c, accept))
                .collect(),
            events: vec![Vec::new(); n],
            faults,
            filter: None,
            queue: BinaryHeap::new(),
            seq: 0,
            tainted: HashSet::new(),
            latency: Duration::from_micros(500),
            jitter_us: 200,
            auto_events: true,
            sent_datagrams: 0,
            in_place: false,
            scratch: Vec::new(),
        }
    }

    fn transmit_all(&mut self) {
        let mut buf = Vec::new();
        for from in 0..self.nodes.len() {
            loop {
                buf.clear();
                let Some((to, _)) = self.nodes[from].poll_transmit(self.now, &mut buf) else {
                    break;
                };
                self.sent_datagrams += 1;
                if let Some(f) = self.filter.as_mut() {
                    if f(from, &buf) {
                        continue;
                    }
                }
                let f = self.faults;
                if self.rng.gen_bool(f.loss) {
                    continue;
                }
                let ce = f.ce_mark > 0.0 && self.rng.gen_bool(f.ce_mark);
                let copies = if self.rng.gen_bool(f.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut bytes = buf.clone();
                    if self.rng.gen_bool(f.corrupt) {
                        let pos = self.rng.gen_range(0..bytes.len());
                        let bit = self.rng.gen_range(0..8);
                        if pos >= HEADER_LEN {
                            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                                if p.packet_type() == Ok(PacketType::Data) {
                                    self.tainted.insert((to, p.mess_seq_no()));
                                }
                            }
                        }
                        bytes[pos] ^= 1 << bit;
                    }
                    let mut delay = self.latency
                        + Duration::from_micros(self.rng.gen_range(0..=self.jitter_us));
                    if self.rng.gen_bool(f.reorder) {
                        delay += Duration::from_micros(self.rng.gen_range(500..3000));
                    }
                    self.seq += 1;
                    self.queue
                        .push(Reverse((self.now + delay, self.seq, from, to, bytes, ce)));
                }
            }
        }
    }

    fn drain_events(&mut self) {
        for (i, ep) in self.nodes.iter_mut().enumerate() {
            while let Some(e) = ep.poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// One step: transmit, then jump to the next arrival or timer (not beyond `until`).
    /// Returns false when nothing is left to happen before `until`.
    pub fn step(&mut self, until: Instant) -> bool {
        self.transmit_all();
        if self.auto_events {
            self.drain_events();
        }
        self.transmit_all();
        let next_arrival = self.queue.peek().map(|Reverse((t, ..))| *t);
        let next_timer = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
        let Some(next) = [next_arrival, next_timer].into_iter().flatten().min() else {
            return false;
        };
        if next > until {
            self.now = until;
            return false;
        }
        self.now = self.now.max(next);
        while let Some(Reverse((t, ..))) = self.queue.peek() {
            if *t > self.now {
                break;
            }
            let Some(Reverse((_, _, from, to, bytes, ce))) = self.queue.pop() else {
                break;
            };
            if self.in_place {
                self.deliver_in_place(from, to, &bytes, ce);
            } else {
                self.nodes[to].handle_datagram_ecn(self.now, from, &bytes, ce);
            }
        }
        for n in &mut self.nodes {
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                n.handle_timeout(self.now);
            }
        }
        true
    }

    /// Scatters `bytes` as a `recvmsg` with three iovecs would: header, lent region, overflow.
    fn deliver_in_place(&mut self, from: usize, to: usize, bytes: &[u8], ce: bool) {
        let now = self.now;
        self.nodes[to].handle_split(now, from, bytes, ce, &mut self.scratch);
    }

    /// Steps until idle or `limit` of virtual time; panics (with `ctx`) past the step cap.
    pub fn run(&mut self, limit: Duration, ctx: &str) {
        let until = self.now + limit;
        let mut steps = 0u32;
        while self.step(until) {
            steps += 1;
            assert!(steps < 2_000_000, "{ctx}: livelock (step cap)");
        }
        if self.auto_events {
            self.drain_events();
        }
    }

    /// Steps until `cond` holds or `limit` passes.
    pub fn run_until(
        &mut self,
        limit: Duration,
        ctx: &str,
        mut cond: impl FnMut(&mut Net) -> bool,
    ) -> bool {
        let until = self.now + limit;
        let mut steps = 0u32;
        loop {
            if cond(self) {
                return true;
            }
            if !self.step(until) {
                if self.auto_events {
                    self.drain_events();
                }
                return cond(self);
            }
            steps += 1;
            assert!(steps < 2_000_000, "{ctx}: livelock (step cap)");
        }
    }
}

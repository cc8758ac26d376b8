//! The DT convergence figure of `viastack bench overlay` (issue 16 "Figures":
//! `dt_10000_converge_s`, `dt_10000_wall_s`, `control_bytes_per_node_s`; seed 000 §3.1.1.2).
//!
//! The sans-IO DT nodes of `viastack-overlay` ([`viastack_overlay::dt::Node`]) are driven
//! directly in a discrete-event loop: virtual time jumps to the next message arrival, timer or
//! node start; every message takes a fixed latency plus a uniform jitter (no loss). The full
//! kernel simulator carries every stack layer and is not needed to time the topology protocol.
//!
//! - **Joins.** `n` nodes at distinct random points start at uniform random instants in the
//!   first `join_within` (messages lost with probability `loss`, 0 by default), joining through the buddies 0 and 1 (the DT default configuration,
//!   except that `NewNode` may travel 255 hops: greedy routes in a 10,000-node triangulation
//!   are longer than the default 64).
//! - **Convergence.** Every `check_every` of virtual time from the last start, each node's
//!   neighbour set is compared with its neighbours in the Delaunay triangulation of all the
//!   points computed centrally with `spade`, and the leaders are counted. `converge_s` is the
//!   first check at which every node matches and exactly one leader remains (the node with the
//!   greatest point).
//! - **Steady state.** From convergence, `steady` more virtual seconds run at the default
//!   heartbeats; every control message sent in them is encoded ([`wire::dt::Repr`]) and its
//!   bytes counted: `control_bytes_per_node_s` is the overlay datagram bytes per node per
//!   second (UDP/IP headers excluded; the device's 2-byte channel tag excluded). The
//!   triangulation is checked once more at the end (`converged`).

#![allow(clippy::disallowed_methods)] // wall time of the run

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_kernel::{Duration, Instant};
use viastack_overlay::dt::{Config, Message, Node};
use viastack_overlay::wire;
use viastack_overlay::{DtAddr, SimAddr};

/// What one DT run is asked to do.
#[derive(Debug, Clone)]
pub struct DtRun {
    /// Nodes.
    pub nodes: usize,
    /// Seed of the points, start times and jitter.
    pub seed: u64,
    /// Every node starts within this.
    pub join_within: Duration,
    /// Virtual time after which a run that has not converged gives up.
    pub limit: Duration,
    /// Steady state measured after convergence.
    pub steady: Duration,
    /// Interval of the convergence checks.
    pub check_every: Duration,
    /// Probability that a message is lost (0: a lossless network).
    pub loss: f64,
}

/// What one DT run measured.
#[derive(Debug, Clone)]
pub struct DtResult {
    /// Virtual seconds from the start to the first check that found the triangulation.
    pub converge_s: Option<f64>,
    /// When the last node started (virtual seconds).
    pub last_start_s: f64,
    /// Whether the triangulation held at the end (after the steady state).
    pub converged: bool,
    /// Wall-clock seconds of the whole run (joins, convergence, steady state).
    pub wall_s: f64,
    /// Overlay control bytes sent per node per second in the steady state.
    pub control_bytes_per_node_s: f64,
    /// Control messages per node per second in the steady state.
    pub control_msgs_per_node_s: f64,
    /// Messages delivered in the whole run.
    pub messages: u64,
    /// Nodes whose neighbours differ from the central triangulation at the end.
    pub wrong_nodes: usize,
    /// Leaders at the end.
    pub leaders: usize,
}

/// A message in flight, ordered by arrival then sending order.
struct Flight {
    at: Instant,
    seq: u64,
    from: u32,
    to: u32,
    msg: Message<SimAddr>,
}

impl PartialEq for Flight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Flight {}
impl PartialOrd for Flight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Flight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Distinct random points in general position (a unique triangulation), with each point's
/// central Delaunay neighbours, sorted as a node lists them.
fn draw(rng: &mut ChaCha8Rng, n: usize) -> anyhow::Result<(Vec<DtAddr>, Vec<Vec<DtAddr>>)> {
    // A wide span makes cocircular or collinear draws (redrawn) vanishingly rare.
    let span = 1 << 24;
    for _ in 0..20 {
        let mut set = BTreeSet::new();
        while set.len() < n {
            set.insert(DtAddr::new(rng.gen_range(0..span), rng.gen_range(0..span))?);
        }
        let mut points: Vec<DtAddr> = set.into_iter().collect();
        for i in (1..points.len()).rev() {
            points.swap(i, rng.gen_range(0..=i));
        }
        if let Some(nbrs) = central(&points) {
            return Ok((points, nbrs));
        }
    }
    anyhow::bail!("no point set in general position after 20 draws")
}

/// The Delaunay neighbours of every point (`spade`, through the scenario crate's check);
/// `None` unless the triangulation is unique.
fn central(points: &[DtAddr]) -> Option<Vec<Vec<DtAddr>>> {
    let sets = viastack_scenario::overlay::central_dt(points)?;
    Some(sets.into_iter().map(|s| s.into_iter().collect()).collect())
}

/// The simulated network.
struct Net {
    rng: ChaCha8Rng,
    now: Instant,
    nodes: Vec<Option<Node<SimAddr>>>,
    deadline: Vec<Option<Instant>>,
    flights: BinaryHeap<Reverse<Flight>>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    seq: u64,
    latency: Duration,
    jitter_ns: u64,
    loss: f64,
    /// Count the bytes of what is sent (steady state only: encoding costs time).
    metering: bool,
    bytes: u64,
    sent: u64,
    delivered: u64,
    buf: Vec<u8>,
}

impl Net {
    fn after_io(&mut self, i: usize) {
        let Some(node) = self.nodes[i].as_mut() else {
            return;
        };
        while node.poll_event().is_some() {}
        while let Some((to, msg)) = node.poll_transmit() {
            if self.metering {
                self.buf.clear();
                if wire::dt::Repr::from_message(&msg)
                    .emit_into(&mut self.buf)
                    .is_ok()
                {
                    self.bytes += self.buf.len() as u64;
                }
                self.sent += 1;
            }
            if self.loss > 0.0 && self.rng.gen_bool(self.loss) {
                continue;
            }
            self.seq += 1;
            let at = self.now
                + self.latency
                + Duration::from_nanos(self.rng.gen_range(0..=self.jitter_ns));
            self.flights.push(Reverse(Flight {
                at,
                seq: self.seq,
                from: i as u32,
                to: to.0,
                msg,
            }));
        }
        let d = node.poll_timeout();
        if d != self.deadline[i] {
            self.deadline[i] = d;
            if let Some(d) = d {
                self.timers.push(Reverse((d, i as u32)));
            }
        }
    }

    /// Runs every event strictly before `until`, then sets the clock to `until`.
    fn run_until(&mut self, until: Instant) {
        loop {
            let tf = self.flights.peek().map(|Reverse(f)| f.at);
            let tt = self.timers.peek().map(|Reverse((t, _))| *t);
            let next = match (tf, tt) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if next >= until {
                break;
            }
            self.now = next;
            if tf == Some(next) {
                let Some(Reverse(f)) = self.flights.pop() else {
                    break;
                };
                let to = f.to as usize;
                if let Some(Some(node)) = self.nodes.get_mut(to) {
                    node.handle_message(f.at, SimAddr(f.from), f.msg);
                    self.delivered += 1;
                    self.after_io(to);
                }
            } else {
                let Some(Reverse((t, i))) = self.timers.pop() else {
                    break;
                };
                let i = i as usize;
                // Lazy deletion: only the node's current deadline counts.
                if self.deadline[i] == Some(t) {
                    self.deadline[i] = None;
                    if let Some(node) = self.nodes[i].as_mut() {
                        node.handle_timeout(t);
                    }
                    self.after_io(i);
                }
            }
        }
        self.now = until;
    }

    /// Nodes whose neighbours differ from `want`, and the leaders.
    fn check(&self, want: &[Vec<DtAddr>]) -> (usize, usize) {
        let mut wrong = 0;
        let mut leaders = 0;
        for (node, want) in self.nodes.iter().zip(want) {
            match node {
                Some(n) => {
                    if !n.neighbour_addrs().eq(want.iter().copied()) {
                        wrong += 1;
                    }
                    if n.is_leader() {
                        leaders += 1;
                    }
                }
                None => wrong += 1,
            }
        }
        (wrong, leaders)
    }
}

/// Runs the DT convergence experiment.
///
/// # Errors
/// No point set in general position could be drawn.
pub fn run(r: &DtRun) -> anyhow::Result<DtResult> {
    let mut rng = ChaCha8Rng::seed_from_u64(r.seed);
    let (points, want) = draw(&mut rng, r.nodes)?;
    let wall = std::time::Instant::now();
    let buddies: Vec<SimAddr> = (0..r.nodes.min(2) as u32).map(SimAddr).collect();
    let config = Config {
        buddies,
        new_node_hops: u8::MAX,
        ..Config::default()
    };
    let mut starts: Vec<(Instant, usize)> = (0..r.nodes)
        .map(|i| {
            let at = Instant::from_nanos(rng.gen_range(0..=r.join_within.as_nanos() as u64));
            (at, i)
        })
        .collect();
    starts.sort();
    let mut net = Net {
        rng,
        now: Instant::ZERO,
        nodes: (0..r.nodes).map(|_| None).collect(),
        deadline: vec![None; r.nodes],
        flights: BinaryHeap::new(),
        timers: BinaryHeap::new(),
        seq: 0,
        latency: Duration::from_millis(5),
        jitter_ns: Duration::from_millis(2).as_nanos() as u64,
        loss: r.loss.clamp(0.0, 1.0),
        metering: false,
        bytes: 0,
        sent: 0,
        delivered: 0,
        buf: Vec::with_capacity(256),
    };
    for (at, i) in starts {
        net.run_until(at);
        net.nodes[i] = Some(Node::new(config.clone(), points[i], SimAddr(i as u32), at));
        net.after_io(i);
    }
    let last_start_s = net.now.as_nanos() as f64 / 1e9;
    let end = Instant::ZERO + r.limit;
    let mut converge_s = None;
    let mut t = net.now;
    while t < end {
        t = (t + r.check_every).min(end);
        net.run_until(t);
        let (wrong, leaders) = net.check(&want);
        if wrong == 0 && leaders == 1 {
            converge_s = Some(t.as_nanos() as f64 / 1e9);
            break;
        }
    }
    let mut bytes_s = f64::NAN;
    let mut msgs_s = f64::NAN;
    if converge_s.is_some() && !r.steady.is_zero() {
        net.metering = true;
        let from = net.now;
        net.run_until(from + r.steady);
        let secs = r.steady.as_nanos() as f64 / 1e9;
        bytes_s = net.bytes as f64 / secs / r.nodes as f64;
        msgs_s = net.sent as f64 / secs / r.nodes as f64;
    }
    let (wrong, leaders) = net.check(&want);
    Ok(DtResult {
        converge_s,
        last_start_s,
        converged: wrong == 0 && leaders == 1,
        wall_s: wall.elapsed().as_secs_f64(),
        control_bytes_per_node_s: bytes_s,
        control_msgs_per_node_s: msgs_s,
        messages: net.delivered,
        wrong_nodes: wrong,
        leaders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lossy_network_still_converges() {
        let r = run(&DtRun {
            nodes: 40,
            seed: 5,
            join_within: Duration::from_secs(2),
            limit: Duration::from_secs(120),
            steady: Duration::ZERO,
            check_every: Duration::from_millis(250),
            loss: 0.1,
        })
        .unwrap();
        assert!(r.converged, "{r:?}");
    }

    #[test]
    fn a_small_overlay_converges_to_the_central_triangulation() {
        let r = run(&DtRun {
            nodes: 60,
            seed: 3,
            join_within: Duration::from_secs(2),
            limit: Duration::from_secs(60),
            steady: Duration::from_secs(6),
            check_every: Duration::from_millis(250),
            loss: 0.0,
        })
        .unwrap();
        assert!(r.converged, "{r:?}");
        assert!(r.converge_s.is_some_and(|s| s < 60.0), "{r:?}");
        assert_eq!(r.wrong_nodes, 0);
        assert!(r.converge_s.is_some_and(|s| s >= r.last_start_s), "{r:?}");
        // Steady state: a few hellos per neighbour per slow heartbeat, never zero.
        assert!(r.control_bytes_per_node_s > 10.0, "{r:?}");
    }
}

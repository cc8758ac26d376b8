//! The overlay properties a scenario can expect (issue 16 §2, "Properties"): judged at the end
//! of a simulated run from the `overlay` sessions' state and the recorder.
//!
//! - `overlay-converged`: on DT, every live node's neighbours equal its neighbours in the
//!   Delaunay triangulation of the live nodes' points, computed centrally (`spade`, checked
//!   with the exact predicates of `viastack_overlay::geometry`), and exactly one node — the
//!   greatest point — is leader; on the hypercube, the labels are exactly G(0)…G(N−1), each
//!   held once, and every node's neighbours are the present labels one bit away.
//! - `overlay-multicast`: converged, and every `multicast` workload message sent by a node
//!   that stayed up was delivered exactly once at every other node that stayed up, and no node
//!   received any multicast twice — unless the sender's stack reported that message (a
//!   reliable service that gave up and told the sender: a miss, not a violation). A node
//!   *stayed up* if it is up at the end, did not leave, and never crashed after it first
//!   started (a late start is written as a crash at `0s` with a restart).
//!
//! Live nodes are the nodes up at the end that did not leave, but the rendezvous server's
//! node (the `overlay` layer's `rendezvous`), which is no member of the overlay.

use std::collections::{BTreeMap, BTreeSet};

use spade::{DelaunayTriangulation, Point2, Triangulation};
use viastack_kernel::{Duration, NodeId};
use viastack_overlay::geometry::{incircle, orient};
use viastack_overlay::{DtAddr, HcLabel};
use viastack_protocols::overlay::{Engine, OverlaySession};
use viastack_stack::model::{Expect, Scenario};

use crate::node::SimNode;
use crate::recorder::{Recorder, BROADCAST};

/// Most violations listed one by one; the rest are summed up.
const SHOWN: usize = 8;

/// The `overlay` session of a node, if its stack has one.
fn session(node: &SimNode) -> Option<&OverlaySession> {
    let k = node.kernel();
    node.channels().iter().find_map(|(_, ch)| {
        k.channel_sessions(*ch)
            .into_iter()
            .flatten()
            .find_map(|id| k.session::<OverlaySession>(id))
    })
}

/// Nodes that never crashed after they first started.
fn stayed_up(scenario: &Scenario, live: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
    live.iter()
        .copied()
        .filter(|n| {
            !scenario
                .crashes
                .iter()
                .any(|c| c.node == n.0 && c.at > Duration::ZERO)
        })
        .collect()
}

/// The violations of `expect` (empty for other expectations).
pub fn check<'a>(
    expect: Expect,
    scenario: &Scenario,
    nodes: impl Iterator<Item = (NodeId, Option<&'a SimNode>)>,
    recorder: &Recorder,
) -> Vec<String> {
    if !matches!(expect, Expect::OverlayConverged | Expect::OverlayMulticast) {
        return Vec::new();
    }
    let mut v = Vec::new();
    let left: BTreeSet<u32> = scenario.leaves.iter().map(|l| l.node).collect();
    let mut sessions = BTreeMap::new();
    for (id, node) in nodes {
        let Some(node) = node else { continue };
        if left.contains(&id.0) || node.has_left() {
            continue;
        }
        match session(node) {
            // The rendezvous server is no member of the overlay.
            Some(s) if s.is_rendezvous_server() => {}
            Some(s) => {
                sessions.insert(id, s);
            }
            None => {
                v.push(format!("{id} has no overlay layer"));
                return v;
            }
        }
    }
    converged(&sessions, &mut v);
    if expect == Expect::OverlayMulticast {
        let live: BTreeSet<NodeId> = sessions.keys().copied().collect();
        multicast(recorder, &stayed_up(scenario, &live), &mut v);
    }
    v
}

fn converged(sessions: &BTreeMap<NodeId, &OverlaySession>, v: &mut Vec<String>) {
    let mut dt = BTreeMap::new();
    let mut hc = BTreeMap::new();
    for (&id, s) in sessions {
        match s.engine() {
            Engine::Dt(n) => {
                dt.insert(id, n);
            }
            Engine::Hypercube(n) => {
                hc.insert(id, n);
            }
            Engine::Idle => v.push(format!("overlay not started at {id}")),
        }
    }
    if !dt.is_empty() {
        let points: Vec<DtAddr> = dt.values().map(|n| n.addr()).collect();
        let Some(want) = central_dt(&points) else {
            v.push(
                "the live points are not in general position: the triangulation is not unique"
                    .into(),
            );
            return;
        };
        let mut bad = 0;
        for ((id, n), want) in dt.iter().zip(&want) {
            let got: BTreeSet<DtAddr> = n.neighbour_addrs().collect();
            if &got != want {
                bad += 1;
                if bad <= SHOWN {
                    let missing: Vec<String> =
                        want.difference(&got).map(ToString::to_string).collect();
                    let extra: Vec<String> =
                        got.difference(want).map(ToString::to_string).collect();
                    v.push(format!(
                        "{id} at {}: neighbours differ from the Delaunay triangulation (missing [{}], extra [{}])",
                        n.addr(),
                        missing.join(" "),
                        extra.join(" ")
                    ));
                }
            }
        }
        if bad > SHOWN {
            v.push(format!("… {bad} nodes in all with wrong neighbours"));
        }
        let leaders: Vec<String> = dt
            .iter()
            .filter(|(_, n)| n.is_leader())
            .map(|(id, _)| id.to_string())
            .collect();
        if leaders.len() != 1 {
            v.push(format!(
                "{} leaders ({}), not one",
                leaders.len(),
                leaders.join(" ")
            ));
        }
    }
    if !hc.is_empty() {
        let mut labels: BTreeMap<HcLabel, NodeId> = BTreeMap::new();
        for (&id, n) in &hc {
            match n.label() {
                None => v.push(format!("{id} has no hypercube label")),
                Some(l) => {
                    if let Some(other) = labels.insert(l, id) {
                        v.push(format!("label {l} held by {other} and {id}"));
                    }
                }
            }
        }
        let count = u32::try_from(hc.len()).unwrap_or(u32::MAX);
        let want: BTreeSet<HcLabel> = (0..count).map(HcLabel::gray).collect();
        let have: BTreeSet<HcLabel> = labels.keys().copied().collect();
        if have != want {
            v.push(format!(
                "the hypercube is not compact: {} labels, not G(0)…G({})",
                have.len(),
                count.saturating_sub(1)
            ));
        }
        for (&id, n) in &hc {
            let Some(l) = n.label() else { continue };
            let want_nb: BTreeSet<HcLabel> = (0..32)
                .map(|b| l.flip(b))
                .filter(|x| have.contains(x))
                .collect();
            let got: BTreeSet<HcLabel> = n.neighbour_labels().collect();
            if got != want_nb {
                v.push(format!("{id} ({l}): neighbours {got:?}, not {want_nb:?}"));
            }
        }
    }
}

fn multicast(rec: &Recorder, stayed: &BTreeSet<NodeId>, v: &mut Vec<String>) {
    let mut messages = 0u64;
    let mut missing = 0u64;
    let mut shown = 0;
    for (&(w, src, dst), s) in &rec.streams {
        if dst != BROADCAST || !stayed.contains(&src) {
            continue;
        }
        for seq in 0..s.sent {
            messages += 1;
            let got = rec.multicast.get(&(w, src, seq));
            for &n in stayed {
                if n == src {
                    continue;
                }
                let c = got.and_then(|m| m.get(&n)).copied().unwrap_or(0);
                // Not delivered but reported to the sender (the service gave up and said so):
                // the promise "exactly once or the sender is told" holds.
                if c == 0 && s.reported.contains(&seq) {
                    continue;
                }
                if c != 1 {
                    missing += 1;
                    if shown < SHOWN {
                        shown += 1;
                        v.push(format!(
                            "multicast {seq} of workload {w} from {src} reached {n} {c} times, not once"
                        ));
                    }
                }
            }
        }
    }
    let twice: u64 = rec
        .multicast
        .values()
        .flat_map(|m| m.values())
        .filter(|&&c| c > 1)
        .count() as u64;
    if missing > SHOWN as u64 {
        v.push(format!(
            "… {missing} (message, node) pairs not delivered exactly once"
        ));
    }
    if twice > 0 && missing == 0 {
        v.push(format!(
            "{twice} multicast deliveries at a node that already had the message"
        ));
    }
    if messages == 0 {
        v.push("vacuous: no multicast message was sent by a node that stayed up".into());
    }
}

/// The Delaunay neighbours of every point, in the order given; `None` if the points are not
/// in general position (four cocircular around an inner edge, three collinear on the hull).
pub fn central_dt(points: &[DtAddr]) -> Option<Vec<BTreeSet<DtAddr>>> {
    let mut nbrs = vec![BTreeSet::new(); points.len()];
    if points.len() < 3 {
        for (i, set) in nbrs.iter_mut().enumerate() {
            for (j, b) in points.iter().enumerate() {
                if i != j {
                    set.insert(*b);
                }
            }
        }
        return Some(nbrs);
    }
    let mut t: DelaunayTriangulation<Point2<f64>> = DelaunayTriangulation::new();
    let mut index = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        let h = t
            .insert(Point2::new(f64::from(p.x()), f64::from(p.y())))
            .ok()?;
        index.insert(h.index(), i);
    }
    if t.num_inner_faces() == 0 {
        return None;
    }
    let idx = |v: spade::handles::FixedVertexHandle| index.get(&v.index()).copied();
    for e in t.undirected_edges() {
        let [a, b] = e.vertices();
        let (a, b) = (idx(a.fix())?, idx(b.fix())?);
        nbrs[a].insert(points[b]);
        nbrs[b].insert(points[a]);
    }
    for e in t.directed_edges() {
        if e.face().as_inner().is_none() || e.rev().face().as_inner().is_none() {
            continue;
        }
        let a = points[idx(e.from().fix())?];
        let b = points[idx(e.to().fix())?];
        let c = points[idx(e.next().to().fix())?];
        let d = points[idx(e.rev().next().to().fix())?];
        let (a, b, c) = if orient(a, b, c) > 0 {
            (a, b, c)
        } else {
            (b, a, c)
        };
        if incircle(a, b, c, d) >= 0 {
            return None;
        }
    }
    for e in t.convex_hull() {
        let a = points[idx(e.from().fix())?];
        let b = points[idx(e.to().fix())?];
        let c = points[idx(e.next().to().fix())?];
        if orient(a, b, c) == 0 {
            return None;
        }
    }
    Some(nbrs)
}

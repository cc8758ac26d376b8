//! Trees embedded in the overlay, computed locally from the neighbourhood with no routing
//! protocol (seed 000 §3.1.1.4: "all application messages are transmitted along trees that are
//! embedded in the overlay network topology"; multicast goes down the tree rooted at the
//! sender, unicast up the tree rooted at the receiver).
//!
//! On the hypercube the tree rooted at `r` follows the bit rule ([`hc_parent`]): a node's
//! parent flips the lowest bit in which its label and `r` differ whose result is a label of
//! the compact cube (its Gray index at most the HRoot's). Each step clears one differing bit,
//! so there is no cycle; in a compact Gray cube such a bit always exists (checked for every
//! root of every cube of 1…259 nodes, and by the property tests), so the tree spans the cube.
//! HyperCast's description fixes the rule only up to the order in which the bits are tried;
//! any fixed order gives a spanning tree, and all nodes must use the same one. A node needs
//! the root's *label*: the forwarding engine carries it (the source of a multicast, the
//! destination of a unicast), the `messagestore` carries its root's label in its messages
//! (wire version 2).
//!
//! On the Delaunay triangulation the tree rooted at `r` is given by compass routing: a node's
//! parent is the neighbour whose direction makes the smallest angle with the direction of `r`
//! (ties by address). Compass routing always reaches its target on a Delaunay triangulation, so
//! the parent pointers form a tree spanning the overlay. A node finds its children without
//! asking anyone: neighbour `n` is a child iff this node beats, at `n`, the two neighbours
//! angularly next to it around `n` — which `n` reports in every `HelloNeighbor` (`cw`, `ccw`).
//! (Angles from `n` are unimodal around the circle, so beating both angular neighbours means
//! beating all of them.)

use crate::addr::{DtAddr, HcLabel};
use crate::dt::Node;
use crate::geometry::compass_cmp;
use crate::hypercube;

/// The parent of `node` in the tree rooted at `root`; `None` at the root or with no neighbour.
pub fn dt_parent<S: Clone + PartialEq>(node: &Node<S>, root: DtAddr) -> Option<DtAddr> {
    let me = node.addr();
    if me == root {
        return None;
    }
    node.neighbour_addrs()
        .min_by(|&u, &v| compass_cmp(me, root, u, v))
}

/// The children of `node` in the tree rooted at `root`, ordered by address.
pub fn dt_children<S: Clone + PartialEq>(
    node: &Node<S>,
    root: DtAddr,
) -> impl Iterator<Item = DtAddr> + '_ {
    let me = node.addr();
    node.neighbours().filter_map(move |(n, info)| {
        if n == root {
            return None;
        }
        let (cw, ccw) = info.around;
        let beats = |other: Option<DtAddr>| {
            other.is_none_or(|o| o == me || compass_cmp(n, root, me, o).is_lt())
        };
        (beats(cw) && beats(ccw)).then_some(n)
    })
}

/// The parent of `label` in the hypercube tree rooted at `root`, in a compact cube whose top
/// label has Gray index `top` (the bit rule): flip the lowest bit in which `label` and `root`
/// differ whose result is a label of the cube. Each step brings the label one bit nearer the
/// root, so there is no cycle; in a compact Gray cube such a bit always exists (see
/// [`crate::hypercube`]), so every node has a parent. `None` at the root.
pub fn hc_parent(label: HcLabel, root: HcLabel, top: u32) -> Option<HcLabel> {
    let diff = label.value() ^ root.value();
    (0..32)
        .filter(|b| diff & (1 << b) != 0)
        .map(|b| label.flip(b))
        .find(|l| l.gray_index() <= top)
}

/// The children of `node` in the hypercube tree rooted at `root`: its neighbours whose parent
/// (by [`hc_parent`], with the HRoot's index as the top) is this node.
pub fn hc_children<S: Clone + Ord>(
    node: &hypercube::Node<S>,
    root: HcLabel,
) -> impl Iterator<Item = HcLabel> + '_ {
    let me = node.label();
    let top = node.root_label().map_or(0, HcLabel::gray_index);
    node.neighbour_labels()
        .filter(move |&n| me.is_some() && hc_parent(n, root, top) == me)
}

//! Exact integer geometry for the Delaunay triangulation protocol: orientation, in-circle, the
//! neighbour test, angular order and compass-routing angles. No floating point: every
//! predicate is computed in `i128` from coordinates bounded by [`DtAddr::MAX_COORD`]
//! (differences fit 30 bits, the in-circle determinant fits 124), so two nodes always agree on
//! a decision, whatever their platform.
//!
//! Invariants: every function is total (no panic) for addresses built by [`DtAddr::new`].

use std::cmp::Ordering;

use crate::addr::DtAddr;

fn d(a: DtAddr, b: DtAddr) -> (i128, i128) {
    (
        i128::from(b.x()) - i128::from(a.x()),
        i128::from(b.y()) - i128::from(a.y()),
    )
}

/// Twice the signed area of triangle `abc`: > 0 if `a, b, c` turn counter-clockwise, < 0 if
/// clockwise, 0 if collinear.
pub fn orient(a: DtAddr, b: DtAddr, c: DtAddr) -> i128 {
    let (bx, by) = d(a, b);
    let (cx, cy) = d(a, c);
    bx * cy - by * cx
}

/// The in-circle determinant: for `a, b, c` counter-clockwise, > 0 if `p` is strictly inside
/// their circumcircle, 0 on it, < 0 outside (the sign flips for clockwise `a, b, c`).
pub fn incircle(a: DtAddr, b: DtAddr, c: DtAddr, p: DtAddr) -> i128 {
    let (ax, ay) = d(p, a);
    let (bx, by) = d(p, b);
    let (cx, cy) = d(p, c);
    let al = ax * ax + ay * ay;
    let bl = bx * bx + by * by;
    let cl = cx * cx + cy * cy;
    ax * (by * cl - bl * cy) - ay * (bx * cl - bl * cx) + al * (bx * cy - by * cx)
}

/// Squared distance.
pub fn dist2(a: DtAddr, b: DtAddr) -> i128 {
    let (x, y) = d(a, b);
    x * x + y * y
}

/// The neighbour test: whether `a`–`p` is an edge of the Delaunay triangulation of
/// `{a, p} ∪ others` (points equal to `a` or `p` are ignored). The edge exists iff some circle
/// through `a` and `p` has no other point strictly inside and no point lies strictly between
/// them on the segment. Cocircular ties count as an edge (the rule is applied the same way by
/// every node; tests use points in general position, where the triangulation is unique).
///
/// Method: of the points left of `a→p`, keep the one whose circle through `a, p` is smallest
/// on that side (each replaces the current one if it is inside its circle), likewise on the
/// right; the edge exists iff the right one is not inside the left one's circle.
pub fn is_delaunay_edge(a: DtAddr, p: DtAddr, others: impl IntoIterator<Item = DtAddr>) -> bool {
    if a == p {
        return false;
    }
    let mut left: Option<DtAddr> = None;
    let mut right: Option<DtAddr> = None;
    for q in others {
        if q == a || q == p {
            continue;
        }
        let o = orient(a, p, q);
        if o == 0 {
            // Collinear: only a point strictly between a and p blocks the edge.
            let (px, py) = d(a, p);
            let (qx, qy) = d(a, q);
            let dot = px * qx + py * qy;
            if dot > 0 && dot < px * px + py * py {
                return false;
            }
            continue;
        }
        if o > 0 {
            match left {
                Some(l) if incircle(a, p, l, q) <= 0 => {}
                _ => left = Some(q),
            }
        } else {
            match right {
                Some(r) if incircle(p, a, r, q) <= 0 => {}
                _ => right = Some(q),
            }
        }
    }
    match (left, right) {
        (Some(l), Some(r)) => incircle(a, p, l, r) <= 0,
        _ => true,
    }
}

/// Orders `u` and `v`, seen from `c`, counter-clockwise from the positive x axis (angle in
/// `[0, 2π)`); equal directions are ordered nearer first, then by address.
pub fn angular_cmp(c: DtAddr, u: DtAddr, v: DtAddr) -> Ordering {
    let (ux, uy) = d(c, u);
    let (vx, vy) = d(c, v);
    let half = |x: i128, y: i128| u8::from(!(y > 0 || (y == 0 && x > 0)));
    half(ux, uy)
        .cmp(&half(vx, vy))
        .then_with(|| 0.cmp(&(ux * vy - uy * vx)))
        .then_with(|| dist2(c, u).cmp(&dist2(c, v)))
        .then_with(|| u.cmp(&v))
}

/// Compares the unsigned angles ∠(`target`, `c`, `u`) and ∠(`target`, `c`, `v`) in `[0, π]`
/// (smaller first), as compass routing does; equal angles are ordered by address so that every
/// node breaks ties alike.
pub fn compass_cmp(c: DtAddr, target: DtAddr, u: DtAddr, v: DtAddr) -> Ordering {
    let (tx, ty) = d(c, target);
    let key = |p: DtAddr| {
        let (px, py) = d(c, p);
        // (cos·|t||p|, |sin|·|t||p|): a point of the closed upper half-plane whose angle is the
        // unsigned angle from target to p.
        (tx * px + ty * py, (tx * py - ty * px).abs())
    };
    let (du, cu) = key(u);
    let (dv, cv) = key(v);
    let ord = if cu == 0 && cv == 0 {
        // Both on the line through target: angle 0 (dot > 0) before angle π.
        (du <= 0).cmp(&(dv <= 0))
    } else {
        // Angle of (du, cu) smaller than that of (dv, cv) iff their cross product is positive.
        0.cmp(&(du * cv - cu * dv))
    };
    ord.then_with(|| u.cmp(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(x: i32, y: i32) -> DtAddr {
        DtAddr::new(x, y).unwrap()
    }

    #[test]
    fn predicates_signs() {
        assert!(orient(p(0, 0), p(1, 0), p(0, 1)) > 0);
        assert!(orient(p(0, 0), p(0, 1), p(1, 0)) < 0);
        assert_eq!(orient(p(0, 0), p(1, 1), p(2, 2)), 0);
        assert!(incircle(p(0, 0), p(2, 0), p(0, 2), p(1, 1)) > 0);
        assert_eq!(incircle(p(0, 0), p(2, 0), p(0, 2), p(2, 2)), 0);
        assert!(incircle(p(0, 0), p(2, 0), p(0, 2), p(3, 3)) < 0);
    }

    #[test]
    fn extreme_coordinates_do_not_overflow() {
        let m = DtAddr::MAX_COORD;
        let (a, b, c) = (p(-m, -m), p(m, -m), p(-m, m));
        assert!(incircle(a, b, c, p(0, 0)) > 0);
        assert!(incircle(a, b, c, p(m, m)) == 0);
        assert!(orient(a, b, c) > 0);
    }

    #[test]
    fn neighbour_test() {
        // A square split by a diagonal, with a fourth point pulling the other diagonal.
        let (a, b) = (p(0, 0), p(10, 10));
        assert!(is_delaunay_edge(a, b, [p(10, 0)]));
        // (0,10) and (9,1) — (9,1) lies inside the circle through a, b, (0,10): the short
        // diagonal (0,10)-(9,1)... a-b crosses it and loses.
        assert!(!is_delaunay_edge(a, b, [p(0, 10), p(9, 1)]));
        assert!(is_delaunay_edge(p(0, 10), p(9, 1), [a, b]));
        // Collinear: a point between blocks, a point beyond does not.
        assert!(!is_delaunay_edge(a, b, [p(5, 5)]));
        assert!(is_delaunay_edge(a, b, [p(20, 20)]));
    }

    #[test]
    fn angular_and_compass_order() {
        let c = p(0, 0);
        let mut v = vec![p(0, -1), p(-1, 0), p(1, 0), p(0, 1), p(1, 1)];
        v.sort_by(|&a, &b| angular_cmp(c, a, b));
        assert_eq!(v, vec![p(1, 0), p(1, 1), p(0, 1), p(-1, 0), p(0, -1)]);
        let t = p(10, 0);
        assert_eq!(compass_cmp(c, t, p(5, 1), p(1, 5)), Ordering::Less);
        assert_eq!(compass_cmp(c, t, p(-5, 0), p(0, -5)), Ordering::Greater);
        assert_eq!(compass_cmp(c, t, p(3, 0), p(-3, 1)), Ordering::Less);
    }
}

//! The fault-injection layers through a real kernel: each fault at rate 0 and 1, counters,
//! timers releasing held messages, the `max_held` bound, direction, determinism.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use viastack_kernel::{Duration, Instant, LayerRef};
use viastack_protocols::fault::{Config, Fault, FaultLayer, Faulty, DEFAULT_MAX_HELD};

fn fault_node(seed: u64, fault: Fault, rate: f64, direction: Faulty, max_held: usize) -> Node {
    let l: LayerRef = Arc::new(FaultLayer::new(
        "f",
        Config {
            fault,
            rate,
            direction,
            max_held,
        },
    ));
    node(1, seed, vec![l], 1)
}

fn down(fault: Fault, rate: f64) -> Node {
    fault_node(1, fault, rate, Faulty::Down, DEFAULT_MAX_HELD)
}

#[test]
fn drop_drops_at_its_rate() {
    let mut n = down(Fault::Drop, 1.0);
    assert!(send(&mut n, 0, Some(2), b"x").is_empty());
    assert_eq!(counter(&n, "f.dropped"), 1);
    let mut n = down(Fault::Drop, 0.0);
    assert_eq!(send(&mut n, 0, Some(2), b"x").len(), 1);
    let mut n = down(Fault::Drop, 0.3);
    let passed: usize = (0..10_000)
        .map(|_| send(&mut n, 0, Some(2), b"x").len())
        .sum();
    assert!((6_700..7_300).contains(&passed), "{passed}");
    assert_eq!(counter(&n, "f.dropped"), 10_000 - passed as u64);
}

#[test]
fn duplicate_sends_an_identical_copy() {
    let mut n = down(Fault::Duplicate, 1.0);
    let sent = send(&mut n, 0, Some(2), b"twice");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], sent[1]);
    assert_eq!(counter(&n, "f.duplicated"), 1);
}

#[test]
fn corrupt_flips_one_to_three_bits() {
    let mut n = down(Fault::Corrupt, 1.0);
    let payload = [0u8; 64];
    for _ in 0..500 {
        let sent = send(&mut n, 0, Some(2), &payload).pop().unwrap();
        assert_eq!(
            sent[..2],
            [0, 0],
            "the device tag is pushed after the fault"
        );
        let flipped: u32 = sent[2..].iter().map(|b| b.count_ones()).sum();
        // Two flips of one bit cancel out: 0..=3, odd counts 1 or 3.
        assert!(flipped <= 3, "{flipped}");
    }
    assert_eq!(counter(&n, "f.corrupted"), 500);
    // An empty message has nothing to corrupt.
    assert_eq!(send(&mut n, 0, Some(2), b"").len(), 1);
    assert_eq!(counter(&n, "f.empty"), 1);
}

#[test]
fn delay_holds_messages_until_their_timer() {
    let fault = Fault::Delay {
        delay: Duration::from_millis(10),
        jitter: Duration::from_millis(5),
    };
    let mut n = down(fault, 1.0);
    for i in 0..20u8 {
        assert!(send(&mut n, 0, Some(2), &[i]).is_empty());
    }
    assert_eq!(counter(&n, "f.delayed"), 20);
    assert!(advance(&mut n, Instant::from_micros(9_999)).1.is_empty());
    let (_, out) = advance(&mut n, Instant::from_millis(15));
    assert_eq!(out.len(), 20, "all released by delay + jitter");
    let mut order: Vec<u8> = out.iter().map(|(_, b)| b[2]).collect();
    assert_ne!(order, (0..20).collect::<Vec<_>>(), "jitter reorders");
    order.sort();
    assert_eq!(order, (0..20).collect::<Vec<_>>());
    assert_eq!(n.kernel.pending_timers(), 0);
}

#[test]
fn reorder_lets_later_messages_pass_and_max_held_bounds_the_queue() {
    let fault = Fault::Reorder {
        hold: Duration::from_millis(5),
    };
    let mut n = fault_node(3, fault, 1.0, Faulty::Down, 4);
    for i in 0..6u8 {
        assert!(send(&mut n, 0, Some(2), &[i]).is_empty());
    }
    assert_eq!(counter(&n, "f.reordered"), 4);
    assert_eq!(counter(&n, "f.overflow"), 2);
    let (_, out) = advance(&mut n, Instant::from_millis(5));
    let got: Vec<u8> = out.iter().map(|(_, b)| b[2]).collect();
    assert_eq!(
        got,
        vec![0, 1, 2, 3],
        "released in arrival order at equal times"
    );
    // At rate 0.5 some pass at once and the held ones come later: out of order.
    let mut n = fault_node(4, fault, 0.5, Faulty::Down, 1024);
    let mut got = vec![];
    for i in 0..40u8 {
        let now = Instant::from_millis(u64::from(i));
        n.now = now;
        got.extend(send(&mut n, 0, Some(2), &[i]).iter().map(|b| b[2]));
        got.extend(advance(&mut n, now).1.iter().map(|(_, b)| b[2]));
    }
    got.extend(
        advance(&mut n, Instant::from_millis(100))
            .1
            .iter()
            .map(|(_, b)| b[2]),
    );
    assert_eq!(got.len(), 40);
    assert!(got.windows(2).any(|w| w[0] > w[1]), "{got:?}");
}

#[test]
fn direction_selects_which_messages_suffer() {
    let mut up = fault_node(1, Fault::Drop, 1.0, Faulty::Up, 16);
    assert_eq!(send(&mut up, 0, Some(2), b"x").len(), 1, "down untouched");
    assert!(receive(&mut up, 2, vec![0, 0, 1]).is_empty(), "up dropped");
    let mut both = fault_node(1, Fault::Drop, 1.0, Faulty::Both, 16);
    assert!(send(&mut both, 0, Some(2), b"x").is_empty());
    assert!(receive(&mut both, 2, vec![0, 0, 1]).is_empty());
    assert_eq!(counter(&both, "f.dropped"), 2);
    let mut delayed_up = fault_node(
        1,
        Fault::Delay {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
        },
        1.0,
        Faulty::Up,
        16,
    );
    assert!(receive(&mut delayed_up, 2, vec![0, 0, 7]).is_empty());
    let (up, _) = advance(&mut delayed_up, Instant::from_millis(1));
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].2, vec![7]);
}

#[test]
fn the_same_seed_injects_the_same_faults() {
    let run = |seed| {
        let mut n = fault_node(seed, Fault::Corrupt, 0.5, Faulty::Down, 16);
        (0..50u8)
            .flat_map(|i| send(&mut n, 0, Some(2), &[i; 8]))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

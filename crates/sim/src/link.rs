//! The fate of one datagram on one directed link: loss, queueing, delay, duplication,
//! reordering and corruption.
//!
//! Part of the deterministic simulator, which realizes DESIGN.md §4.2 "deterministic simulation
//! first". Everything here is a pure function of the random number generator, the link's
//! [`LinkConfig`], its [`LinkState`] and the current time: the same inputs draw the same random
//! numbers in the same order and give the same fate. A probability of exactly 0 or 1 draws
//! nothing, so a perfect link costs no random numbers at all.
//!
//! Order of decisions for a datagram of `len` bytes sent at `now`:
//! 1. loss (`loss`) — a lost datagram does not occupy the link;
//! 2. queueing: it leaves at `max(now, next_free) + len*8/bandwidth`, which becomes the new
//!    `next_free` (a FIFO queue);
//! 3. duplication (`duplicate`): a second copy leaves at the same moment;
//! 4. per copy, first the original then the duplicate: arrival = departure + `latency` +
//!    uniform jitter in `[0, jitter]`, plus `reorder_delay` with probability `reorder`;
//!    corrupted with probability `corrupt` unless empty.

use rand::Rng;
use viastack_kernel::time::duration_nanos;
use viastack_kernel::Instant;

use crate::config::LinkConfig;

/// What a link remembers between datagrams: when its transmitter is free again. Only
/// bandwidth-limited links need one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkState {
    /// The instant the last queued datagram finishes serializing.
    pub next_free: Instant,
}

/// When one copy of a datagram arrives, and whether its bits are to be flipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyFate {
    pub at: Instant,
    pub corrupt: bool,
}

/// What happens to a datagram on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Lost,
    Delivered {
        first: CopyFate,
        duplicate: Option<CopyFate>,
    },
}

/// True with probability `p`; draws a random number only when `0 < p < 1`.
fn chance<R: Rng>(rng: &mut R, p: f64) -> bool {
    if p <= 0.0 {
        false
    } else if p >= 1.0 {
        true
    } else {
        rng.gen::<f64>() < p
    }
}

/// Nanoseconds to serialize `len` bytes at `bps` bits per second, rounded up.
pub(crate) fn serialization_nanos(len: usize, bps: u64) -> u64 {
    if bps == 0 {
        return u64::MAX;
    }
    let bits = (len as u128).saturating_mul(8);
    let nanos = bits.saturating_mul(1_000_000_000).div_ceil(u128::from(bps));
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

fn copy_fate<R: Rng>(rng: &mut R, cfg: &LinkConfig, depart: Instant, len: usize) -> CopyFate {
    let mut at = depart.saturating_add(cfg.latency);
    let jitter = duration_nanos(cfg.jitter);
    if jitter > 0 {
        at = Instant::from_nanos(at.as_nanos().saturating_add(rng.gen_range(0..=jitter)));
    }
    if chance(rng, cfg.reorder) {
        at = at.saturating_add(cfg.reorder_delay);
    }
    let corrupt = len > 0 && chance(rng, cfg.corrupt);
    CopyFate { at, corrupt }
}

/// Decide the fate of a `len`-byte datagram entering the link at `now`, updating the link's
/// queue in `state`.
pub(crate) fn fate<R: Rng>(
    rng: &mut R,
    cfg: &LinkConfig,
    state: &mut LinkState,
    now: Instant,
    len: usize,
) -> Fate {
    if chance(rng, cfg.loss) {
        return Fate::Lost;
    }
    let depart = match cfg.bandwidth_bps {
        Some(bps) => {
            let start = now.max(state.next_free);
            let done = Instant::from_nanos(
                start
                    .as_nanos()
                    .saturating_add(serialization_nanos(len, bps)),
            );
            state.next_free = done;
            done
        }
        None => now,
    };
    let duplicated = chance(rng, cfg.duplicate);
    let first = copy_fate(rng, cfg, depart, len);
    let duplicate = duplicated.then(|| copy_fate(rng, cfg, depart, len));
    Fate::Delivered { first, duplicate }
}

/// Flip 1–3 distinct random bits of `bytes`; returns how many were flipped (0 only for an
/// empty datagram, which is left alone).
pub(crate) fn corrupt<R: Rng>(rng: &mut R, bytes: &mut [u8]) -> u32 {
    let bits = bytes.len().saturating_mul(8);
    if bits == 0 {
        return 0;
    }
    let wanted = rng.gen_range(1..=3usize).min(bits);
    let mut chosen = [usize::MAX; 3];
    let mut flipped = 0;
    for slot in 0..wanted {
        // Rejection sampling for distinct bits: at least 8 candidates for at most 3 picks,
        // so this ends after very few draws.
        let bit = loop {
            let b = rng.gen_range(0..bits);
            if !chosen.contains(&b) {
                break b;
            }
        };
        if let Some(c) = chosen.get_mut(slot) {
            *c = bit;
        }
        if let Some(byte) = bytes.get_mut(bit / 8) {
            *byte ^= 1 << (bit % 8);
            flipped += 1;
        }
    }
    flipped
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use viastack_kernel::Duration;

    fn rng(seed: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed)
    }

    #[test]
    fn perfect_link_is_fixed_latency_and_draws_nothing() {
        let cfg = LinkConfig::default();
        let mut r = rng(7);
        let mut state = LinkState::default();
        let now = Instant::from_millis(3);
        let f = fate(&mut r, &cfg, &mut state, now, 100);
        assert_eq!(
            f,
            Fate::Delivered {
                first: CopyFate {
                    at: Instant::from_millis(4),
                    corrupt: false
                },
                duplicate: None
            }
        );
        // No random number was consumed.
        assert_eq!(r.gen::<u64>(), rng(7).gen::<u64>());
    }

    #[test]
    fn certain_loss_and_certain_duplication() {
        let mut r = rng(1);
        let mut state = LinkState::default();
        let lossy = LinkConfig {
            loss: 1.0,
            ..LinkConfig::default()
        };
        assert_eq!(
            fate(&mut r, &lossy, &mut state, Instant::ZERO, 10),
            Fate::Lost
        );
        let dup = LinkConfig {
            duplicate: 1.0,
            corrupt: 1.0,
            ..LinkConfig::default()
        };
        match fate(&mut r, &dup, &mut state, Instant::ZERO, 10) {
            Fate::Delivered {
                first,
                duplicate: Some(second),
            } => assert!(first.corrupt && second.corrupt),
            other => panic!("expected two corrupted copies, got {other:?}"),
        }
        // Empty datagrams are never corrupted.
        match fate(&mut r, &dup, &mut state, Instant::ZERO, 0) {
            Fate::Delivered {
                first,
                duplicate: Some(second),
            } => assert!(!first.corrupt && !second.corrupt),
            other => panic!("expected two clean copies, got {other:?}"),
        }
    }

    #[test]
    fn duplicate_draws_its_own_delay_and_corruption() {
        let cfg = LinkConfig {
            jitter: Duration::from_millis(1),
            duplicate: 1.0,
            corrupt: 0.5,
            ..LinkConfig::default()
        };
        let mut r = rng(5);
        let mut state = LinkState::default();
        let (mut other_time, mut other_corruption) = (0, 0);
        for _ in 0..100 {
            match fate(&mut r, &cfg, &mut state, Instant::ZERO, 10) {
                Fate::Delivered {
                    first,
                    duplicate: Some(second),
                } => {
                    other_time += usize::from(first.at != second.at);
                    other_corruption += usize::from(first.corrupt != second.corrupt);
                }
                other => panic!("expected two copies, got {other:?}"),
            }
        }
        assert!(other_time > 90, "duplicates share the original's jitter");
        assert!(
            other_corruption > 20,
            "duplicates share the original's corruption"
        );
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let cfg = LinkConfig {
            latency: Duration::from_millis(2),
            jitter: Duration::from_micros(500),
            ..LinkConfig::default()
        };
        let mut r = rng(3);
        let mut state = LinkState::default();
        let lo = Instant::from_millis(2);
        let hi = Instant::from_micros(2500);
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            match fate(&mut r, &cfg, &mut state, Instant::ZERO, 10) {
                Fate::Delivered { first, .. } => {
                    assert!(first.at >= lo && first.at <= hi, "{}", first.at);
                    distinct.insert(first.at);
                }
                Fate::Lost => panic!("lossless link lost a datagram"),
            }
        }
        assert!(
            distinct.len() > 900,
            "jitter barely varies: {}",
            distinct.len()
        );
    }

    #[test]
    fn reorder_adds_its_delay() {
        let cfg = LinkConfig {
            reorder: 1.0,
            reorder_delay: Duration::from_millis(5),
            ..LinkConfig::default()
        };
        let mut state = LinkState::default();
        let f = fate(&mut rng(0), &cfg, &mut state, Instant::ZERO, 1);
        assert!(matches!(f, Fate::Delivered { first, .. } if first.at == Instant::from_millis(6)));
    }

    #[test]
    fn bandwidth_queues_datagrams_back_to_back() {
        assert_eq!(serialization_nanos(1000, 8_000_000), 1_000_000);
        assert_eq!(serialization_nanos(1, 3), 2_666_666_667); // rounded up
        assert_eq!(serialization_nanos(usize::MAX, 1), u64::MAX);
        let cfg = LinkConfig {
            bandwidth_bps: Some(8_000_000),
            ..LinkConfig::default()
        };
        let mut state = LinkState::default();
        let mut r = rng(0);
        for i in 1..=5u64 {
            let f = fate(&mut r, &cfg, &mut state, Instant::ZERO, 1000);
            let want = Instant::from_millis(i + 1);
            assert!(
                matches!(f, Fate::Delivered { first, .. } if first.at == want),
                "{f:?}"
            );
        }
        // An idle link starts serializing at once.
        let f = fate(&mut r, &cfg, &mut state, Instant::from_millis(100), 1000);
        assert!(
            matches!(f, Fate::Delivered { first, .. } if first.at == Instant::from_millis(102))
        );
    }

    #[test]
    fn corruption_flips_one_to_three_distinct_bits() {
        let mut r = rng(11);
        let mut counts = [0u32; 4];
        for len in [1usize, 2, 64] {
            for _ in 0..500 {
                let original: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let mut bytes = original.clone();
                let n = corrupt(&mut r, &mut bytes);
                let changed: u32 = original
                    .iter()
                    .zip(&bytes)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum();
                assert_eq!(changed, n, "flipped bits must be distinct");
                assert!((1..=3).contains(&n));
                counts[n as usize] += 1;
            }
        }
        assert!(
            counts[1] > 0 && counts[2] > 0 && counts[3] > 0,
            "{counts:?}"
        );
        assert_eq!(corrupt(&mut r, &mut []), 0);
    }
}

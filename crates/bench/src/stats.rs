//! The statistics every benchmark reports (issue 13 §6): on this noisy 2-core VM the lanes of
//! a benchmark take turns round by round, each lane's figure is the median of its rounds, and a
//! ratio between two lanes comes with a 95 % interval from a paired bootstrap over rounds (a
//! round's measurements were made side by side, so resampling whole rounds keeps what they
//! shared: the machine's phase at the time).

use rand::{Rng, SeedableRng};

/// The `q` quantile of `samples` (sorted in place), nearest rank; NaN when empty.
pub fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples.get(i).copied().unwrap_or(f64::NAN)
}

/// The median of `samples` (nearest rank); NaN when empty.
pub fn median(samples: &[f64]) -> f64 {
    percentile(&mut samples.to_vec(), 0.5)
}

/// Resamples of the bootstrap.
const BOOTSTRAP: usize = 1_000;

/// A 95 % confidence interval of median(a) / median(b) over paired rounds `(a, b)`: a paired
/// percentile bootstrap resampling whole rounds with a fixed seed (the same rounds give the
/// same interval). NaN bounds with fewer than two pairs.
pub fn ratio_of_medians_ci95(pairs: &[(f64, f64)]) -> [f64; 2] {
    if pairs.len() < 2 {
        return [f64::NAN; 2];
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let (mut xs, mut ys) = (vec![0.0; pairs.len()], vec![0.0; pairs.len()]);
    let mut ratios: Vec<f64> = (0..BOOTSTRAP)
        .map(|_| {
            for (x, y) in xs.iter_mut().zip(ys.iter_mut()) {
                (*x, *y) = pairs[rng.gen_range(0..pairs.len())];
            }
            percentile(&mut xs, 0.5) / percentile(&mut ys, 0.5)
        })
        .collect();
    [
        percentile(&mut ratios, 0.025),
        percentile(&mut ratios, 0.975),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_of_an_exact_ratio_is_that_ratio() {
        let pairs: Vec<(f64, f64)> = (1..=50)
            .map(|i| (2.0 * f64::from(i), f64::from(i)))
            .collect();
        assert_eq!(ratio_of_medians_ci95(&pairs), [2.0, 2.0]);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn the_interval_holds_the_ratio_and_narrows_with_more_rounds() {
        // a = 1.1 × b, each with its own noise of ±10 %, around a level that drifts between
        // rounds (the phases the pairing is meant to cancel).
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut rounds = |n: usize| -> Vec<(f64, f64)> {
            (0..n)
                .map(|i| {
                    let level = 50.0 + 30.0 * ((i / 20) % 3) as f64;
                    (
                        1.1 * level * rng.gen_range(0.9..1.1),
                        level * rng.gen_range(0.9..1.1),
                    )
                })
                .collect()
        };
        let wide = ratio_of_medians_ci95(&rounds(60));
        let narrow = ratio_of_medians_ci95(&rounds(1200));
        for ci in [wide, narrow] {
            assert!(ci[0] < 1.1 && 1.1 < ci[1], "{ci:?}");
        }
        assert!(
            narrow[1] - narrow[0] < wide[1] - wide[0],
            "{wide:?} {narrow:?}"
        );
    }

    #[test]
    fn fewer_than_two_rounds_give_no_interval() {
        assert!(ratio_of_medians_ci95(&[(1.0, 2.0)])
            .iter()
            .all(|b| b.is_nan()));
    }
}

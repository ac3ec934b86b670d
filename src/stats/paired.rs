//! Paired comparisons of two runs over the same items: the exact McNemar test and Newcombe's
//! interval for binary outcomes, a paired bootstrap for everything else.

use crate::rng::SplitMix64;

/// Resamples of [`paired_bootstrap`] when the caller has no reason to choose.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;
/// The fixed seed of comparisons, so the same two runs always give the same interval and p.
pub const BOOTSTRAP_SEED: u64 = 0x5EED_0C0A_4BA5_E000;

/// Exact McNemar test: the two-sided binomial p-value of the discordant pairs, `b` items
/// right only in the first run and `c` right only in the second, under p = 1/2:
/// `min(1, 2 · P(X ≤ min(b, c)))` with `X ~ Binomial(b + c, 1/2)`; 1 when `b + c = 0`.
///
/// The tail is summed relative to its largest term (`C(m, k) / 2^m`, taken in log space), so
/// nothing overflows or underflows before the end and thousands of pairs keep full accuracy.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let m = b + c;
    if m == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // t(i-1) / t(i) = i / (m - i + 1) <= 1 below the middle, so the terms only shrink.
    let (mut sum, mut term) = (0.0f64, 1.0f64);
    for i in (0..=k).rev() {
        sum += term;
        if i == 0 || term < sum * 1e-18 {
            break;
        }
        term *= i as f64 / (m - i + 1) as f64;
    }
    let ln_choose: f64 = (0..k).map(|i| ((m - i) as f64).ln() - ((i + 1) as f64).ln()).sum();
    let ln_tail = ln_choose - m as f64 * std::f64::consts::LN_2 + sum.ln();
    (2.0 * ln_tail.exp()).min(1.0)
}

/// The 2×2 table of paired binary outcomes: base run against new run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairedCounts {
    /// Right in both runs.
    pub both: u64,
    /// Right in base, wrong in new.
    pub regressions: u64,
    /// Wrong in base, right in new.
    pub improvements: u64,
    /// Wrong in both runs.
    pub neither: u64,
}

impl PairedCounts {
    pub fn n(&self) -> u64 {
        self.both + self.regressions + self.improvements + self.neither
    }

    pub fn base_rate(&self) -> f64 {
        (self.both + self.regressions) as f64 / self.n().max(1) as f64
    }

    pub fn new_rate(&self) -> f64 {
        (self.both + self.improvements) as f64 / self.n().max(1) as f64
    }
}

/// 95% interval of `new rate − base rate` for paired binary outcomes: Newcombe's
/// square-and-add method for paired proportions (Newcombe 1998, method 10). The Wilson
/// intervals of the two rates are combined through their correlation, estimated by the
/// continuity-corrected phi coefficient of the table. Unlike a Wald interval it stays inside
/// [-1, 1] and does not collapse to a point when few items flip. `[0, 0]` for an empty table.
pub fn newcombe_paired_ci(t: &PairedCounts) -> [f64; 2] {
    let n = t.n();
    if n == 0 {
        return [0.0, 0.0];
    }
    let (a, b, c, d) = (t.both, t.regressions, t.improvements, t.neither);
    let (p_new, p_base) = (t.new_rate(), t.base_rate());
    let (l_new, u_new) = super::wilson_95((a + c) as usize, n as usize);
    let (l_base, u_base) = super::wilson_95((a + b) as usize, n as usize);
    let margins = [a + c, b + d, a + b, c + d];
    let phi = if margins.contains(&0) {
        0.0
    } else {
        let product = margins.iter().map(|&m| m as f64).product::<f64>().sqrt();
        let cross = a as f64 * d as f64 - b as f64 * c as f64;
        let half_n = n as f64 / 2.0;
        if cross > half_n {
            (cross - half_n) / product
        } else if cross >= 0.0 {
            0.0
        } else {
            cross / product
        }
    };
    let delta = p_new - p_base;
    let square_add = |x: f64, y: f64| (x * x + y * y - 2.0 * phi * x * y).max(0.0).sqrt();
    [delta - square_add(p_new - l_new, u_base - p_base), delta + square_add(p_base - l_base, u_new - p_new)]
}

/// What [`paired_bootstrap`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bootstrap {
    /// Mean of `new − base` over the items.
    pub delta: f64,
    /// Percentile 95% interval of that mean.
    pub ci95: [f64; 2],
    /// Two-sided p-value of "no difference" (see [`paired_bootstrap`]).
    pub p_value: f64,
    /// One-sided p-value of "new is not above base": `(1 + #{mean ≤ 0}) / (resamples + 1)`.
    pub p_above: f64,
}

/// Paired bootstrap of the mean difference `new[i] − base[i]`: `resamples` times, draw as many
/// items as there are, with replacement (both runs' values of an item travel together), and
/// take the mean difference. The interval is the 2.5th and 97.5th percentile of those means
/// (linear interpolation between order statistics). The p-value inverts the percentile
/// interval: `min(1, 2 · (1 + min(#{mean ≤ 0}, #{mean ≥ 0})) / (resamples + 1))`, twice the
/// share of resampled means on the far side of zero (the +1 keeps it above zero), so p < 0.05
/// exactly when zero lies outside the interval, up to resampling noise. Draws come from our
/// own [`SplitMix64`] seeded with `seed`: the same input gives the same result everywhere.
/// Both slices must have the same length.
pub fn paired_bootstrap(base: &[f64], new: &[f64], resamples: usize, seed: u64) -> Bootstrap {
    assert_eq!(base.len(), new.len(), "paired_bootstrap needs one base and one new value per item");
    let n = base.len();
    let diffs: Vec<f64> = new.iter().zip(base).map(|(x, y)| x - y).collect();
    let delta = super::mean(&diffs);
    if n == 0 || resamples == 0 {
        return Bootstrap { delta, ci95: [delta, delta], p_value: 1.0, p_above: 1.0 };
    }
    let mut rng = SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            let sum: f64 = (0..n).map(|_| diffs[draw_index(&mut rng, n)]).sum();
            sum / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at_or_below = means.partition_point(|m| *m <= 0.0);
    let at_or_above = resamples - means.partition_point(|m| *m < 0.0);
    let tail = at_or_below.min(at_or_above);
    let p_value = (2.0 * (1 + tail) as f64 / (resamples + 1) as f64).min(1.0);
    let p_above = (1 + at_or_below) as f64 / (resamples + 1) as f64;
    Bootstrap { delta, ci95: [percentile(&means, 0.025), percentile(&means, 0.975)], p_value, p_above }
}

/// An index in `0..n` drawn uniformly: multiply-shift maps 64 random bits onto `0..n` without
/// a division.
pub(super) fn draw_index(rng: &mut SplitMix64, n: usize) -> usize {
    ((rng.next_u64() as u128 * n as u128) >> 64) as usize
}

/// The `q` quantile of sorted `values`, interpolating between neighbours.
pub(super) fn percentile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let (low, high) = (position.floor() as usize, position.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcnemar_matches_hand_computed_binomials() {
        // b=12, c=1: 2 · (C(13,0) + C(13,1)) / 2^13 = 28 / 8192.
        assert_eq!(mcnemar_exact(12, 1), 0.00341796875);
        assert_eq!(mcnemar_exact(1, 12), 0.00341796875);
        // b=5, c=0: 2 / 2^5.
        assert_eq!(mcnemar_exact(5, 0), 0.0625);
        // Equal counts, neighbouring counts and no discordant pair at all: no evidence.
        assert_eq!(mcnemar_exact(3, 3), 1.0);
        assert_eq!(mcnemar_exact(7, 6), 1.0);
        assert_eq!(mcnemar_exact(250, 250), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
    }

    #[test]
    fn mcnemar_stays_exact_for_thousands_of_pairs() {
        // Exact values, rounded once to f64:
        // python3 -c "from fractions import Fraction; from math import comb;
        //   p=lambda b,c: float(min(1, Fraction(2*sum(comb(b+c,i) for i in range(min(b,c)+1)), 2**(b+c))));
        //   print(repr(p(2100,1950)), repr(p(3000,2850)), repr(p(1200,1000)), repr(p(40,60)))"
        let cases = [
            (2100, 1950, 0.01920513333543407),
            (3000, 2850, 0.05139528070225107),
            (1200, 1000, 2.1817026407914712e-05),
            (40, 60, 0.05688793364098079),
        ];
        for (b, c, exact) in cases {
            let got = mcnemar_exact(b, c);
            assert!(((got - exact) / exact).abs() < 1e-9, "b={b} c={c}: {got} vs {exact}");
        }
    }

    #[test]
    fn newcombe_interval_matches_the_published_example() {
        // Cavo et al. 2012 as worked in Fagerland, Lydersen & Laake, "Statistical Analysis of
        // Contingency Tables", ch. 8: table [[59, 6], [16, 80]], Newcombe square-and-add
        // estimate -0.0621, 95% CI -0.1186 to -0.0046 (new = rows, base = columns).
        let t = PairedCounts { both: 59, improvements: 6, regressions: 16, neither: 80 };
        assert!((t.new_rate() - t.base_rate() - (-10.0 / 161.0)).abs() < 1e-12);
        let [lo, hi] = newcombe_paired_ci(&t);
        assert!((lo - -0.1186).abs() < 5e-5, "{lo}");
        assert!((hi - -0.0046).abs() < 5e-5, "{hi}");
        // No flips at all: the interval still has width (unlike Wald's [0, 0]) and holds 0.
        let same = PairedCounts { both: 10, neither: 10, ..PairedCounts::default() };
        let [lo, hi] = newcombe_paired_ci(&same);
        assert!(lo < 0.0 && hi > 0.0 && hi - lo > 0.05, "[{lo}, {hi}]");
        // Everything regresses: bounded by -1.
        let all = PairedCounts { regressions: 20, ..PairedCounts::default() };
        let [lo, hi] = newcombe_paired_ci(&all);
        assert!(lo >= -1.0 && hi < -0.5, "[{lo}, {hi}]");
    }

    fn noisy(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f64()).collect()
    }

    #[test]
    fn bootstrap_is_deterministic() {
        let base = noisy(300, 1);
        let new = noisy(300, 2);
        let a = paired_bootstrap(&base, &new, 2000, BOOTSTRAP_SEED);
        let b = paired_bootstrap(&base, &new, 2000, BOOTSTRAP_SEED);
        assert_eq!(a, b);
        let other = paired_bootstrap(&base, &new, 2000, BOOTSTRAP_SEED + 1);
        assert_ne!(a.ci95, other.ci95, "the seed drives the resamples");
    }

    #[test]
    fn bootstrap_detects_a_clear_shift() {
        // Every item loses 0.1 plus noise in [-0.05, 0.05).
        let base = noisy(200, 3);
        let noise = noisy(200, 4);
        let new: Vec<f64> = base.iter().zip(&noise).map(|(b, e)| b - 0.1 + (e - 0.5) * 0.1).collect();
        let r = paired_bootstrap(&base, &new, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED);
        assert!((r.delta - -0.1).abs() < 0.01, "{r:?}");
        assert!(r.ci95[1] < -0.09 && r.ci95[0] > -0.11, "{r:?}");
        // No resampled mean reaches zero: the smallest p the resamples can show.
        assert_eq!(r.p_value, 2.0 / (BOOTSTRAP_RESAMPLES + 1) as f64);
    }

    #[test]
    fn bootstrap_sees_no_shift_in_symmetric_differences() {
        // Differences come in +x / -x pairs: the mean difference is exactly 0.
        let base = noisy(200, 5);
        let step = noisy(100, 6);
        let new: Vec<f64> = base
            .iter()
            .enumerate()
            .map(|(i, b)| if i % 2 == 0 { b + step[i / 2] } else { b - step[i / 2] })
            .collect();
        let r = paired_bootstrap(&base, &new, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED);
        assert!(r.delta.abs() < 1e-12);
        assert!(r.ci95[0] < 0.0 && r.ci95[1] > 0.0, "{r:?}");
        assert!(r.p_value > 0.5, "{r:?}");
        // The percentile interval's width agrees with the normal theory one, 2 · 1.96 · sd / sqrt(n).
        let diffs: Vec<f64> = new.iter().zip(&base).map(|(x, y)| x - y).collect();
        let expected =
            2.0 * super::super::Z_95 * super::super::sample_std(&diffs) / (diffs.len() as f64).sqrt();
        let width = r.ci95[1] - r.ci95[0];
        assert!((width / expected - 1.0).abs() < 0.1, "width {width} vs {expected}");
    }

    #[test]
    fn bootstrap_of_identical_runs_is_a_point_at_zero() {
        let base = noisy(50, 7);
        let r = paired_bootstrap(&base, &base, 500, BOOTSTRAP_SEED);
        assert_eq!(r, Bootstrap { delta: 0.0, ci95: [0.0, 0.0], p_value: 1.0, p_above: 1.0 });
    }

    #[test]
    fn the_one_sided_p_value_counts_resampled_means_at_or_below_zero() {
        let (low, high) = (vec![0.0; 20], vec![1.0; 20]);
        assert_eq!(paired_bootstrap(&low, &high, 999, 1).p_above, 1.0 / 1000.0);
        assert_eq!(paired_bootstrap(&high, &low, 999, 1).p_above, 1.0);
    }
}

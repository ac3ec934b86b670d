//! How a suite's primary metric holds up under each perturbation family: the original's score,
//! the mean over variants, the worst case, the drop with a paired-bootstrap interval over
//! documents, flips each way, whether the same content was chosen, McNemar per variant with
//! Holm's correction, and for option families recall by gold position, the selection rate per
//! letter and PriDe's debiased accuracy. Written to `results.json` under `robustness`.

use std::collections::BTreeMap;

use super::perturb::IDENTITY;
use super::record::SampleRecord;
use super::reports::primary_metric;
use super::template::LETTERS;
use crate::digest::stable_hash;
use crate::stats::paired::BOOTSTRAP_SEED;
use crate::stats::perturbed::{family_figures as observed_figures, Observed, ObservedItem};
pub use crate::stats::perturbed::{FamilyRobustness, FormatFigures, OptionFigures, VariantTest};
use crate::stats::robustness::format_spread;

/// Resamples of the format spread's interval: each recomputes every format's mean.
const FORMAT_RESAMPLES: usize = 2_000;

/// Share of documents whose variants estimate PriDe's prior over option letters.
pub const PRIDE_ESTIMATION_SHARE: f64 = 0.05;

/// The position the metric picked, for multiple choice.
fn picked(record: &SampleRecord, metric: &str) -> Option<usize> {
    record.extracted.get(metric)?.as_deref()?.parse().ok()
}

/// What the record answered, comparable across variants: the content chosen (its index in the
/// original order), the extracted answer, or the programs' statuses.
fn answer(record: &SampleRecord, metric: &str) -> Option<u64> {
    if !record.choices.is_empty() {
        let shown = picked(record, metric)?;
        let order = record.variant.as_ref().and_then(|v| v.option_order.as_ref());
        return Some(order.map_or(Some(shown), |o| o.get(shown).copied())? as u64);
    }
    let text = match metric.strip_prefix("exact_match_") {
        Some(extractor) => record.extracted.get(extractor)?.clone()?,
        None => {
            let statuses: Vec<String> = record.outputs.iter().map(|o| format!("{:?}", o.status)).collect();
            statuses.join(",")
        }
    };
    Some(stable_hash(&[text.as_bytes()]))
}

/// Whether `record` counts as right under `metric`: a value of 0.5 or more (a 0/1 metric's 1,
/// the majority of several samples).
pub fn is_right(record: &SampleRecord, metric: &str) -> bool {
    record.scores.get(metric).is_some_and(|v| *v >= 0.5)
}

/// The variants of `family` that `records` hold for the item under `original_key`, by index.
pub fn variants_of<'r>(
    records: &'r BTreeMap<String, SampleRecord>,
    original_key: &str,
    family: &str,
) -> Vec<&'r SampleRecord> {
    let prefix = format!("{original_key}{}", crate::perturb::key_prefix(family));
    records.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).map(|(_, r)| r).collect()
}

/// The families whose variants `records` hold.
pub fn families(records: &BTreeMap<String, SampleRecord>) -> std::collections::BTreeSet<&str> {
    records.values().filter_map(|r| r.variant.as_ref()).map(|v| v.family.as_str()).collect()
}

/// One (seed, document): its original and its variants of one family.
struct Unit<'r> {
    doc: usize,
    original: &'r SampleRecord,
    variants: Vec<&'r SampleRecord>,
}

/// `robustness.<family>` for every family the run's records hold variants of.
pub fn robustness(
    records: &BTreeMap<String, SampleRecord>,
    seeds: &[u64],
    doc_ids: &[String],
) -> BTreeMap<String, FamilyRobustness> {
    let families = families(records);
    let originals: Vec<&SampleRecord> = records.values().filter(|r| r.variant.is_none()).collect();
    let Some(metric) =
        primary_metric(originals.iter().flat_map(|r| r.scores.keys()).collect::<Vec<_>>().into_iter())
    else {
        return BTreeMap::new();
    };
    let mut out: BTreeMap<String, FamilyRobustness> = BTreeMap::new();
    for family in families {
        let mut units = Vec::new();
        for &seed in seeds {
            for (doc, id) in doc_ids.iter().enumerate() {
                let key = SampleRecord::key_of(seed, id);
                let Some(original) = records.get(&key) else { continue };
                let variants = variants_of(records, &key, family);
                if !variants.is_empty() {
                    units.push(Unit { doc, original, variants });
                }
            }
        }
        if !units.is_empty() {
            out.insert(family.to_owned(), family_figures(&units, &metric, doc_ids.len()));
        }
    }
    if let Some(identity) = out.get(IDENTITY).map(|f| f.drop) {
        for figures in out.values_mut() {
            figures.identity_drop = Some(identity);
        }
    }
    out
}

fn family_figures(units: &[Unit<'_>], metric: &str, docs: usize) -> FamilyRobustness {
    let moves_options = units
        .iter()
        .any(|u| u.variants.iter().any(|v| v.variant.as_ref().is_some_and(|x| x.option_order.is_some())));
    let shows_formats = units
        .iter()
        .any(|u| u.variants.iter().any(|v| v.variant.as_ref().is_some_and(|x| x.format.is_some())));
    let positions = if moves_options {
        units
            .iter()
            .flat_map(|u| std::iter::once(u.original).chain(u.variants.iter().copied()))
            .map(|r| r.choices.len())
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let observed = |r: &SampleRecord| Observed {
        value: r.scores.get(metric).copied().unwrap_or(0.0),
        answer: answer(r, metric),
        gold_position: r.target.as_u64().map_or(usize::MAX, |g| g as usize),
        index: r.variant.as_ref().map_or(0, |v| v.index),
        applied: r.variant.as_ref().is_some_and(|v| v.applied),
        prompt_sha256: r.prompt_sha256.clone(),
    };
    let items: Vec<ObservedItem> = units
        .iter()
        .map(|u| ObservedItem {
            doc: u.doc,
            original: observed(u.original),
            variants: u.variants.iter().map(|v| observed(v)).collect(),
        })
        .collect();
    let (mut figures, stats) = observed_figures(&items, metric, positions);
    figures.options = moves_options.then(|| option_figures(units, metric, positions, docs, &stats));
    figures.formats = shows_formats.then(|| format_figures(units, metric));
    figures
}

/// Per document (its seeds averaged), the metric under the original format and each variant's
/// by index; documents missing a format are left out.
fn format_figures(units: &[Unit<'_>], metric: &str) -> FormatFigures {
    let formats = units.iter().map(|u| u.variants.len()).max().unwrap_or(0) + 1;
    let mut per_doc: BTreeMap<usize, Vec<Vec<f64>>> = BTreeMap::new();
    for u in units.iter().filter(|u| u.variants.len() + 1 == formats) {
        let mut row = vec![u.original.scores.get(metric).copied().unwrap_or(0.0)];
        let mut variants = u.variants.clone();
        variants.sort_by_key(|v| v.variant.as_ref().map_or(0, |x| x.index));
        row.extend(variants.iter().map(|v| v.scores.get(metric).copied().unwrap_or(0.0)));
        per_doc.entry(u.doc).or_default().push(row);
    }
    let rows: Vec<Vec<f64>> = per_doc
        .values()
        .map(|seeds| {
            (0..formats)
                .map(|f| crate::stats::mean(&seeds.iter().map(|r| r[f]).collect::<Vec<_>>()))
                .collect()
        })
        .collect();
    let (per_format, spread, spread_ci95) = format_spread(&rows, FORMAT_RESAMPLES, BOOTSTRAP_SEED);
    FormatFigures { per_format, spread, spread_ci95 }
}

fn option_figures(
    units: &[Unit<'_>],
    metric: &str,
    positions: usize,
    docs: usize,
    stats: &crate::stats::robustness::Robustness,
) -> OptionFigures {
    let shown = || units.iter().flat_map(|u| std::iter::once(u.original).chain(u.variants.iter().copied()));
    let mut picks = vec![0usize; positions];
    let mut total = 0usize;
    for r in shown() {
        if let Some(p) = picked(r, metric).filter(|&p| p < positions) {
            picks[p] += 1;
            total += 1;
        }
    }
    let selection_rate = picks
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            (LETTERS[p.min(25)].to_owned(), if total == 0 { 0.0 } else { n as f64 / total as f64 })
        })
        .collect();
    let (pride_prior, pride_accuracy, pride_estimation_items) = pride(units, positions, docs);
    OptionFigures {
        recall_by_position: stats.recall_by_position.clone(),
        rstd: stats.rstd,
        selection_rate,
        pride_prior,
        pride_accuracy,
        pride_estimation_items,
    }
}

/// Log-softmax of the options' log-likelihoods: the probability the model gives each shown
/// option among them.
fn option_log_probs(record: &SampleRecord) -> Vec<f64> {
    let ll: Vec<f64> = record.choices.iter().map(|c| c.loglikelihood).collect();
    let max = ll.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = max + ll.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    ll.iter().map(|x| x - log_sum).collect()
}

/// PriDe: the documents whose hash ranks in the first [`PRIDE_ESTIMATION_SHARE`] (at least one)
/// estimate the prior of each letter as the softmax of its mean log-probability over all their
/// shown orders (the content averages out across orders); every other document's original is
/// then answered by the option whose probability divided by its letter's prior is largest.
fn pride(units: &[Unit<'_>], positions: usize, docs: usize) -> (Vec<f64>, f64, usize) {
    let estimating = ((docs as f64 * PRIDE_ESTIMATION_SHARE).ceil() as usize).max(1);
    let mut ranked: Vec<usize> = units.iter().map(|u| u.doc).collect();
    ranked.sort_by_key(|&d| (stable_hash(&[b"pride", &(d as u64).to_le_bytes()]), d));
    ranked.dedup();
    let chosen: std::collections::BTreeSet<usize> = ranked.into_iter().take(estimating).collect();
    let (mut sums, mut counts) = (vec![0.0; positions], vec![0usize; positions]);
    for u in units.iter().filter(|u| chosen.contains(&u.doc)) {
        for r in std::iter::once(u.original).chain(u.variants.iter().copied()) {
            for (p, lp) in option_log_probs(r).into_iter().enumerate() {
                sums[p] += lp;
                counts[p] += 1;
            }
        }
    }
    let means: Vec<f64> =
        sums.iter().zip(&counts).map(|(s, &n)| if n == 0 { 0.0 } else { s / n as f64 }).collect();
    let max = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = means.iter().map(|m| (m - max).exp()).sum();
    let prior: Vec<f64> = means.iter().map(|m| (m - max).exp() / z).collect();
    let (mut right, mut judged) = (0usize, 0usize);
    for u in units.iter().filter(|u| !chosen.contains(&u.doc)) {
        let lp = option_log_probs(u.original);
        let debiased = |p: usize| lp[p] - prior.get(p).map_or(0.0, |q| q.ln());
        let best = (0..lp.len()).fold(0, |best, p| if debiased(p) > debiased(best) { p } else { best });
        judged += 1;
        right += usize::from(u.original.target.as_u64() == Some(best as u64));
    }
    (prior, if judged == 0 { 0.0 } else { right as f64 / judged as f64 }, chosen.len())
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::stats::robustness::rotation;
    use crate::suites::perturb::VariantRecord;
    use crate::suites::record::ChoiceRecord;

    /// Twelve four-option questions (question `q`'s gold at `gold_of(q)`) in their four
    /// rotations, scored by a model whose log-likelihood is `bias[position]`, plus `signal` for
    /// the gold's content: the records a circular run would write.
    pub(crate) fn circular_run(
        bias: [f64; 4],
        signal: f64,
        gold_of: &dyn Fn(usize) -> usize,
    ) -> BTreeMap<String, SampleRecord> {
        let mut records = BTreeMap::new();
        for q in 0..12usize {
            let gold = gold_of(q);
            for r in 0..4 {
                let order = rotation(4, r);
                let shown_gold = order.iter().position(|&o| o == gold).unwrap();
                let choices: Vec<ChoiceRecord> = (0..4)
                    .map(|p| ChoiceRecord {
                        continuation: format!(" {}", LETTERS[p]),
                        loglikelihood: bias[p] + if p == shown_gold { signal } else { 0.0 } - 5.0,
                        tokens: 1,
                        chars: 2,
                        is_greedy: false,
                    })
                    .collect();
                let pick = crate::suites::engine::mc_predictions(&choices)[0].1;
                let variant = (r > 0).then(|| VariantRecord {
                    format: None,
                    family: "options.circular".into(),
                    index: r,
                    applied: true,
                    option_order: Some(order.clone()),
                    fewshot_order: None,
                });
                let record = SampleRecord {
                    suite: "t".into(),
                    seed: 0,
                    doc_id: format!("q{q}"),
                    index: q,
                    group: None,
                    prompt: format!("q{q} r{r}"),
                    prompt_sha256: format!("{q}.{r}"),
                    target: shown_gold.into(),
                    outputs: Vec::new(),
                    choices,
                    extracted: BTreeMap::from([("acc".to_owned(), Some(pick.to_string()))]),
                    scores: BTreeMap::from([("acc".to_owned(), f64::from(u8::from(pick == shown_gold)))]),
                    variant,
                    fingerprint: None,
                };
                records.insert(crate::kernel::store::StoredRecord::key(&record), record);
            }
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::circular_run;
    use super::*;

    fn gold_at_a_in_three(q: usize) -> usize {
        if q.is_multiple_of(4) {
            0
        } else {
            1 + q % 3
        }
    }

    fn docs() -> Vec<String> {
        (0..12).map(|q| format!("q{q}")).collect()
    }

    #[test]
    fn a_letter_biased_model_is_found_out_and_pride_undoes_the_bias() {
        let found = robustness(&circular_run([3.0, 0.0, 0.0, 0.0], 1.0, &gold_at_a_in_three), &[0], &docs());
        let r = &found["options.circular"];
        assert_eq!((r.items, r.variants), (12, 36));
        assert!((r.original - 0.25).abs() < 1e-12 && (r.variant_mean - 0.25).abs() < 1e-12);
        assert_eq!((r.worst_case, r.consistency), (0.0, 0.0));
        assert_eq!(r.drop, 0.0);
        // Right on A only: 3 originals right turn wrong on all three rotations; 9 wrong turn
        // right on one each.
        assert!((r.flips_right_to_wrong - 9.0 / 36.0).abs() < 1e-12);
        assert!((r.flips_wrong_to_right - 9.0 / 36.0).abs() < 1e-12);
        let o = r.options.as_ref().unwrap();
        assert_eq!(o.recall_by_position, [Some(1.0), Some(0.0), Some(0.0), Some(0.0)]);
        assert!((o.rstd - 3f64.sqrt() / 4.0).abs() < 1e-12);
        assert_eq!(o.selection_rate["A"], 1.0);
        assert_eq!(o.selection_rate["D"], 0.0);
        // The prior from one document's four rotations puts A's bias back where it came from.
        assert_eq!(o.pride_estimation_items, 1);
        assert!((o.pride_prior[0] - 3f64.exp() / (3f64.exp() + 3.0)).abs() < 1e-9, "{:?}", o.pride_prior);
        assert_eq!(o.pride_accuracy, 1.0);
    }

    #[test]
    fn a_content_reading_model_is_robust() {
        let found = robustness(&circular_run([0.0; 4], 2.0, &gold_at_a_in_three), &[0], &docs());
        let r = &found["options.circular"];
        assert_eq!((r.original, r.variant_mean, r.worst_case, r.consistency), (1.0, 1.0, 1.0, 1.0));
        assert_eq!((r.drop, r.drop_ci95), (0.0, [0.0, 0.0]));
        assert_eq!((r.flips_right_to_wrong, r.flips_wrong_to_right), (0.0, 0.0));
        assert!(r.mcnemar.iter().all(|t| t.p == 1.0 && t.p_holm == 1.0));
        assert_eq!(r.mcnemar.iter().map(|t| t.index).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(r.options.as_ref().unwrap().rstd, 0.0);
    }
}

//! How a multiple-choice score holds up when the options are rearranged: accuracy on the
//! original order, the mean over variants, the worst case (right on every variant), whether the
//! same content is chosen throughout, and recall by the position the gold stood at with its
//! spread (RStd, Zheng et al. 2023). The first piece of the perturbation work; the arithmetic
//! only, on outcomes a run has recorded.

/// One item under one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub correct: bool,
    /// Where the gold option was shown (0 = the first option).
    pub gold_position: usize,
    /// What was answered, the same value for the same answer in every variant: for options,
    /// the chosen option's index in the original order (so the same content has the same index
    /// wherever it is shown); `None` when nothing was answered.
    pub chosen: Option<u64>,
}

/// What [`robustness`] finds over a set of items.
#[derive(Debug, Clone, PartialEq)]
pub struct Robustness {
    /// Right on the original order (each item's first outcome).
    pub accuracy: f64,
    /// Right over every (item, variant).
    pub variant_mean: f64,
    /// Right on every variant of the item.
    pub worst_case: f64,
    /// The same content chosen on every variant of the item.
    pub consistency: f64,
    /// Per gold position, the share of (item, variant) pairs with the gold there that are
    /// right; `None` for a position the gold never took.
    pub recall_by_position: Vec<Option<f64>>,
    /// Population standard deviation of the recalls that exist.
    pub rstd: f64,
}

/// `items[i]` holds item `i`'s outcomes, the original order first; `positions` is how many
/// options are shown. Items without outcomes are left out.
pub fn robustness(items: &[Vec<Outcome>], positions: usize) -> Robustness {
    let items: Vec<&Vec<Outcome>> = items.iter().filter(|o| !o.is_empty()).collect();
    let share = |count: usize, of: usize| if of == 0 { 0.0 } else { count as f64 / of as f64 };
    let all: Vec<&Outcome> = items.iter().flat_map(|o| o.iter()).collect();
    let mut right = vec![0usize; positions];
    let mut seen = vec![0usize; positions];
    for o in &all {
        if o.gold_position < positions {
            seen[o.gold_position] += 1;
            right[o.gold_position] += o.correct as usize;
        }
    }
    let recall_by_position: Vec<Option<f64>> =
        right.iter().zip(&seen).map(|(&r, &s)| (s > 0).then(|| share(r, s))).collect();
    let recalls: Vec<f64> = recall_by_position.iter().flatten().copied().collect();
    let mean = super::mean(&recalls);
    let rstd = if recalls.is_empty() {
        0.0
    } else {
        (recalls.iter().map(|r| (r - mean) * (r - mean)).sum::<f64>() / recalls.len() as f64).sqrt()
    };
    Robustness {
        accuracy: share(items.iter().filter(|o| o[0].correct).count(), items.len()),
        variant_mean: share(all.iter().filter(|o| o.correct).count(), all.len()),
        worst_case: share(items.iter().filter(|o| o.iter().all(|x| x.correct)).count(), items.len()),
        consistency: share(
            items
                .iter()
                .filter(|o| o[0].chosen.is_some() && o.iter().all(|x| x.chosen == o[0].chosen))
                .count(),
            items.len(),
        ),
        recall_by_position,
        rstd,
    }
}

/// How far apart prompt formats put a score: `values[d][f]` is document `d`'s value under
/// format `f` (every document has every format). Returns each format's mean, the spread
/// (largest mean − smallest), and a 95% percentile-bootstrap interval of the spread in which
/// every resample of documents picks its own largest and smallest format, so the interval
/// carries the selection of the extremes (Sclar et al. 2023).
pub fn format_spread(values: &[Vec<f64>], resamples: usize, seed: u64) -> (Vec<f64>, f64, [f64; 2]) {
    let formats = values.first().map_or(0, Vec::len);
    let means_of = |docs: &mut dyn Iterator<Item = usize>| {
        let mut sums = vec![0.0; formats];
        let mut n = 0usize;
        for d in docs {
            for (s, v) in sums.iter_mut().zip(&values[d]) {
                *s += v;
            }
            n += 1;
        }
        sums.iter().map(|s| s / n.max(1) as f64).collect::<Vec<f64>>()
    };
    let spread_of = |means: &[f64]| {
        means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            - means.iter().copied().fold(f64::INFINITY, f64::min)
    };
    let means = means_of(&mut (0..values.len()));
    if formats == 0 || values.is_empty() {
        return (means, 0.0, [0.0, 0.0]);
    }
    let spread = spread_of(&means);
    let mut rng = crate::rng::SplitMix64::new(seed);
    let n = values.len();
    let mut spreads: Vec<f64> = (0..resamples)
        .map(|_| spread_of(&means_of(&mut (0..n).map(|_| super::paired::draw_index(&mut rng, n)))))
        .collect();
    spreads.sort_by(f64::total_cmp);
    let interval = if spreads.is_empty() {
        [spread, spread]
    } else {
        [super::paired::percentile(&spreads, 0.025), super::paired::percentile(&spreads, 0.975)]
    };
    (means, spread, interval)
}

/// The `r`-th rotation of `n` options as the original index shown at each position: position
/// `i` shows option `(i + r) mod n`. Over `r` in `0..n`, every option stands at every position
/// exactly once, and the gold follows its content because whole options move.
pub fn rotation(n: usize, r: usize) -> Vec<usize> {
    (0..n).map(|i| (i + r) % n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Twelve four-option questions, the gold originally at A in three (0, 4, 8) and elsewhere
    /// in the rest, each shown in its four rotations; `choose(question, shown)` picks a
    /// position given the original indices shown.
    fn circular(choose: impl Fn(usize, &[usize], usize) -> usize) -> Robustness {
        let golds: Vec<usize> = (0..12).map(|q| if q % 4 == 0 { 0 } else { 1 + q % 3 }).collect();
        assert_eq!(golds.iter().filter(|g| **g == 0).count(), 3);
        let items: Vec<Vec<Outcome>> = golds
            .iter()
            .enumerate()
            .map(|(q, &gold)| {
                (0..4)
                    .map(|r| {
                        let shown = rotation(4, r);
                        let gold_position = shown.iter().position(|&o| o == gold).unwrap();
                        let pick = choose(q, &shown, gold_position);
                        Outcome {
                            correct: pick == gold_position,
                            gold_position,
                            chosen: Some(shown[pick] as u64),
                        }
                    })
                    .collect()
            })
            .collect();
        robustness(&items, 4)
    }

    #[test]
    fn a_chooser_that_always_picks_a() {
        let r = circular(|_, _, _| 0);
        assert!((r.accuracy - 0.25).abs() < 1e-12);
        assert_eq!(r.worst_case, 0.0);
        assert!((r.variant_mean - 0.25).abs() < 1e-12);
        assert_eq!(r.recall_by_position, [Some(1.0), Some(0.0), Some(0.0), Some(0.0)]);
        assert!((r.rstd - 3f64.sqrt() / 4.0).abs() < 1e-12, "{}", r.rstd);
        assert_eq!(r.consistency, 0.0, "the letter stays, the content changes");
    }

    #[test]
    fn a_chooser_that_reads_the_content() {
        let r = circular(|_, _, gold| gold);
        assert_eq!((r.accuracy, r.worst_case, r.variant_mean, r.consistency), (1.0, 1.0, 1.0, 1.0));
        assert_eq!(r.rstd, 0.0);
    }

    #[test]
    fn a_chooser_right_on_half_the_questions_and_otherwise_b() {
        let r = circular(|q, _, gold| if q < 6 { gold } else { 1 });
        assert!((r.worst_case - 0.5).abs() < 1e-12);
    }

    #[test]
    fn format_spread_repicks_the_extremes() {
        // Format 1 is better on half the documents, format 2 on the other half: equal means,
        // spread 0, yet resamples that draw unevenly see a spread, so the interval opens above 0.
        let values: Vec<Vec<f64>> =
            (0..40).map(|d| if d % 2 == 0 { vec![0.5, 1.0, 0.0] } else { vec![0.5, 0.0, 1.0] }).collect();
        let (means, spread, [lo, hi]) = format_spread(&values, 2000, 1);
        assert_eq!(means, [0.5, 0.5, 0.5]);
        assert_eq!(spread, 0.0);
        assert!(lo >= 0.0 && hi > 0.1, "[{lo}, {hi}]");
        let fixed: Vec<Vec<f64>> = (0..10).map(|_| vec![0.25, 0.75]).collect();
        assert_eq!(format_spread(&fixed, 500, 1), (vec![0.25, 0.75], 0.5, [0.5, 0.5]));
    }

    #[test]
    fn rotations_keep_the_gold_with_its_text_and_put_it_everywhere_once() {
        let mut rng = SplitMix64::new(7);
        for list in 0..10_000 {
            let n = 2 + (rng.next_u64() % 9) as usize;
            let options: Vec<String> =
                (0..n).map(|i| format!("option {list}.{i}.{}", rng.next_u64() % 1000)).collect();
            let gold = (rng.next_u64() % n as u64) as usize;
            let mut positions = Vec::new();
            for r in 0..n {
                let shown: Vec<&String> = rotation(n, r).iter().map(|&i| &options[i]).collect();
                let at = rotation(n, r).iter().position(|&i| i == gold).unwrap();
                assert_eq!(shown[at], &options[gold]);
                positions.push(at);
            }
            positions.sort();
            assert_eq!(positions, (0..n).collect::<Vec<_>>(), "list {list}");
        }
    }
}

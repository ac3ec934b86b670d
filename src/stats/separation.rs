//! How well a per-item score tells a target set from a control set, for contamination probes:
//! Min-K% Prob (Shi et al. 2023) as the score, AUROC as the separation, and a stratified
//! bootstrap interval for it.

use crate::rng::SplitMix64;

use super::paired::{draw_index, percentile};

/// How many of `n` tokens Min-K% at `k_percent` averages: `⌊n · k / 100⌋`, at least one.
pub fn min_k_count(n: usize, k_percent: u32) -> usize {
    (n * k_percent as usize / 100).max(1)
}

/// Min-K% Prob: the mean log-probability of the `k_percent`% least likely tokens. The count is
/// `⌊n · k / 100⌋` as in the reference code, but at least one token (the reference takes none
/// when that rounds to zero, and its mean is then undefined). `None` for no tokens or a `k`
/// outside `1..=100`.
pub fn min_k_percent(logprobs: &[f64], k_percent: u32) -> Option<f64> {
    if logprobs.is_empty() || !(1..=100).contains(&k_percent) {
        return None;
    }
    let count = min_k_count(logprobs.len(), k_percent);
    let mut sorted = logprobs.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted[..count].iter().sum::<f64>() / count as f64)
}

/// The area under the ROC curve of `score` telling `target` from `control`: the probability
/// that a target item scores higher than a control item, ties counting half (Mann-Whitney U
/// over the product of the sizes, from mid-ranks). 0.5 when either set is empty.
pub fn auroc(target: &[f64], control: &[f64]) -> f64 {
    if target.is_empty() || control.is_empty() {
        return 0.5;
    }
    let mut all: Vec<(f64, bool)> =
        target.iter().map(|s| (*s, true)).chain(control.iter().map(|s| (*s, false))).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut target_ranks = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0.total_cmp(&all[i].0).is_eq() {
            j += 1;
        }
        // Ranks i+1..=j share their mean.
        let mid_rank = (i + 1 + j) as f64 / 2.0;
        target_ranks += mid_rank * all[i..j].iter().filter(|(_, t)| *t).count() as f64;
        i = j;
    }
    let (n_target, n_control) = (target.len() as f64, control.len() as f64);
    (target_ranks - n_target * (n_target + 1.0) / 2.0) / (n_target * n_control)
}

/// [`auroc`] with a 95% percentile interval from a stratified bootstrap: each resample draws
/// as many target items from the target set and as many control items from the control set,
/// with replacement, so both sizes stay fixed. Seeded: the same input gives the same interval.
pub fn auroc_with_interval(target: &[f64], control: &[f64], resamples: usize, seed: u64) -> (f64, [f64; 2]) {
    let value = auroc(target, control);
    if target.is_empty() || control.is_empty() || resamples == 0 {
        return (value, [value, value]);
    }
    let mut rng = SplitMix64::new(seed);
    let mut draw =
        |set: &[f64]| -> Vec<f64> { (0..set.len()).map(|_| set[draw_index(&mut rng, set.len())]).collect() };
    let mut values: Vec<f64> = (0..resamples)
        .map(|_| {
            let t = draw(target);
            let c = draw(control);
            auroc(&t, &c)
        })
        .collect();
    values.sort_by(f64::total_cmp);
    (value, [percentile(&values, 0.025), percentile(&values, 0.975)])
}

/// ROUGE-L F1 of `candidate` against `reference`: the longest common subsequence of their
/// whitespace-separated words (case kept, since code is compared), as the harmonic mean of its
/// share of each side. 0 when either is empty.
pub fn rouge_l(candidate: &str, reference: &str) -> f64 {
    let a: Vec<&str> = candidate.split_whitespace().collect();
    let b: Vec<&str> = reference.split_whitespace().collect();
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    // One row of the LCS table at a time.
    let mut row = vec![0usize; b.len() + 1];
    for word in &a {
        let mut diagonal = 0;
        for (j, other) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if word == other { diagonal + 1 } else { above.max(row[j]) };
            diagonal = above;
        }
    }
    let lcs = row[b.len()] as f64;
    if lcs == 0.0 {
        return 0.0;
    }
    let (precision, recall) = (lcs / a.len() as f64, lcs / b.len() as f64);
    2.0 * precision * recall / (precision + recall)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_k_takes_the_least_likely_share_and_at_least_one_token() {
        let logprobs = [-0.1, -5.0, -0.2, -3.0, -0.05];
        // 40% of 5 is 2 tokens: −5 and −3.
        assert_eq!(min_k_percent(&logprobs, 40), Some(-4.0));
        // 10% of 5 rounds to none; one token is taken: −5.
        assert_eq!(min_k_percent(&logprobs, 10), Some(-5.0));
        // All of them: the plain mean.
        assert!((min_k_percent(&logprobs, 100).unwrap() - (-8.35 / 5.0)).abs() < 1e-12);
        assert_eq!(min_k_percent(&[], 20), None);
        assert_eq!(min_k_percent(&logprobs, 0), None);
        assert_eq!(min_k_percent(&logprobs, 101), None);
    }

    #[test]
    fn auroc_counts_pairs_with_ties_as_half() {
        assert_eq!(auroc(&[3.0, 4.0], &[1.0, 2.0]), 1.0);
        assert_eq!(auroc(&[1.0, 2.0], &[3.0, 4.0]), 0.0);
        assert_eq!(auroc(&[1.0, 2.0], &[1.0, 2.0]), 0.5);
        // By hand over the 6 pairs: 1 beats 0; 2 ties 2 and beats 0; 3 beats both: 4.5 / 6.
        assert_eq!(auroc(&[1.0, 2.0, 3.0], &[2.0, 0.0]), 0.75);
        assert_eq!(auroc(&[], &[1.0]), 0.5);
    }

    #[test]
    fn the_interval_is_seeded_and_covers_one_half_for_the_same_sets() {
        let scores: Vec<f64> = (0..40).map(|i| ((i * 37) % 23) as f64).collect();
        let (value, interval) = auroc_with_interval(&scores, &scores, 1000, 7);
        assert_eq!(value, 0.5);
        assert!(interval[0] < 0.5 && interval[1] > 0.5, "{interval:?}");
        assert_eq!(auroc_with_interval(&scores, &scores, 1000, 7), (value, interval));
        let high: Vec<f64> = scores.iter().map(|s| s + 100.0).collect();
        assert_eq!(auroc_with_interval(&high, &scores, 200, 7), (1.0, [1.0, 1.0]));
    }

    #[test]
    fn rouge_l_counts_the_longest_common_subsequence_of_words() {
        // LCS of "the cat sat on the mat" and "the cat lay on a mat" is "the cat on mat": 4 of 6
        // words on each side.
        let f = rouge_l("the cat sat on the mat", "the cat lay on a mat");
        assert!((f - 4.0 / 6.0).abs() < 1e-12, "{f}");
        assert_eq!(rouge_l("a b c", "a b c"), 1.0);
        assert_eq!(rouge_l("x y", "a b"), 0.0);
        assert_eq!(rouge_l("", "a"), 0.0);
        // Precision 2/2, recall 2/4: F1 = 2/3.
        assert!((rouge_l("a c", "a b c d") - 2.0 / 3.0).abs() < 1e-12);
    }
}

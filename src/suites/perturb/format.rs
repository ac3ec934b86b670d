//! `format:K`: prompt formats from a small grammar (FormatSpread, Sclar et al. 2023). A suite
//! that lists options declares its own format under `[prompt.format]` and its templates show
//! it through `format.labels[i]`, `format.cue` and `format.gap`; a format variant renders the
//! same templates with other values: how an option's letter is shown, the answer cue's casing
//! and separator, and the break between the question and its options. A format is a choice for
//! the whole prompt (its few-shot examples too) and the same for every document, so each format
//! index is one prompt style across the dataset and the spread across formats is meaningful.

use serde::{Deserialize, Serialize};

use super::super::def::FormatDef;
use super::super::prompt::permutation;
use super::super::template::LETTERS;

/// How an option's letter `{L}` is shown.
const LABELS: [&str; 6] = ["{L}. ", "({L}) ", "{L}) ", "[{L}] ", "{L}: ", "{L} - "];
/// The separator after the cue's word.
const CUE_SEPARATORS: [&str; 3] = [":", " :", " -"];
/// The cue word's casing: as written, lower, upper.
const CASINGS: usize = 3;
/// Between the question and its options.
const GAPS: [&str; 2] = ["\n", "\n\n"];

/// One prompt format: the values the templates see as `format`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptFormat {
    /// How a letter is shown, `{L}` standing for it.
    pub label: String,
    pub cue: String,
    pub gap: String,
}

impl PromptFormat {
    /// The suite's own format.
    pub fn of(def: &FormatDef) -> Self {
        Self { label: def.label.clone(), cue: def.cue.clone(), gap: def.gap.clone() }
    }

    /// The template value: `labels` (one per letter), `cue` and `gap`.
    pub fn context(&self) -> serde_json::Value {
        let labels: Vec<String> = LETTERS.iter().map(|l| self.label.replace("{L}", l)).collect();
        serde_json::json!({"labels": labels, "cue": self.cue, "gap": self.gap})
    }

    /// Format `index` (from 1) of the grammar under `key`: the grammar's combinations in a
    /// seeded order, the suite's own left out, so every index is a different style from the
    /// original and from each other (up to the grammar's size).
    pub fn variant(base: &FormatDef, index: usize, key: u64) -> Self {
        let word = base.cue.trim_end_matches([':', '-', ' ']).trim_end();
        let combos = LABELS.len() * CUE_SEPARATORS.len() * CASINGS * GAPS.len();
        let own = Self::of(base);
        let order = permutation(combos, key);
        let styles = order.iter().map(|&c| {
            let (label, c) = (LABELS[c % LABELS.len()], c / LABELS.len());
            let (separator, c) = (CUE_SEPARATORS[c % CUE_SEPARATORS.len()], c / CUE_SEPARATORS.len());
            let (casing, c) = (c % CASINGS, c / CASINGS);
            let cased = match casing {
                0 => word.to_owned(),
                1 => word.to_lowercase(),
                _ => word.to_uppercase(),
            };
            Self {
                label: label.to_owned(),
                cue: format!("{cased}{separator}"),
                gap: GAPS[c % GAPS.len()].to_owned(),
            }
        });
        let others: Vec<Self> = styles.filter(|s| *s != own).collect();
        others[(index - 1) % others.len()].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmlu() -> FormatDef {
        FormatDef { label: "{L}. ".into(), cue: "Answer:".into(), gap: "\n".into() }
    }

    #[test]
    fn variants_differ_from_the_original_and_each_other() {
        let base = mmlu();
        let variants: Vec<PromptFormat> = (1..=20).map(|i| PromptFormat::variant(&base, i, 7)).collect();
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(*v, PromptFormat::of(&base));
            assert!(variants[..i].iter().all(|w| w != v), "{v:?} repeats");
            assert!(v.cue.to_lowercase().starts_with("answer"), "{v:?}");
        }
    }

    /// Formats are part of a run's results: a change needs a `VERSION` bump.
    #[test]
    fn formats_are_pinned() {
        let v = PromptFormat::variant(&mmlu(), 1, 7);
        assert_eq!(v, PromptFormat { label: "({L}) ".into(), cue: "answer:".into(), gap: "\n".into() });
        assert_eq!(v.context()["labels"][1], "(B) ");
    }
}

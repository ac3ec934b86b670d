//! `format:K`: prompt formats from a small grammar (FormatSpread, Sclar et al. 2023). A suite
//! declares its own format under `[prompt.format]` and its templates show it through
//! `format.labels[i]`, `format.cue`, `format.gap` and `format.question`; a format variant
//! renders the same templates with other values: how an option's letter is shown, the casing
//! and separator of the field names (the answer cue, the question's name), and the break
//! after the question. A generation suite's stop sequences that are its own field names
//! follow the format (GSM8K stops at the next `Question:`, so at the next `QUESTION -` in that
//! format). A format is a choice for
//! the whole prompt (its few-shot examples too) and the same for every document, so each format
//! index is one prompt style across the dataset and the spread across formats is meaningful.

use serde::{Deserialize, Serialize};

use super::super::def::FormatDef;
use super::super::template::LETTERS;
use crate::rng::permutation;

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
    /// How a letter is shown, `{L}` standing for it (empty where no options are listed).
    pub label: String,
    pub cue: String,
    pub gap: String,
    /// What introduces the question; empty where the prompt does not name it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub question: String,
}

impl PromptFormat {
    /// The suite's own format.
    pub fn of(def: &FormatDef) -> Self {
        Self {
            label: def.label.clone().unwrap_or_default(),
            cue: def.cue.clone(),
            gap: def.gap.clone(),
            question: def.question.clone().unwrap_or_default(),
        }
    }

    /// The template value: `labels` (one per letter), `cue` and `gap`.
    pub fn context(&self) -> serde_json::Value {
        let labels: Vec<String> = LETTERS.iter().map(|l| self.label.replace("{L}", l)).collect();
        serde_json::json!({"labels": labels, "cue": self.cue, "gap": self.gap, "question": self.question})
    }

    /// A stop sequence under this format: one of `own`'s field names becomes this format's.
    pub fn restyle_stop(&self, own: &PromptFormat, stop: &str) -> String {
        if !own.question.is_empty() && stop == own.question {
            self.question.clone()
        } else if stop == own.cue {
            self.cue.clone()
        } else {
            stop.to_owned()
        }
    }

    /// Format `index` (from 1) of the grammar under `key`: the grammar's combinations in a
    /// seeded order, the suite's own left out, so every index is a different style from the
    /// original and from each other (up to the grammar's size).
    pub fn variant(base: &FormatDef, index: usize, key: u64) -> Self {
        let word = |name: &str| name.trim_end_matches([':', '-', ' ']).trim_end().to_owned();
        // Without listed options the label is no dimension of the grammar.
        let labels: &[&str] = if base.label.is_some() { &LABELS } else { &[""] };
        let combos = labels.len() * CUE_SEPARATORS.len() * CASINGS * GAPS.len();
        let own = Self::of(base);
        let order = permutation(combos, key);
        let styles = order.iter().map(|&c| {
            let (label, c) = (labels[c % labels.len()], c / labels.len());
            let (separator, c) = (CUE_SEPARATORS[c % CUE_SEPARATORS.len()], c / CUE_SEPARATORS.len());
            let (casing, c) = (c % CASINGS, c / CASINGS);
            // The field names share one casing and separator, as a prompt's style would.
            let styled = |name: &str| {
                let cased = match casing {
                    0 => word(name),
                    1 => word(name).to_lowercase(),
                    _ => word(name).to_uppercase(),
                };
                format!("{cased}{separator}")
            };
            Self {
                label: label.to_owned(),
                cue: styled(&base.cue),
                gap: GAPS[c % GAPS.len()].to_owned(),
                question: base.question.as_deref().map(styled).unwrap_or_default(),
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
        FormatDef { label: Some("{L}. ".into()), cue: "Answer:".into(), gap: "\n".into(), question: None }
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
        assert_eq!(
            v,
            PromptFormat {
                label: "({L}) ".into(),
                cue: "answer:".into(),
                gap: "\n".into(),
                question: String::new()
            }
        );
        assert_eq!(v.context()["labels"][1], "(B) ");
        // GSM8K: no options, a named question; the stop at the next question follows it.
        let gsm8k = FormatDef {
            label: None,
            cue: "Answer:".into(),
            gap: "\n".into(),
            question: Some("Question:".into()),
        };
        let v = PromptFormat::variant(&gsm8k, 1, 7);
        assert_eq!(
            v,
            PromptFormat {
                label: String::new(),
                cue: "ANSWER :".into(),
                gap: "\n\n".into(),
                question: "QUESTION :".into()
            }
        );
        let own = PromptFormat::of(&gsm8k);
        assert_eq!(v.restyle_stop(&own, "Question:"), "QUESTION :");
        assert_eq!(v.restyle_stop(&own, "</s>"), "</s>");
        let all: std::collections::BTreeSet<String> =
            (1..=17).map(|i| format!("{:?}", PromptFormat::variant(&gsm8k, i, 7))).collect();
        assert_eq!(all.len(), 17, "3 separators x 3 casings x 2 gaps, the suite's own left out");
    }
}

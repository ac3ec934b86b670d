//! One line of a probe's `samples.jsonl`: a scored text with what it was made from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Side;
use crate::kernel::fingerprint::Fingerprint;
use crate::kernel::store::StoredRecord;

/// A token of the item's text and its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredToken {
    pub text: String,
    pub logprob: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub side: Side,
    pub id: String,
    pub part: String,
    /// The method that scored it (`mink:20`).
    pub method: String,
    pub text_sha256: String,
    pub chars: usize,
    /// Tokens scored (`mink`: every token of the text after the first, or after BOS).
    pub tokens: usize,
    /// The item's statistics by name (`min_k`, `min_k_plus_plus`, `mean_logprob`;
    /// `path_match`; `rouge_l`; `ts_exact`, `ts_rouge_l`; `guided_rouge_l`, `general_rouge_l`,
    /// `guided_gain`); empty when it could not be scored.
    pub values: BTreeMap<String, f64>,
    /// The least likely tokens, those Min-K% averages (at most [`LOWEST_SHOWN`]), for audit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lowest: Vec<ScoredToken>,
    /// The model's answers by prompt (the generation methods: `answer`; `guided`'s `guided`
    /// and `general`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, String>,
    /// Why the item has no values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error came from the model's server or engine, not the item: a rerun retries it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub infrastructure: bool,
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
}

/// How many of an item's least likely tokens its record shows.
pub const LOWEST_SHOWN: usize = 10;

impl ProbeRecord {
    pub fn key_of(side: Side, part: &str, id: &str) -> String {
        format!("{}/{part}/{id}", side.as_str())
    }
}

impl StoredRecord for ProbeRecord {
    fn key(&self) -> String {
        Self::key_of(self.side, &self.part, &self.id)
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.clone()
    }

    fn is_infrastructure_failure(&self) -> bool {
        self.infrastructure
    }
}

//! One line of `samples.jsonl` per item and seed: the prompt, what the model answered (or the
//! options it scored), the extracted answers and per-item scores. The runner writes these
//! records and metrics are computed from them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::code::ProgramStatus;

/// One generated sequence and, for code, how its program ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRecord {
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub finish: Option<crate::model::FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub status: Option<ProgramStatus>,
}

/// One scored option of a multiple-choice item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceRecord {
    /// The scored continuation, as sent (with its delimiter).
    pub continuation: String,
    pub loglikelihood: f64,
    pub tokens: usize,
    pub chars: usize,
    pub is_greedy: bool,
}

/// One line of `samples.jsonl`: everything needed to audit an item's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    pub suite: String,
    pub seed: u64,
    pub doc_id: String,
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// The exact text the model saw.
    pub prompt: String,
    pub prompt_sha256: String,
    /// The reference: the answer (generate), the gold option index (multiple choice), or null.
    pub target: serde_json::Value,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub outputs: Vec<OutputRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub choices: Vec<ChoiceRecord>,
    /// Extracted answers by extractor (generate) or predicted option by metric (multiple choice).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub extracted: BTreeMap<String, Option<String>>,
    /// Per-item values of every metric; the reported metrics are their means.
    pub scores: BTreeMap<String, f64>,
    /// SHA-256 of the dataset row: an edited row is recomputed on resume, the others kept.
    pub row_sha256: String,
    /// Fingerprint of the configuration that produced this record (suite, model, options).
    pub config_sha256: String,
}

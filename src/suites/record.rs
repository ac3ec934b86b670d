//! The records a suite run writes: one [`SampleRecord`] per (seed, item) in `samples.jsonl`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::code::ProgramStatus;
use super::perturb::VariantRecord;
use crate::kernel::fingerprint::Fingerprint;
use crate::kernel::store::StoredRecord;

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
    /// Which perturbation variant of the item this is; absent on the original.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub variant: Option<VariantRecord>,
    /// What the record was made from (suite file, data row, few-shot data, model, code...);
    /// resume recomputes the item when any part changes.
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
}

impl SampleRecord {
    /// The store key of an item under a seed.
    pub fn key_of(seed: u64, doc_id: &str) -> String {
        format!("{seed}:{doc_id}")
    }

    /// The store key of a variant of an item: the original's with `@FAMILY#INDEX` added.
    pub fn variant_key(seed: u64, doc_id: &str, family: &str, index: usize) -> String {
        Self::key_of(seed, doc_id) + &crate::perturb::key_suffix(family, index)
    }
}

impl StoredRecord for SampleRecord {
    fn key(&self) -> String {
        match &self.variant {
            Some(v) => Self::variant_key(self.seed, &self.doc_id, &v.family, v.index),
            None => Self::key_of(self.seed, &self.doc_id),
        }
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.clone()
    }

    /// A code item some of whose programs the harness could not judge.
    fn is_infrastructure_failure(&self) -> bool {
        self.scores.get("harness_errors").is_some_and(|n| *n > 0.0)
    }
}

/// What a suite run's `results.json` says of it: its suite, its seeds in the order it used
/// them, and how many documents it evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct RunShape {
    pub suite: Option<String>,
    pub seeds: Vec<u64>,
    pub items: usize,
}

impl RunShape {
    /// Reads `results`; an error is the field and what is wrong with it.
    pub fn of(results: &serde_json::Value) -> Result<Self, (&'static str, &'static str)> {
        let seeds = results["seeds"]
            .as_array()
            .ok_or(("seeds", "is missing or not a list"))?
            .iter()
            .map(|s| s.as_u64().ok_or(("seeds", "holds a value that is not a seed")))
            .collect::<Result<_, _>>()?;
        let items = results["items"].as_u64().ok_or(("items", "is missing or not a count"))?;
        Ok(Self { suite: results["suite"].as_str().map(str::to_owned), seeds, items: items as usize })
    }

    /// The run's records among those a `samples.jsonl` holds: the last one per item (as on
    /// resume), of its seeds and of its first `items` documents in data order, since an earlier
    /// run into the same folder may have left other seeds or a longer --limit. Also returns how
    /// many items were left out for that.
    pub fn records(&self, records: Vec<SampleRecord>) -> (BTreeMap<String, SampleRecord>, usize) {
        let mut by_key: BTreeMap<String, SampleRecord> = BTreeMap::new();
        for record in records {
            by_key.insert(record.key(), record);
        }
        let before = by_key.len();
        by_key.retain(|_, r| self.seeds.contains(&r.seed));
        let docs = documents(&by_key);
        if docs.len() > self.items {
            let keep: BTreeSet<&String> = docs.iter().take(self.items).collect();
            by_key.retain(|_, r| keep.contains(&r.doc_id));
        }
        let dropped = before - by_key.len();
        (by_key, dropped)
    }
}

/// The document ids of `records`, in data order.
pub fn documents(records: &BTreeMap<String, SampleRecord>) -> Vec<String> {
    let mut docs: Vec<(usize, &String)> = records.values().map(|r| (r.index, &r.doc_id)).collect();
    docs.sort();
    docs.dedup();
    docs.into_iter().map(|(_, id)| id.clone()).collect()
}

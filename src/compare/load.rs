//! Reading one output folder back: a `swe grade` run (report.json, manifest.json) or an
//! `eval` run (samples.jsonl, results.json, manifest.json), and its per-item scores.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::CompareError;
use crate::kernel::store::StoredRecord;
use crate::repair::GradeReport;
use crate::suites::SampleRecord;

/// What wrote an output folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// `swe grade` / `swe run` (and the repair half of `run`).
    Swe,
    /// `eval` (and the HumanEval half of `run`).
    Suite,
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Swe => "swe grade",
            Self::Suite => "eval",
        })
    }
}

/// The SWE metric: whether the instance was resolved.
pub const SWE_METRIC: &str = "resolved";
/// A suite's primary metric, the first of these its samples carry.
const SUITE_PRIMARY: [&str; 3] = ["pass@1", "acc", "exact_match"];

/// The per-item records of a run.
pub(super) enum Records {
    Swe(GradeReport),
    /// The run's records, last one per (seed, document) (see [`SampleRecord::key_of`]).
    Suite(BTreeMap<String, SampleRecord>),
}

/// One output folder, read.
pub(super) struct RunDir {
    pub dir: PathBuf,
    pub kind: RunKind,
    pub manifest: serde_json::Value,
    pub records: Records,
    /// What was read but left out, and why.
    pub notes: Vec<String>,
}

/// One item's score under the compared metric.
#[derive(Debug, Clone)]
pub(super) struct Scored {
    /// Document id for suites (seeds of one document are resampled together); the instance id
    /// for SWE.
    pub unit: String,
    pub value: f64,
    /// How the item ended, for people: the SWE verdict, or the value.
    pub label: String,
    /// Whether the value is one sample's outcome (not an average over several samples).
    pub single_sample: bool,
    /// Where the item comes in its run, for listing: (seed, data row) for suites.
    pub order: (u64, usize),
}

/// A run's items under one metric: scored, or left out (infrastructure failure, no score).
pub(super) struct Items {
    pub scored: BTreeMap<String, Scored>,
    pub excluded: BTreeMap<String, String>,
}

fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, CompareError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| CompareError::Read { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|source| CompareError::Parse { path: path.to_owned(), what, source })
}

fn required(dir: &Path, name: &str, what: &'static str) -> Result<PathBuf, CompareError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(CompareError::Missing { path, what })
    }
}

/// Formats a score: integers plainly, fractions to four places.
pub(super) fn format_value(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.4}")
    }
}

impl RunDir {
    pub fn open(dir: &Path) -> Result<Self, CompareError> {
        if !dir.is_dir() {
            return Err(CompareError::NotADirectory(dir.to_owned()));
        }
        if dir.join("report.json").is_file() {
            let report = read_json(&required(dir, "report.json", "swe grade's report")?, "swe grade report")?;
            let manifest = read_json(&required(dir, "manifest.json", "the run's settings")?, "manifest")?;
            return Ok(Self {
                dir: dir.to_owned(),
                kind: RunKind::Swe,
                manifest,
                records: Records::Swe(report),
                notes: Vec::new(),
            });
        }
        if dir.join("samples.jsonl").is_file() {
            return Self::open_suite(dir);
        }
        Err(CompareError::NotARun(dir.to_owned()))
    }

    fn open_suite(dir: &Path) -> Result<Self, CompareError> {
        let samples_path = dir.join("samples.jsonl");
        let results_path = required(dir, "results.json", "the suite's results")?;
        let results: serde_json::Value = read_json(&results_path, "suite results")?;
        let manifest = read_json(&required(dir, "manifest.json", "the run's settings")?, "manifest")?;
        let shape = crate::suites::record::RunShape::of(&results).map_err(|(field, problem)| {
            CompareError::Field { path: results_path.clone(), field: field.into(), problem: problem.into() }
        })?;

        let mut notes = Vec::new();
        let (records, unreadable): (Vec<SampleRecord>, Vec<String>) =
            crate::report::read_jsonl(&samples_path);
        notes.extend(unreadable.into_iter().map(|line| format!("unreadable record skipped: {line}")));
        let (by_key, dropped) = shape.records(records);
        if dropped > 0 {
            notes.push(format!(
                "{}: {dropped} records of seeds or items outside this run (results.json: seeds {:?}, {} items) left out",
                samples_path.display(),
                shape.seeds,
                shape.items
            ));
        }
        Ok(Self {
            dir: dir.to_owned(),
            kind: RunKind::Suite,
            manifest,
            records: Records::Suite(by_key),
            notes,
        })
    }

    /// The file the per-item records come from.
    pub fn records_file(&self) -> PathBuf {
        self.dir.join(match self.kind {
            RunKind::Swe => "report.json",
            RunKind::Suite => "samples.jsonl",
        })
    }

    /// Every item key of the run, scored or not.
    pub fn keys(&self) -> BTreeSet<String> {
        match &self.records {
            Records::Swe(report) => report.instances.iter().map(|r| r.instance_id.clone()).collect(),
            Records::Suite(records) => records.keys().cloned().collect(),
        }
    }

    /// The metrics some record carries.
    pub fn metrics(&self) -> BTreeSet<String> {
        match &self.records {
            Records::Swe(_) => BTreeSet::from([SWE_METRIC.to_owned()]),
            Records::Suite(records) => records.values().flat_map(|r| r.scores.keys().cloned()).collect(),
        }
    }

    /// The default metric: `resolved` for SWE; for a suite the first of pass@1, acc and
    /// exact_match its samples carry, else its one `exact_match_*` metric.
    pub fn default_metric(&self) -> Result<String, CompareError> {
        let metrics = self.metrics();
        if let Some(found) = SUITE_PRIMARY.iter().chain([&SWE_METRIC]).find(|m| metrics.contains(**m)) {
            return Ok((*found).to_owned());
        }
        let exact: Vec<&String> = metrics.iter().filter(|m| m.starts_with("exact_match_")).collect();
        match exact.as_slice() {
            [only] => Ok((*only).clone()),
            _ => Err(CompareError::NoDefaultMetric {
                path: self.records_file(),
                available: metrics.into_iter().collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// Each item's score under `metric`; infrastructure failures and items without that
    /// score are left out with the reason.
    pub fn items(&self, metric: &str) -> Items {
        let mut items = Items { scored: BTreeMap::new(), excluded: BTreeMap::new() };
        match &self.records {
            Records::Swe(report) => {
                for r in &report.instances {
                    if r.is_infrastructure_failure() {
                        let why = r.reason.as_deref().or(r.detail.as_deref()).unwrap_or("infrastructure");
                        items
                            .excluded
                            .insert(r.instance_id.clone(), format!("{}: {why}", r.verdict.as_str()));
                        continue;
                    }
                    let scored = Scored {
                        unit: r.instance_id.clone(),
                        value: f64::from(u8::from(r.resolved)),
                        label: r.verdict.as_str().to_owned(),
                        single_sample: true,
                        order: (0, 0),
                    };
                    items.scored.insert(r.instance_id.clone(), scored);
                }
            }
            Records::Suite(records) => {
                for (key, r) in records {
                    if r.is_infrastructure_failure() {
                        let errors = r.scores.get("harness_errors").copied().unwrap_or(0.0);
                        items.excluded.insert(key.clone(), format!("{errors} harness error(s)"));
                        continue;
                    }
                    let Some(&value) = r.scores.get(metric) else {
                        items.excluded.insert(key.clone(), format!("no {metric} score"));
                        continue;
                    };
                    let scored = Scored {
                        unit: r.doc_id.clone(),
                        value,
                        label: format_value(value),
                        single_sample: r.outputs.len() <= 1,
                        order: (r.seed, r.index),
                    };
                    items.scored.insert(key.clone(), scored);
                }
            }
        }
        items
    }

    /// SWE: each instance's task content hash (its fingerprint's `task` part), by id.
    pub fn task_hashes(&self) -> BTreeMap<String, String> {
        let Records::Swe(report) = &self.records else { return BTreeMap::new() };
        report
            .instances
            .iter()
            .filter_map(|r| {
                let task = r.fingerprint.as_ref()?.parts.get("task")?;
                Some((r.instance_id.clone(), task.clone()))
            })
            .collect()
    }
}

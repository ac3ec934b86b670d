//! One run to compare: its folder (read by [`RunFolder`]), its settings, and its per-item
//! scores under a metric.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::CompareError;
use crate::kernel::store::StoredRecord;
use crate::repair::perturb::{variant_of, variants_by_family};
use crate::repair::{GradeReport, InstanceResult};
use crate::run::folder::{records_file, RunFolder};
pub use crate::run::folder::{Records, RunKind};
use crate::suites::robust;
use crate::suites::SampleRecord;

/// The SWE metric: whether the instance was resolved.
pub const SWE_METRIC: &str = "resolved";
/// A suite's primary metric, the first of these its samples carry.
const SUITE_PRIMARY: [&str; 3] = ["pass@1", "acc", "exact_match"];

/// A suite run's records of the original items: a perturbed run's variants are not items of
/// their own, so the originals pair with a plain run's.
fn originals(records: &BTreeMap<String, SampleRecord>) -> impl Iterator<Item = (&String, &SampleRecord)> {
    records.iter().filter(|(_, r)| r.variant.is_none())
}

/// The metric prefix of a perturbation family's worst case: `robust@options.circular` is 1
/// for an item right on its original and on every variant of the family, under the suite's
/// primary metric.
pub const ROBUST: &str = "robust@";

/// Each original's worst case over `family`'s variants, as [`ROBUST`] says.
fn robust_items(records: &BTreeMap<String, SampleRecord>, family: &str, items: &mut Items) {
    let scores = originals(records).flat_map(|(_, r)| r.scores.keys());
    let Some(primary) = crate::suites::reports::primary_metric(scores.collect::<Vec<_>>().into_iter()) else {
        return;
    };
    for (key, r) in originals(records) {
        let variants = robust::variants_of(records, key, family);
        if let Some(failed) =
            std::iter::once(r).chain(variants.iter().copied()).find(|v| v.is_infrastructure_failure())
        {
            items.excluded.insert(key.clone(), format!("harness errors in {}", failed.key()));
            continue;
        }
        if variants.is_empty() {
            items.excluded.insert(key.clone(), format!("no {family} variants"));
            continue;
        }
        let value = f64::from(u8::from(
            robust::is_right(r, &primary) && variants.iter().all(|v| robust::is_right(v, &primary)),
        ));
        let scored = Scored {
            unit: r.doc_id.clone(),
            value,
            label: format_value(value),
            single_sample: true,
            order: (r.seed, r.index),
        };
        items.scored.insert(key.clone(), scored);
    }
}

/// A SWE run's results of the dataset's own instances: a perturbed run's variants are not
/// instances of their own.
fn swe_originals(report: &GradeReport) -> impl Iterator<Item = &InstanceResult> {
    report.instances.iter().filter(|r| variant_of(r).is_none())
}

/// Each original instance's worst case over `family`'s variants: resolved on the original and
/// on every variant.
fn swe_robust_items(report: &GradeReport, family: &str, items: &mut Items) {
    let variants = variants_by_family(&report.instances).remove(family).unwrap_or_default();
    for r in swe_originals(report) {
        let id = r.instance_id.clone();
        let of = variants.get(r.instance_id.as_str()).cloned().unwrap_or_default();
        if let Some(failed) =
            std::iter::once(r).chain(of.iter().copied()).find(|v| v.is_infrastructure_failure())
        {
            items.excluded.insert(id, format!("{} in {}", failed.verdict.as_str(), failed.instance_id));
            continue;
        }
        if of.is_empty() {
            items.excluded.insert(id, format!("no {family} variants"));
            continue;
        }
        let value = f64::from(u8::from(r.resolved && of.iter().all(|v| v.resolved)));
        let scored = Scored {
            unit: id.clone(),
            value,
            label: format_value(value),
            single_sample: true,
            order: (0, 0),
        };
        items.scored.insert(id, scored);
    }
}

/// One output folder, read.
pub(super) struct RunDir {
    pub dir: PathBuf,
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
        let folder = RunFolder::open(dir)?;
        let manifest = folder.manifest()?;
        Ok(Self { dir: folder.dir, manifest, records: folder.records, notes: folder.notes })
    }

    pub fn kind(&self) -> RunKind {
        self.records.kind()
    }

    /// The file the per-item records come from.
    pub fn records_file(&self) -> PathBuf {
        records_file(&self.dir, self.kind())
    }

    /// Every item key of the run, scored or not.
    pub fn keys(&self) -> BTreeSet<String> {
        match &self.records {
            Records::Swe(report) => swe_originals(report).map(|r| r.instance_id.clone()).collect(),
            Records::Suite { by_key: records, .. } => originals(records).map(|(k, _)| k.clone()).collect(),
        }
    }

    /// The metrics some record carries.
    pub fn metrics(&self) -> BTreeSet<String> {
        match &self.records {
            Records::Swe(report) => {
                let families =
                    report.instances.iter().filter_map(variant_of).map(|v| format!("{ROBUST}{}", v.family));
                std::iter::once(SWE_METRIC.to_owned()).chain(families).collect()
            }
            Records::Suite { by_key: records, .. } => {
                let mut metrics: BTreeSet<String> =
                    records.values().flat_map(|r| r.scores.keys().cloned()).collect();
                metrics.extend(robust::families(records).into_iter().map(|f| format!("{ROBUST}{f}")));
                metrics
            }
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
            Records::Swe(report) if metric.starts_with(ROBUST) => {
                swe_robust_items(report, &metric[ROBUST.len()..], &mut items);
            }
            Records::Swe(report) => {
                for r in swe_originals(report) {
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
            Records::Suite { by_key: records, .. } if metric.starts_with(ROBUST) => {
                robust_items(records, &metric[ROBUST.len()..], &mut items);
            }
            Records::Suite { by_key: records, .. } => {
                for (key, r) in originals(records) {
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

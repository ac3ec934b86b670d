//! Comparing two runs of the same kind (two `swe grade` outputs, or two `eval` outputs of one
//! suite) item by item, for a regression gate: pair the items, refuse when the runs measured
//! different things ([`drift`]), test the paired difference ([`crate::stats::paired`]) and give
//! a verdict.
//!
//! SWE items pair by instance id, suite items by (seed, document id). Binary outcomes with one
//! sample per item (`resolved`; `acc`, `exact_match` or `pass@1` with one seed and one sample)
//! go to the exact McNemar test with Newcombe's interval. Anything else (several samples per
//! item, several seeds, non-0/1 scores) goes to a paired bootstrap over items, where an item
//! is a document with all its paired seeds, since seeds of one document are not independent.
//!
//! Views: a terminal summary, Markdown, JUnit XML ([`render`]) and a self-contained HTML page
//! ([`html()`]).

mod drift;
mod html;
mod load;
mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use drift::Drift;
pub use html::html;
pub use load::RunKind;
pub use render::{junit, markdown, summary_text};

use crate::stats::paired::{self, PairedCounts, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Folder(#[from] crate::run::folder::FolderError),
    #[error("cannot compare runs of different kinds: {base} is {base_kind} output, {new} is {new_kind} output", base = base.display(), new = new.display())]
    DifferentKinds { base: PathBuf, base_kind: RunKind, new: PathBuf, new_kind: RunKind },
    #[error("{path}: no primary metric (pass@1, acc, exact_match or a single exact_match_*); choose one with --metric from: {available}")]
    NoDefaultMetric { path: PathBuf, available: String },
    #[error("{path}: no record carries metric `{metric}` (available: {available})")]
    UnknownMetric { path: PathBuf, metric: String, available: String },
    #[error("the runs have no scored item in common ({base} and {new})", base = base.display(), new = new.display())]
    NoPairs { base: PathBuf, new: PathBuf },
    #[error("the runs measured different things; rerun with --allow-drift to compare anyway:{}", drift_list(.0))]
    Drift(Vec<Drift>),
    #[error("{0}")]
    BadOption(String),
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Lists drift one per line, the first few of a long list.
fn drift_list(drift: &[Drift]) -> String {
    const SHOWN: usize = 10;
    let mut text: String = drift.iter().take(SHOWN).map(|d| format!("\n  {d}")).collect();
    if drift.len() > SHOWN {
        text.push_str(&format!("\n  ... and {} more", drift.len() - SHOWN));
    }
    text
}

/// How to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The metric; `None`: `resolved` for SWE, the suite's primary metric otherwise.
    pub metric: Option<String>,
    /// Significance level of the verdict.
    pub alpha: f64,
    /// The smallest |delta| that counts as a change, on the metric's scale.
    pub min_delta: f64,
    /// Compare even when the runs' settings differ (the drift is then listed).
    pub allow_drift: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self { metric: None, alpha: 0.05, min_delta: 0.0, allow_drift: false }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regression,
    Improvement,
    NoSignificantChange,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Regression => "regression",
            Self::Improvement => "improvement",
            Self::NoSignificantChange => "no_significant_change",
        }
    }

    /// `regression` when `delta < 0`, `p < alpha` and `|delta| >= min_delta`; `improvement`
    /// likewise for `delta > 0`.
    pub fn of(delta: f64, p_value: f64, alpha: f64, min_delta: f64) -> Self {
        if delta == 0.0 || p_value >= alpha || delta.abs() < min_delta {
            Self::NoSignificantChange
        } else if delta < 0.0 {
            Self::Regression
        } else {
            Self::Improvement
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestName {
    McnemarExact,
    PairedBootstrap,
}

impl TestName {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::McnemarExact => "mcnemar_exact",
            Self::PairedBootstrap => "paired_bootstrap",
        }
    }
}

/// One item both runs scored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub id: String,
    pub base: f64,
    pub new: f64,
    /// How the item ended in each run (SWE verdict, or the score).
    pub base_label: String,
    pub new_label: String,
}

/// An item both runs hold that is left out of the test, with each run's reason (`None`: that
/// run scored it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excluded {
    pub id: String,
    pub base: Option<String>,
    pub new: Option<String>,
}

/// The result of [`compare`]; its JSON form is what `compare --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub metric: String,
    /// The metric over the paired items in each run.
    pub base: f64,
    pub new: f64,
    /// `new − base`.
    pub delta: f64,
    /// 95% interval of the delta.
    pub ci95: [f64; 2],
    pub p_value: f64,
    pub test: TestName,
    /// Items both runs scored (suite items: one per seed and document).
    pub n_pairs: usize,
    /// Paired items whose score went down, and up.
    pub regressions: Vec<String>,
    pub improvements: Vec<String>,
    pub verdict: Verdict,
    pub kind: RunKind,
    pub base_dir: PathBuf,
    pub new_dir: PathBuf,
    pub alpha: f64,
    pub min_delta: f64,
    /// Units the test counts (documents when several seeds pair per document).
    pub n_units: usize,
    pub only_in_base: Vec<String>,
    pub only_in_new: Vec<String>,
    /// Items both runs hold but at least one could not score (infrastructure failures).
    pub excluded: Vec<Excluded>,
    /// Setting differences, present only when `allow_drift` let them through.
    pub drift: Vec<Drift>,
    /// What was read but left out of either run, and why.
    pub notes: Vec<String>,
    /// Every paired item, for the JUnit report.
    #[serde(skip)]
    pub pairs: Vec<Pair>,
}

/// Compares the run in `base_dir` with the run in `new_dir`.
pub fn compare(
    base_dir: &Path,
    new_dir: &Path,
    options: &CompareOptions,
) -> Result<Comparison, CompareError> {
    // Written so that NaN fails too.
    if !(options.alpha > 0.0 && options.alpha < 1.0) {
        return Err(CompareError::BadOption(format!(
            "alpha must be between 0 and 1 (got {})",
            options.alpha
        )));
    }
    if options.min_delta.is_nan() || options.min_delta < 0.0 {
        return Err(CompareError::BadOption(format!(
            "min-delta must be 0 or more (got {})",
            options.min_delta
        )));
    }
    let base = load::RunDir::open(base_dir)?;
    let new = load::RunDir::open(new_dir)?;
    if base.kind() != new.kind() {
        return Err(CompareError::DifferentKinds {
            base: base.dir.clone(),
            base_kind: base.kind(),
            new: new.dir.clone(),
            new_kind: new.kind(),
        });
    }
    let (base_keys, new_keys) = (base.keys(), new.keys());
    let common: BTreeSet<String> = base_keys.intersection(&new_keys).cloned().collect();
    let drift = drift::find(&base, &new, &common);
    if !drift.is_empty() && !options.allow_drift {
        return Err(CompareError::Drift(drift));
    }

    let metric = choose_metric(&base, &new, options.metric.as_deref())?;
    let paired = pair(&common, &base.items(&metric), &new.items(&metric));
    if paired.pairs.is_empty() {
        return Err(CompareError::NoPairs { base: base.dir.clone(), new: new.dir.clone() });
    }
    let tested = test_difference(&paired);
    let Paired { pairs, excluded, units, .. } = paired;

    let mut notes = base.notes.clone();
    notes.extend(new.notes.iter().cloned());
    Ok(Comparison {
        metric,
        base: tested.base,
        new: tested.new,
        delta: tested.delta,
        ci95: tested.ci95,
        p_value: tested.p_value,
        test: tested.test,
        n_pairs: pairs.len(),
        regressions: pairs.iter().filter(|p| p.new < p.base).map(|p| p.id.clone()).collect(),
        improvements: pairs.iter().filter(|p| p.new > p.base).map(|p| p.id.clone()).collect(),
        verdict: Verdict::of(tested.delta, tested.p_value, options.alpha, options.min_delta),
        kind: base.kind(),
        base_dir: base.dir.clone(),
        new_dir: new.dir.clone(),
        alpha: options.alpha,
        min_delta: options.min_delta,
        n_units: units.len(),
        only_in_base: base_keys.difference(&new_keys).cloned().collect(),
        only_in_new: new_keys.difference(&base_keys).cloned().collect(),
        excluded,
        drift,
        notes,
        pairs,
    })
}

/// `requested`, or the base run's default metric; either way one both runs carry.
fn choose_metric(
    base: &load::RunDir,
    new: &load::RunDir,
    requested: Option<&str>,
) -> Result<String, CompareError> {
    let metric = match requested {
        Some(metric) => metric.to_owned(),
        None => base.default_metric()?,
    };
    for run in [base, new] {
        let available = run.metrics();
        if !available.contains(&metric) {
            return Err(CompareError::UnknownMetric {
                path: run.records_file(),
                metric,
                available: available.into_iter().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(metric)
}

/// The items both runs hold, paired or left out.
struct Paired {
    pairs: Vec<Pair>,
    excluded: Vec<Excluded>,
    /// Per unit (document, or SWE instance), the (base, new) means over its pairs.
    units: Vec<(f64, f64)>,
    /// One 0/1 outcome of one sample per unit in both runs: McNemar applies.
    binary: bool,
}

fn pair(common: &BTreeSet<String>, base: &load::Items, new: &load::Items) -> Paired {
    let mut pairs = Vec::new();
    let mut excluded = Vec::new();
    let mut units: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    let mut single_sample = true;
    // Suite items in data order (seed by seed), not in the string order of their keys.
    let mut in_order: Vec<&String> = common.iter().collect();
    in_order.sort_by_key(|id| base.scored.get(*id).map(|b| b.order));
    for id in in_order {
        match (base.scored.get(id), new.scored.get(id)) {
            (Some(b), Some(n)) => {
                units.entry(&b.unit).or_default().push((b.value, n.value));
                single_sample &= b.single_sample && n.single_sample;
                pairs.push(Pair {
                    id: id.clone(),
                    base: b.value,
                    new: n.value,
                    base_label: b.label.clone(),
                    new_label: n.label.clone(),
                });
            }
            _ => excluded.push(Excluded {
                id: id.clone(),
                base: base.excluded.get(id).cloned(),
                new: new.excluded.get(id).cloned(),
            }),
        }
    }
    let one_pair_each = units.values().all(|v| v.len() == 1);
    let units: Vec<(f64, f64)> = units
        .values()
        .map(|v| {
            let n = v.len() as f64;
            (v.iter().map(|p| p.0).sum::<f64>() / n, v.iter().map(|p| p.1).sum::<f64>() / n)
        })
        .collect();
    let zero_one = |x: &f64| *x == 0.0 || *x == 1.0;
    let binary = single_sample && one_pair_each && units.iter().all(|(b, n)| zero_one(b) && zero_one(n));
    Paired { pairs, excluded, units, binary }
}

/// The test's numbers: the metric over the units in each run, their difference, its 95%
/// interval and p-value.
struct Tested {
    base: f64,
    new: f64,
    delta: f64,
    ci95: [f64; 2],
    p_value: f64,
    test: TestName,
}

fn test_difference(items: &Paired) -> Tested {
    if items.binary {
        let mut t = PairedCounts::default();
        for (b, n) in &items.units {
            match (*b == 1.0, *n == 1.0) {
                (true, true) => t.both += 1,
                (true, false) => t.regressions += 1,
                (false, true) => t.improvements += 1,
                (false, false) => t.neither += 1,
            }
        }
        Tested {
            base: t.base_rate(),
            new: t.new_rate(),
            delta: t.new_rate() - t.base_rate(),
            ci95: paired::newcombe_paired_ci(&t),
            p_value: paired::mcnemar_exact(t.regressions, t.improvements),
            test: TestName::McnemarExact,
        }
    } else {
        let (b, n): (Vec<f64>, Vec<f64>) = items.units.iter().copied().unzip();
        let r = paired::paired_bootstrap(&b, &n, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED);
        Tested {
            base: crate::stats::mean(&b),
            new: crate::stats::mean(&n),
            delta: r.delta,
            ci95: r.ci95,
            p_value: r.p_value,
            test: TestName::PairedBootstrap,
        }
    }
}

/// Writes [`markdown`] to `path`.
pub fn write_markdown(comparison: &Comparison, path: &Path) -> Result<(), CompareError> {
    write_file(path, &markdown(comparison))
}

/// Writes [`html()`] to `path`.
pub fn write_html(comparison: &Comparison, path: &Path) -> Result<(), CompareError> {
    write_file(path, &html(comparison))
}

/// Writes [`junit`] to `path`.
pub fn write_junit(comparison: &Comparison, path: &Path) -> Result<(), CompareError> {
    write_file(path, &junit(comparison))
}

fn write_file(path: &Path, text: &str) -> Result<(), CompareError> {
    let write_err = |source| CompareError::Write { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    std::fs::write(path, text).map_err(write_err)
}

#[cfg(test)]
mod tests;

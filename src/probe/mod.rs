//! Contamination probes: has the model seen these texts before?
//!
//! A probe compares a **target** set (a benchmark, a repository's fixes) with a **control**
//! set the model cannot have seen (tasks harvested after its training cutoff, texts a team
//! wrote). Each item gets a statistic; how well the statistic tells the two sets apart is the
//! AUROC with a stratified bootstrap interval ([`crate::stats::separation`]). An AUROC whose
//! interval lies above 0.5 is evidence that the target was in the model's training data,
//! never proof: the sets may differ in style or length as well.
//!
//! Methods: `mink:K`, Min-K% Prob (Shi et al. 2023), the mean log-probability of the K% least
//! likely tokens of the item's text, and beside it Min-K%++ where the backend returns whole
//! next-token distributions (the local engine); and for SWE tasks two generation probes,
//! `path-guess` (the file to fix named from the issue text alone, as in "SWE-Bench Illusion")
//! and `patch-prefix` (the gold patch continued from its first third); and for
//! multiple-choice suites `ts-guess` (a wrong option masked and asked for; Deng et al. 2023);
//! and for any set `guided` (guided against general instructions; Golchin & Surdeanu 2023).
//!
//! A run goes through the run kernel like every other: one [`ProbeRecord`] per (set, part,
//! item) appended to `samples.jsonl` as soon as it is scored, so a rerun resumes.

mod generate;
mod items;
mod record;
mod run;
mod views;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use generate::{answered_path, guided_prompts, path_question, split_halves, split_patch};
pub use items::{load_set, Expected, ProbeItem};
pub use record::ProbeRecord;
pub use run::{probe, GuidedGain, ProbeSummary, Separation, SetStats};
pub use views::write_views;

/// The K of `mink` when none is given (the paper's best setting on WikiMIA).
pub const DEFAULT_MIN_K: u32 = 20;

/// How a probe scores an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Min-K% Prob over the K% least likely tokens (and Min-K%++ where available).
    MinK { k: u32 },
    /// SWE tasks: the path of the file to fix, asked from the problem statement alone.
    PathGuess,
    /// SWE tasks: the gold patch's first third, continued; ROUGE-L against the rest.
    PatchPrefix,
    /// Multiple-choice suites: a wrong option masked and asked for (TS-Guessing).
    TsGuess,
    /// Each item's first half, continued under a prompt naming the dataset and under a generic
    /// one; ROUGE-L of both against the true second half, and a paired test of the gain.
    Guided,
}

impl Method {
    /// `mink`, `mink:K` with K in 1..=100, `path-guess`, `patch-prefix`, `ts-guess` or `guided`.
    pub fn parse_name(text: &str) -> Result<Self, String> {
        let (name, k) = text.split_once(':').map_or((text, None), |(n, k)| (n, Some(k)));
        match (name, k) {
            ("mink", None) => Ok(Self::MinK { k: DEFAULT_MIN_K }),
            ("mink", Some(k)) => k
                .parse::<u32>()
                .ok()
                .filter(|k| (1..=100).contains(k))
                .map(|k| Self::MinK { k })
                .ok_or_else(|| format!("expected mink:K with K a percentage in 1..=100, not `{text}`")),
            ("path-guess", None) => Ok(Self::PathGuess),
            ("patch-prefix", None) => Ok(Self::PatchPrefix),
            ("ts-guess", None) => Ok(Self::TsGuess),
            ("guided", None) => Ok(Self::Guided),
            _ => Err(format!(
                "unknown probe method `{text}` (expected mink, mink:K, path-guess, patch-prefix, ts-guess or guided)"
            )),
        }
    }

    /// The name as it parses back (`mink:20`).
    pub fn label(&self) -> String {
        match self {
            Self::MinK { k } => format!("mink:{k}"),
            Self::PathGuess => "path-guess".into(),
            Self::PatchPrefix => "patch-prefix".into(),
            Self::TsGuess => "ts-guess".into(),
            Self::Guided => "guided".into(),
        }
    }
}

/// Which of the two compared sets an item belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Target,
    Control,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Target => "target",
            Self::Control => "control",
        }
    }
}

/// Where a set's items come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetSource {
    /// JSON lines of `{"id": ..., "text": ...}`.
    Texts(PathBuf),
    /// A SWE-bench-format dataset or task folders: each instance's problem statement and the
    /// lines its gold patch adds.
    Dataset(PathBuf),
    /// A suite's items (prompt and gold answer), from `data` or the suite's own source.
    Suite { suite: String, data: Option<PathBuf> },
}

impl SetSource {
    /// How the source reads in messages and reports.
    pub fn describe(&self) -> String {
        match self {
            Self::Texts(path) => format!("texts {}", path.display()),
            Self::Dataset(path) => format!("dataset {}", path.display()),
            Self::Suite { suite, data: Some(data) } => format!("suite {suite} (data {})", data.display()),
            Self::Suite { suite, data: None } => format!("suite {suite}"),
        }
    }
}

/// One probe run, resolved.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    pub method: Method,
    pub target: SetSource,
    pub control: SetSource,
    /// At most this many items of each set, in file order.
    pub limit: Option<usize>,
    pub out: PathBuf,
    /// Score every item again instead of resuming from `samples.jsonl`.
    pub force: bool,
}

/// Bootstrap resamples behind each AUROC interval, and their seed: fixed, so that two runs
/// give the same interval.
pub const RESAMPLES: usize = 2000;
pub const BOOTSTRAP_SEED: u64 = 0;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{path}:{line}: {message}")]
    Texts { path: PathBuf, line: usize, message: String },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load the tasks")]
    Tasks(#[from] crate::tasks::LoadError),
    #[error("cannot load the suite's items")]
    Suite(#[from] crate::suites::SuiteError),
    #[error("the {side} set ({source_name}) has no items to score")]
    EmptySet { side: &'static str, source_name: String },
    #[error("{method} probes {what} (the {side} set is {source_name})")]
    Needs { method: String, what: &'static str, side: &'static str, source_name: String },
    #[error("{method} scores texts, and this model cannot: use a generation method (path-guess, patch-prefix), or a server that returns prompt log-probabilities")]
    CannotScore {
        method: String,
        #[source]
        source: Box<crate::model::ModelError>,
    },
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

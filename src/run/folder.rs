//! Reading a finished run's output folder back: the one reader behind `compare` and `report`.
//! A `swe grade` run left `report.json`; an `eval` run left `results.json` (its suite, seeds and
//! item count) and `samples.jsonl` (the records); both left `manifest.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::repair::GradeReport;
use crate::suites::record::RunShape;
use crate::suites::SampleRecord;

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("{0} is not a folder")]
    NotADirectory(PathBuf),
    #[error("{0} holds no run: neither report.json (swe grade) nor results.json and samples.jsonl (eval)")]
    NotARun(PathBuf),
    #[error("{path} is missing: {why}")]
    Missing { path: PathBuf, why: &'static str },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid {what}")]
    Parse {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: field `{field}` {problem}")]
    Field { path: PathBuf, field: &'static str, problem: &'static str },
}

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

/// The per-item records of a run.
pub enum Records {
    Swe(GradeReport),
    Suite {
        /// What `results.json` says of the run.
        shape: RunShape,
        /// The run's records, the last one per (seed, document) (see [`SampleRecord::key`]).
        by_key: BTreeMap<String, SampleRecord>,
    },
}

impl Records {
    pub fn kind(&self) -> RunKind {
        match self {
            Self::Swe(_) => RunKind::Swe,
            Self::Suite { .. } => RunKind::Suite,
        }
    }
}

/// One finished run's folder, read.
pub struct RunFolder {
    pub dir: PathBuf,
    pub records: Records,
    /// What was read but left out, and why.
    pub notes: Vec<String>,
}

fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, FolderError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| FolderError::Read { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|source| FolderError::Parse { path: path.to_owned(), what, source })
}

impl RunFolder {
    /// Reads the run in `dir`; a run that did not finish is an error that says how to finish it.
    pub fn open(dir: &Path) -> Result<Self, FolderError> {
        if !dir.is_dir() {
            return Err(FolderError::NotADirectory(dir.to_owned()));
        }
        let has = |name: &str| dir.join(name).is_file();
        if has("report.json") {
            let report = read_json(&dir.join("report.json"), "swe grade report")?;
            return Ok(Self { dir: dir.to_owned(), records: Records::Swe(report), notes: Vec::new() });
        }
        let missing = |name: &str, why| Err(FolderError::Missing { path: dir.join(name), why });
        if has("results.jsonl") {
            return missing(
                "report.json",
                "the swe grade run that wrote results.jsonl did not finish; rerun it with the same --out (it resumes)",
            );
        }
        match (has("results.json"), has("samples.jsonl")) {
            (false, false) => Err(FolderError::NotARun(dir.to_owned())),
            (false, true) => missing(
                "results.json",
                "the eval run that wrote samples.jsonl did not finish; rerun it with the same --out (it resumes)",
            ),
            (true, false) => missing("samples.jsonl", "results.json is there but not the records it was made from"),
            (true, true) => Self::open_suite(dir),
        }
    }

    fn open_suite(dir: &Path) -> Result<Self, FolderError> {
        let results_path = dir.join("results.json");
        let results: serde_json::Value = read_json(&results_path, "suite results file")?;
        let shape = RunShape::of(&results).map_err(|(field, problem)| FolderError::Field {
            path: results_path.clone(),
            field,
            problem,
        })?;
        let samples_path = dir.join("samples.jsonl");
        let (records, unreadable): (Vec<SampleRecord>, Vec<String>) =
            crate::report::read_jsonl(&samples_path);
        let mut notes: Vec<String> =
            unreadable.into_iter().map(|line| format!("unreadable record skipped: {line}")).collect();
        let (by_key, dropped) = shape.records(records);
        if dropped > 0 {
            notes.push(format!(
                "{}: {dropped} records of seeds or items outside this run (results.json: seeds {:?}, {} items) left out",
                samples_path.display(),
                shape.seeds,
                shape.items
            ));
        }
        Ok(Self { dir: dir.to_owned(), records: Records::Suite { shape, by_key }, notes })
    }

    pub fn kind(&self) -> RunKind {
        self.records.kind()
    }

    /// The settings the run recorded.
    pub fn manifest(&self) -> Result<serde_json::Value, FolderError> {
        let path = self.dir.join("manifest.json");
        if !path.is_file() {
            return Err(FolderError::Missing {
                path,
                why: "the run's settings; was the folder copied whole?",
            });
        }
        read_json(&path, "manifest")
    }

    /// The file the per-item records come from.
    pub fn records_file(&self) -> PathBuf {
        records_file(&self.dir, self.kind())
    }
}

/// The file a run of `kind` in `dir` keeps its per-item records in.
pub fn records_file(dir: &Path, kind: RunKind) -> PathBuf {
    dir.join(match kind {
        RunKind::Swe => "report.json",
        RunKind::Suite => "samples.jsonl",
    })
}

//! `repairbench report DIR`: the views of a finished run (`report.md`, `junit.xml`,
//! `report.html`) written again from the files the run left, by the same functions its
//! subscribers call when it finishes: SWE from `report.json`, suites from `results.json` (seeds,
//! item count) and `samples.jsonl` (the records).

use std::path::{Path, PathBuf};

use crate::repair::{reports as swe_reports, GradeReport};
use crate::report::ReportError;
use crate::suites::record::{documents, RunShape};
use crate::suites::{reports as suite_reports, SampleRecord};

#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error("{0} is not a folder")]
    NotADirectory(PathBuf),
    #[error("{0} holds no run: neither report.json (swe grade) nor results.json and samples.jsonl (eval)")]
    NotARun(PathBuf),
    #[error("{path} is missing: {why}")]
    Unfinished { path: PathBuf, why: &'static str },
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
    #[error("writing the reports")]
    Write(#[source] ReportError),
}

/// What was written again.
#[derive(Debug, Clone)]
pub struct Regenerated {
    /// `swe grade`, or `eval SUITE`.
    pub run: String,
    /// Items in the reports (SWE instances; suite items times seeds).
    pub items: usize,
    pub files: Vec<PathBuf>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, RegenerateError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| RegenerateError::Read { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|source| RegenerateError::Parse {
        path: path.to_owned(),
        what,
        source,
    })
}

/// Writes the views of the finished run in `dir` again.
pub fn regenerate(dir: &Path) -> Result<Regenerated, RegenerateError> {
    if !dir.is_dir() {
        return Err(RegenerateError::NotADirectory(dir.to_owned()));
    }
    let has = |name: &str| dir.join(name).is_file();
    if has("report.json") {
        let report: GradeReport = read_json(&dir.join("report.json"), "swe grade report")?;
        swe_reports::write_views(&report, dir).map_err(RegenerateError::Write)?;
        return Ok(Regenerated {
            run: "swe grade".into(),
            items: report.instances.len(),
            files: swe_reports::VIEWS.iter().map(|v| dir.join(v)).collect(),
        });
    }
    if has("results.jsonl") {
        return Err(RegenerateError::Unfinished {
            path: dir.join("report.json"),
            why: "the swe grade run that wrote results.jsonl did not finish; rerun it with the same --out (it resumes)",
        });
    }
    if !has("samples.jsonl") && !has("results.json") {
        return Err(RegenerateError::NotARun(dir.to_owned()));
    }
    if !has("results.json") {
        return Err(RegenerateError::Unfinished {
            path: dir.join("results.json"),
            why: "the eval run that wrote samples.jsonl did not finish; rerun it with the same --out (it resumes)",
        });
    }
    if !has("samples.jsonl") {
        return Err(RegenerateError::Unfinished {
            path: dir.join("samples.jsonl"),
            why: "results.json is there but not the records it was made from",
        });
    }
    regenerate_suite(dir)
}

fn regenerate_suite(dir: &Path) -> Result<Regenerated, RegenerateError> {
    let results_path = dir.join("results.json");
    let results: serde_json::Value = read_json(&results_path, "suite results file")?;
    let field = |(field, problem)| RegenerateError::Field { path: results_path.clone(), field, problem };
    let shape = RunShape::of(&results).map_err(&field)?;
    let suite = shape.suite.clone().ok_or_else(|| field(("suite", "is missing or not a name")))?;
    let samples_path = dir.join("samples.jsonl");
    let (records, unreadable): (Vec<SampleRecord>, Vec<String>) = crate::report::read_jsonl(&samples_path);
    for line in unreadable {
        tracing::warn!("unreadable record skipped: {line}");
    }
    let (records, _) = shape.records(records);
    let doc_ids = documents(&records);
    suite_reports::write_views(dir, &suite, &shape.seeds, &doc_ids, &records)
        .map_err(RegenerateError::Write)?;
    Ok(Regenerated {
        run: format!("eval {suite}"),
        items: records.len(),
        files: suite_reports::VIEWS.iter().map(|v| dir.join(v)).collect(),
    })
}

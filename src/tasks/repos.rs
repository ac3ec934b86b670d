//! Finding a task's repository and opening its base commit. Nothing is ever checked out:
//! patches are applied to git trees in memory (see [`crate::patch::tree`]).
//!
//! Order: the task folder's own bundle, then `--repos DIR` (`DIR/OWNER/NAME`, bare or not,
//! or `DIR/OWNER/NAME.bundle`), then a mirror cloned through a URL template. Bundles and
//! network clones go through the git CLI: the vendored libgit2 here is built without https
//! and cannot read bundles.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::SweTask;

/// The default URL template; `{repo}` is `OWNER/NAME`, `{owner}` and `{name}` its parts.
pub const DEFAULT_URL_TEMPLATE: &str = "https://github.com/{repo}.git";

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository {repo}: not found under {searched} and cloning {url} failed")]
    NotFound {
        repo: String,
        searched: String,
        url: String,
        #[source]
        source: CloneError,
    },
    #[error("repository {repo}: cannot open {path}")]
    Open {
        repo: String,
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("repository {repo}: bundle {path} cannot be read")]
    BundleRead {
        repo: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("repository {repo}: bundle {path} cannot be unpacked")]
    Bundle {
        repo: String,
        path: PathBuf,
        #[source]
        source: CloneError,
    },
    #[error("repository {repo}: commit {commit} not found")]
    MissingCommit { repo: String, commit: String },
}

/// Why `git clone --mirror` made no mirror.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    #[error("creating {}", path.display())]
    Folder { path: PathBuf, source: std::io::Error },
    #[error("git clone")]
    Spawn(#[source] std::io::Error),
    #[error("git clone: {stderr}")]
    Failed { stderr: String },
    #[error("renaming into {}", path.display())]
    Rename { path: PathBuf, source: std::io::Error },
}

/// Finds repositories for tasks; clones and unpacks into `cache_dir` when needed.
#[derive(Debug)]
pub struct RepoLocator {
    pub repos_dir: Option<PathBuf>,
    pub url_template: String,
    pub cache_dir: PathBuf,
    /// One clone at a time: two workers on one repository must not both clone it.
    clone_lock: Mutex<()>,
}

impl RepoLocator {
    pub fn new(repos_dir: Option<PathBuf>, url_template: Option<String>, cache_dir: PathBuf) -> Self {
        Self {
            repos_dir,
            url_template: url_template.unwrap_or_else(|| DEFAULT_URL_TEMPLATE.to_owned()),
            cache_dir,
            clone_lock: Mutex::new(()),
        }
    }

    /// A git directory (bare or not) that git2 can open and that holds the task's commits.
    pub fn locate(&self, task: &SweTask) -> Result<PathBuf, RepoError> {
        let (owner, name) = task.owner_name().unwrap_or(("", &task.repo));
        if let Some(bundle) = &task.bundle {
            return self.unbundle(&task.repo, bundle);
        }
        let mut searched = Vec::new();
        if let Some(dir) = &self.repos_dir {
            let plain = dir.join(owner).join(name);
            searched.push(plain.display().to_string());
            if plain.is_dir() {
                return Ok(plain);
            }
            let bare = dir.join(owner).join(format!("{name}.git"));
            if bare.is_dir() {
                return Ok(bare);
            }
            let bundle = dir.join(owner).join(format!("{name}.bundle"));
            if bundle.is_file() {
                return self.unbundle(&task.repo, &bundle);
            }
        }
        let url =
            self.url_template.replace("{repo}", &task.repo).replace("{owner}", owner).replace("{name}", name);
        let dest = self.cache_dir.join("mirrors").join(owner).join(format!("{name}.git"));
        if dest.is_dir() {
            return Ok(dest);
        }
        self.clone_mirror(&url, &dest).map_err(|source| RepoError::NotFound {
            repo: task.repo.clone(),
            searched: if searched.is_empty() { "no --repos".into() } else { searched.join(", ") },
            url,
            source,
        })?;
        Ok(dest)
    }

    fn unbundle(&self, repo: &str, bundle: &Path) -> Result<PathBuf, RepoError> {
        let bytes = std::fs::read(bundle).map_err(|source| RepoError::BundleRead {
            repo: repo.into(),
            path: bundle.into(),
            source,
        })?;
        // Keyed by content so an edited bundle is unpacked afresh.
        let key = crate::digest::sha256_hex(&bytes)[..16].to_owned();
        let dest = self.cache_dir.join("bundles").join(format!("{key}.git"));
        if dest.is_dir() {
            return Ok(dest);
        }
        self.clone_mirror(&bundle.display().to_string(), &dest).map_err(|source| RepoError::Bundle {
            repo: repo.into(),
            path: bundle.into(),
            source,
        })?;
        Ok(dest)
    }

    /// `git clone --mirror` into a temporary name, then renamed, so a killed clone never
    /// leaves a half-made mirror that later runs would trust.
    fn clone_mirror(&self, source: &str, dest: &Path) -> Result<(), CloneError> {
        let _guard = self.clone_lock.lock().unwrap_or_else(|e| e.into_inner());
        if dest.is_dir() {
            return Ok(());
        }
        let parent = dest.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)
            .map_err(|source| CloneError::Folder { path: parent.to_owned(), source })?;
        let partial = parent.join(format!(
            ".partial-{}-{}",
            std::process::id(),
            dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        ));
        let _ = std::fs::remove_dir_all(&partial);
        tracing::info!(%source, dest = %dest.display(), "cloning repository mirror");
        let output = crate::deadline::output_within(
            Command::new("git")
                .args(["clone", "--mirror", "--quiet", source])
                .arg(&partial)
                .env("GIT_TERMINAL_PROMPT", "0"),
            crate::deadline::CLONE_TIMEOUT,
        );
        let output = output.map_err(|e| {
            let _ = std::fs::remove_dir_all(&partial);
            CloneError::Spawn(e)
        })?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(CloneError::Failed {
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        std::fs::rename(&partial, dest).map_err(|source| CloneError::Rename { path: dest.to_owned(), source })
    }
}

/// Opens `source` for patching (new objects stay in memory, nothing is written to disk) and
/// resolves `commit` in it.
pub fn open_commit(
    source: &Path,
    repo: &str,
    commit: &str,
) -> Result<(git2::Repository, git2::Oid), RepoError> {
    let opened = crate::patch::tree::open_in_memory(source).map_err(|e| RepoError::Open {
        repo: repo.into(),
        path: source.into(),
        source: e,
    })?;
    let oid = opened
        .revparse_single(commit)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|_| RepoError::MissingCommit { repo: repo.into(), commit: commit.into() })?;
    Ok((opened, oid))
}

/// Contents of `path` at `commit` in `repo`, if it exists there.
pub fn read_at_commit(repo: &git2::Repository, commit: &str, path: &str) -> Option<Vec<u8>> {
    let tree = repo.revparse_single(commit).ok()?.peel_to_commit().ok()?.tree().ok()?;
    let entry = tree.get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).ok()?;
    Some(blob.content().to_vec())
}

/// Every file path in the tree of `commit`.
pub fn list_files(repo: &git2::Repository, commit: &str) -> Vec<String> {
    let mut files = Vec::new();
    let Ok(tree) = repo.revparse_single(commit).and_then(|o| o.peel_to_tree()) else {
        return files;
    };
    let _ = tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
        if entry.kind() == Some(git2::ObjectType::Blob) {
            files.push(format!("{root}{}", entry.name().unwrap_or("")));
        }
        git2::TreeWalkResult::Ok
    });
    files
}

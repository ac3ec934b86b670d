//! Applying patches to repositories with git2, and extracting patches from model output.
//!
//! [`apply`] tries, in order: libgit2 on the patch as given (check, then apply); libgit2 on
//! the normalized patch ([`diff::normalize`]); our own [`fuzzy`] applier. The method that
//! succeeded is recorded, so a score never silently depends on fallbacks.

pub mod diff;
pub mod extract;
pub mod fuzzy;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use diff::files_touched;

/// How a patch was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyMethod {
    /// libgit2, patch as given.
    Git2,
    /// libgit2, after adding headers, recounting hunks and dropping junk.
    Git2Normalized,
    /// Our offset-searching, whitespace-tolerant applier.
    Fuzzy,
}

impl ApplyMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Git2 => "git2",
            Self::Git2Normalized => "git2_normalized",
            Self::Fuzzy => "fuzzy",
        }
    }
}

/// A successful application and how it went.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    pub method: ApplyMethod,
    pub files: Vec<String>,
    /// What each attempt said, in order (failures before the one that worked; fuzzy offsets).
    pub log: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("patch contains no file changes")]
    NoChanges,
    #[error("patch does not apply: {}", attempts.join("; "))]
    DoesNotApply { attempts: Vec<String> },
}

fn git2_apply(repo: &git2::Repository, patch: &str) -> Result<(), String> {
    let diff = git2::Diff::from_buffer(patch.as_bytes()).map_err(|e| format!("parse: {}", e.message()))?;
    if diff.deltas().len() == 0 {
        return Err("parse: no file changes".into());
    }
    let mut check = git2::ApplyOptions::new();
    check.check(true);
    repo.apply(&diff, git2::ApplyLocation::WorkDir, Some(&mut check))
        .map_err(|e| format!("check: {}", e.message()))?;
    repo.apply(&diff, git2::ApplyLocation::WorkDir, None).map_err(|e| format!("apply: {}", e.message()))
}

/// Applies `patch` to the worktree of `repo`, trying each method in turn.
pub fn apply(repo: &git2::Repository, patch: &str) -> Result<Applied, PatchError> {
    let root = repo.workdir().unwrap_or(Path::new("."));
    let files = diff::parse(patch);
    if files.is_empty() {
        return Err(PatchError::NoChanges);
    }
    let touched = files_touched(patch);
    let mut log = Vec::new();
    match git2_apply(repo, patch) {
        Ok(()) => return Ok(Applied { method: ApplyMethod::Git2, files: touched, log }),
        Err(e) => log.push(format!("git2: {e}")),
    }
    let normalized = diff::render(&files);
    if normalized != patch {
        match git2_apply(repo, &normalized) {
            Ok(()) => return Ok(Applied { method: ApplyMethod::Git2Normalized, files: touched, log }),
            Err(e) => log.push(format!("git2_normalized: {e}")),
        }
    }
    match fuzzy::apply(root, &files) {
        Ok(placements) => {
            for p in placements {
                log.push(format!(
                    "fuzzy: {} hunk {} offset {:+}{}",
                    p.path,
                    p.hunk,
                    p.offset,
                    if p.whitespace_tolerant { " (whitespace ignored)" } else { "" }
                ));
            }
            Ok(Applied { method: ApplyMethod::Fuzzy, files: touched, log })
        }
        Err(e) => {
            log.push(format!("fuzzy: {e}"));
            Err(PatchError::DoesNotApply { attempts: log })
        }
    }
}

/// Whether `path` looks like a test file or test configuration, for any language we grade.
pub fn is_test_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_test_dir = path.split('/').any(|part| matches!(part, "test" | "tests" | "testing"));
    in_test_dir
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name.ends_with("_test.go")
        || name == "conftest.py"
        || name == "pytest.ini"
        || name == "tox.ini"
}

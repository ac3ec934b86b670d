//! Applying patches to repositories with git2, and extracting patches from model output.
//!
//! [`apply`] works on git trees, never on a directory: it tries, in order, libgit2 on the
//! patch as given, libgit2 on the normalized patch ([`diff::normalize`]), and our own
//! [`fuzzy`] applier editing blobs. The method that succeeded is recorded, so a score never
//! silently depends on fallbacks. [`tree`] holds the path rules every route obeys, and
//! [`protect`] the test infrastructure a model patch may not change.

pub mod diff;
pub mod extract;
pub mod fuzzy;
pub mod protect;
pub mod tree;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use diff::files_touched;
pub use protect::is_test_path;
pub use tree::{Change, UnsafePath};

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
#[derive(Debug, Clone)]
pub struct Applied {
    /// The tree the patch made (in the repository's in-memory store).
    pub tree: git2::Oid,
    pub method: ApplyMethod,
    /// Every path whose entry changed, as libgit2 sees the two trees.
    pub changes: Vec<Change>,
    /// What each attempt said, in order (failures before the one that worked; fuzzy offsets).
    pub log: Vec<String>,
}

impl Applied {
    /// The changed paths.
    pub fn files(&self) -> Vec<String> {
        self.changes.iter().map(|c| c.path.clone()).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("patch contains no file changes")]
    NoChanges,
    #[error("patch does not apply: {}", attempts.join("; "))]
    DoesNotApply { attempts: Vec<String> },
    #[error("patch refused")]
    Unsafe(#[source] UnsafePath),
    #[error("git object store")]
    Git(#[source] git2::Error),
}

/// Paths as libgit2 parses the patch (C-quoted names unquoted, renames as both sides).
fn libgit2_paths(diff: &git2::Diff<'_>) -> Result<Vec<String>, UnsafePath> {
    let mut out = Vec::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if let Some(bytes) = file.path_bytes() {
                let path = std::str::from_utf8(bytes)
                    .map_err(|_| UnsafePath::NotUtf8(String::from_utf8_lossy(bytes).into_owned()))?;
                out.push(path.to_owned());
            }
        }
    }
    Ok(out)
}

/// Why one way of applying a patch failed; each is one entry of [`PatchError::DoesNotApply`].
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error("parse")]
    Parse(#[source] git2::Error),
    #[error("parse: no file changes")]
    NoChanges,
    #[error("apply")]
    Apply(#[source] git2::Error),
    #[error("write tree")]
    WriteTree(#[source] git2::Error),
    #[error("{path}")]
    Blob { path: String, source: git2::Error },
    #[error("building the tree")]
    Tree(#[source] git2::Error),
    #[error(transparent)]
    Fuzzy(#[from] fuzzy::FuzzyError),
}

fn git2_apply(
    repo: &git2::Repository,
    base: &git2::Tree<'_>,
    diff: &git2::Diff<'_>,
) -> Result<git2::Oid, AttemptError> {
    if diff.deltas().len() == 0 {
        return Err(AttemptError::NoChanges);
    }
    let mut index = repo.apply_to_tree(base, diff, None).map_err(AttemptError::Apply)?;
    index.write_tree_to(repo).map_err(AttemptError::WriteTree)
}

fn blob_of(repo: &git2::Repository, tree: &git2::Tree<'_>, path: &str) -> Option<Vec<u8>> {
    let entry = tree.get_path(Path::new(path)).ok()?;
    Some(repo.find_blob(entry.id()).ok()?.content().to_vec())
}

fn fuzzy_apply(
    repo: &git2::Repository,
    base: &git2::Tree<'_>,
    files: &[diff::FilePatch],
) -> Result<(git2::Oid, Vec<fuzzy::Placement>), AttemptError> {
    let (placements, edits) = fuzzy::apply(|path| blob_of(repo, base, path), files)?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    for edit in &edits {
        match edit {
            fuzzy::Edit::Delete { path } => {
                update.remove(path);
            }
            fuzzy::Edit::Write { path, content } => {
                let mode = base
                    .get_path(Path::new(path))
                    .ok()
                    .map(|e| e.filemode())
                    .filter(|m| *m == 0o100755)
                    .map_or(git2::FileMode::Blob, |_| git2::FileMode::BlobExecutable);
                let blob = repo
                    .blob(content.as_bytes())
                    .map_err(|source| AttemptError::Blob { path: path.clone(), source })?;
                update.upsert(path, blob, mode);
            }
        }
    }
    let tree = update.create_updated(repo, base).map_err(AttemptError::Tree)?;
    Ok((tree, placements))
}

/// Applies `patch` to `base`, trying each method in turn, and returns the new tree. The
/// repository should come from [`tree::open_in_memory`] so the new objects stay in memory.
/// Paths are checked before any attempt (as both parsers read them) and after (as the trees
/// differ); an unsafe path refuses the whole patch.
pub fn apply(repo: &git2::Repository, base: &git2::Tree<'_>, patch: &str) -> Result<Applied, PatchError> {
    let files = diff::parse(patch);
    // Parsed once: its paths are checked, then the same diff is the first attempt.
    let parsed = git2::Diff::from_buffer(patch.as_bytes()).map_err(AttemptError::Parse);
    let mut named: Vec<String> =
        files.iter().flat_map(|f| [f.old_path.clone(), f.new_path.clone()]).flatten().collect();
    if let Ok(parsed) = &parsed {
        named.extend(libgit2_paths(parsed).map_err(PatchError::Unsafe)?);
    }
    if named.is_empty() {
        return Err(PatchError::NoChanges);
    }
    for path in &named {
        tree::check_path(path).map_err(PatchError::Unsafe)?;
        tree::check_no_symlink_on_the_way(base, path).map_err(PatchError::Unsafe)?;
    }

    let mut log = Vec::new();
    let mut made = None;
    match parsed.and_then(|diff| git2_apply(repo, base, &diff)) {
        Ok(tree) => made = Some((tree, ApplyMethod::Git2)),
        Err(e) => log.push(format!("git2: {}", crate::error_chain(&e))),
    }
    let normalized = diff::render(&files);
    if made.is_none() && normalized != patch && !files.is_empty() {
        let attempt = git2::Diff::from_buffer(normalized.as_bytes())
            .map_err(AttemptError::Parse)
            .and_then(|diff| git2_apply(repo, base, &diff));
        match attempt {
            Ok(tree) => made = Some((tree, ApplyMethod::Git2Normalized)),
            Err(e) => log.push(format!("git2_normalized: {}", crate::error_chain(&e))),
        }
    }
    if made.is_none() {
        match fuzzy_apply(repo, base, &files) {
            Ok((tree, placements)) => {
                for p in placements {
                    log.push(format!(
                        "fuzzy: {} hunk {} offset {:+}{}",
                        p.path,
                        p.hunk,
                        p.offset,
                        if p.whitespace_tolerant { " (whitespace ignored)" } else { "" }
                    ));
                }
                made = Some((tree, ApplyMethod::Fuzzy));
            }
            Err(e) => {
                log.push(format!("fuzzy: {}", crate::error_chain(&e)));
                return Err(PatchError::DoesNotApply { attempts: log });
            }
        }
    }
    let (tree, method) = made.expect("set above or returned");
    let new_tree = repo.find_tree(tree).map_err(PatchError::Git)?;
    let changes = tree::changes(repo, base, &new_tree).map_err(PatchError::Git)?;
    tree::check_changes(repo, base, &new_tree, &changes).map_err(PatchError::Unsafe)?;
    Ok(Applied { tree, method, changes, log })
}

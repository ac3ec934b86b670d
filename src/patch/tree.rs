//! Patches applied to git trees, never to a directory on the host.
//!
//! A repository is opened with an in-memory object store in front of its own
//! ([`open_in_memory`]), so every blob and tree a patch makes lives in memory and nothing is
//! written to disk. Every path a patch names (as our parser reads it and as libgit2 reads it)
//! and every path its result changes is checked by [`check_path`] and the symlink rules before
//! it counts as applied. The finished tree goes to the sandbox as a tar made from its blobs
//! ([`tree_tar`]).

use std::path::Path;

use git2::{Oid, Repository, Tree};

use crate::sandbox::archive::Owner;

/// Why a path may not be touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafePath {
    #[error("{0}: absolute path")]
    Absolute(String),
    #[error("{0}: climbs out of the repository with `..`")]
    ParentDir(String),
    #[error("{0}: inside .git")]
    GitDir(String),
    #[error("{0}: empty, `.` or NUL component")]
    Malformed(String),
    #[error("{path}: goes through the symlink {link}")]
    ThroughSymlink { path: String, link: String },
    #[error("{path}: symlink to {target}, outside the repository")]
    SymlinkEscapes { path: String, target: String },
    #[error("{0}: not UTF-8")]
    NotUtf8(String),
}

/// Opens `path` so that objects written through the returned handle stay in memory.
pub fn open_in_memory(path: &Path) -> Result<Repository, git2::Error> {
    let repo = Repository::open(path)?;
    // The highest priority takes every write; the on-disk stores still serve reads.
    repo.odb()?.add_new_mempack_backend(1000)?;
    Ok(repo)
}

/// Checks a repository-relative path as text: no absolute path, no `..`, nothing in `.git`.
pub fn check_path(path: &str) -> Result<(), UnsafePath> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Err(UnsafePath::Absolute(path.into()));
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed.is_empty() || trimmed.contains('\0') {
        return Err(UnsafePath::Malformed(path.into()));
    }
    // Backslashes separate components for some tools; treat them as separators here too.
    for component in trimmed.split(['/', '\\']) {
        match component {
            ".." => return Err(UnsafePath::ParentDir(path.into())),
            "" | "." => return Err(UnsafePath::Malformed(path.into())),
            c if c.eq_ignore_ascii_case(".git") => return Err(UnsafePath::GitDir(path.into())),
            _ => {}
        }
    }
    Ok(())
}

const LINK_MODE: i32 = 0o120000;

/// Fails when a directory on the way to `path` is a symlink in `tree`.
pub fn check_no_symlink_on_the_way(tree: &Tree<'_>, path: &str) -> Result<(), UnsafePath> {
    let parts: Vec<&str> = path.split('/').collect();
    for end in 1..parts.len() {
        let prefix = parts[..end].join("/");
        if let Ok(entry) = tree.get_path(Path::new(&prefix)) {
            if entry.filemode() == LINK_MODE {
                return Err(UnsafePath::ThroughSymlink { path: path.into(), link: prefix });
            }
        }
    }
    Ok(())
}

/// Fails when the symlink at `path` with `target` resolves outside the repository.
pub fn check_symlink_target(path: &str, target: &str) -> Result<(), UnsafePath> {
    let escapes = || UnsafePath::SymlinkEscapes { path: path.into(), target: target.into() };
    if target.starts_with('/') || target.is_empty() {
        return Err(escapes());
    }
    // Depth of the link's own directory, then walk the target.
    let mut depth: i64 = path.split('/').count() as i64 - 1;
    for component in target.split('/') {
        match component {
            "" | "." => {}
            ".." => depth -= 1,
            c if c.eq_ignore_ascii_case(".git") => return Err(escapes()),
            _ => depth += 1,
        }
        if depth < 0 {
            return Err(escapes());
        }
    }
    Ok(())
}

/// One path whose entry differs between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    /// Blob and file mode before; `None` when the path was added.
    pub old: Option<(Oid, i32)>,
    /// Blob and file mode after; `None` when the path was deleted.
    pub new: Option<(Oid, i32)>,
}

/// Every file path whose content or mode differs between `old` and `new`, as libgit2 sees it
/// (no rename detection: a rename is its old path deleted and its new path added).
pub fn changes(repo: &Repository, old: &Tree<'_>, new: &Tree<'_>) -> Result<Vec<Change>, git2::Error> {
    let mut options = git2::DiffOptions::new();
    options.include_typechange(true).ignore_submodules(false);
    let diff = repo.diff_tree_to_tree(Some(old), Some(new), Some(&mut options))?;
    let mut out = Vec::new();
    for delta in diff.deltas() {
        let side =
            |file: git2::DiffFile<'_>| (!file.id().is_zero()).then(|| (file.id(), i32::from(file.mode())));
        let (old_side, new_side) = (side(delta.old_file()), side(delta.new_file()));
        let path_bytes = delta.new_file().path_bytes().or(delta.old_file().path_bytes()).unwrap_or_default();
        let path = String::from_utf8_lossy(path_bytes).into_owned();
        // A type change (file to symlink) is one delta; both sides are kept.
        out.push(Change { path, old: old_side, new: new_side });
    }
    Ok(out)
}

/// Checks what a patch did: every changed path is safe, no change goes through a symlink of
/// the old or new tree, and no symlink it made points outside the repository.
pub fn check_changes(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
    changes: &[Change],
) -> Result<(), UnsafePath> {
    for change in changes {
        check_path(&change.path)?;
        check_no_symlink_on_the_way(old, &change.path)?;
        check_no_symlink_on_the_way(new, &change.path)?;
        if let Some((oid, LINK_MODE)) = change.new {
            let target = repo
                .find_blob(oid)
                .map(|b| String::from_utf8_lossy(b.content()).into_owned())
                .unwrap_or_default();
            check_symlink_target(&change.path, &target)?;
        }
    }
    Ok(())
}

/// The tree as a tar archive owned by the sandbox user (uid 1000), with directories and files
/// writable so tests can write caches and reports.
pub fn tree_tar(repo: &Repository, tree: &Tree<'_>) -> Result<Vec<u8>, git2::Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut failure: Option<git2::Error> = None;
    let header = |kind, mode, size| crate::sandbox::archive::header(kind, mode, size, Owner::Sandbox);
    tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
        let Ok(name) = entry.name() else { return git2::TreeWalkResult::Skip };
        let path = format!("{root}{name}");
        // Writing into a Vec cannot fail; a broken entry name is the repository's problem.
        let appended = match (entry.kind(), entry.filemode()) {
            (Some(git2::ObjectType::Tree), _) | (Some(git2::ObjectType::Commit), _) => {
                let mut h = header(tar::EntryType::Directory, 0o777, 0);
                builder.append_data(&mut h, &path, std::io::empty())
            }
            (Some(git2::ObjectType::Blob), mode) => match repo.find_blob(entry.id()) {
                Ok(blob) if mode == LINK_MODE => {
                    let target = String::from_utf8_lossy(blob.content()).into_owned();
                    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                    builder.append_link(&mut h, &path, target)
                }
                Ok(blob) => {
                    let executable = mode & 0o111 != 0;
                    let mut h = header(
                        tar::EntryType::Regular,
                        if executable { 0o777 } else { 0o666 },
                        blob.content().len() as u64,
                    );
                    builder.append_data(&mut h, &path, blob.content())
                }
                Err(e) => {
                    failure = Some(e);
                    return git2::TreeWalkResult::Abort;
                }
            },
            _ => Ok(()),
        };
        if let Err(e) = appended {
            tracing::warn!("{path}: left out of the archive: {e}");
        }
        git2::TreeWalkResult::Ok
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    builder.into_inner().map_err(|e| git2::Error::from_str(&format!("packing the tree: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_repository_are_refused() {
        assert!(check_path("src/a.py").is_ok());
        assert!(check_path("a..b/c").is_ok());
        assert_eq!(check_path("/etc/passwd"), Err(UnsafePath::Absolute("/etc/passwd".into())));
        assert!(matches!(check_path("../x"), Err(UnsafePath::ParentDir(_))));
        assert!(matches!(check_path("a/../../x"), Err(UnsafePath::ParentDir(_))));
        assert!(matches!(check_path("a\\..\\x"), Err(UnsafePath::ParentDir(_))));
        assert!(matches!(check_path(".git/hooks/pre-commit"), Err(UnsafePath::GitDir(_))));
        assert!(matches!(check_path("sub/.GIT/config"), Err(UnsafePath::GitDir(_))));
        assert!(matches!(check_path("a//b"), Err(UnsafePath::Malformed(_))));
        assert!(matches!(check_path("./a"), Err(UnsafePath::Malformed(_))));
    }

    #[test]
    fn symlink_targets_must_stay_inside() {
        assert!(check_symlink_target("docs/latest", "v2").is_ok());
        assert!(check_symlink_target("docs/latest", "../README.md").is_ok());
        assert!(check_symlink_target("link", "/etc/passwd").is_err());
        assert!(check_symlink_target("link", "..").is_err());
        assert!(check_symlink_target("a/b/link", "../../../x").is_err());
        assert!(check_symlink_target("a/link", "../.git/config").is_err());
    }
}

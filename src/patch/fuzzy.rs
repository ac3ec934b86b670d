//! Our own last-resort applier: each hunk is placed where its old lines are found, searching
//! outward from the line its header names, first exactly, then ignoring whitespace. Context
//! lines keep the file's own text; only removed and added lines change. It reads and returns
//! contents only; the caller turns them into blobs of a tree, so it never touches a disk.

use super::diff::{FilePatch, HunkLine};

/// Where each hunk landed, for the apply log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub path: String,
    pub hunk: usize,
    /// Lines away from where the header said (positive: later in the file).
    pub offset: i64,
    pub whitespace_tolerant: bool,
}

fn squash(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn find(file: &[String], old: &[&str], expected: usize, from: usize, loose: bool) -> Option<usize> {
    if old.is_empty() {
        return Some(expected.clamp(from, file.len()));
    }
    if file.len() < old.len() {
        return None;
    }
    let last = file.len() - old.len();
    let matches = |at: usize| {
        old.iter().enumerate().all(|(k, want)| {
            let have = &file[at + k];
            if loose {
                squash(have) == squash(want)
            } else {
                have == want
            }
        })
    };
    let expected = expected.clamp(from, last.max(from));
    for distance in 0..=file.len() {
        let later = expected + distance;
        if later >= from && later <= last && matches(later) {
            return Some(later);
        }
        if let Some(earlier) = expected.checked_sub(distance) {
            if distance > 0 && earlier >= from && earlier <= last && matches(earlier) {
                return Some(earlier);
            }
        }
        if later > last && expected.saturating_sub(distance) <= from {
            break;
        }
    }
    None
}

/// Why a patch cannot be applied by editing the files' text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FuzzyError {
    #[error("{path}: binary patches need libgit2")]
    Binary { path: String },
    #[error("{path}: file to delete does not exist")]
    DeletedMissing { path: String },
    #[error("{path}: file does not exist")]
    Missing { path: String },
    #[error("{path}: file to create already exists")]
    CreatedExists { path: String },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: String },
    #[error("{path}: hunk {hunk} (line {line}) not found")]
    HunkNotFound { path: String, hunk: usize, line: usize },
}

/// The new contents of one file, or why it cannot be made.
fn apply_file(
    original: Option<&str>,
    patch: &FilePatch,
    placements: &mut Vec<Placement>,
) -> Result<Option<String>, FuzzyError> {
    let path = patch.path().to_owned();
    if patch.binary {
        return Err(FuzzyError::Binary { path });
    }
    if patch.new_path.is_none() {
        return match original {
            Some(_) => Ok(None),
            None => Err(FuzzyError::DeletedMissing { path }),
        };
    }
    let (mut lines, mut trailing_newline) = match original {
        Some(text) => {
            let trailing = text.ends_with('\n') || text.is_empty();
            let body = text.strip_suffix('\n').unwrap_or(text);
            let lines: Vec<String> =
                if text.is_empty() { Vec::new() } else { body.split('\n').map(str::to_owned).collect() };
            (lines, trailing)
        }
        None if patch.old_path.is_none() => (Vec::new(), true),
        None => return Err(FuzzyError::Missing { path }),
    };
    let mut shift: i64 = 0;
    let mut from = 0usize;
    for (index, hunk) in patch.hunks.iter().enumerate() {
        let old = hunk.old_lines();
        let stated = hunk.old_start.saturating_sub(1) as i64 + shift;
        let expected = stated.max(0) as usize;
        let (at, loose) = match find(&lines, &old, expected, from, false) {
            Some(at) => (at, false),
            None => match find(&lines, &old, expected, from, true) {
                Some(at) => (at, true),
                None => return Err(FuzzyError::HunkNotFound { path, hunk: index + 1, line: hunk.old_start }),
            },
        };
        placements.push(Placement {
            path: path.clone(),
            hunk: index + 1,
            offset: at as i64 - stated,
            whitespace_tolerant: loose,
        });
        let mut replacement = Vec::new();
        let mut cursor = at;
        for line in &hunk.lines {
            match line {
                HunkLine::Context(_) => {
                    replacement.push(lines[cursor].clone());
                    cursor += 1;
                }
                HunkLine::Remove(_) => cursor += 1,
                HunkLine::Add(text) => replacement.push(text.clone()),
            }
        }
        let removed = cursor - at;
        let added = replacement.len();
        let touches_end = cursor == lines.len();
        lines.splice(at..cursor, replacement);
        if touches_end && hunk.new_no_newline {
            trailing_newline = false;
        } else if touches_end && hunk.old_no_newline {
            trailing_newline = true;
        }
        shift += added as i64 - removed as i64;
        from = at + added;
    }
    let mut text = lines.join("\n");
    if trailing_newline && !lines.is_empty() {
        text.push('\n');
    }
    Ok(Some(text))
}

/// What the fuzzy applier does to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Write this content (a new file, or a changed one).
    Write {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
}

/// Computes every file's new content from `read` (a path's current bytes, `None` when it
/// does not exist); on any failure there are no edits, so a patch applies whole or not at all.
pub fn apply(
    read: impl Fn(&str) -> Option<Vec<u8>>,
    files: &[FilePatch],
) -> Result<(Vec<Placement>, Vec<Edit>), FuzzyError> {
    let mut placements = Vec::new();
    let mut edits = Vec::new();
    for patch in files {
        let source_path = patch.old_path.as_deref().unwrap_or(patch.path());
        let original = match read(source_path) {
            Some(bytes) => Some(
                String::from_utf8(bytes).map_err(|_| FuzzyError::NotUtf8 { path: source_path.to_owned() })?,
            ),
            None => None,
        };
        if patch.old_path.is_none() && original.is_some() {
            return Err(FuzzyError::CreatedExists { path: patch.path().to_owned() });
        }
        let updated = apply_file(original.as_deref(), patch, &mut placements)?;
        if let (Some(old), Some(new)) = (&patch.old_path, &patch.new_path) {
            if old != new {
                edits.push(Edit::Delete { path: old.clone() });
            }
        }
        edits.push(match updated {
            Some(content) => Edit::Write { path: patch.path().to_owned(), content },
            None => Edit::Delete { path: patch.path().to_owned() },
        });
    }
    Ok((placements, edits))
}

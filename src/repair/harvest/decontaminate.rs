//! Decontamination aids. A task is only a fair test of a model that has not seen its fix.
//! The candidate's dates (commit, merge) let users keep tasks newer than a model's training
//! cutoff; and when the fix's text is still in the repository at a later commit, any model
//! trained on that later snapshot has read the answer, so the task says so.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::source::git;

/// A later commit whose tree holds every added block of the fix verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaterCommit {
    pub commit: String,
    pub committed_unix: i64,
}

/// The blocks of consecutive added lines of a unified diff, by the file they are added to.
/// Blocks with no line of substance (blank lines, lone brackets) are left out: they appear
/// everywhere and prove nothing.
pub fn added_blocks(patch: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut file: Option<String> = None;
    let mut in_hunk = false;
    let mut block: Vec<&str> = Vec::new();
    let mut flush = |file: &Option<String>, block: &mut Vec<&str>| {
        let substantial = block.iter().any(|l| l.chars().filter(|c| c.is_alphanumeric()).count() >= 3);
        if let (Some(file), true) = (file, substantial) {
            blocks.push((file.clone(), block.join("\n")));
        }
        block.clear();
    };
    for line in patch.lines() {
        if line.starts_with("diff --git ") {
            flush(&file, &mut block);
            in_hunk = false;
            file = None;
        } else if !in_hunk && line.starts_with("+++ ") {
            file = line[4..].strip_prefix("b/").map(str::to_owned);
        } else if line.starts_with("@@") {
            flush(&file, &mut block);
            in_hunk = true;
        } else if in_hunk && line.starts_with('+') {
            block.push(&line[1..]);
        } else {
            flush(&file, &mut block);
        }
    }
    flush(&file, &mut block);
    blocks
}

/// The repository's HEAD when it is later than `commit` and holds every added block of
/// `patch` verbatim in the same files.
pub fn fix_text_at_later_commit(mirror: &Path, patch: &str, commit: &str) -> Option<LaterCommit> {
    let head = git(mirror, &["rev-parse", "HEAD"]).ok()?.trim().to_owned();
    if head == commit || git(mirror, &["merge-base", "--is-ancestor", commit, &head]).is_err() {
        return None;
    }
    let blocks = added_blocks(patch);
    if blocks.is_empty() {
        return None;
    }
    for (file, block) in &blocks {
        let text = git(mirror, &["show", &format!("{head}:{file}")]).ok()?;
        if !text.contains(block.as_str()) {
            return None;
        }
    }
    let committed_unix = git(mirror, &["show", "-s", "--format=%ct", &head]).ok()?.trim().parse().ok()?;
    Some(LaterCommit { commit: head, committed_unix })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_blocks_are_split_by_context_and_file() {
        let patch = "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n\
                     @@ -4,2 +4,3 @@ def add(a, b):\n def clamp(x, lo, hi):\n-    return max(lo, x)\n\
                     +    x = max(lo, x)\n+    return min(hi, x)\n \n+\n+}\n\
                     diff --git a/new.py b/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/new.py\n\
                     @@ -0,0 +1 @@\n+VALUE = 1\n";
        assert_eq!(
            added_blocks(patch),
            [
                ("calc/core.py".to_owned(), "    x = max(lo, x)\n    return min(hi, x)".to_owned()),
                ("new.py".to_owned(), "VALUE = 1".to_owned()),
            ]
        );
    }
}

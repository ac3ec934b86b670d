//! Each apply path on a real git repository: clean (git2), missing header and wrong counts
//! (git2_normalized), junk and CRLF around the diff, hunks at the wrong line (fuzzy, offset),
//! changed indentation (fuzzy, whitespace-tolerant), and a patch that cannot apply.

use std::path::Path;

use repairbench::patch::{self, ApplyMethod, PatchError};
use repairbench::tasks::repos;

const MODULE: &str = "\
import math


def area(radius):
    return math.pi * radius * radius


def perimeter(radius):
    return 2 * math.pi * radius


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return low
    return value
";

const FIXED_CLAMP: &str = "    if value > high:\n        return high\n";

fn commit_repo(dir: &Path) -> String {
    let repo = git2::Repository::init(dir).unwrap();
    std::fs::create_dir_all(dir.join("geo")).unwrap();
    std::fs::write(dir.join("geo/shapes.py"), MODULE).unwrap();
    std::fs::write(dir.join("README.md"), "geo\n").unwrap();
    let mut index = repo.index().unwrap();
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "base", &tree, &[]).unwrap().to_string()
}

/// Checks out the base into a fresh worktree and applies `patch_text`.
fn apply(patch_text: &str) -> (tempfile::TempDir, Result<patch::Applied, PatchError>) {
    let source = tempfile::tempdir().unwrap();
    let base = commit_repo(source.path());
    let work = tempfile::tempdir().unwrap();
    let repo = repos::checkout(source.path(), "acme/geo", &base, &work.path().join("tree")).unwrap();
    let result = patch::apply(&repo, patch_text);
    // Keep the source alive as long as the worktree (it borrows the objects).
    std::mem::forget(source);
    (work, result)
}

fn shapes(work: &tempfile::TempDir) -> String {
    std::fs::read_to_string(work.path().join("tree/geo/shapes.py")).unwrap()
}

const CLEAN: &str = "diff --git a/geo/shapes.py b/geo/shapes.py
--- a/geo/shapes.py
+++ b/geo/shapes.py
@@ -14,4 +14,4 @@ def clamp(value, low, high):
         return low
     if value > high:
-        return low
+        return high
     return value
";

#[test]
fn clean_patch_applies_with_git2() {
    let (work, result) = apply(CLEAN);
    let applied = result.unwrap();
    assert_eq!(applied.method, ApplyMethod::Git2);
    assert_eq!(applied.files, vec!["geo/shapes.py".to_string()]);
    assert!(shapes(&work).contains(FIXED_CLAMP));
}

#[test]
fn missing_header_and_wrong_counts_are_normalized() {
    // What models write: no `diff --git`, made-up hunk counts.
    let patch_text = "--- a/geo/shapes.py
+++ b/geo/shapes.py
@@ -14,7 +14,9 @@
         return low
     if value > high:
-        return low
+        return high
     return value
";
    let (work, result) = apply(patch_text);
    let applied = result.unwrap();
    assert_eq!(applied.method, ApplyMethod::Git2Normalized, "{:?}", applied.log);
    assert!(applied.log[0].starts_with("git2:"), "the refusal is recorded: {:?}", applied.log);
    assert!(shapes(&work).contains(FIXED_CLAMP));
}

#[test]
fn junk_and_crlf_around_the_diff_are_dropped() {
    let patch_text = format!(
        "Sure! Here is the patch:\r\n```diff\r\n{}```\r\nLet me know.\r\n",
        CLEAN.replace('\n', "\r\n")
    );
    let (work, result) = apply(&patch_text);
    let applied = result.unwrap();
    assert_eq!(applied.method, ApplyMethod::Git2Normalized, "{:?}", applied.log);
    let text = shapes(&work);
    assert!(text.contains(FIXED_CLAMP));
    assert!(!text.contains('\r'));
}

#[test]
fn hunk_at_the_wrong_line_is_found_by_offset() {
    // Says line 3; the code is at line 14. libgit2 refuses, the fuzzy applier searches.
    let patch_text = CLEAN.replace("@@ -14,4 +14,4 @@", "@@ -3,4 +3,4 @@");
    let (work, result) = apply(&patch_text);
    let applied = result.unwrap();
    assert_eq!(applied.method, ApplyMethod::Fuzzy, "{:?}", applied.log);
    assert!(applied.log.iter().any(|l| l.contains("offset +11")), "{:?}", applied.log);
    assert!(shapes(&work).contains(FIXED_CLAMP));
}

#[test]
fn changed_indentation_in_context_is_tolerated() {
    // Context re-indented with tabs and trailing spaces: only whitespace differs.
    let patch_text = "--- a/geo/shapes.py
+++ b/geo/shapes.py
@@ -14,4 +14,4 @@
 \t\treturn low
 \tif value > high:  
-        return low
+        return high
 \treturn value
";
    let (work, result) = apply(patch_text);
    let applied = result.unwrap();
    assert_eq!(applied.method, ApplyMethod::Fuzzy);
    assert!(applied.log.iter().any(|l| l.contains("whitespace ignored")), "{:?}", applied.log);
    let text = shapes(&work);
    // Context lines keep the file's own text.
    assert!(text.contains("    if value > high:\n        return high\n    return value\n"), "{text}");
}

#[test]
fn new_file_without_header_is_created() {
    let patch_text =
        "--- /dev/null\n+++ b/geo/volume.py\n@@ -0,0 +1,2 @@\n+def cube(side):\n+    return side ** 3\n";
    let (work, result) = apply(patch_text);
    assert!(result.is_ok(), "{result:?}");
    let text = std::fs::read_to_string(work.path().join("tree/geo/volume.py")).unwrap();
    assert_eq!(text, "def cube(side):\n    return side ** 3\n");
}

#[test]
fn a_patch_for_other_code_does_not_apply_and_changes_nothing() {
    let patch_text =
        "--- a/geo/shapes.py\n+++ b/geo/shapes.py\n@@ -1,2 +1,2 @@\n-import numpy\n+import numpy as np\n";
    let (work, result) = apply(patch_text);
    match result {
        Err(PatchError::DoesNotApply { attempts }) => {
            assert_eq!(attempts.len(), 3, "git2, git2_normalized and fuzzy were all tried: {attempts:?}");
            assert!(attempts[2].contains("hunk 1"), "{attempts:?}");
        }
        other => panic!("expected DoesNotApply, got {other:?}"),
    }
    assert_eq!(shapes(&work), MODULE);
    let (_, prose) = apply("I could not find the bug.");
    assert!(matches!(prose, Err(PatchError::NoChanges)));
}

#[test]
fn normalize_recounts_and_adds_headers() {
    let text = "--- a/x.py\n+++ b/x.py\n@@ -1,9 +1,9 @@\n a\n-b\n+c\n";
    assert_eq!(
        patch::diff::normalize(text),
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    );
    assert_eq!(patch::files_touched(CLEAN), vec!["geo/shapes.py".to_string()]);
}

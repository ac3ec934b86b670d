//! Each apply path on a real git repository: clean (git2), missing header and wrong counts
//! (git2_normalized), junk and CRLF around the diff, hunks at the wrong line (fuzzy, offset),
//! changed indentation (fuzzy, whitespace-tolerant), and a patch that cannot apply. Patches
//! are applied to git trees in memory: hostile paths (`..`, absolute, `.git`, through or to a
//! symlink outside) are refused on every route, and nothing is ever written to disk.

use std::path::Path;

use repairbench::patch::{self, ApplyMethod, PatchError, UnsafePath};

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
    // Symlinks a patch must not write through: one inside the repository, one out of it.
    std::os::unix::fs::symlink("geo", dir.join("geo_link")).unwrap();
    std::os::unix::fs::symlink("/tmp", dir.join("tmp_link")).unwrap();
    let mut index = repo.index().unwrap();
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "base", &tree, &[]).unwrap().to_string()
}

/// A repository, its base commit, and what applying a patch made of it.
struct Applied {
    _dir: tempfile::TempDir,
    repo: git2::Repository,
    result: Result<patch::Applied, PatchError>,
}

impl Applied {
    /// A file of the tree the patch made.
    fn file(&self, path: &str) -> Option<String> {
        let applied = self.result.as_ref().unwrap();
        let tree = self.repo.find_tree(applied.tree).unwrap();
        let entry = tree.get_path(Path::new(path)).ok()?;
        Some(String::from_utf8(self.repo.find_blob(entry.id()).unwrap().content().to_vec()).unwrap())
    }
}

/// Applies `patch_text` to the base tree of a fresh repository, as grading does: in memory.
fn apply(patch_text: &str) -> Applied {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("repo");
    let base = commit_repo(&source);
    let before = list(dir.path());
    let repo = patch::tree::open_in_memory(&source).unwrap();
    let tree = repo.find_commit(git2::Oid::from_str(&base).unwrap()).unwrap().tree().unwrap();
    let result = patch::apply(&repo, &tree, patch_text);
    drop(tree);
    assert_eq!(list(dir.path()), before, "applying wrote to disk");
    Applied { _dir: dir, repo, result }
}

fn list(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push(format!("{} {}", path.display(), meta.len()));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn shapes(applied: &Applied) -> String {
    applied.file("geo/shapes.py").unwrap()
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
    let work = apply(CLEAN);
    let applied = work.result.as_ref().unwrap();
    assert_eq!(applied.method, ApplyMethod::Git2);
    assert_eq!(applied.files(), vec!["geo/shapes.py".to_string()]);
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
    let work = apply(patch_text);
    let applied = work.result.as_ref().unwrap();
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
    let work = apply(&patch_text);
    let applied = work.result.as_ref().unwrap();
    assert_eq!(applied.method, ApplyMethod::Git2Normalized, "{:?}", applied.log);
    let text = shapes(&work);
    assert!(text.contains(FIXED_CLAMP));
    assert!(!text.contains('\r'));
}

#[test]
fn hunk_at_the_wrong_line_is_found_by_offset() {
    // Says line 3; the code is at line 14. libgit2 refuses, the fuzzy applier searches.
    let patch_text = CLEAN.replace("@@ -14,4 +14,4 @@", "@@ -3,4 +3,4 @@");
    let work = apply(&patch_text);
    let applied = work.result.as_ref().unwrap();
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
    let work = apply(patch_text);
    let applied = work.result.as_ref().unwrap();
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
    let work = apply(patch_text);
    assert!(work.result.is_ok(), "{:?}", work.result);
    let text = work.file("geo/volume.py").unwrap();
    assert_eq!(text, "def cube(side):\n    return side ** 3\n");
}

#[test]
fn a_patch_for_other_code_does_not_apply_and_changes_nothing() {
    let patch_text =
        "--- a/geo/shapes.py\n+++ b/geo/shapes.py\n@@ -1,2 +1,2 @@\n-import numpy\n+import numpy as np\n";
    let work = apply(patch_text);
    match &work.result {
        Err(PatchError::DoesNotApply { attempts }) => {
            assert_eq!(attempts.len(), 3, "git2, git2_normalized and fuzzy were all tried: {attempts:?}");
            assert!(attempts[2].contains("hunk 1"), "{attempts:?}");
        }
        other => panic!("expected DoesNotApply, got {other:?}"),
    }
    let prose = apply("I could not find the bug.");
    assert!(matches!(prose.result, Err(PatchError::NoChanges)));
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

/// The refusal of `patch_text`, which must name an unsafe path.
fn refused(patch_text: &str) -> UnsafePath {
    let work = apply(patch_text);
    match work.result {
        Err(PatchError::Unsafe(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const EVIL_BODY: &str = "@@ -0,0 +1 @@\n+pwned\n";

#[test]
fn traversal_is_refused_on_every_route() {
    // git2 route: a well-formed git diff.
    let git = format!("diff --git a/../escape.txt b/../escape.txt\nnew file mode 100644\n--- /dev/null\n+++ b/../escape.txt\n{EVIL_BODY}");
    assert!(matches!(refused(&git), UnsafePath::ParentDir(p) if p.contains("escape.txt")));
    // git2_normalized route: no header, wrong counts.
    let normalized = "--- /dev/null\n+++ b/geo/../../escape.txt\n@@ -0,0 +1,5 @@\n+pwned\n";
    assert!(matches!(refused(normalized), UnsafePath::ParentDir(_)));
    // Fuzzy route: an edit of a real file, at the wrong line, reached by climbing out and back.
    let fuzzy = CLEAN
        .replace("a/geo/shapes.py", "a/../repo/geo/shapes.py")
        .replace("b/geo/shapes.py", "b/../repo/geo/shapes.py")
        .replace("@@ -14,4 +14,4 @@", "@@ -3,4 +3,4 @@");
    assert!(matches!(refused(&fuzzy), UnsafePath::ParentDir(_)));
    // Absolute paths, and git's own folder.
    let absolute = format!("--- /dev/null\n+++ /tmp/repairbench-escape.txt\n{EVIL_BODY}");
    assert!(matches!(refused(&absolute), UnsafePath::Absolute(_)));
    assert!(!Path::new("/tmp/repairbench-escape.txt").exists());
    let hook = format!("diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/post-checkout\n{EVIL_BODY}");
    assert!(matches!(refused(&hook), UnsafePath::GitDir(_)));
    // A C-quoted name that only libgit2 unquotes.
    let quoted = format!("diff --git \"a/\\056\\056/escape.txt\" \"b/\\056\\056/escape.txt\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/\\056\\056/escape.txt\"\n{EVIL_BODY}");
    let work = apply(&quoted);
    assert!(
        matches!(&work.result, Err(PatchError::Unsafe(_)) | Err(PatchError::DoesNotApply { .. })),
        "{:?}",
        work.result
    );
}

#[test]
fn symlinks_cannot_carry_a_patch_out() {
    // Writing through a symlink, whether it points inside or out of the repository.
    let through = format!("--- /dev/null\n+++ b/tmp_link/repairbench-escape.txt\n{EVIL_BODY}");
    assert!(matches!(refused(&through), UnsafePath::ThroughSymlink { link, .. } if link == "tmp_link"));
    assert!(!Path::new("/tmp/repairbench-escape.txt").exists());
    let inside = CLEAN.replace("geo/shapes.py", "geo_link/shapes.py");
    assert!(matches!(refused(&inside), UnsafePath::ThroughSymlink { .. }));
    // Making a symlink that points out of the repository.
    let link = "diff --git a/passwd b/passwd\nnew file mode 120000\n--- /dev/null\n+++ b/passwd\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n";
    assert!(matches!(refused(link), UnsafePath::SymlinkEscapes { target, .. } if target == "/etc/passwd"));
    let climbing = link.replace("+/etc/passwd", "+../../../etc/passwd");
    assert!(matches!(refused(&climbing), UnsafePath::SymlinkEscapes { .. }));
    // A symlink that stays inside is an ordinary change.
    let fine = link.replace("+/etc/passwd", "+geo/shapes.py");
    let work = apply(&fine);
    assert_eq!(work.result.as_ref().unwrap().method, ApplyMethod::Git2);
    assert_eq!(work.file("passwd").as_deref(), Some("geo/shapes.py"));
}

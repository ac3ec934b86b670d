//! Test-runner output to per-test statuses, for repositories that are not tested with pytest.
//!
//! Each parser reads what one runner prints and gives every test a stable id in SWE-bench's
//! spirit (`<where the test lives>::<the runner's own name for it>`), so FAIL_TO_PASS and
//! PASS_TO_PASS lists can name tests of any language. Ids never depend on the outcome: a test
//! has the same id whether it passed or failed. Parsers never fail on odd output: what does not
//! add up (a duplicate id, a summary that disagrees with the per-test lines, a test that started
//! and never finished) goes into [`RunnerReport::problems`] for the report to show.

pub mod django;
pub mod gotest;
pub mod junit_generic;
pub mod libtest;
pub mod sympy;
pub mod tap;

use serde::{Deserialize, Serialize};

use super::{StatusMap, TestStatus};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    Pytest,
    Cargo,
    Go,
    Node,
    Junit,
    /// Django's `tests/runtests.py`, with SWE-bench's django ids.
    Django,
    /// SymPy's `bin/test`, with SWE-bench's sympy ids.
    Sympy,
}

impl RunnerKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pytest => "pytest",
            Self::Cargo => "cargo",
            Self::Go => "go",
            Self::Node => "node",
            Self::Junit => "junit",
            Self::Django => "django",
            Self::Sympy => "sympy",
        }
    }

    /// Whether the tests are Python files, run in a Python environment.
    pub fn is_python(&self) -> bool {
        matches!(self, Self::Pytest | Self::Django | Self::Sympy)
    }
}

/// The runner of a Python repository by its layout: Django's `tests/runtests.py` (run from the
/// repository root, as SWE-bench runs it), SymPy's `bin/test`, otherwise pytest. `exists` says
/// whether a path is a file of the tree.
pub fn python_runner(exists: impl Fn(&str) -> bool) -> RunnerKind {
    if exists("tests/runtests.py") {
        RunnerKind::Django
    } else if exists("bin/test") {
        RunnerKind::Sympy
    } else {
        RunnerKind::Pytest
    }
}

const SCRIPT_EXTENSIONS: [&str; 8] = [".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"];
const NODE_TEST_DIRS: [&str; 4] = ["test", "tests", "__tests__", "spec"];
const PYTHON_MARKERS: [&str; 5] = ["pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini"];

fn kind_of_test_file(path: &str) -> Option<RunnerKind> {
    let path = path.trim_start_matches("./");
    let name = path.rsplit('/').next().unwrap_or(path);
    if name.ends_with(".rs") {
        Some(RunnerKind::Cargo)
    } else if name.ends_with("_test.go") {
        Some(RunnerKind::Go)
    } else if SCRIPT_EXTENSIONS.iter().any(|ext| name.ends_with(ext)) {
        let in_test_dir = path.split('/').rev().skip(1).any(|dir| NODE_TEST_DIRS.contains(&dir));
        let named_as_test = name.contains(".test.") || name.contains(".spec.");
        // A changed `src/index.js` says nothing about how the tests run.
        (in_test_dir || named_as_test).then_some(RunnerKind::Node)
    } else if name.ends_with(".py") {
        Some(RunnerKind::Pytest)
    } else {
        None
    }
}

/// Detects the runner: first from the files the task's test_patch touches (`.rs` -> Cargo,
/// `_test.go` -> Go, `.js`/`.mjs`/`.cjs`/`.ts` (and `.mts`/`.cts`/`.jsx`/`.tsx`) under a
/// `test`/`tests`/`__tests__`/`spec` directory or named `*.test.*`/`*.spec.*` -> Node, `.py` ->
/// Pytest; the kind most files point at, the first seen on a tie), then from marker files at
/// the repository root (Cargo.toml, go.mod, package.json, then pyproject.toml, setup.py,
/// setup.cfg, pytest.ini, tox.ini, requirements*.txt). None when nothing matches.
pub fn detect(test_patch_files: &[String], root_files: &[String]) -> Option<RunnerKind> {
    let mut votes: Vec<(RunnerKind, usize)> = Vec::new();
    for kind in test_patch_files.iter().filter_map(|f| kind_of_test_file(f)) {
        match votes.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => votes.push((kind, 1)),
        }
    }
    // max_by_key keeps the last maximum; reversing first makes the first-seen kind win ties.
    if let Some((kind, _)) = votes.iter().rev().max_by_key(|(_, n)| *n) {
        return Some(*kind);
    }
    let names: Vec<&str> =
        root_files.iter().map(|f| f.trim_start_matches("./").trim_end_matches('/')).collect();
    let has = |marker: &str| names.contains(&marker);
    if has("Cargo.toml") {
        Some(RunnerKind::Cargo)
    } else if has("go.mod") {
        Some(RunnerKind::Go)
    } else if has("package.json") {
        Some(RunnerKind::Node)
    } else if PYTHON_MARKERS.iter().any(|m| has(m))
        || names.iter().any(|n| n.starts_with("requirements") && n.ends_with(".txt"))
    {
        Some(RunnerKind::Pytest)
    } else {
        None
    }
}

/// Test counts as a runner's own summary states them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// What a parser found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerReport {
    pub statuses: StatusMap,
    /// Summary counts the runner printed, when it printed any.
    pub summary: Option<Counts>,
    /// Inconsistencies: duplicate ids, a summary disagreeing with the per-test lines, tests
    /// started but never finished.
    pub problems: Vec<String>,
}

fn severity(status: TestStatus) -> u8 {
    match status {
        TestStatus::Passed => 0,
        TestStatus::Xfail => 1,
        TestStatus::Skipped => 2,
        TestStatus::Failed => 3,
        TestStatus::Error => 4,
    }
}

impl RunnerReport {
    /// Records a test. A second result for the same id is a problem, and the worse status is
    /// kept so a failing run of a test is never hidden by a passing one with the same id.
    pub(crate) fn record(&mut self, id: String, status: TestStatus) {
        if let Some(old) = self.statuses.get(&id) {
            self.problems.push(format!("test {id} reported twice ({old:?}, then {status:?})"));
        }
        self.keep_worse(id, status);
    }

    /// Records a test, keeping the worse status when the id is already there (runners whose ids
    /// may legitimately repeat: Django's docstring lines, SymPy's bare names).
    pub(crate) fn keep_worse(&mut self, id: String, status: TestStatus) {
        let old = self.statuses.entry(id).or_insert(status);
        if severity(status) > severity(*old) {
            *old = status;
        }
    }

    /// Adds a summary to the total and notes when it disagrees with what the per-test lines
    /// of the same scope (`what`) counted.
    pub(crate) fn check_summary(&mut self, what: &str, stated: Counts, seen: Counts) {
        if stated != seen {
            self.problems.push(format!(
                "{what}: the summary says {} passed, {} failed, {} skipped but the per-test lines \
                 give {} passed, {} failed, {} skipped",
                stated.passed, stated.failed, stated.skipped, seen.passed, seen.failed, seen.skipped
            ));
        }
        let total = self.summary.get_or_insert_with(Counts::default);
        total.passed += stated.passed;
        total.failed += stated.failed;
        total.skipped += stated.skipped;
    }
}

impl Counts {
    /// Counts one test's status the way runners summarise: errors are failures, xfails passes.
    pub(crate) fn add(&mut self, status: TestStatus) {
        match status {
            TestStatus::Passed | TestStatus::Xfail => self.passed += 1,
            TestStatus::Failed | TestStatus::Error => self.failed += 1,
            TestStatus::Skipped => self.skipped += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detect_prefers_the_test_patch_over_root_markers() {
        let root = strings(&["Cargo.toml", "package.json", "README.md"]);
        assert_eq!(detect(&strings(&["pkg/calc/calc_test.go"]), &root), Some(RunnerKind::Go));
        assert_eq!(
            detect(&strings(&["tests/test_text.py", "tests/conftest.py"]), &root),
            Some(RunnerKind::Pytest)
        );
        assert_eq!(detect(&strings(&["src/lib.rs"]), &[]), Some(RunnerKind::Cargo));
        assert_eq!(detect(&strings(&["test/slug.test.mjs"]), &[]), Some(RunnerKind::Node));
        assert_eq!(detect(&strings(&["src/slug.spec.ts"]), &[]), Some(RunnerKind::Node));
        assert_eq!(detect(&strings(&["packages/a/__tests__/x.js"]), &[]), Some(RunnerKind::Node));
        // Most files win; a tie goes to the first seen.
        let mixed = strings(&["a_test.go", "tests/x.py", "tests/y.py"]);
        assert_eq!(detect(&mixed, &[]), Some(RunnerKind::Pytest));
        assert_eq!(detect(&strings(&["tests/x.py", "a_test.go"]), &[]), Some(RunnerKind::Pytest));
    }

    #[test]
    fn detect_falls_back_to_root_markers_in_order() {
        // A JS file outside test dirs and a fixture say nothing about the runner.
        let patch = strings(&["src/index.js", "testdata/input.json"]);
        assert_eq!(detect(&patch, &strings(&["package.json", "go.mod"])), Some(RunnerKind::Go));
        assert_eq!(detect(&patch, &strings(&["./Cargo.toml", "go.mod"])), Some(RunnerKind::Cargo));
        assert_eq!(detect(&patch, &strings(&["package.json", "setup.py"])), Some(RunnerKind::Node));
        assert_eq!(detect(&[], &strings(&["requirements-dev.txt"])), Some(RunnerKind::Pytest));
        assert_eq!(detect(&[], &strings(&["tox.ini"])), Some(RunnerKind::Pytest));
        assert_eq!(detect(&patch, &strings(&["README.md", "Makefile"])), None);
    }

    #[test]
    fn kind_names_and_serde_agree() {
        for kind in [
            RunnerKind::Pytest,
            RunnerKind::Cargo,
            RunnerKind::Go,
            RunnerKind::Node,
            RunnerKind::Junit,
            RunnerKind::Django,
            RunnerKind::Sympy,
        ] {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.as_str()));
        }
    }

    #[test]
    fn python_repositories_are_told_apart_by_their_runner_files() {
        let tree = |files: &'static [&'static str]| move |path: &str| files.contains(&path);
        assert_eq!(python_runner(tree(&["tests/runtests.py", "setup.py"])), RunnerKind::Django);
        assert_eq!(python_runner(tree(&["bin/test", "setup.py"])), RunnerKind::Sympy);
        assert_eq!(python_runner(tree(&["tests/test_x.py", "pyproject.toml"])), RunnerKind::Pytest);
    }

    #[test]
    fn a_duplicate_keeps_the_worse_status_and_is_a_problem() {
        let mut report = RunnerReport::default();
        report.record("a".into(), TestStatus::Failed);
        report.record("a".into(), TestStatus::Passed);
        report.record("b".into(), TestStatus::Passed);
        assert_eq!(report.statuses.get("a"), Some(&TestStatus::Failed));
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].contains("test a reported twice"), "{:?}", report.problems);
    }
}

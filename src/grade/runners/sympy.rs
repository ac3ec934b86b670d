//! SymPy's own test runner (`bin/test -C --verbose FILES`) to per-test statuses under SWE-bench's
//! ids for sympy: the bare test function name (`test_integers`).
//!
//! The runner prints a header per file (`sympy/core/tests/test_basic.py[23]`), then one line
//! per test: its name and `ok`, `F` (failed), `E` (exception), `T` (timed out), `f` (expected
//! to fail), `X` (expected to fail but passed), or a skip (`s`, `w` for slow, `K`, each after a
//! reason), the file's last test ending with `[OK]` or `[FAIL]`. A name in two files keeps its
//! worse status. Checked: each file ran as many tests as its header announced, every failure
//! section names a test that failed, and `tests finished: ...` (which may wrap over lines)
//! agrees with the per-test lines.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;

use super::{Counts, RunnerReport};
use crate::grade::TestStatus;

fn status_of(word: &str) -> Option<TestStatus> {
    Some(match word {
        "ok" | "X" => TestStatus::Passed,
        "F" | "T" => TestStatus::Failed,
        "E" => TestStatus::Error,
        "f" => TestStatus::Xfail,
        "s" | "w" | "K" => TestStatus::Skipped,
        _ => return None,
    })
}

/// The totals of the closing line, as counts of the per-test kinds.
fn stated_counts(summary: &str) -> Counts {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"(\d+) (expected to fail but passed|expected to fail|passed|failed|skipped|exceptions?)")
            .expect("valid regex")
    });
    let mut counts = Counts::default();
    for c in re.captures_iter(summary) {
        let n: usize = c[1].parse().unwrap_or(0);
        match &c[2] {
            "failed" | "exceptions" | "exception" => counts.failed += n,
            "skipped" => counts.skipped += n,
            _ => counts.passed += n,
        }
    }
    counts
}

pub fn parse(output: &str) -> RunnerReport {
    static HEADER: OnceLock<Regex> = OnceLock::new();
    static SECTION: OnceLock<Regex> = OnceLock::new();
    let header = HEADER.get_or_init(|| Regex::new(r"^(\S+\.py)\[(\d+|\?)\]").expect("valid regex"));
    let section = SECTION.get_or_init(|| Regex::new(r"^_+ (\S+\.py):(\w+) _+$").expect("valid regex"));
    let mut report = RunnerReport::default();
    let mut seen = Counts::default();
    // Per file: tests announced, tests seen; and the failed or erroring tests by file.
    let mut files: Vec<(String, Option<usize>, usize)> = Vec::new();
    let mut failing: BTreeMap<(String, String), ()> = BTreeMap::new();
    let mut sections = Vec::new();
    let mut summary: Option<String> = None;
    let mut lines = output.lines().map(|l| l.trim_end_matches('\r').trim_end());
    while let Some(line) = lines.next() {
        if let Some(c) = header.captures(line) {
            let file = c[1].to_owned();
            if line.contains("Failed to import") {
                // Counted by the runner as an exception; the file's tests never ran.
                seen.add(TestStatus::Error);
                report.statuses.insert(file.clone(), TestStatus::Error);
                files.push((file, None, 0));
            } else {
                files.push((file, c[2].parse().ok(), 0));
            }
            continue;
        }
        if let Some(c) = section.captures(line.trim()) {
            sections.push((c[1].to_owned(), c[2].to_owned()));
            continue;
        }
        if line.contains("tests finished:") {
            let mut text = line.to_owned();
            while !text.contains("seconds") {
                match lines.next() {
                    Some(next) => {
                        text.push(' ');
                        text.push_str(next);
                    }
                    None => break,
                }
            }
            summary = Some(text);
            continue;
        }
        let Some(name) = line.split(' ').next().filter(|n| n.starts_with("test_")) else { continue };
        let Some((file, _, count)) = files.last_mut() else { continue };
        let rest = line.trim_end_matches("[OK]").trim_end_matches("[FAIL]").trim_end();
        let word = rest.rsplit(' ').next().unwrap_or_default();
        let Some(status) = status_of(word).filter(|_| rest.len() > name.len()) else {
            report.problems.push(format!("{file}: test {name} has no result: `{line}`"));
            continue;
        };
        *count += 1;
        seen.add(status);
        if matches!(status, TestStatus::Failed | TestStatus::Error) {
            failing.insert((file.clone(), name.to_owned()), ());
        }
        report.keep_worse(name.to_owned(), status);
    }
    for (file, announced, count) in &files {
        if let Some(announced) = announced.filter(|a| a != count) {
            report.problems.push(format!("{file}: the header announced {announced} tests, {count} reported"));
        }
    }
    for (file, name) in sections {
        if !failing.contains_key(&(file.clone(), name.clone())) {
            report.problems.push(format!("a failure report names {file}:{name}, which did not fail"));
        }
    }
    match summary {
        Some(text) => report.check_summary("the run", stated_counts(&text), seen),
        None => report.problems.push("no `tests finished:` line: the runner did not finish".into()),
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_wrapped_totals_and_sections() {
        let log = "\
sympy/a/tests/test_x.py[4]
test_one ok
test_two F
test_three E
test_four Slow w                                                  [FAIL]

sympy/b/tests/test_y.py[3]
test_one ok
test_five f
test_six X                                                          [OK]

________________________________________________________________________________
__________________ sympy/a/tests/test_x.py:test_three __________________
Traceback (most recent call last):
ZeroDivisionError: division by zero
___________________ sympy/a/tests/test_x.py:test_two ___________________
AssertionError

 tests finished: 2 passed, 1 failed, 1 skipped, 1 expected to fail,
1 expected to fail but passed, 1 exceptions, in 0.5 seconds
DO *NOT* COMMIT!
";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let status = |id: &str| report.statuses.get(id).copied();
        assert_eq!(status("test_one"), Some(TestStatus::Passed));
        assert_eq!(status("test_two"), Some(TestStatus::Failed));
        assert_eq!(status("test_three"), Some(TestStatus::Error));
        assert_eq!(status("test_four"), Some(TestStatus::Skipped));
        assert_eq!(status("test_five"), Some(TestStatus::Xfail));
        assert_eq!(status("test_six"), Some(TestStatus::Passed));
        assert_eq!(report.summary, Some(Counts { passed: 4, failed: 2, skipped: 1 }));
    }

    #[test]
    fn what_does_not_add_up_is_a_problem() {
        // Fewer tests than the header announced, a section for a test that passed, a forged total.
        let log = "sympy/a/tests/test_x.py[3]\ntest_one ok\ntest_two ok      [OK]\n\n\
                   ___ sympy/a/tests/test_x.py:test_one ___\n\
                   ======= tests finished: 3 passed, in 0.1 seconds =======\n";
        let problems = parse(log).problems.join("\n");
        assert!(problems.contains("announced 3 tests, 2 reported"), "{problems}");
        assert!(problems.contains("names sympy/a/tests/test_x.py:test_one"), "{problems}");
        assert!(problems.contains("summary says"), "{problems}");
        let problems = parse("sympy/a/tests/test_x.py[1]\ntest_one ok\n").problems.join("\n");
        assert!(problems.contains("did not finish"), "{problems}");
    }
}

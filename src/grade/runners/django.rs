//! Django's own test runner (`tests/runtests.py --verbosity 2`, unittest's text runner) to
//! per-test statuses under SWE-bench's ids for django: each test's verbosity-2 description,
//! `test_name (module.Class)`, or for a test with a docstring that docstring's first line.
//!
//! Python 3.11 describes a test as `test_name (module.Class.test_name)`; the id drops the
//! repeated name, so one id names the test on every Python. Two tests may share a docstring line
//! and so an id: the worse status is kept (never a passing test hiding a failing one), and that
//! is not a problem, as it would be for other runners. What is checked: every test that started
//! finished, and `Ran N tests` and the `OK`/`FAILED (...)` line agree with the per-test lines.
//!
//! Before Python 3.11 a test whose subtests failed prints no result word at all: its description
//! is left open and the next test's description follows on the same line. Such a test is read
//! from the failure headings (`FAIL: test_x (module.Class) (param=1)`) that name its subtests.

use std::sync::OnceLock;

use regex::Regex;

use super::{severity, Counts, RunnerReport};
use crate::grade::TestStatus;

/// The status a result word after ` ... ` stands for.
fn result(word: &str) -> Option<TestStatus> {
    let word = word.trim();
    Some(match word {
        "ok" | "OK" => TestStatus::Passed,
        "FAIL" => TestStatus::Failed,
        "ERROR" => TestStatus::Error,
        "expected failure" => TestStatus::Xfail,
        "unexpected success" => TestStatus::Failed,
        _ if word.starts_with("skipped ") || word == "skipped" => TestStatus::Skipped,
        _ => return None,
    })
}

/// `test_x (module.Class.test_x)` (Python 3.11 and later) as `test_x (module.Class)`; a
/// subtest's parameters after it stay.
pub fn swe_bench_id(description: &str) -> String {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^(\w+) \(([\w.]+)\.(\w+)\)(.*)$").expect("valid regex"));
    match re.captures(description) {
        Some(c) if c[1] == c[3] => format!("{} ({}){}", &c[1], &c[2], &c[4]),
        _ => description.to_owned(),
    }
}

/// What unittest's closing lines state: `Ran N tests`, then `OK (skipped=2)` or
/// `FAILED (failures=1, errors=2, skipped=3, expected failures=1, unexpected successes=1)`.
/// `failed` counts failing results, a failing subtest each.
fn stated(outcome: &str) -> (usize, usize) {
    let n = |key: &str| {
        outcome
            .split(['(', ',', ')'])
            .filter_map(|part| part.trim().split_once('='))
            .find(|(k, _)| k.trim() == key)
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    (n("failures") + n("errors") + n("unexpected successes"), n("skipped"))
}

/// The tally as the per-test lines give it, to hold against the closing lines.
#[derive(Default)]
struct Seen {
    /// Tests (a test with subtests once).
    tests: usize,
    /// Failing results: tests, and each failing subtest.
    failing: usize,
    skipped: usize,
}

/// `test_x (module.Class)` (or Python 3.11's form) at the start of a text: a test's name.
fn test_name(text: &str) -> Option<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^\w+ \([\w.]+\)").expect("valid regex"));
    re.find(text).map(|m| swe_bench_id(m.as_str()))
}

/// A test whose description was printed and whose result is still to come; `worst` is the
/// worst status of its subtests that reported. `name` is its `test_x (module.Class)`, which
/// the failure headings use also when the description is a docstring line.
struct Pending {
    description: String,
    name: Option<String>,
    worst: Option<TestStatus>,
}

struct Parser {
    report: RunnerReport,
    seen: Seen,
    pending: Option<Pending>,
    /// The line before, when it was a test's name alone: a docstring line follows it.
    name_line: Option<String>,
    /// Tests that ended with no result word (Python before 3.11: their subtests failed).
    silent: Vec<Pending>,
    /// The failure headings so far: the subtest's (or test's) description and its status.
    headings: Vec<(String, TestStatus)>,
}

impl Parser {
    fn record(&mut self, description: &str, status: TestStatus) {
        self.report.keep_worse(swe_bench_id(description.trim()), status);
    }

    fn count(&mut self, status: TestStatus) {
        match status {
            TestStatus::Failed | TestStatus::Error => self.seen.failing += 1,
            TestStatus::Skipped => self.seen.skipped += 1,
            TestStatus::Passed | TestStatus::Xfail => {}
        }
    }

    /// A test's result line.
    fn finished(&mut self, description: &str, status: TestStatus) {
        self.settle();
        self.seen.tests += 1;
        self.count(status);
        self.record(description, status);
    }

    /// The test still pending ends: with its failing subtests' worst status, or with none,
    /// to be read from the failure headings.
    fn settle(&mut self) {
        let Some(pending) = self.pending.take() else { return };
        match pending.worst {
            Some(worst) => {
                self.seen.tests += 1;
                self.record(&pending.description, worst);
            }
            None => self.silent.push(pending),
        }
    }

    /// Each test that ended with no result word takes its failing subtests from the headings
    /// that name it; one that no heading names never finished.
    fn settle_silent(&mut self) {
        self.settle();
        for test in std::mem::take(&mut self.silent) {
            let subtests: Vec<(String, TestStatus)> = self
                .headings
                .iter()
                .filter(|(heading, _)| test.name.is_some() && test_name(heading) == test.name)
                .cloned()
                .collect();
            let Some(worst) = subtests.iter().map(|(_, status)| *status).max_by_key(|s| severity(*s)) else {
                self.report.problems.push(format!("test {} started and never finished", test.description));
                continue;
            };
            self.seen.tests += 1;
            self.record(&test.description, worst);
            for (subtest, status) in subtests {
                self.count(status);
                self.record(&subtest, status);
            }
        }
    }

    fn line(&mut self, line: &str) {
        let heading = (line.strip_prefix("FAIL: ").map(|h| (h, TestStatus::Failed)))
            .or_else(|| line.strip_prefix("ERROR: ").map(|h| (h, TestStatus::Error)));
        if let Some((heading, status)) = heading {
            self.headings.push((heading.trim().to_owned(), status));
            return;
        }
        let name_line = self.name_line.take();
        if let Some((description, rest)) = line.split_once(" ... ") {
            // A test with no result word, and the next test's description on its line.
            if result(rest).is_none() && test_name(rest).is_some() {
                self.settle();
                self.silent.push(Pending {
                    description: description.to_owned(),
                    name: test_name(description).or(name_line),
                    worst: None,
                });
                return self.line(rest);
            }
            let status = result(rest);
            // A subtest's result, indented under its test (Python 3.11 and later).
            if let (Some(pending), Some(status), true) =
                (self.pending.as_mut(), status, line.starts_with("  "))
            {
                if pending.worst.is_none_or(|w| severity(status) > severity(w)) {
                    pending.worst = Some(status);
                }
                self.count(status);
                self.record(description, status);
                return;
            }
            match status {
                Some(status) => self.finished(description, status),
                // Output the test printed came between the description and the result.
                None => {
                    self.settle();
                    self.pending = Some(Pending {
                        description: description.to_owned(),
                        name: test_name(description).or(name_line),
                        worst: None,
                    });
                }
            }
            return;
        }
        self.name_line = test_name(line).filter(|name| *name == swe_bench_id(line.trim()));
        if let Some(status) = self.pending.as_ref().filter(|p| p.worst.is_none()).and_then(|_| result(line)) {
            let pending = self.pending.take().expect("checked above");
            self.finished(&pending.description, status);
        } else if let (None, Some(status @ (TestStatus::Error | TestStatus::Failed))) =
            (&self.pending, result(line))
        {
            // A class or module fixture that failed (`setUpClass`): unittest prints the word alone
            // and counts an error, but no test; the tests it held never ran, so they have no
            // status (as in SWE-bench's parser) and count as not passing.
            self.count(status);
        }
    }

    /// `Ran N tests` and the outcome line after it, held against the tally so far.
    fn closing(&mut self, ran: usize, ran_line: &str, outcome: &str) {
        self.settle_silent();
        if !(outcome.starts_with("OK") || outcome.starts_with("FAILED")) {
            self.report.problems.push(format!("`{ran_line}` is followed by `{outcome}`, not OK or FAILED"));
        }
        let (failing, skipped) = stated(outcome);
        let seen = std::mem::take(&mut self.seen);
        if (ran, failing, skipped) != (seen.tests, seen.failing, seen.skipped) {
            self.report.problems.push(format!(
                "the run: the summary says {ran} tests, {failing} failing results, {skipped} skipped, but the \
                 per-test lines give {}, {}, {}",
                seen.tests, seen.failing, seen.skipped
            ));
        }
        let total = self.report.summary.get_or_insert_with(Counts::default);
        total.passed += ran.saturating_sub(failing + skipped);
        total.failed += failing;
        total.skipped += skipped;
    }
}

pub fn parse(output: &str) -> RunnerReport {
    let mut parser = Parser {
        report: RunnerReport::default(),
        seen: Seen::default(),
        pending: None,
        name_line: None,
        silent: Vec::new(),
        headings: Vec::new(),
    };
    let mut lines = output.lines().map(|l| l.trim_end_matches('\r'));
    while let Some(line) = lines.next() {
        let ran = line
            .strip_prefix("Ran ")
            .filter(|r| r.contains(" test"))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok());
        match ran {
            Some(ran) => {
                // The next non-empty line says OK or FAILED.
                let outcome = lines.by_ref().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
                parser.closing(ran, line, outcome);
            }
            None => parser.line(line),
        }
    }
    parser.settle_silent();
    let mut report = parser.report;
    if report.summary.is_none() {
        report.problems.push("no `Ran N tests` line: the runner did not finish".into());
    }
    if parser.seen.tests > 0 {
        report.problems.push("tests reported after the `Ran N tests` line".into());
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_docstrings_statuses_and_totals() {
        let log = "\
Found 7 test(s).
System check identified no issues (0 silenced).
test_a (app.tests.T.test_a) ... ok
test_b (app.tests.T.test_b)
Does b. ... FAIL
test_c (app.tests.T) ... ERROR
test_d (app.tests.T.test_d) ... skipped 'no db'
test_e (app.tests.T.test_e) ... some printed output
ok
test_f (app.tests.T.test_f) ... expected failure
test_g (app.tests.T.test_g) ... unexpected success

======================================================================
FAIL: test_b (app.tests.T.test_b)
----------------------------------------------------------------------
Ran 7 tests in 0.010s

FAILED (failures=1, errors=1, skipped=1, expected failures=1, unexpected successes=1)
";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let status = |id: &str| report.statuses.get(id).copied();
        assert_eq!(status("test_a (app.tests.T)"), Some(TestStatus::Passed));
        assert_eq!(status("Does b."), Some(TestStatus::Failed));
        assert_eq!(status("test_c (app.tests.T)"), Some(TestStatus::Error));
        assert_eq!(status("test_d (app.tests.T)"), Some(TestStatus::Skipped));
        assert_eq!(status("test_e (app.tests.T)"), Some(TestStatus::Passed));
        assert_eq!(status("test_f (app.tests.T)"), Some(TestStatus::Xfail));
        assert_eq!(status("test_g (app.tests.T)"), Some(TestStatus::Failed));
        assert_eq!(report.statuses.len(), 7);
    }

    #[test]
    fn a_summary_that_disagrees_or_is_missing_is_a_problem() {
        let forged = "test_a (m.T.test_a) ... ok\ntest_b (m.T.test_b) ... ok\n\nRan 3 tests in 0.1s\n\nFAILED (failures=1)\n";
        let report = parse(forged);
        assert!(report.problems.iter().any(|p| p.contains("summary says 3 tests")), "{:?}", report.problems);
        let cut = "test_a (m.T.test_a) ... ok\ntest_b (m.T.test_b) ... ";
        let report = parse(cut);
        assert!(report.problems.iter().any(|p| p.contains("never finished")), "{:?}", report.problems);
        assert!(report.problems.iter().any(|p| p.contains("did not finish")), "{:?}", report.problems);
    }

    #[test]
    fn failing_subtests_fail_their_test_and_count_each() {
        let log = "test_s (m.T.test_s) ... \n  test_s (m.T.test_s) (i=1) ... FAIL\n  test_s (m.T.test_s) (i=2) ... ERROR\n\
                   test_t (m.T.test_t) ... ok\n\nRan 2 tests in 0.1s\n\nFAILED (failures=1, errors=1)\n";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.statuses.get("test_s (m.T)"), Some(&TestStatus::Error));
        assert_eq!(report.statuses.get("test_s (m.T) (i=1)"), Some(&TestStatus::Failed));
        assert_eq!(report.statuses.get("test_s (m.T) (i=2)"), Some(&TestStatus::Error));
        assert_eq!(report.statuses.get("test_t (m.T)"), Some(&TestStatus::Passed));
    }

    /// Python 3.9: a test whose subtests failed prints no result word, and the next test's
    /// description follows on its line (as Django 4.2.17's own tests printed under SWE-bench's
    /// 4.2 spec); its subtests are in the failure headings.
    #[test]
    fn before_python_3_11_a_test_with_failing_subtests_is_read_from_the_headings() {
        let log = "test_a (m.T) ... ok\n\
                   test_s (m.T) ... test_t (m.T) ... ok\n\
                   test_d (m.T) ... test_e (m.T)\n\
                   Docstring of e. ... ok\n\
                   test_f (m.T)\n\
                   Docstring of f. ... test_g (m.T) ... ok\n\n\
                   ======================================================================\n\
                   FAIL: test_s (m.T) (i=1)\n\
                   ----------------------------------------------------------------------\n\
                   AssertionError\n\n\
                   ======================================================================\n\
                   ERROR: test_s (m.T) (i=2)\n\
                   ----------------------------------------------------------------------\n\
                   ValueError\n\n\
                   ======================================================================\n\
                   FAIL: test_d (m.T) (x='a ... b')\n\
                   ----------------------------------------------------------------------\n\
                   ======================================================================\n\
                   FAIL: test_f (m.T) (n=3)\n\
                   Docstring of f.\n\
                   ----------------------------------------------------------------------\n\
                   Ran 7 tests in 0.1s\n\nFAILED (failures=3, errors=1)\n";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let status = |id: &str| report.statuses.get(id).copied();
        assert_eq!(status("test_s (m.T)"), Some(TestStatus::Error));
        assert_eq!(status("test_s (m.T) (i=1)"), Some(TestStatus::Failed));
        assert_eq!(status("test_s (m.T) (i=2)"), Some(TestStatus::Error));
        assert_eq!(status("test_t (m.T)"), Some(TestStatus::Passed));
        assert_eq!(status("test_d (m.T)"), Some(TestStatus::Failed));
        assert_eq!(status("Docstring of e."), Some(TestStatus::Passed));
        assert_eq!(status("Docstring of f."), Some(TestStatus::Failed));
        assert_eq!(status("test_f (m.T) (n=3)"), Some(TestStatus::Failed));
        assert_eq!(status("test_g (m.T)"), Some(TestStatus::Passed));
        assert_eq!(report.summary.as_ref().map(|c| (c.passed, c.failed)), Some((3, 4)));

        // A test left open that no heading names did not finish, whatever the totals say.
        let open = "test_s (m.T) ... test_t (m.T) ... ok\n\nRan 2 tests in 0.1s\n\nOK\n";
        let report = parse(open);
        assert!(
            report.problems.iter().any(|p| p.contains("test_s (m.T) started and never finished")),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn two_tests_with_one_docstring_line_keep_the_worse_status() {
        let log = "test_a (m.T.test_a)\nSame line. ... FAIL\ntest_b (m.T.test_b)\nSame line. ... ok\n\nRan 2 tests in 0.1s\n\nFAILED (failures=1)\n";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.statuses.get("Same line."), Some(&TestStatus::Failed));
    }

    #[test]
    fn a_failed_class_fixture_counts_an_error_and_leaves_its_tests_without_a_status() {
        // What unittest prints when a live-server test class cannot start its server.
        let log = "test_a (m.T.test_a) ... ok\nERROR\ntest_c (m.U.test_c) ... ok\n\n\
                   ======================================================================\n\
                   ERROR: setUpClass (m.Live)\n\
                   ----------------------------------------------------------------------\n\
                   Ran 2 tests in 0.1s\n\nFAILED (errors=1)\n";
        let report = parse(log);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.statuses.len(), 2);
        assert_eq!(report.summary.as_ref().map(|c| c.failed), Some(1));
    }
}

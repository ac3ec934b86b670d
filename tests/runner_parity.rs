//! Our Django and SymPy runner parsers against SWE-bench's own log parsers (`swebench` 4.1.0,
//! `parse_log_django` and `parse_log_sympy`, called in Python from the venv `scripts/setup`
//! prepares), on logs of real runs: Django 4.2's `tests/runtests.py --verbosity 2
//! --settings=test_sqlite --parallel 1` and SymPy 1.12's runner with `verbose=True`, under
//! Python 3.11, passing and with tests broken on purpose, and Django 4.2.17's tests failing on
//! 4.2.16's code under Python 3.9 (tests/fixtures/runner_logs; tracebacks keep their frame
//! lines, not the quoted source).
//!
//! Every test our parsers report has SWE-bench's status under SWE-bench's id, except where the
//! difference is one of those named below, each of which is asserted where it occurs.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use repairbench::grade::runners::{django, sympy, RunnerReport};
use repairbench::grade::TestStatus;

fn log(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runner_logs").join(name);
    std::fs::read_to_string(path).unwrap()
}

/// SWE-bench's parser `function` on the log `name`: test id to status.
fn swe_bench(function: &str, name: &str) -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runner_logs").join(name);
    let script = format!(
        "import json, sys\nfrom swebench.harness.log_parsers.python import {function}\n\
         print(json.dumps({function}(open(sys.argv[1]).read(), None)))\n"
    );
    let output = Command::new(common::venv::swebench()).args(["-c", &script]).arg(&path).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn swe_bench_status(status: TestStatus) -> &'static str {
    match status {
        TestStatus::Passed => "PASSED",
        TestStatus::Failed => "FAILED",
        TestStatus::Error => "ERROR",
        TestStatus::Skipped => "SKIPPED",
        TestStatus::Xfail => "XFAIL",
    }
}

#[test]
fn django_statuses_equal_swe_bench_parse_log_django() {
    for (name, clean) in [("django_ok.log", true), ("django_mixed.log", false)] {
        let text = log(name);
        let ours: RunnerReport = django::parse(&text);
        assert!(ours.problems.is_empty(), "{name}: {:?}", ours.problems);
        // Python 3.11's `test_x (module.Class.test_x)` is SWE-bench's `test_x (module.Class)`:
        // their parser keeps what the log says, so their ids are rewritten as ours are.
        let mut theirs: BTreeMap<String, String> = BTreeMap::new();
        for (id, status) in swe_bench("parse_log_django", name) {
            theirs.insert(django::swe_bench_id(&id), status);
        }
        let (mut agreed, mut with_subtests) = (0, 0);
        for (id, status) in &ours.statuses {
            // A test whose subtests failed: SWE-bench records the subtests only; ours records
            // them and the test, with their worst status.
            let subtests = || ours.statuses.keys().any(|other| other.starts_with(&format!("{id} (")));
            if !theirs.contains_key(id) && subtests() {
                with_subtests += 1;
                continue;
            }
            assert_eq!(theirs.get(id).map(String::as_str), Some(swe_bench_status(*status)), "{name}: {id}");
            agreed += 1;
        }
        // Their extra keys come from the failure details' headings (`FAIL: test_x (...)`), of
        // which their parser keeps the first word; ours reads the result lines only.
        let headings: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("FAIL: ").or_else(|| l.strip_prefix("ERROR: ")))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        for id in theirs.keys().filter(|id| !ours.statuses.contains_key(*id)) {
            assert!(headings.contains(&id.as_str()), "{name}: SWE-bench has {id}, which we do not");
        }
        let counts = ours.summary.unwrap();
        println!(
            "{name}: {agreed} ids agree with SWE-bench, {with_subtests} tests with failing subtests only we \
             record; the run's totals {counts:?}"
        );
        if clean {
            assert_eq!(
                (agreed, with_subtests, counts.failed),
                (96, 0, 0),
                "99 tests, 3 of them sharing docstring lines"
            );
        } else {
            assert_eq!(with_subtests, 2);
            assert!(counts.failed > 0 && counts.skipped > 0 && agreed > 100, "{counts:?}");
        }
    }
    // A run that crashed in the system checks, before any test: SWE-bench finds no tests, and
    // ours says the runner did not finish (graded as a broken run, not as failing tests).
    let crash = django::parse(&log("django_crash.log"));
    assert!(swe_bench("parse_log_django", "django_crash.log").is_empty());
    assert!(crash.statuses.is_empty());
    assert!(crash.problems.iter().any(|p| p.contains("did not finish")), "{:?}", crash.problems);
}

/// Python 3.9 under SWE-bench's own django 4.2 spec: Django 4.2.16's tree with 4.2.17's tests,
/// where one test's subtests fail. Before Python 3.11 such a test prints no result word, so the
/// next test's description follows on its line. SWE-bench's parser keys that next test as
/// `A ... B` and the failing test by the first word of its headings; ours reads both tests.
#[test]
fn django_before_python_3_11_a_test_with_failing_subtests_leaves_its_line_open() {
    let name = "django_py39_subtests.log";
    let text = log(name);
    let ours = django::parse(&text);
    assert!(ours.problems.is_empty(), "{:?}", ours.problems);
    let theirs = swe_bench("parse_log_django", name);
    let open = "test_invalid_bracketed_hosts (utils_tests.test_http.URLHasAllowedHostAndSchemeTests)";
    let next = "test_no_allowed_hosts (utils_tests.test_http.URLHasAllowedHostAndSchemeTests)";
    let mut agreed = 0;
    for (id, status) in &ours.statuses {
        if id.starts_with(open) {
            continue;
        }
        let key = if id == next { format!("{open} ... {next}") } else { id.clone() };
        assert_eq!(theirs.get(&key).map(String::as_str), Some(swe_bench_status(*status)), "{id}");
        agreed += 1;
    }
    assert_eq!(ours.statuses.get(open), Some(&TestStatus::Failed));
    let subtests = ours.statuses.keys().filter(|id| id.starts_with(&format!("{open} ("))).count();
    assert_eq!(theirs.get("test_invalid_bracketed_hosts").map(String::as_str), Some("FAILED"));
    let counts = ours.summary.unwrap();
    println!("{name}: {agreed} ids agree with SWE-bench; {subtests} failing subtests of the open test");
    // `Ran 207 tests`, `FAILED (failures=11, skipped=8)`: one failing test and ten subtests.
    assert_eq!((agreed, subtests, counts.failed, counts.skipped), (206, 10, 11, 8));
}

#[test]
fn sympy_statuses_equal_swe_bench_parse_log_sympy() {
    for (name, clean) in [("sympy_ok.log", true), ("sympy_mixed.log", false)] {
        let text = log(name);
        let ours = sympy::parse(&text);
        assert!(ours.problems.is_empty(), "{name}: {:?}", ours.problems);
        let theirs = swe_bench("parse_log_sympy", name);
        // The last test of each file ends its line with `[OK]` or `[FAIL]`, which SWE-bench's
        // parser does not read; and it knows only `ok`, `F` and `E`.
        let line_of = |id: &str| text.lines().find(|l| l.split(' ').next() == Some(id)).unwrap_or_default();
        let (mut agreed, mut last_in_file, mut other_kinds) = (0, 0, 0);
        for (id, status) in &ours.statuses {
            match theirs.get(id) {
                Some(theirs) => {
                    assert_eq!(theirs, swe_bench_status(*status), "{name}: {id}");
                    agreed += 1;
                }
                None if line_of(id).ends_with("[OK]") || line_of(id).ends_with("[FAIL]") => last_in_file += 1,
                None => {
                    let word = line_of(id).rsplit(' ').next().unwrap_or_default();
                    assert!(["f", "X", "s", "w"].contains(&word), "{name}: {id} is missing from SWE-bench's");
                    other_kinds += 1;
                }
            }
        }
        // Their extra keys are the failure reports' headings (`path.py:test_x`), each naming a
        // test that failed in ours.
        for id in theirs.keys().filter(|id| !ours.statuses.contains_key(*id)) {
            let (_, test) = id.split_once(".py:").unwrap_or_else(|| panic!("{name}: SWE-bench has {id}"));
            assert!(
                matches!(ours.statuses.get(test), Some(TestStatus::Failed | TestStatus::Error)),
                "{name}: {id}"
            );
        }
        println!(
            "{name}: {agreed} ids agree with SWE-bench; {last_in_file} last-in-file and {other_kinds} \
             xfail/xpass/skip lines only we read"
        );
        if clean {
            assert_eq!((agreed, last_in_file, other_kinds), (30, 2, 0));
        } else {
            assert!(
                agreed > 70 && last_in_file == 4 && other_kinds == 3,
                "{agreed} {last_in_file} {other_kinds}"
            );
        }
    }
}

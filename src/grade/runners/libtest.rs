//! `cargo test` output (libtest's human format, stdout and stderr of cargo together) to
//! per-test statuses.
//!
//! Id: `<source file of the test binary>::<libtest name>`, the source taken from cargo's
//! `Running unittests src/lib.rs (target/debug/deps/foo-1a2b)` / `Running tests/cli.rs (...)`
//! lines: `src/lib.rs::parser::tests::empty`, `tests/cli.rs::runs_help`. When two binaries of
//! one run share a source path (workspace members each with `src/lib.rs`), their ids become
//! `<crate>@<source>::<name>`, the crate named as in the binary's file name. Cargo older than
//! 1.57 prints no source; the binary's crate name stands in for it. Doctests are left out
//! entirely; ignored tests are Skipped; `#[should_panic]` tests are named without libtest's
//! ` - should panic` suffix. Cargo stops at the first failing binary unless given
//! `--no-fail-fast`, and the tests of binaries it never ran are then simply absent.
//!
//! With `--nocapture` and one test thread, libtest prints `test foo ... ` when a test starts and
//! the result after whatever the test printed, possibly at the end of the test's last line. A
//! result alone on a line settles it; otherwise the test's entry in the closing `failures:` list,
//! else the last line that ended in a result word before the next test started, else it is
//! reported as never finished.

use std::collections::BTreeSet;

use regex::Regex;

use super::{Counts, RunnerReport};
use crate::grade::TestStatus;

#[derive(Default)]
struct Binary {
    source: String,
    krate: String,
    announced: Option<usize>,
    results: Vec<(String, TestStatus)>,
    /// Started, result not seen yet: name and the best guess so far.
    pending: Vec<(String, Option<TestStatus>)>,
    failures: BTreeSet<String>,
    stated: Option<Counts>,
}

fn result_word(text: &str) -> Option<TestStatus> {
    match text {
        "ok" => Some(TestStatus::Passed),
        "FAILED" => Some(TestStatus::Failed),
        _ if text == "ignored" || text.starts_with("ignored, ") => Some(TestStatus::Skipped),
        _ => None,
    }
}

/// A result glued to the end of the test's own last output line.
fn trailing_result(line: &str) -> Option<TestStatus> {
    if line.ends_with("FAILED") {
        Some(TestStatus::Failed)
    } else if line.ends_with("ok") {
        Some(TestStatus::Passed)
    } else {
        None
    }
}

/// `Running unittests src/lib.rs (target/debug/deps/foo-1a2b)` -> (`src/lib.rs`, `foo`).
fn binary_names(running: &str) -> (String, String) {
    let rest = running.strip_prefix("unittests ").unwrap_or(running);
    let (source, path) = match rest.strip_suffix(')').and_then(|r| r.rsplit_once(" (")) {
        Some((source, path)) => (Some(source), path),
        None => (None, rest),
    };
    let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let file = file.strip_suffix(".exe").unwrap_or(file);
    let krate = match file.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name,
        _ => file,
    };
    (source.unwrap_or(krate).to_owned(), krate.to_owned())
}

impl Binary {
    fn settle_pending(&mut self, line: &str) {
        if let Some((_, guess)) = self.pending.last_mut() {
            if let Some(status) = result_word(line.trim()) {
                let (name, _) = self.pending.pop().expect("checked above");
                self.results.push((name, status));
            } else if let Some(status) = trailing_result(line.trim_end()) {
                *guess = Some(status);
            }
        }
    }

    fn finish(mut self, report: &mut RunnerReport, done: &mut Vec<Binary>) {
        for (name, guess) in std::mem::take(&mut self.pending) {
            let status = if self.failures.contains(&name) { Some(TestStatus::Failed) } else { guess };
            match status {
                Some(status) => self.results.push((name, status)),
                None => {
                    report.problems.push(format!("{}: test {name} started but never finished", self.source))
                }
            }
        }
        let mut seen = Counts::default();
        for (_, status) in &self.results {
            seen.add(*status);
        }
        match self.stated {
            Some(stated) => report.check_summary(&self.source, stated, seen),
            None => report.problems.push(format!(
                "{}: no `test result:` line (the test binary crashed or was killed)",
                self.source
            )),
        }
        if let Some(announced) = self.announced.filter(|&n| n != self.results.len()) {
            report.problems.push(format!(
                "{}: {announced} tests announced, {} finished",
                self.source,
                self.results.len()
            ));
        }
        done.push(self);
    }
}

/// Parses `cargo test` output.
pub fn parse(output: &str) -> RunnerReport {
    let summary =
        Regex::new(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored").expect("valid regex");
    let mut report = RunnerReport::default();
    let mut done = Vec::new();
    let mut current: Option<Binary> = None;
    let mut in_failures_list = false;
    for line in output.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let trimmed = line.trim();
        if let Some(running) = trimmed.strip_prefix("Running ") {
            if let Some(binary) = current.take() {
                binary.finish(&mut report, &mut done);
            }
            let (source, krate) = binary_names(running);
            current = Some(Binary { source, krate, ..Binary::default() });
            continue;
        }
        if trimmed.starts_with("Doc-tests ") {
            // Doctests are not counted: everything up to the next `Running` is skipped.
            if let Some(binary) = current.take() {
                binary.finish(&mut report, &mut done);
            }
            continue;
        }
        // A test binary killed by a signal; a plain non-zero exit is just failing tests.
        let killed = trimmed.contains("didn't exit successfully") && trimmed.contains("(signal: ");
        if trimmed.starts_with("error: could not compile") || killed {
            report.problems.push(trimmed.to_owned());
        }
        let Some(binary) = current.as_mut() else {
            continue;
        };
        if in_failures_list {
            match line.strip_prefix("    ").filter(|name| !name.is_empty() && !name.contains(' ')) {
                Some(name) => {
                    binary.failures.insert(name.to_owned());
                    continue;
                }
                None => in_failures_list = false,
            }
        }
        if let Some(caps) = summary.captures(line) {
            let count = |i: usize| caps[i].parse().unwrap_or(usize::MAX);
            binary.stated = Some(Counts { passed: count(1), failed: count(2), skipped: count(3) });
            let binary = current.take().expect("matched above");
            binary.finish(&mut report, &mut done);
        } else if let Some(test) = line.strip_prefix("test ") {
            let Some((name, rest)) = test.split_once(" ...") else {
                binary.settle_pending(line);
                continue;
            };
            let name = name.strip_suffix(" - should panic").unwrap_or(name).to_owned();
            let rest = rest.trim();
            match result_word(rest) {
                Some(status) => binary.results.push((name, status)),
                None => binary.pending.push((name, trailing_result(rest))),
            }
        } else if line == "failures:" {
            in_failures_list = true;
        } else if let Some(n) = line.strip_prefix("running ").and_then(|r| r.split(' ').next()) {
            binary.announced = n.parse().ok();
        } else {
            binary.settle_pending(line);
        }
    }
    if let Some(binary) = current.take() {
        binary.finish(&mut report, &mut done);
    }
    for binary in &done {
        let shared = done.iter().any(|other| other.source == binary.source && other.krate != binary.krate);
        let label =
            if shared { format!("{}@{}", binary.krate, binary.source) } else { binary.source.clone() };
        for (name, status) in &binary.results {
            report.record(format!("{label}::{name}"), *status);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    // Real output of `cargo test --no-fail-fast` (cargo 1.95) on a crate with a lib, a bin and an
    // integration test: a failing assertion, an index panic, should_panic, an ignored test, doctests.
    const NO_FAIL_FAST: &str = r#"    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.02s
     Running unittests src/lib.rs (target/debug/deps/slugger-39e27d6f69d16c88)

running 6 tests
test parser::tests::counts ... ok
test parser::tests::empty ... ok
test parser::tests::expected_panic - should panic ... ok
test parser::tests::slow ... ignored, slow
test parser::tests::panics ... FAILED
test tests::slug_joins ... FAILED

failures:

---- parser::tests::panics stdout ----

thread 'parser::tests::panics' (12680) panicked at src/lib.rs:38:22:
index out of bounds: the len is 0 but the index is 3

---- tests::slug_joins stdout ----

thread 'tests::slug_joins' (12681) panicked at src/lib.rs:57:9:
assertion `left == right` failed
  left: "a-b"
 right: "a_b"


failures:
    parser::tests::panics
    tests::slug_joins

test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

error: test failed, to rerun pass `--lib`
     Running unittests src/bin/slug.rs (target/debug/deps/slug-c62261bd4b766bae)

running 1 test
test tests::bin_test ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/cli.rs (target/debug/deps/cli-87228bd6245f7239)

running 2 tests
test prints_then_passes ... ok
test runs_help ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

   Doc-tests slugger

running 2 tests
test src/lib.rs - broken_doc (line 12) ... FAILED
test src/lib.rs - slug (line 5) ... ok

failures:

---- src/lib.rs - broken_doc (line 12) stdout ----
Test executable failed (exit status: 101).

stderr:

thread 'main' (12718) panicked at /tmp/rustdoctestA3gr1x/doctest_bundle_2024.rs:6:1:
assertion `left == right` failed
  left: "x"
 right: "y"
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace



failures:
    src/lib.rs - broken_doc (line 12)

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s

all doctests ran in 0.47s; merged doctests compilation took 0.46s
error: doctest failed, to rerun pass `--doc`
error: 2 targets failed:
    `--lib`
    `--doc`
"#;

    // The same crate with `-- --nocapture --test-threads=1`: results land after printed lines.
    const NOCAPTURE: &str = r#"    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.01s
     Running unittests src/lib.rs (target/debug/deps/slugger-39e27d6f69d16c88)

running 6 tests
test parser::tests::counts ... counting words in a sentence
ok
test parser::tests::empty ... ok
test parser::tests::expected_panic - should panic ... 
thread 'parser::tests::expected_panic' (12732) panicked at src/lib.rs:44:13:
boom
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
ok
test parser::tests::panics ... 
thread 'parser::tests::panics' (12734) panicked at src/lib.rs:38:22:
index out of bounds: the len is 0 but the index is 3
FAILED
test parser::tests::slow ... ignored, slow
test tests::slug_joins ... 
thread 'tests::slug_joins' (12735) panicked at src/lib.rs:57:9:
assertion `left == right` failed
  left: "a-b"
 right: "a_b"
FAILED

failures:

failures:
    parser::tests::panics
    tests::slug_joins

test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

error: test failed, to rerun pass `--lib`
     Running unittests src/bin/slug.rs (target/debug/deps/slug-c62261bd4b766bae)

running 1 test
test tests::bin_test ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/cli.rs (target/debug/deps/cli-87228bd6245f7239)

running 2 tests
test prints_then_passes ... partial line without newlineok
test runs_help ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

   Doc-tests slugger

running 2 tests
test src/lib.rs - broken_doc (line 12) ... Test executable failed (exit status: 101).

stderr:

thread 'main' (12769) panicked at /tmp/rustdoctestLXHi5C/doctest_bundle_2024.rs:6:1:
assertion `left == right` failed
  left: "x"
 right: "y"
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

FAILED
test src/lib.rs - slug (line 5) ... ok

failures:

failures:
    src/lib.rs - broken_doc (line 12)

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.02s

all doctests ran in 0.48s; merged doctests compilation took 0.45s
error: doctest failed, to rerun pass `--doc`
error: 2 targets failed:
    `--lib`
    `--doc`
"#;

    // A test binary that aborts mid-run (`--test-threads=1`).
    const CRASH: &str = r#"   Compiling slugger v0.1.0 (/tmp/rcrate2)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.78s
     Running tests/crash.rs (target/debug/deps/crash-181bf22bda84775b)

running 2 tests
test aborts ... error: test failed, to rerun pass `--test crash`

Caused by:
  process didn't exit successfully: `/tmp/rcrate2/target/debug/deps/crash-181bf22bda84775b --test-threads=1` (signal: 6, SIGABRT: process abort signal)
error: 1 target failed:
    `--test crash`
"#;

    fn get<'a>(report: &'a RunnerReport, id: &str) -> Option<&'a TestStatus> {
        report.statuses.get(id)
    }

    fn check_slugger(report: &RunnerReport) {
        let expected = [
            ("src/lib.rs::parser::tests::counts", Passed),
            ("src/lib.rs::parser::tests::empty", Passed),
            ("src/lib.rs::parser::tests::expected_panic", Passed),
            ("src/lib.rs::parser::tests::panics", Failed),
            ("src/lib.rs::parser::tests::slow", Skipped),
            ("src/lib.rs::tests::slug_joins", Failed),
            ("src/bin/slug.rs::tests::bin_test", Passed),
            ("tests/cli.rs::prints_then_passes", Passed),
            ("tests/cli.rs::runs_help", Passed),
        ];
        let want: Vec<(String, TestStatus)> = expected.iter().map(|(id, s)| (id.to_string(), *s)).collect();
        let got: Vec<(String, TestStatus)> = report.statuses.clone().into_iter().collect();
        let mut want_sorted = want;
        want_sorted.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want_sorted, "doctests must not appear");
        assert_eq!(report.summary, Some(Counts { passed: 6, failed: 2, skipped: 1 }));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn ids_come_from_the_binary_source_and_doctests_are_left_out() {
        check_slugger(&parse(NO_FAIL_FAST));
    }

    #[test]
    fn results_printed_after_test_output_still_count() {
        // `test parser::tests::counts ... counting words in a sentence` / `ok`, and
        // `test prints_then_passes ... partial line without newlineok`.
        check_slugger(&parse(NOCAPTURE));
    }

    #[test]
    fn a_crashed_binary_is_reported_not_guessed() {
        let report = parse(CRASH);
        assert!(report.statuses.is_empty(), "{:?}", report.statuses);
        assert_eq!(report.summary, None);
        let problems = report.problems.join("\n");
        assert!(problems.contains("tests/crash.rs: test aborts started but never finished"), "{problems}");
        assert!(problems.contains("tests/crash.rs: no `test result:` line"), "{problems}");
        assert!(problems.contains("tests/crash.rs: 2 tests announced, 0 finished"), "{problems}");
        assert!(problems.contains("SIGABRT"), "{problems}");
    }

    #[test]
    fn a_build_failure_leaves_no_tests_and_says_why() {
        // Tail of real output after breaking src/lib.rs.
        let output = "   Compiling slugger v0.1.0 (/tmp/rcrate2)\nerror[E0277]: cannot add `&str` to `usize`\n  \
                      --> src/lib.rs:19:38\n\nFor more information about this error, try `rustc --explain E0277`.\n\
                      error: could not compile `slugger` (lib) due to 1 previous error\n\
                      warning: build failed, waiting for other jobs to finish...\n\
                      error: could not compile `slugger` (lib test) due to 1 previous error\n";
        let report = parse(output);
        assert!(report.statuses.is_empty());
        assert_eq!(report.summary, None);
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(
            report.problems[1].contains("could not compile `slugger` (lib test)"),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn workspace_members_sharing_a_source_path_get_their_crate_name() {
        let output = "     Running unittests src/lib.rs (target/debug/deps/core_a-0123abcd)\n\nrunning 1 test\n\
                      test tests::it_works ... ok\n\n\
                      test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\
                      \x20    Running unittests src/lib.rs (target/debug/deps/core_b-4567ef01)\n\nrunning 1 test\n\
                      test tests::it_works ... FAILED\n\nfailures:\n\nfailures:\n    tests::it_works\n\n\
                      test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\
                      \x20    Running target/debug/deps/old_style-89abcdef\n\nrunning 1 test\n\
                      test legacy ... ok\n\n\
                      test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        let report = parse(output);
        assert_eq!(get(&report, "core_a@src/lib.rs::tests::it_works"), Some(&Passed));
        assert_eq!(get(&report, "core_b@src/lib.rs::tests::it_works"), Some(&Failed));
        assert_eq!(get(&report, "old_style::legacy"), Some(&Passed));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn a_summary_that_disagrees_with_the_test_lines_is_a_problem() {
        let output = NO_FAIL_FAST.replace("test result: ok. 2 passed", "test result: ok. 3 passed");
        let report = parse(&output);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].starts_with("tests/cli.rs: the summary says 3 passed"),
            "{:?}",
            report.problems
        );
        assert_eq!(report.summary, Some(Counts { passed: 7, failed: 2, skipped: 1 }));
    }

    #[test]
    fn the_failures_list_beats_a_result_guessed_from_printed_text() {
        let output = "     Running tests/io.rs (target/debug/deps/io-0a1b)\n\nrunning 2 tests\n\
                      test reads ... looks ok\nthread 'reads' panicked at tests/io.rs:3:5:\nboom\n\
                      test writes ... ok\n\nfailures:\n\nfailures:\n    reads\n\n\
                      test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        let report = parse(output);
        assert_eq!(get(&report, "tests/io.rs::reads"), Some(&Failed));
        assert_eq!(get(&report, "tests/io.rs::writes"), Some(&Passed));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}

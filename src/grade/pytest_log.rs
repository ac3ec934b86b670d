//! pytest logs (`-rA`) to per-test status. Grading reads the signed JUnit report
//! ([`super::channel`]); the summary read here is what that report is checked against.
//!
//! [`parse_whole_log`] reads every line the way SWE-bench's pytest parser does: a line that
//! starts with a status word names a test (for FAILED, ` - ` is treated as a space) and a later
//! line wins. That lets code under test forge results by printing `PASSED tests/x.py::y`, so
//! the check uses [`parse_summary`]: the same rule applied only inside the last
//! `short test summary info` section, which pytest writes after all captured output, and only
//! up to the closing `=== N passed in Xs ===` line (an `atexit` print comes after it).

use super::{StatusMap, TestStatus};

fn read_line(line: &str, map: &mut StatusMap) {
    if !["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"].iter().any(|w| line.starts_with(w)) {
        return;
    }
    read_status_line(line, map);
}

fn read_status_line(line: &str, map: &mut StatusMap) {
    let line = if line.starts_with("FAILED") { line.replace(" - ", " ") } else { line.to_owned() };
    let mut parts = line.split_whitespace();
    let (Some(status), Some(test)) = (parts.next(), parts.next()) else {
        return;
    };
    // SWE-bench stores the first word as is; a word like `PASSEDX` then counts as neither
    // passed nor failed, which is how SKIPPED counts.
    let status = TestStatus::parse(status).unwrap_or(TestStatus::Skipped);
    map.insert(test.to_owned(), status);
}

/// SWE-bench's reading of a pytest log, over every line (for comparison; not for grading).
pub fn parse_whole_log(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.split('\n') {
        read_line(line, &mut map);
    }
    map
}

fn is_banner(line: &str, title: &str) -> bool {
    let trimmed = line.trim();
    trimmed.starts_with('=') && trimmed.ends_with('=') && trimmed.trim_matches('=').trim() == title
}

fn is_final_line(line: &str) -> bool {
    // `==== 2 failed, 3 passed in 0.12s ====` (also `no tests ran in`).
    let trimmed = line.trim();
    trimmed.starts_with("==") && trimmed.ends_with("==") && trimmed.contains(" in ")
}

/// The statuses in the last `short test summary info` section; `None` if there is none.
pub fn parse_summary(log: &str) -> Option<StatusMap> {
    summary_lines(log, read_line)
}

/// [`parse_summary`], also reading `XPASS` lines as passed (as the JUnit report has them),
/// for checking the report against the summary.
pub fn parse_summary_outcomes(log: &str) -> Option<StatusMap> {
    // A project's `addopts = --color=yes` colours the summary even though we ask for none.
    let log = strip_ansi_escapes::strip_str(log);
    summary_lines(&log, |line, map| match line.strip_prefix("XPASS") {
        Some(rest) => read_status_line(&format!("PASSED{rest}"), map),
        None => read_line(line, map),
    })
}

fn summary_lines(log: &str, read: impl Fn(&str, &mut StatusMap)) -> Option<StatusMap> {
    let lines: Vec<&str> = log.split('\n').collect();
    let start = lines.iter().rposition(|l| is_banner(l, "short test summary info"))?;
    let mut map = StatusMap::new();
    for line in &lines[start + 1..] {
        if is_final_line(line) {
            break;
        }
        read(line, &mut map);
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_lines_lose_their_message() {
        let log = "=========== short test summary info ===========\nPASSED tests/a.py::t1\nFAILED tests/a.py::t2 - assert 1 == 2\nERROR tests/b.py\n====== 1 failed, 1 passed, 1 error in 0.1s ======\n";
        let map = parse_summary(log).unwrap();
        assert_eq!(map.get("tests/a.py::t1"), Some(&TestStatus::Passed));
        assert_eq!(map.get("tests/a.py::t2"), Some(&TestStatus::Failed));
        assert_eq!(map.get("tests/b.py"), Some(&TestStatus::Error));
        assert_eq!(map, parse_whole_log(log));
    }

    #[test]
    fn prints_outside_the_summary_do_not_count() {
        let log = "PASSED tests/a.py::t2\n========= short test summary info =========\nFAILED tests/a.py::t2 - boom\n==== 1 failed in 0.1s ====\nPASSED tests/a.py::t2\n";
        assert_eq!(parse_summary(log).unwrap().get("tests/a.py::t2"), Some(&TestStatus::Failed));
        // SWE-bench's whole-log reading is fooled by the atexit print.
        assert_eq!(parse_whole_log(log).get("tests/a.py::t2"), Some(&TestStatus::Passed));
    }

    #[test]
    fn a_coloured_summary_reads_like_a_plain_one() {
        let log = "\u{1b}[36m\u{1b}[1m==== short test summary info ====\u{1b}[0m\n\u{1b}[32mPASSED\u{1b}[0m tests/a.py::t1\n\
                   \u{1b}[31mFAILED\u{1b}[0m tests/a.py::t2 - \u{1b}(Bboom\n\u{1b}[31m==== 1 failed, 1 passed in 0.1s ====\u{1b}[0m\n";
        let map = parse_summary_outcomes(log).unwrap();
        assert_eq!(map.get("tests/a.py::t1"), Some(&TestStatus::Passed));
        assert_eq!(map.get("tests/a.py::t2"), Some(&TestStatus::Failed));
    }

    #[test]
    fn no_summary_means_no_result() {
        assert_eq!(parse_summary("ImportError: no module named pytest\n"), None);
    }
}

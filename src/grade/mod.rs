//! Grading test runs: structured reports and log parsers to per-test status, then verdicts.
//!
//! Definitions follow SWE-bench's harness, stricter where a patch could otherwise earn credit
//! without fixing anything: a FAIL_TO_PASS test succeeds only when it PASSED (skipped, xfailed,
//! failed, errored or missing is a failure, so `pytest.skip()` raised from library code earns
//! nothing); a PASS_TO_PASS test succeeds when it PASSED or XFAILed as before, and fails when it
//! failed, errored, is missing or was skipped. Rates are successes over (successes + failures),
//! 1 when both are empty; FULL when both rates are 1, PARTIAL when FAIL_TO_PASS is strictly
//! between 0 and 1 and PASS_TO_PASS is 1, NO otherwise; resolved means FULL.

pub mod channel;
pub mod junit;
pub mod pytest_log;
pub mod runners;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Status of one test, with SWE-bench's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestStatus {
    Passed,
    Failed,
    Skipped,
    Error,
    Xfail,
}

impl TestStatus {
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "PASSED" => Self::Passed,
            "FAILED" => Self::Failed,
            "SKIPPED" => Self::Skipped,
            "ERROR" => Self::Error,
            "XFAIL" => Self::Xfail,
            _ => return None,
        })
    }
}

/// Test id (pytest node id) to status.
pub type StatusMap = BTreeMap<String, TestStatus>;

fn passed(test: &str, map: &StatusMap) -> bool {
    matches!(map.get(test), Some(TestStatus::Passed | TestStatus::Xfail))
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuccessFailure {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

impl SuccessFailure {
    /// successes / (successes + failures); 1 when there is nothing to count.
    pub fn rate(&self) -> f64 {
        let total = self.success.len() + self.failure.len();
        if total == 0 {
            1.0
        } else {
            self.success.len() as f64 / total as f64
        }
    }
}

/// Per-test outcome for both lists, as SWE-bench reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: SuccessFailure,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: SuccessFailure,
}

/// Splits FAIL_TO_PASS and PASS_TO_PASS into successes and failures under `map`.
pub fn tests_status(fail_to_pass: &[String], pass_to_pass: &[String], map: &StatusMap) -> TestsStatus {
    let split = |tests: &[String], success: fn(Option<&TestStatus>) -> bool| {
        let mut out = SuccessFailure::default();
        for test in tests {
            if success(map.get(test)) {
                out.success.push(test.clone());
            } else {
                out.failure.push(test.clone());
            }
        }
        out
    };
    TestsStatus {
        fail_to_pass: split(fail_to_pass, |s| s == Some(&TestStatus::Passed)),
        pass_to_pass: split(pass_to_pass, |s| matches!(s, Some(TestStatus::Passed | TestStatus::Xfail))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Resolution {
    Full,
    Partial,
    No,
}

pub fn resolution(status: &TestsStatus) -> Resolution {
    let f2p = status.fail_to_pass.rate();
    let p2p = status.pass_to_pass.rate();
    if f2p == 1.0 && p2p == 1.0 {
        Resolution::Full
    } else if f2p < 1.0 && f2p > 0.0 && p2p == 1.0 {
        Resolution::Partial
    } else {
        Resolution::No
    }
}

/// Exactly one per instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Resolved,
    Unresolved,
    EmptyPatch,
    PatchApplyFailed,
    Timeout,
    /// The environment could not run the tests (not the patch's fault).
    EnvError,
    /// Our own failure or a broken task.
    Error,
}

impl Verdict {
    pub const ALL: [Verdict; 7] = [
        Self::Resolved,
        Self::Unresolved,
        Self::EmptyPatch,
        Self::PatchApplyFailed,
        Self::Timeout,
        Self::EnvError,
        Self::Error,
    ];

    /// What the verdict means, in a few words, for the console's first mention of it.
    pub fn gloss(self) -> &'static str {
        match self {
            Self::Resolved => "every FAIL_TO_PASS and PASS_TO_PASS test passed",
            Self::Unresolved => "the tests ran, but a required test failed",
            Self::EmptyPatch => "the model's answer contained no diff",
            Self::PatchApplyFailed => "the patch did not apply to the repository",
            Self::Timeout => "the tests ran past the time limit",
            Self::EnvError => "the environment could not run the tests; not the patch's fault",
            Self::Error => "repairbench itself failed on it; a rerun grades it again",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resolved => "resolved",
            Self::Unresolved => "unresolved",
            Self::EmptyPatch => "empty_patch",
            Self::PatchApplyFailed => "patch_apply_failed",
            Self::Timeout => "timeout",
            Self::EnvError => "env_error",
            Self::Error => "error",
        }
    }
}

/// Where the per-test statuses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusSource {
    /// The JUnit report signed by the harness plugin, checked against pytest's summary.
    Junit,
    /// Another runner's own output (libtest lines, `go test -json`, TAP, JUnit files it
    /// wrote), cross-checked but not signed.
    RunnerOutput,
}

/// Statuses after flaky reruns: PASS_TO_PASS tests that failed and then passed on a rerun
/// count as passing and are listed as flaky.
pub fn merge_reruns(
    first: &StatusMap,
    reruns: &[StatusMap],
    rerun_tests: &[String],
) -> (StatusMap, Vec<String>) {
    let mut merged = first.clone();
    let mut flaky = Vec::new();
    for test in rerun_tests {
        if reruns.iter().any(|run| passed(test, run)) {
            merged.insert(test.clone(), TestStatus::Passed);
            flaky.push(test.clone());
        }
    }
    (merged, flaky)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, TestStatus)]) -> StatusMap {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resolution_follows_swebench() {
        use TestStatus::*;
        let f2p = ids(&["t::a", "t::b"]);
        let p2p = ids(&["t::c"]);
        let full = tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Passed), ("t::c", Xfail)]));
        assert_eq!(resolution(&full), Resolution::Full);
        // An xfailed FAIL_TO_PASS test was not fixed.
        let xfail = tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Xfail), ("t::c", Passed)]));
        assert_eq!(xfail.fail_to_pass.failure, ids(&["t::b"]));
        let partial = tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Failed), ("t::c", Passed)]));
        assert_eq!(resolution(&partial), Resolution::Partial);
        assert_eq!(partial.fail_to_pass.failure, ids(&["t::b"]));
        // A missing test is a failure; a broken PASS_TO_PASS makes it NO even with F2P fixed.
        let broke = tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Passed)]));
        assert_eq!(broke.pass_to_pass.failure, ids(&["t::c"]));
        assert_eq!(resolution(&broke), Resolution::No);
        // Skipped is a failure on both lists (SWE-bench counts it as neither).
        let skipped =
            tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Skipped), ("t::c", Passed)]));
        assert_eq!(skipped.fail_to_pass, SuccessFailure { success: ids(&["t::a"]), failure: ids(&["t::b"]) });
        assert_eq!(resolution(&skipped), Resolution::Partial);
        let p2p_skipped =
            tests_status(&f2p, &p2p, &map(&[("t::a", Passed), ("t::b", Passed), ("t::c", Skipped)]));
        assert_eq!(resolution(&p2p_skipped), Resolution::No);
        let none = tests_status(&f2p, &p2p, &map(&[("t::c", Passed)]));
        assert_eq!(resolution(&none), Resolution::No);
    }

    #[test]
    fn reruns_turn_flips_into_flaky() {
        use TestStatus::*;
        let first = map(&[("t::a", Passed), ("t::b", Failed), ("t::c", Failed)]);
        let rerun = map(&[("t::b", Passed), ("t::c", Failed)]);
        let (merged, flaky) = merge_reruns(&first, &[rerun], &ids(&["t::b", "t::c"]));
        assert_eq!(flaky, ids(&["t::b"]));
        assert_eq!(merged.get("t::b"), Some(&Passed));
        assert_eq!(merged.get("t::c"), Some(&Failed));
    }
}

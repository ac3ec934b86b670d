//! From test runs to a verdict, as pure functions (no sandbox, no files), in the order grading
//! asks them: [`first_step`] reads the first run; when it gave nothing usable, the tests are
//! run without the prediction and [`after_base_check`] says whose fault it was; otherwise
//! failing PASS_TO_PASS tests are rerun and [`graded`] merges the reruns and grades.

use crate::grade::channel::Tampered;
use crate::grade::{self, Resolution, StatusMap, TestsStatus, Verdict};
use crate::sandbox;
use crate::tasks::SweTask;

/// What a finished test run said, reduced to what the verdict depends on.
#[derive(Debug, Clone)]
pub struct RunFacts {
    pub exec: sandbox::Verdict,
    /// Why the test runner itself could not run (not installed, usage error...).
    pub runner_broken: Option<String>,
    /// The statuses, when the signed report could be trusted.
    pub results: Result<StatusMap, Tampered>,
}

/// A verdict and everything the report says about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub verdict: Verdict,
    /// `results_tampered`, `tests_crashed`...
    pub reason: Option<&'static str>,
    pub detail: Option<String>,
    pub tests_status: TestsStatus,
    pub resolution: Resolution,
}

impl Outcome {
    fn new(verdict: Verdict, detail: Option<String>, task: &SweTask) -> Self {
        Self {
            verdict,
            reason: None,
            detail,
            tests_status: grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new()),
            resolution: Resolution::No,
        }
    }
}

/// What to do after the first run.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Done(Outcome),
    /// Nothing usable came back (`why`): run the tests without the prediction.
    CheckBase {
        why: String,
        note: Option<String>,
    },
    /// Statuses to grade, after rerunning `failing` PASS_TO_PASS tests.
    Grade {
        map: StatusMap,
        failing: Vec<String>,
        note: Option<String>,
    },
}

/// Reads the first run. `timeout_s` and `memory_bytes` only word the details.
pub fn first_step(task: &SweTask, facts: &RunFacts, timeout_s: f64, memory_bytes: u64) -> Step {
    let mut note = None;
    match &facts.exec {
        sandbox::Verdict::Timeout => {
            return Step::Done(Outcome::new(
                Verdict::Timeout,
                Some(format!("tests ran past {timeout_s} s")),
                task,
            ))
        }
        sandbox::Verdict::Error(why) => {
            return Step::Done(Outcome::new(Verdict::EnvError, Some(format!("sandbox: {why}")), task))
        }
        sandbox::Verdict::Oom => note = Some(format!("tests ran out of memory ({memory_bytes} bytes)")),
        sandbox::Verdict::Exit(_) => {}
    }
    match (&facts.results, &facts.runner_broken) {
        (Ok(map), None) if !map.is_empty() => {
            let failing =
                grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, map).pass_to_pass.failure;
            Step::Grade { map: map.clone(), failing, note }
        }
        (_, Some(why)) => Step::CheckBase { why: why.clone(), note },
        (Ok(_), None) => Step::CheckBase { why: "no test results with the prediction".into(), note },
        (Err(tampered), None) => Step::CheckBase { why: tampered.to_string(), note },
    }
}

fn with_note(note: Option<String>, text: String) -> Option<String> {
    Some(match note {
        Some(n) => format!("{n}; {text}"),
        None => text,
    })
}

/// The verdict when the first run gave nothing usable, given whether the tests run (and
/// PASS_TO_PASS holds) without the prediction.
pub fn after_base_check(
    task: &SweTask,
    facts: &RunFacts,
    why: &str,
    note: Option<String>,
    base_ok: bool,
) -> Outcome {
    if !base_ok {
        let detail = format!("{why}, and the tests do not run without the prediction either");
        return Outcome::new(Verdict::EnvError, Some(detail), task);
    }
    let killed = match facts.exec {
        sandbox::Verdict::Oom => true,
        sandbox::Verdict::Exit(code) => code >= 128,
        _ => false,
    };
    match &facts.results {
        Err(_) if killed => {
            let text = format!("the test process was killed ({}) before reporting", facts.exec);
            Outcome {
                reason: Some("tests_crashed"),
                ..Outcome::new(Verdict::Unresolved, with_note(note, text), task)
            }
        }
        Err(tampered) => {
            let text = format!("{tampered} (test command: {})", facts.exec);
            Outcome {
                reason: Some("results_tampered"),
                ..Outcome::new(Verdict::Error, with_note(note, text), task)
            }
        }
        Ok(_) => Outcome::new(
            Verdict::Unresolved,
            with_note(note, format!("{why} (the tests run without it)")),
            task,
        ),
    }
}

/// Grades `map` after merging `reruns` (each a whole run in a fresh environment) for the
/// `failing` PASS_TO_PASS tests; returns the outcome and the tests found flaky.
pub fn graded(
    task: &SweTask,
    map: &StatusMap,
    failing: &[String],
    reruns: &[StatusMap],
    note: Option<String>,
) -> (Outcome, Vec<String>) {
    let (merged, flaky) = grade::merge_reruns(map, reruns, failing);
    let tests_status = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &merged);
    let resolution = grade::resolution(&tests_status);
    let verdict = if resolution == Resolution::Full { Verdict::Resolved } else { Verdict::Unresolved };
    (Outcome { verdict, reason: None, detail: note, tests_status, resolution }, flaky)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grade::TestStatus::{Failed, Passed, Skipped};

    fn task() -> SweTask {
        serde_json::from_value(serde_json::json!({
            "repo": "acme/x", "instance_id": "acme__x-1", "base_commit": "abc", "test_patch": "",
            "FAIL_TO_PASS": ["t.py::f"], "PASS_TO_PASS": ["t.py::p"]
        }))
        .unwrap()
    }

    fn facts(exec: sandbox::Verdict, results: Result<StatusMap, Tampered>) -> RunFacts {
        RunFacts { exec, runner_broken: None, results }
    }

    fn map(entries: &[(&str, crate::grade::TestStatus)]) -> StatusMap {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn infrastructure_and_time_end_the_grading_at_once() {
        let t = task();
        let timeout = first_step(&t, &facts(sandbox::Verdict::Timeout, Err(Tampered::Missing)), 60.0, 1);
        assert!(matches!(timeout, Step::Done(Outcome { verdict: Verdict::Timeout, .. })));
        let broken =
            first_step(&t, &facts(sandbox::Verdict::Error("gone".into()), Ok(StatusMap::new())), 60.0, 1);
        assert!(matches!(broken, Step::Done(Outcome { verdict: Verdict::EnvError, .. })));
    }

    #[test]
    fn missing_or_forged_results_are_the_patch_s_fault_only_when_the_base_runs() {
        let t = task();
        let tampered = facts(sandbox::Verdict::Exit(0), Err(Tampered::Missing));
        let Step::CheckBase { why, note } = first_step(&t, &tampered, 60.0, 1) else { panic!("base check") };
        let outcome = after_base_check(&t, &tampered, &why, note.clone(), true);
        assert_eq!((outcome.verdict, outcome.reason), (Verdict::Error, Some("results_tampered")));
        assert_eq!(after_base_check(&t, &tampered, &why, note, false).verdict, Verdict::EnvError);

        let killed = facts(sandbox::Verdict::Exit(137), Err(Tampered::Missing));
        let outcome = after_base_check(&t, &killed, "x", None, true);
        assert_eq!((outcome.verdict, outcome.reason), (Verdict::Unresolved, Some("tests_crashed")));

        let nothing = facts(sandbox::Verdict::Exit(2), Ok(StatusMap::new()));
        let Step::CheckBase { why, note } = first_step(&t, &nothing, 60.0, 1) else { panic!("base check") };
        let outcome = after_base_check(&t, &nothing, &why, note, true);
        assert_eq!(outcome.verdict, Verdict::Unresolved);
        assert!(outcome.detail.unwrap().contains("tests run without it"));
    }

    #[test]
    fn grading_merges_whole_reruns_and_needs_real_passes() {
        let t = task();
        let first = map(&[("t.py::f", Passed), ("t.py::p", Failed)]);
        let run = facts(sandbox::Verdict::Exit(1), Ok(first.clone()));
        let Step::Grade { map: m, failing, note } = first_step(&t, &run, 60.0, 1) else { panic!("grade") };
        assert_eq!(failing, ["t.py::p"]);
        let (outcome, flaky) =
            graded(&t, &m, &failing, &[map(&[("t.py::f", Passed), ("t.py::p", Passed)])], note);
        assert_eq!((outcome.verdict, flaky), (Verdict::Resolved, vec!["t.py::p".to_string()]));
        let (outcome, flaky) = graded(&t, &m, &failing, &[map(&[("t.py::p", Failed)])], None);
        assert_eq!((outcome.verdict, flaky.len()), (Verdict::Unresolved, 0));
        let skipped = map(&[("t.py::f", Skipped), ("t.py::p", Passed)]);
        let (outcome, _) = graded(&t, &skipped, &[], &[], None);
        assert_eq!((outcome.verdict, outcome.resolution), (Verdict::Unresolved, Resolution::No));
    }
}

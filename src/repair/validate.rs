//! `swe validate`: is each instance of a dataset a fair task? Its gold patch must resolve it,
//! and without any patch (the tree with only test_patch, which is what an empty patch would
//! be graded on) every FAIL_TO_PASS test must fail while every PASS_TO_PASS test passes. Both
//! are ordinary grading runs ([`super::grade`]) into `OUT/gold` and `OUT/unpatched`; the
//! judgement is a pure function of their results.
//!
//! With `--perturb`, each variant is judged too: it is valid when its original is and when
//! [`super::perturb::variant_problems`] finds nothing, that is when everything grading reads
//! is its original's byte for byte (so its gold and unpatched runs are its original's: they are
//! not run again) and its statement changed only where prose may change.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::grade::Verdict;
use crate::report::{self, Reporter};
use crate::sandbox::Sandbox;
use crate::tasks::PredictionSource;

use super::{GradePlan, InstanceResult, RunError};

/// One instance's validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceValidation {
    pub instance_id: String,
    /// For a variant: the instance whose gold and unpatched runs it shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_of: Option<String>,
    pub valid: bool,
    /// Why not, one line each.
    pub problems: Vec<String>,
    pub gold_verdict: Verdict,
    pub unpatched_verdict: Verdict,
    /// FAIL_TO_PASS tests that pass without any patch (the task does not test the fix).
    pub fail_to_pass_passing_unpatched: Vec<String>,
    /// PASS_TO_PASS tests that fail without any patch.
    pub pass_to_pass_failing_unpatched: Vec<String>,
}

/// How a gold patch's problem begins; every other problem shows without any patch.
const GOLD_PROBLEM: &str = "gold does not resolve it";

impl InstanceValidation {
    /// The problems the tree shows without any patch (the gold patch's own are left out).
    pub fn unpatched_problems(&self) -> Vec<&str> {
        self.problems.iter().map(String::as_str).filter(|p| !p.starts_with(GOLD_PROBLEM)).collect()
    }
}

/// `validation.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidationReport {
    pub valid: usize,
    pub invalid: usize,
    pub instances: Vec<InstanceValidation>,
    /// Dataset records skipped as invalid (named in `gold/report.json`'s `skipped`).
    #[serde(default)]
    pub invalid_input: usize,
}

/// Judges one instance from its gold run and its unpatched run.
pub fn judge(gold: &InstanceResult, unpatched: &InstanceResult) -> InstanceValidation {
    let mut problems = Vec::new();
    if !gold.resolved {
        let why = gold.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
        problems.push(format!("{GOLD_PROBLEM} ({}){why}", gold.verdict.as_str()));
    }
    let ran = matches!(unpatched.verdict, Verdict::Resolved | Verdict::Unresolved);
    if !ran {
        let why = unpatched.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
        problems.push(format!("the tests do not run without a patch ({}){why}", unpatched.verdict.as_str()));
    }
    let status = &unpatched.tests_status;
    let f2p_passing = status.fail_to_pass.success.clone();
    let p2p_failing = if ran { status.pass_to_pass.failure.clone() } else { Vec::new() };
    if ran && !f2p_passing.is_empty() {
        problems.push(format!("FAIL_TO_PASS tests pass without the fix: {}", f2p_passing.join(", ")));
    }
    if !p2p_failing.is_empty() {
        problems.push(format!("PASS_TO_PASS tests fail without any patch: {}", p2p_failing.join(", ")));
    }
    InstanceValidation {
        instance_id: gold.instance_id.clone(),
        variant_of: None,
        valid: problems.is_empty(),
        problems,
        gold_verdict: gold.verdict,
        unpatched_verdict: unpatched.verdict,
        fail_to_pass_passing_unpatched: f2p_passing,
        pass_to_pass_failing_unpatched: p2p_failing,
    }
}

/// The unpatched pass reads the same dataset as the gold pass, which already showed its
/// skipped inputs.
struct WithoutSkips<'a>(&'a mut dyn Reporter<InstanceResult>);

impl Reporter<InstanceResult> for WithoutSkips<'_> {
    fn report(&mut self, event: &report::ResultEvent<InstanceResult>) -> Result<(), report::ReportError> {
        match event {
            report::ResultEvent::ItemSkipped(_) => Ok(()),
            other => self.0.report(other),
        }
    }
}

/// Grades gold and the unpatched tree for every instance of `plan` (whose `out` is the
/// validation folder), writes `validation.json` and returns the report.
pub async fn validate<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    plan: &GradePlan,
    reporter: &mut dyn Reporter<InstanceResult>,
) -> Result<ValidationReport, RunError> {
    let mut gold_plan = plan.clone();
    gold_plan.perturb = None;
    gold_plan.predictions = PredictionSource::Gold;
    gold_plan.out = plan.out.join("gold");
    let gold = super::grade(super::Grader::Local(sandbox.clone()), &gold_plan, reporter).await?;
    let mut unpatched_plan = gold_plan.clone();
    unpatched_plan.predictions = PredictionSource::Empty;
    unpatched_plan.settings.test_empty_patches = true;
    unpatched_plan.out = plan.out.join("unpatched");
    let unpatched =
        super::grade(super::Grader::Local(sandbox), &unpatched_plan, &mut WithoutSkips(reporter)).await?;
    let by_id: BTreeMap<&str, &InstanceResult> =
        unpatched.instances.iter().map(|r| (r.instance_id.as_str(), r)).collect();
    let mut instances: Vec<InstanceValidation> = gold
        .instances
        .iter()
        .filter_map(|g| by_id.get(g.instance_id.as_str()).map(|u| judge(g, u)))
        .collect();
    if let Some(spec) = &plan.perturb {
        let tasks = crate::tasks::load_tasks(&plan.dataset).map_err(RunError::Dataset)?.tasks;
        let judged: BTreeMap<String, InstanceValidation> =
            instances.iter().map(|v| (v.instance_id.clone(), v.clone())).collect();
        for original in tasks.iter().filter(|t| judged.contains_key(&t.instance_id)) {
            for variant in super::perturb::expand(vec![original.clone()], spec).into_iter().skip(1) {
                let mut judgement = judged[&original.instance_id].clone();
                judgement.problems.extend(super::perturb::variant_problems(original, &variant));
                judgement.valid = judgement.problems.is_empty();
                judgement.instance_id = variant.instance_id;
                judgement.variant_of = Some(original.instance_id.clone());
                instances.push(judgement);
            }
        }
    }
    let valid = instances.iter().filter(|i| i.valid).count();
    let validation = ValidationReport {
        valid,
        invalid: instances.len() - valid,
        instances,
        invalid_input: gold.summary.invalid_input,
    };
    report::write_json_atomic(&plan.out.join("validation.json"), &validation).map_err(RunError::Report)?;
    Ok(validation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grade::{SuccessFailure, TestsStatus};

    fn result(verdict: Verdict, f2p: (&[&str], &[&str]), p2p: (&[&str], &[&str])) -> InstanceResult {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut r = super::super::error_result("acme__x-1", String::new());
        r.verdict = verdict;
        r.resolved = verdict == Verdict::Resolved;
        r.detail = None;
        r.tests_status = TestsStatus {
            fail_to_pass: SuccessFailure { success: list(f2p.0), failure: list(f2p.1) },
            pass_to_pass: SuccessFailure { success: list(p2p.0), failure: list(p2p.1) },
        };
        r
    }

    #[test]
    fn a_fair_task_fails_without_the_fix_and_resolves_with_it() {
        let gold = result(Verdict::Resolved, (&["t::a"], &[]), (&["t::b"], &[]));
        let unpatched = result(Verdict::Unresolved, (&[], &["t::a"]), (&["t::b"], &[]));
        let v = judge(&gold, &unpatched);
        assert!(v.valid, "{v:?}");
    }

    #[test]
    fn tests_that_pass_without_the_fix_or_a_gold_that_fails_make_it_invalid() {
        let gold = result(Verdict::Unresolved, (&[], &["t::a"]), (&["t::b"], &[]));
        let unpatched = result(Verdict::Resolved, (&["t::a"], &[]), (&["t::b"], &[]));
        let v = judge(&gold, &unpatched);
        assert!(!v.valid);
        assert_eq!(v.fail_to_pass_passing_unpatched, ["t::a"]);
        assert_eq!(v.problems.len(), 2, "{:?}", v.problems);
        let broken = result(Verdict::EnvError, (&[], &["t::a"]), (&[], &["t::b"]));
        let v = judge(&result(Verdict::Resolved, (&["t::a"], &[]), (&["t::b"], &[])), &broken);
        assert!(!v.valid && v.problems[0].contains("do not run without a patch"), "{v:?}");
        assert!(v.pass_to_pass_failing_unpatched.is_empty(), "an environment error says nothing about P2P");
    }
}

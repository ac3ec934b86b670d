//! `repairbench run`, the main job. Before it judges the model, the harness proves itself on
//! the same inputs: every gold patch must resolve its issue, no issue may resolve without a
//! patch (its FAIL_TO_PASS tests fail, its PASS_TO_PASS tests pass: [`repair::validate`]), and
//! every canonical solution of the HumanEval slice must pass. A zero from a harness that passes
//! this check is the model's; from one that fails it, it means nothing, and the run says so.
//!
//! The controls do not depend on the model, so their records are kept in the cache and seeded
//! into the next run's folder, whatever it is; the kernel still matches each record by its
//! fingerprint (image, task, code), so a changed input is graded again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::config::RunConfig;
use super::index;
use super::pipeline::{
    code_runner, create_dir, grade_env_lifetime, grade_in, infer, load_model, to_json, ModelChoice,
    PipelineError, Session, CODE_ENV_LIFETIME, DEFAULT_CODE_WORKERS,
};
use crate::grade::Verdict;
use crate::kernel::interrupt;
use crate::model::{ModelInfo, Sampling};
use crate::repair::infer::InferPlan;
use crate::repair::validate::ValidationReport;
use crate::repair::{self, GradePlan, GradeReport, GradeSettings};
use crate::report::index::{write_index, RunIndex};
use crate::report::{ConsoleProgress, Reporter};
use crate::suites::{self, EvalSummary};
use crate::tasks::prompt::PromptSettings;
use crate::tasks::PredictionSource;

/// One control of the harness check: how many items came out as they must, and the others.
#[derive(Debug, Clone, Serialize)]
pub struct Control {
    /// Items that came out as they must (gold: resolved; no patch: failing as the task says;
    /// canonical: passed).
    pub as_expected: usize,
    pub total: usize,
    /// The others: (instance or problem, what happened).
    pub failures: Vec<(String, String)>,
}

impl Control {
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.as_expected == self.total
    }
}

/// The harness check: the bundled issues graded with their gold patches and with none, and the
/// HumanEval slice's canonical solutions run.
#[derive(Debug, Clone, Serialize)]
pub struct HarnessCheck {
    pub gold: Control,
    /// `as_expected` counts the issues that behave as their task says without a patch; the
    /// resolved ones are among the failures.
    pub no_patch: Control,
    /// Of the no-patch runs, how many resolved (must be 0).
    pub no_patch_resolved: usize,
    pub canonical: Control,
}

impl HarnessCheck {
    pub fn ok(&self) -> bool {
        self.gold.ok() && self.no_patch.ok() && self.canonical.ok()
    }

    /// Every instance or problem that did not come out as it must: `ID: what happened`.
    pub fn failures(&self) -> Vec<String> {
        [&self.gold, &self.no_patch, &self.canonical]
            .iter()
            .flat_map(|c| c.failures.iter().map(|(id, what)| format!("{id}: {what}")))
            .collect()
    }

    /// `gold 11/11 resolved, no-patch 0/11 resolved, canonical 5/5 passed`.
    pub fn summary(&self) -> String {
        format!(
            "gold {}/{} resolved, no-patch {}/{} resolved, canonical {}/{} passed",
            self.gold.as_expected,
            self.gold.total,
            self.no_patch_resolved,
            self.no_patch.total,
            self.canonical.as_expected,
            self.canonical.total
        )
    }

    fn of(validation: &ValidationReport, canonical: Control) -> Self {
        let total = validation.instances.len();
        let gold_failures: Vec<(String, String)> = validation
            .instances
            .iter()
            .filter(|i| i.gold_verdict != Verdict::Resolved)
            .map(|i| (i.instance_id.clone(), format!("gold patch: {}", i.gold_verdict.as_str())))
            .collect();
        let no_patch_failures: Vec<(String, String)> = validation
            .instances
            .iter()
            .filter_map(|i| {
                let problems = i.unpatched_problems();
                (!problems.is_empty()).then(|| {
                    let text = problems.join("; ");
                    (i.instance_id.clone(), format!("no patch: {} ({text})", i.unpatched_verdict.as_str()))
                })
            })
            .collect();
        Self {
            gold: Control { as_expected: total - gold_failures.len(), total, failures: gold_failures },
            no_patch: Control {
                as_expected: total - no_patch_failures.len(),
                total,
                failures: no_patch_failures,
            },
            no_patch_resolved: validation
                .instances
                .iter()
                .filter(|i| i.unpatched_verdict == Verdict::Resolved)
                .count(),
            canonical,
        }
    }
}

/// What `repairbench run` produced.
pub struct MainJobReport {
    pub check: HarnessCheck,
    pub check_out: PathBuf,
    pub model: ModelInfo,
    pub repair: GradeReport,
    pub repair_out: PathBuf,
    pub humaneval: EvalSummary,
}

/// `repairbench run`: the harness check, then the model repairs the configured issues and
/// solves the HumanEval slice, and every patch is graded. `workers`
/// (REPAIRBENCH_SANDBOX_WORKERS) replaces both the instances graded at once and the programs
/// run side by side.
/// `checked` is shown the harness check as soon as it is known, before the model loads.
pub fn main_job(
    config: &RunConfig,
    out: &Path,
    workers: Option<usize>,
    checked: &mut dyn FnMut(&HarnessCheck),
) -> Result<MainJobReport, PipelineError> {
    if !config.repair.dataset.exists() {
        return Err(PipelineError::NoDataset(config.repair.dataset.clone()));
    }
    let timeout = crate::deadline::timeout_secs(config.repair.timeout_s).map_err(PipelineError::Config)?;
    let repair_out = out.join("repair");
    let check_out = out.join("harness-check");
    create_dir(&repair_out)?;
    let mut settings = GradeSettings::new(String::new());
    settings.timeout = timeout;
    settings.workers = workers.unwrap_or(settings.workers);
    let session = Session::start(grade_env_lifetime(&settings).max(CODE_ENV_LIFETIME))?;
    (settings.image, settings.image_id) = session.image(None)?;
    let runner = code_runner(&session, workers.unwrap_or(DEFAULT_CODE_WORKERS))?;
    let mut plan = GradePlan {
        dataset: config.repair.dataset.clone(),
        predictions: PredictionSource::Gold,
        repos: None,
        url_template: None,
        cache_dir: crate::env::cache_dir(),
        out: check_out.join("issues"),
        settings,
        extra_manifest: Default::default(),
        force: false,
        specs: None,
        perturb: None,
    };

    // 1. The harness check; no model is loaded yet, so a broken harness shows in seconds.
    let kept = KeptControls::for_dataset(&config.repair.dataset);
    kept.seed(&check_out);
    let validated = {
        let mut progress = ConsoleProgress::new();
        let sandbox = Arc::new(session.sandbox.clone());
        let validate = repair::validate::validate(sandbox, &plan, &mut progress as &mut dyn Reporter<_>);
        session.runtime.block_on(interrupt::until_stopped(validate))?
    };
    let canonical_out = check_out.join("humaneval-canonical");
    let canonical = suites::humaneval_slice(None, &runner, config.humaneval.limit, &canonical_out)?;
    let check = HarnessCheck::of(&validated, canonical_control(&canonical));
    kept.keep(&check_out);
    checked(&check);

    // 2. The model writes a patch for each issue and solves the HumanEval slice.
    let sampling = Sampling { seed: config.seed, ..Sampling::GREEDY };
    let mut model = load_model(&ModelChoice::local(Some(config.model.clone())))?;
    let info: ModelInfo = model.info().clone();
    let predictions = repair_out.join("predictions.jsonl");
    infer(
        model.as_mut(),
        &InferPlan {
            dataset: config.repair.dataset.clone(),
            repos: None,
            url_template: None,
            cache_dir: crate::env::cache_dir(),
            out: predictions.clone(),
            prompt: PromptSettings {
                retrieval: config.repair.retrieval,
                max_files: config.repair.max_files,
                max_file_chars: config.repair.max_file_chars,
            },
            max_tokens: config.repair.max_tokens,
            sampling,
            force: false,
            only: None,
            perturb: None,
        },
    )?;
    let humaneval = suites::humaneval_slice(
        Some(model.as_mut()),
        &runner,
        config.humaneval.limit,
        &out.join("humaneval"),
    )?;
    drop((runner, model));

    // 3. Each patch is graded in the sandbox.
    plan.predictions = PredictionSource::File(predictions);
    plan.out = repair_out.clone();
    plan.extra_manifest.insert("model".into(), to_json(&info));
    plan.extra_manifest.insert("run_config".into(), to_json(config));
    let repair = grade_in(&session, &plan)?;
    let index = RunIndex {
        title: "repairbench run".into(),
        facts: [index::model_facts(&info), index::machine_facts()].concat(),
        configuration: toml::to_string_pretty(config).unwrap_or_default(),
        check: Some(index::check_line(&check)),
        parts: vec![index::repair_part(&repair, "repair"), index::suite_part(&humaneval, "humaneval")],
    };
    write_index(out, &index).map_err(|source| PipelineError::Index(Box::new(source)))?;
    Ok(MainJobReport { check, check_out, model: info, repair, repair_out, humaneval })
}

/// The canonical control from the slice's records: each problem's solution passed or not.
fn canonical_control(slice: &EvalSummary) -> Control {
    let failures: Vec<(String, String)> = slice
        .records
        .values()
        .filter(|r| r.scores.get("pass@1").copied().unwrap_or(0.0) < 1.0)
        .map(|r| {
            let status = r.outputs.first().and_then(|o| o.status);
            let what = status.map_or_else(|| "no result".to_owned(), |s| format!("{s:?}").to_lowercase());
            (r.doc_id.clone(), format!("canonical solution: {what}"))
        })
        .collect();
    Control { as_expected: slice.records.len() - failures.len(), total: slice.records.len(), failures }
}

/// The controls' records kept between runs, under the cache, one folder per dataset.
struct KeptControls {
    dir: PathBuf,
}

/// What a control folder holds that a later run can reuse: its records and their logs.
const KEPT: [&str; 5] = [
    "issues/gold/results.jsonl",
    "issues/gold/logs",
    "issues/unpatched/results.jsonl",
    "issues/unpatched/logs",
    "humaneval-canonical/samples.jsonl",
];

impl KeptControls {
    fn for_dataset(dataset: &Path) -> Self {
        let absolute = std::fs::canonicalize(dataset).unwrap_or_else(|_| dataset.to_owned());
        let key = crate::digest::sha256_hex(absolute.to_string_lossy().as_bytes());
        Self { dir: crate::env::cache_dir().join("harness-check").join(&key[..16]) }
    }

    /// Copies the kept records into `out` where it has none of its own.
    fn seed(&self, out: &Path) {
        for part in KEPT {
            if !out.join(part).exists() && self.dir.join(part).exists() {
                if let Err(e) = copy_tree(&self.dir.join(part), &out.join(part)) {
                    tracing::warn!("seeding the harness check from {}: {e}", self.dir.display());
                }
            }
        }
    }

    /// Keeps `out`'s records for the next run (a failure only costs that run the time).
    fn keep(&self, out: &Path) {
        for part in KEPT {
            if out.join(part).exists() {
                let _ = std::fs::remove_dir_all(self.dir.join(part));
                if let Err(e) = copy_tree(&out.join(part), &self.dir.join(part)) {
                    tracing::warn!("keeping the harness check in {}: {e}", self.dir.display());
                }
            }
        }
    }
}

/// Copies a file, or a folder with everything under it.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.map_err(std::io::Error::other)?;
        let below = entry.path().strip_prefix(from).map_err(std::io::Error::other)?;
        // `from` itself is a plain file when nothing is below it; joining "" would add a slash.
        let target = if below.as_os_str().is_empty() { to.to_owned() } else { to.join(below) };
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if entry.file_type().is_file() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::validate::InstanceValidation;

    fn instance(id: &str, gold: Verdict, unpatched: Verdict, problems: &[&str]) -> InstanceValidation {
        InstanceValidation {
            instance_id: id.into(),
            variant_of: None,
            valid: problems.is_empty(),
            problems: problems.iter().map(|p| p.to_string()).collect(),
            gold_verdict: gold,
            unpatched_verdict: unpatched,
            fail_to_pass_passing_unpatched: Vec::new(),
            pass_to_pass_failing_unpatched: Vec::new(),
        }
    }

    #[test]
    fn the_check_fails_on_a_gold_that_does_not_resolve_or_a_task_that_resolves_unpatched() {
        let passed = Control { as_expected: 2, total: 2, failures: Vec::new() };
        let sound = ValidationReport {
            valid: 2,
            invalid: 0,
            invalid_input: 0,
            instances: vec![
                instance("a", Verdict::Resolved, Verdict::Unresolved, &[]),
                instance("b", Verdict::Resolved, Verdict::Unresolved, &[]),
            ],
        };
        let check = HarnessCheck::of(&sound, passed.clone());
        assert!(check.ok());
        assert_eq!(check.summary(), "gold 2/2 resolved, no-patch 0/2 resolved, canonical 2/2 passed");

        let broken = ValidationReport {
            valid: 0,
            invalid: 2,
            invalid_input: 0,
            instances: vec![
                instance(
                    "a",
                    Verdict::EnvError,
                    Verdict::EnvError,
                    &[
                        "gold does not resolve it (env_error)",
                        "the tests do not run without a patch (env_error)",
                    ],
                ),
                instance(
                    "b",
                    Verdict::Resolved,
                    Verdict::Resolved,
                    &["FAIL_TO_PASS tests pass without the fix: t"],
                ),
            ],
        };
        let check = HarnessCheck::of(&broken, passed);
        assert!(!check.ok());
        assert_eq!(check.summary(), "gold 1/2 resolved, no-patch 1/2 resolved, canonical 2/2 passed");
        assert_eq!(check.gold.failures, vec![("a".to_owned(), "gold patch: env_error".to_owned())]);
        let no_patch: Vec<&str> = check.no_patch.failures.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(no_patch, ["a", "b"]);
        assert!(check.no_patch.failures[1].1.contains("FAIL_TO_PASS tests pass without the fix"));
    }

    #[test]
    fn a_canonical_solution_that_fails_fails_the_check() {
        let sound = ValidationReport { valid: 0, invalid: 0, invalid_input: 0, instances: Vec::new() };
        let failed = Control { as_expected: 4, total: 5, failures: vec![("HumanEval/3".into(), "x".into())] };
        assert!(!HarnessCheck::of(&sound, failed).ok());
    }
}

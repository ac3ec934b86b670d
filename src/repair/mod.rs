//! Grading SWE-bench-style predictions: per instance, apply the prediction to the base
//! commit's tree (recording how), put back what it changed of the test infrastructure, apply
//! test_patch ([`prepare`]), run the tests in the sandbox, accept only signed results that agree
//! with pytest's summary, rerun the whole command in fresh environments for failing
//! PASS_TO_PASS tests to catch flaky ones, and give one verdict ([`execute`]). Instances run concurrently; one failing never stops the others.
//! Every finished instance is appended to `results.jsonl`; a rerun with the same output folder
//! keeps those whose inputs are unchanged.

pub mod environment;
mod execute;
pub mod harvest;
pub mod html;
mod imports;
pub mod infer;
pub mod perturb;
pub mod prebuild;
mod prepare;
pub mod remote;
pub mod reports;
pub mod runners;
pub mod services;
pub mod validate;
pub mod verdict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::grade::{self, Resolution, StatusMap, StatusSource, TestsStatus, Verdict};
use crate::patch::{protect::Tampering, ApplyMethod};
use crate::report::{self, Fanout, FinalWriter, Reporter, RunRecords, Tally};
use crate::sandbox::{EnvSpec, Limits, Sandbox};
use crate::tasks::{self, Prediction, PredictionSource, RepoLocator, Skipped, SweTask};

use crate::kernel::fingerprint::{Fingerprint, FingerprintBuilder};
use crate::kernel::store::StoredRecord;
use crate::kernel::Kernel;

/// Where the sandbox user's workspace is.
const WORKSPACE: &str = "/workspace";

/// Settings that change results; all recorded in the manifest, most in each input hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GradeSettings {
    /// Image tests run in unless the task's `environment.image` says otherwise.
    pub image: String,
    /// Its content id, when known (recorded in the manifest).
    pub image_id: Option<String>,
    pub timeout: Duration,
    pub workers: usize,
    /// How many times failing PASS_TO_PASS tests are rerun before they count against the patch.
    pub flaky_reruns: usize,
    pub limits: Limits,
    /// Run the tests for an empty prediction too (on the tree with only test_patch) instead of
    /// giving `empty_patch` unrun: what `swe validate` needs.
    #[serde(default)]
    pub test_empty_patches: bool,
}

impl GradeSettings {
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            image_id: None,
            timeout: Duration::from_secs(1800),
            workers: default_workers(),
            flaky_reruns: 2,
            limits: Limits::default(),
            test_empty_patches: false,
        }
    }
}

/// Workers by default: one per two cores, at least one (each runs a container and git work).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Everything `swe grade` needs.
#[derive(Debug, Clone)]
pub struct GradePlan {
    pub dataset: PathBuf,
    pub predictions: PredictionSource,
    pub repos: Option<PathBuf>,
    pub url_template: Option<String>,
    pub cache_dir: PathBuf,
    pub out: PathBuf,
    pub settings: GradeSettings,
    /// Extra manifest entries (model info and inference settings when the model ran).
    pub extra_manifest: BTreeMap<String, serde_json::Value>,
    /// Grade everything again, reusing no earlier result.
    pub force: bool,
    /// Environment specs per repository and version (`--specs`), for tasks without their own.
    pub specs: Option<PathBuf>,
    /// Grade each task's variants too (`--perturb`), each against its own prediction.
    pub perturb: Option<perturb::SwePerturbSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("loading the dataset")]
    Dataset(#[source] tasks::LoadError),
    #[error("loading the predictions")]
    Predictions(#[source] tasks::LoadError),
    #[error("loading the environment specs")]
    Specs(#[source] tasks::specs::SpecsError),
    #[error("writing results")]
    Report(#[source] report::ReportError),
    #[error("harvesting tasks")]
    Harvest(#[source] harvest::HarvestError),
    #[error("grading on the cluster")]
    Executor(#[source] crate::executor::ExecutorError),
}

/// Where a grading run's instances are graded: in this machine's sandbox, or on a Ray
/// cluster (whose workers grade in theirs).
pub enum Grader<S> {
    Local(Arc<S>),
    Ray(Box<crate::executor::RayRun>),
}

/// Time spent in each stage of one instance, in seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    pub prepare_s: f64,
    /// Planning the environment and building its image when it was missing.
    #[serde(default)]
    pub environment_s: f64,
    pub tests_s: f64,
    pub reruns_s: f64,
    pub total_s: f64,
}

/// One graded instance: a line of `results.jsonl` and an entry of `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceResult {
    pub instance_id: String,
    pub verdict: Verdict,
    pub resolved: bool,
    pub resolution: Resolution,
    pub patch_applied: bool,
    pub apply_method: Option<ApplyMethod>,
    pub tests_status: TestsStatus,
    /// PASS_TO_PASS tests that failed and then passed on a rerun (not held against the patch).
    pub flaky_tests: Vec<String>,
    /// Changes of the prediction to the test infrastructure, each put back before the tests
    /// ran, with the rule that protects the path.
    #[serde(default)]
    pub tampering: Vec<Tampering>,
    pub status_source: Option<StatusSource>,
    /// The test runner (`pytest`, `cargo`, `go`, `node`, `junit`, `django`, `sympy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<grade::runners::RunnerKind>,
    /// For a Python runner in a built environment: the Python chosen and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// For a built Python environment: the time its packages were resolved as of (the
    /// environment commit's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_as_of: Option<String>,
    /// The `--specs` entry the task's environment came from (`django/django 3.0 (swebench 4.1.0)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_spec: Option<String>,
    /// The repository's CI jobs the task selected, each also graded as `ci:JOB`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ci_jobs: Vec<runners::CiOutcome>,
    /// What the task's services did in the first test run: readiness time, exit, crash, log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<services::ServiceOutcome>,
    /// How the test command ended (`exit 1`, `timeout`, ...).
    pub test_exit: Option<String>,
    /// Why, for every verdict other than resolved/unresolved (and notes for those).
    pub detail: Option<String>,
    /// A machine-readable reason where one verdict has several causes: `unsafe_path`
    /// (patch_apply_failed), `results_tampered` (error), `tests_crashed` (unresolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub model_name_or_path: Option<String>,
    /// In a perturbed run: which variant this is, and the answer robustness compares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perturbation: Option<perturb::PerturbedResult>,
    /// Everything that decided this result; resume recomputes it when any part changes.
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    pub timings: Timings,
    /// Folder with this instance's patch, test output and report, relative to the output.
    pub log_dir: String,
}

/// Everything that decides the grade of `prediction` on `task`.
pub fn fingerprint(task: &SweTask, prediction: &Prediction, settings: &GradeSettings) -> Fingerprint {
    let image =
        task.environment.as_ref().and_then(|e| e.image.clone()).unwrap_or_else(|| settings.image.clone());
    let mut builder = FingerprintBuilder::new()
        .value("task", task)
        .bytes("prediction", prediction.patch().as_bytes())
        .id("image", settings.image_id.as_deref().filter(|_| image == settings.image).unwrap_or(&image))
        .value(
            "settings",
            &(
                settings.timeout.as_secs_f64(),
                settings.flaky_reruns,
                &settings.limits,
                settings.test_empty_patches,
            ),
        );
    if let Some(bundle) = &task.bundle {
        builder = builder.bytes("repository", &std::fs::read(bundle).unwrap_or_default());
    }
    builder.finish()
}

impl StoredRecord for InstanceResult {
    fn key(&self) -> String {
        self.instance_id.clone()
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.clone()
    }

    fn is_infrastructure_failure(&self) -> bool {
        matches!(self.verdict, Verdict::Error | Verdict::EnvError)
    }
}

pub use crate::tasks::safe_name;
pub use prebuild::{environment_image, EnvironmentImage};
pub use reports::{GradeReport, Summary};

/// Grades every prediction of `plan`, writing `results.jsonl` as it goes, then `report.json`
/// and `manifest.json`. Returns the report.
pub async fn grade<S: Sandbox + 'static>(
    grader: Grader<S>,
    plan: &GradePlan,
    reporter: &mut dyn Reporter<InstanceResult>,
) -> Result<GradeReport, RunError> {
    let mut task_set = tasks::load_tasks(&plan.dataset).map_err(RunError::Dataset)?;
    if let Some(path) = &plan.specs {
        let specs = tasks::specs::SpecsFile::load(path).map_err(RunError::Specs)?;
        let applied = specs.apply(&mut task_set.tasks);
        tracing::info!(target: crate::PROGRESS, "{applied} of {} tasks take their environment from {}", task_set.tasks.len(), path.display());
    }
    if let Some(spec) = &plan.perturb {
        task_set.tasks = perturb::expand(std::mem::take(&mut task_set.tasks), spec);
    }
    let prediction_set =
        tasks::load_predictions(&plan.predictions, &task_set.tasks).map_err(RunError::Predictions)?;
    let mut skipped: Vec<Skipped> = task_set.skipped.clone();
    skipped.extend(prediction_set.skipped.iter().cloned());
    let mut work = Vec::new();
    for task in &task_set.tasks {
        match prediction_set.by_instance.get(&task.instance_id) {
            Some(prediction) => work.push((task.clone(), prediction.clone())),
            None => skipped.push(Skipped::new(
                task.origin.clone(),
                Some(task.instance_id.clone()),
                "no prediction for this instance".into(),
            )),
        }
    }

    std::fs::create_dir_all(&plan.out)
        .map_err(|source| RunError::Report(report::ReportError::Write { path: plan.out.clone(), source }))?;
    reports::write_manifest(plan, &task_set.tasks).map_err(RunError::Report)?;
    let out = plan.out.clone();
    // report.json, then its views (report.md, junit.xml, report.html): the final files, each a
    // subscriber of the run.
    let mut report_json = FinalWriter::new(|run: &RunRecords<InstanceResult>| {
        report::write_json_atomic(&out.join("report.json"), &GradeReport::from_run(run))
    });
    let mut views = FinalWriter::new(|run: &RunRecords<InstanceResult>| {
        reports::write_views(&GradeReport::from_run(run), &out)
    });
    // On a cluster the package is made first: repository bundles that stay here leave the
    // tasks, and so their fingerprints, before those are computed.
    let shipment = match &grader {
        Grader::Ray(grading) => {
            let shipment = remote::package(grading, plan, &mut work)?;
            let repositories = shipment.manifest_entry(&plan.repos, &plan.url_template);
            reports::add_to_manifest(&plan.out, "repositories", &repositories).map_err(RunError::Report)?;
            Some(shipment)
        }
        Grader::Local(_) => None,
    };
    let mut subscribers = Fanout::new(vec![&mut report_json, &mut views, reporter]);
    let mut kernel = Kernel::open("swe grade", &plan.out.join("results.jsonl"), plan.force, &mut subscribers)
        .map_err(RunError::Report)?;
    let todo = kernel
        .plan(work.clone(), |(task, prediction)| {
            (task.instance_id.clone(), fingerprint(task, prediction, &plan.settings))
        })
        .map_err(RunError::Report)?;
    for skip in &skipped {
        kernel.report(&skip.event()).map_err(RunError::Report)?;
    }

    let sandbox = match grader {
        Grader::Local(sandbox) => sandbox,
        Grader::Ray(grading) => {
            // The coordinator waits on the cluster: the runtime's other tasks go on meanwhile.
            let dispatched = tokio::task::block_in_place(|| {
                let shipment = shipment.as_ref().expect("made above for a cluster");
                remote::grade_on_ray(&grading, &mut kernel, todo, shipment, plan)
            })?;
            reports::add_to_manifest(&plan.out, "executor", &grading.manifest_entry(&dispatched))
                .map_err(RunError::Report)?;
            return finish_grade(kernel);
        }
    };
    let locator =
        Arc::new(RepoLocator::new(plan.repos.clone(), plan.url_template.clone(), plan.cache_dir.clone()));
    let settings = Arc::new(plan.settings.clone());
    let out = Arc::new(plan.out.clone());
    let perturbed = plan.perturb.is_some();
    kernel
        .run_concurrently(
            todo,
            plan.settings.workers,
            |(task, _)| task.instance_id.clone(),
            |(task, prediction), fingerprint| {
                let (sandbox, locator, settings, out) =
                    (sandbox.clone(), locator.clone(), settings.clone(), out.clone());
                let perturbation = perturbed.then(|| perturb::perturbed_result(&task, &prediction));
                async move {
                    let mut result =
                        grade_instance(sandbox, &locator, &settings, &out, task, prediction, fingerprint)
                            .await;
                    result.perturbation = perturbation;
                    result
                }
            },
            // A panic in one instance is that instance's error, not the run's end.
            error_result,
            |result| (result.verdict.as_str().to_owned(), result.resolved),
        )
        .await
        .map_err(RunError::Report)?;
    finish_grade(kernel)
}

/// Ends a grading run with its verdict counts.
fn finish_grade(kernel: Kernel<'_, InstanceResult>) -> Result<GradeReport, RunError> {
    let verdict_counts = |records: &BTreeMap<String, InstanceResult>| {
        let mut counts = BTreeMap::new();
        for r in records.values() {
            *counts.entry(r.verdict.as_str().to_owned()).or_default() += 1;
        }
        let parts: Vec<String> = Verdict::ALL
            .iter()
            .filter_map(|v| {
                counts.get(v.as_str()).map(|n| format!("{n} {}", report::glossed(v.as_str(), v.gloss())))
            })
            .collect();
        let words = format!("graded {} instance(s): {}", records.len(), parts.join(", "));
        Tally { counts, words }
    };
    let run = kernel.finish_with(verdict_counts).map_err(RunError::Report)?;
    Ok(GradeReport::from_run(&run))
}

fn error_result(id: &str, detail: String) -> InstanceResult {
    InstanceResult {
        instance_id: id.to_owned(),
        verdict: Verdict::Error,
        resolved: false,
        resolution: Resolution::No,
        patch_applied: false,
        apply_method: None,
        tests_status: TestsStatus::default(),
        flaky_tests: Vec::new(),
        tampering: Vec::new(),
        status_source: None,
        runner: None,
        python: None,
        packages_as_of: None,
        environment_spec: None,
        ci_jobs: Vec::new(),
        services: Vec::new(),
        test_exit: None,
        detail: Some(detail),
        reason: None,
        model_name_or_path: None,
        perturbation: None,
        fingerprint: None,
        timings: Timings::default(),
        log_dir: format!("logs/{}", safe_name(id)),
    }
}

/// The image `task`'s tests run in: its own, the run's, or one built from its repository
/// (the build log goes to `environment_build.log`). Errors are `(reason, detail)`.
async fn grade_instance<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    locator: &Arc<RepoLocator>,
    settings: &GradeSettings,
    out: &Path,
    task: SweTask,
    prediction: Prediction,
    fingerprint: Fingerprint,
) -> InstanceResult {
    let started = Instant::now();
    let log_rel = format!("logs/{}", safe_name(&task.instance_id));
    let log_dir = out.join(&log_rel);
    let _ = std::fs::create_dir_all(&log_dir);
    let _ = std::fs::write(log_dir.join("model.patch"), prediction.patch());
    let mut result = error_result(&task.instance_id, String::new());
    result.detail = None;
    result.fingerprint = Some(fingerprint);
    result.log_dir = log_rel;
    result.model_name_or_path = prediction.model_name_or_path.clone();
    let finish = |mut result: InstanceResult, started: Instant| {
        result.timings.total_s = started.elapsed().as_secs_f64();
        result.resolved = result.verdict == Verdict::Resolved;
        let _ = std::fs::write(
            log_dir.join("result.json"),
            serde_json::to_string_pretty(&result).unwrap_or_default(),
        );
        result
    };

    let unpatched = prediction.patch().trim().is_empty();
    if unpatched && !settings.test_empty_patches {
        result.verdict = Verdict::EmptyPatch;
        result.detail = Some("the prediction has no patch; nothing was run".into());
        result.tests_status = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
        return finish(result, started);
    }

    let ci_jobs = {
        let (locator, task) = (locator.clone(), task.clone());
        tokio::task::spawn_blocking(move || prepare::ci_jobs(&locator, &task)).await
    };
    let ci_jobs = match ci_jobs {
        Ok(Ok(jobs)) => jobs,
        Ok(Err(why)) => {
            result.detail = Some(format!("CI jobs: {why}"));
            return finish(result, started);
        }
        Err(e) => {
            result.detail = Some(format!("internal error while reading CI jobs: {e}"));
            return finish(result, started);
        }
    };
    // A prediction may not add a module that runs in place of a tool a CI job runs.
    let tools: std::collections::BTreeSet<String> =
        ci_jobs.iter().flat_map(|job| job.tool_modules()).collect();
    let prepared = {
        let (locator, task, patch_text) = (locator.clone(), task.clone(), prediction.patch().to_owned());
        let patch = (!unpatched).then_some(patch_text);
        tokio::task::spawn_blocking(move || prepare::prepare(&locator, &task, patch.as_deref(), &tools)).await
    };
    result.timings.prepare_s = started.elapsed().as_secs_f64();
    let prepared = match prepared {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(prepare::PrepareError::Apply { why, reason, tampering })) => {
            let _ = std::fs::write(log_dir.join("apply.log"), &why);
            result.verdict = Verdict::PatchApplyFailed;
            result.reason = reason.map(str::to_owned);
            result.tampering = tampering;
            result.detail = Some(why);
            result.tests_status =
                grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
            return finish(result, started);
        }
        Ok(Err(prepare::PrepareError::Task(why))) => {
            result.detail = Some(crate::error_chain(&why));
            return finish(result, started);
        }
        Err(e) => {
            result.detail = Some(format!("internal error while preparing: {e}"));
            return finish(result, started);
        }
    };
    let _ = std::fs::write(log_dir.join("apply.log"), prepared.apply_log.join("\n"));
    result.patch_applied = true;
    result.apply_method = prepared.apply_method;
    result.tampering = prepared.tampering.clone();

    let environment_started = Instant::now();
    let (EnvironmentImage { image, runner, python, packages_as_of }, task) =
        match services::environment_and_services(&*sandbox, locator, settings, &task, &log_dir).await {
            Ok(found) => found,
            Err((reason, why)) => {
                result.verdict = Verdict::EnvError;
                result.reason = Some(reason.to_owned());
                result.detail = Some(why);
                result.timings.environment_s = environment_started.elapsed().as_secs_f64();
                return finish(result, started);
            }
        };
    result.timings.environment_s = environment_started.elapsed().as_secs_f64();
    (result.runner, result.python, result.packages_as_of) = (Some(runner), python, packages_as_of);
    result.environment_spec = task.environment_spec.clone();
    let spec = EnvSpec {
        image,
        limits: settings.limits.clone(),
        workdir: WORKSPACE.into(),
        env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
        user: Default::default(),
    };
    // pytest runs the files test_patch touches and those the graded test ids name.
    let test_files: Vec<String> = prepare::task_test_files(&task)
        .into_iter()
        .filter(|f| !runner.is_python() || f.ends_with(".py"))
        .collect();
    let plan = execute::TestPlan {
        spec: &spec,
        task: &task,
        test_files: &test_files,
        timeout: settings.timeout,
        runner,
        ci_jobs: &ci_jobs,
        log_dir: &log_dir,
    };
    match plan.command() {
        Ok(command) => {
            let _ = std::fs::write(log_dir.join("test_command.txt"), command);
        }
        Err(e) => {
            result.detail = Some(format!("the task's tests cannot be run: {e}"));
            return finish(result, started);
        }
    }
    let tests_started = Instant::now();
    let first = plan.run(&*sandbox, &prepared.tar).await;
    result.timings.tests_s = tests_started.elapsed().as_secs_f64();
    let base_tar = {
        let (locator, task) = (locator.clone(), task.clone());
        move || prepare::prepare(&locator, &task, None, &Default::default()).ok().map(|p| p.tar)
    };
    let context = execute::Evaluation {
        sandbox: &*sandbox,
        plan,
        flaky_reruns: settings.flaky_reruns,
        log_dir: &log_dir,
        base_tar: &base_tar,
    };
    let result = execute::evaluate(&context, &prepared.tar, first, result).await;
    finish(result, started)
}

//! The orchestration of every run command (`swe grade`, `swe infer`, `swe run`, `eval`,
//! `run`): the CLI resolves its flags into a plan once, and this connects to Docker, resolves
//! the image, watches for signals ([`crate::kernel::interrupt`]) and orders the phases.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::model::{Engine, LanguageModel, ModelError, ModelInfo};
use crate::report::{ConsoleProgress, Reporter};
use crate::sandbox::{images, DockerSandbox, ImageError, SandboxError};
use crate::suites::{self, EvalOptions, EvalSummary, Suite, SuiteError, SuiteKind};
use crate::tasks::PredictionSource;

pub use super::cluster::{
    check_cluster, eval_worker, grade_worker, infer_worker, model_worker_flags, Executor,
};
use super::cluster::{connect_cluster, eval_worker_args};
use crate::kernel::interrupt;
use crate::repair::infer::{self, InferPlan, InferSummary};
use crate::repair::{self, GradePlan, GradeReport, GradeSettings};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("the sandbox failed")]
    Sandbox(#[from] SandboxError),
    #[error("preparing the default sandbox image")]
    DefaultImage(#[source] ImageError),
    #[error("image {0} is not in the Docker engine (build it, or check the --image name)")]
    ImageMissing(String),
    #[error("this node lacks the coordinator's image {wanted}, and building it here gave {built} (a base built elsewhere is not byte-identical): load the coordinator's images on each node (docker save there, docker load here)")]
    NodeLacksImage { wanted: String, built: String },
    #[error("checking image {image}")]
    ImageCheck {
        image: String,
        #[source]
        source: ImageError,
    },
    #[error("writing the run's index.html")]
    Index(#[source] Box<crate::report::ReportError>),
    #[error("loading model {model}")]
    Model {
        model: String,
        #[source]
        source: Box<ModelError>,
    },
    #[error("model {model} is not the coordinator's: its hash is {found}, the coordinator's {expected}")]
    OtherModel { model: String, found: String, expected: String },
    #[error("connecting to {model}")]
    Remote {
        model: String,
        #[source]
        source: Box<crate::model::openai::RemoteError>,
    },
    #[error("creating {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("repair dataset {0} not found (run from the repository root, or set [repair] dataset in a --config file)")]
    NoDataset(PathBuf),
    #[error("code repair failed")]
    Swe(#[from] repair::RunError),
    #[error("the suite failed")]
    Suite(#[from] SuiteError),
    #[error("invalid run configuration")]
    Config(#[source] crate::deadline::BadTimeout),
    #[error("using the Ray cluster")]
    Executor(#[from] crate::executor::ExecutorError),
}

/// How a finished run went, beyond its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Completion {
    /// Every item got a real result.
    Clean,
    /// Input records were left out because they were wrong (a line that does not parse, an
    /// unusable id, a prediction for no task); the summary names each by file and line.
    InvalidInput,
    /// Some items ended in infrastructure errors (SWE `error`/`env_error`, suite harness
    /// errors): the numbers are incomplete, and a rerun recomputes those items.
    InfrastructureErrors,
}

impl Completion {
    pub fn of_grade(report: &GradeReport) -> Self {
        // Over every graded result: a perturbed run's variants are not in the summary.
        if report.instances.iter().any(crate::kernel::store::StoredRecord::is_infrastructure_failure) {
            Self::InfrastructureErrors
        } else if report.summary.invalid_input > 0 {
            Self::InvalidInput
        } else {
            Self::Clean
        }
    }

    pub fn of_eval(summary: &EvalSummary) -> Self {
        match summary.metrics.get("harness_errors") {
            Some(m) if m.sum > 0.0 => Self::InfrastructureErrors,
            _ => Self::Clean,
        }
    }

    pub fn of_probe(summary: &crate::probe::ProbeSummary) -> Self {
        if summary.infrastructure_errors > 0 {
            Self::InfrastructureErrors
        } else if !summary.skipped.is_empty() {
            Self::InvalidInput
        } else {
            Self::Clean
        }
    }

    /// The worse of two (infrastructure errors before invalid input before clean).
    pub fn and(self, other: Self) -> Self {
        self.max(other)
    }
}

/// A connected sandbox, watched for signals, with the runtime its calls run on.
pub(super) struct Session {
    pub(super) runtime: tokio::runtime::Runtime,
    pub(super) sandbox: DockerSandbox,
}

impl Session {
    /// Connects (which reaps what dead runs left) and watches the run for signals.
    pub(super) fn connect() -> Result<Self, PipelineError> {
        let runtime = tokio::runtime::Runtime::new().map_err(PipelineError::Runtime)?;
        let sandbox = runtime.block_on(interrupt::until_stopped(DockerSandbox::connect()))?;
        interrupt::watch(&sandbox);
        Ok(Self { runtime, sandbox })
    }

    /// [`Self::connect`], with `env_lifetime` bounding how long any environment container of
    /// this run can live.
    pub(super) fn start(env_lifetime: Duration) -> Result<Self, PipelineError> {
        let session = Self::connect()?;
        Ok(Self { sandbox: session.sandbox.with_env_lifetime(env_lifetime), ..session })
    }

    /// The image to run in (`None`: the default, built when missing) and its content id. A
    /// named image the engine does not have is an error now, not one per item later.
    pub(super) fn image(&self, requested: Option<&str>) -> Result<(String, Option<String>), PipelineError> {
        let docker = self.sandbox.docker();
        self.runtime.block_on(interrupt::until_stopped(async {
            let image = match requested.filter(|i| !i.is_empty()) {
                None => images::ensure_default_image(docker).await.map_err(PipelineError::DefaultImage)?,
                Some(image) => {
                    let exists = images::image_exists(docker, image)
                        .await
                        .map_err(|source| PipelineError::ImageCheck { image: image.to_string(), source })?;
                    if !exists {
                        return Err(PipelineError::ImageMissing(image.to_string()));
                    }
                    image.to_string()
                }
            };
            let id = docker.inspect_image(&image).await.ok().and_then(|i| i.id);
            Ok((image, id))
        }))
    }
}

/// Environments of a grading run live for one test run and its copies, with room to spare.
pub(super) fn grade_env_lifetime(settings: &GradeSettings) -> Duration {
    settings.timeout + Duration::from_secs(30 * 60)
}

pub(super) fn create_dir(path: &Path) -> Result<(), PipelineError> {
    std::fs::create_dir_all(path).map_err(|source| PipelineError::Io { path: path.to_owned(), source })
}

/// Which model: a GGUF source (the default model when `None`) or `openai:BASE_URL`, a served
/// model reached with `remote`.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    pub source: Option<String>,
    pub remote: crate::model::openai::RemoteSettings,
    /// The local engine's batch: sequences decoded together (results do not depend on it).
    pub batch: usize,
    /// The model's hash must be this (a cluster worker loading the coordinator's model).
    pub expected_sha256: Option<String>,
}

impl Default for ModelChoice {
    fn default() -> Self {
        Self {
            source: None,
            remote: Default::default(),
            batch: crate::model::batch::DEFAULT_BATCH,
            expected_sha256: None,
        }
    }
}

impl ModelChoice {
    pub fn local(source: Option<String>) -> Self {
        Self { source, ..Default::default() }
    }
}

/// Loads the chosen model (and checks its hash when `choice` expects one).
pub fn load_model(choice: &ModelChoice) -> Result<Box<dyn LanguageModel>, PipelineError> {
    let model = choice.source.as_deref().unwrap_or(crate::model::DEFAULT_MODEL);
    let loaded: Box<dyn LanguageModel> = if let Some(base) = model.strip_prefix("openai:") {
        let served = crate::model::openai::OpenAiModel::connect(base, choice.remote.clone())
            .map_err(|source| PipelineError::Remote { model: model.into(), source: Box::new(source) })?;
        Box::new(served)
    } else {
        let mut engine = Engine::load(model)
            .map_err(|source| PipelineError::Model { model: model.into(), source: Box::new(source) })?;
        engine.set_max_batch(choice.batch);
        Box::new(engine)
    };
    match &choice.expected_sha256 {
        Some(expected) if *expected != loaded.info().sha256 => Err(PipelineError::OtherModel {
            model: model.into(),
            found: loaded.info().sha256.clone(),
            expected: expected.clone(),
        }),
        _ => Ok(loaded),
    }
}

/// `swe grade`: grades every prediction of `plan` in the sandbox (`plan.settings.image`
/// empty: the default image), here or on the cluster `executor` names.
pub fn grade(mut plan: GradePlan, executor: &Executor) -> Result<GradeReport, PipelineError> {
    let cluster = connect_cluster(executor, &plan.out)?;
    let session = Session::start(grade_env_lifetime(&plan.settings))?;
    let requested = Some(plan.settings.image.clone());
    (plan.settings.image, plan.settings.image_id) = session.image(requested.as_deref())?;
    let report = grade_on(&session, &plan, cluster)?;
    write_grade_index("repairbench swe grade", &plan, &report, None)?;
    Ok(report)
}

/// The `index.html` of a grading run's folder; `model` when the model ran in this run.
fn write_grade_index(
    title: &str,
    plan: &GradePlan,
    report: &GradeReport,
    model: Option<&ModelInfo>,
) -> Result<(), PipelineError> {
    let patches = match &plan.predictions {
        PredictionSource::Gold => "the dataset's gold patches".to_owned(),
        PredictionSource::Empty => "no patch".to_owned(),
        PredictionSource::File(path) => path.display().to_string(),
    };
    let mut facts =
        vec![("patches".to_owned(), patches), ("dataset".to_owned(), plan.dataset.display().to_string())];
    facts.extend(model.map(super::index::model_facts).unwrap_or_default());
    let configuration = serde_json::json!({
        "dataset": plan.dataset,
        "settings": plan.settings,
        "model": plan.extra_manifest.get("model"),
        "inference": plan.extra_manifest.get("inference"),
    });
    super::index::write_single(&plan.out, title, facts, &configuration, super::index::repair_part(report, ""))
        .map_err(|source| PipelineError::Index(Box::new(source)))
}

/// Grades `plan` here or on `cluster`.
fn grade_on(
    session: &Session,
    plan: &GradePlan,
    cluster: Option<crate::executor::RayRun>,
) -> Result<GradeReport, PipelineError> {
    match cluster {
        None => grade_in(session, plan),
        Some(cluster) => run_grade(session, plan, repair::Grader::Ray(Box::new(cluster))),
    }
}

/// `swe validate`: gold and the unpatched tree graded for every instance (see
/// [`repair::validate`]); `plan.out` is the validation folder.
pub fn validate(mut plan: GradePlan) -> Result<repair::validate::ValidationReport, PipelineError> {
    let session = Session::start(grade_env_lifetime(&plan.settings))?;
    let requested = Some(plan.settings.image.clone());
    (plan.settings.image, plan.settings.image_id) = session.image(requested.as_deref())?;
    let sandbox = Arc::new(session.sandbox.clone());
    let mut progress = ConsoleProgress::new();
    let validated = repair::validate::validate(sandbox, &plan, &mut progress as &mut dyn Reporter<_>);
    Ok(session.runtime.block_on(interrupt::until_stopped(validated))?)
}

/// `tasks harvest`: tasks from a repository's history (see [`repair::harvest`]).
pub fn harvest(
    mut plan: repair::harvest::HarvestPlan,
) -> Result<Vec<repair::harvest::HarvestRecord>, PipelineError> {
    let session = Session::start(grade_env_lifetime(&plan.settings))?;
    (plan.settings.image, plan.settings.image_id) = session.image(None)?;
    create_dir(&plan.out)?;
    let sandbox = Arc::new(session.sandbox.clone());
    let mut progress = ConsoleProgress::new();
    let harvested = repair::harvest::harvest(sandbox, &plan, &mut progress as &mut dyn Reporter<_>);
    Ok(session.runtime.block_on(interrupt::until_stopped(harvested))?)
}

pub(super) fn grade_in(session: &Session, plan: &GradePlan) -> Result<GradeReport, PipelineError> {
    run_grade(session, plan, repair::Grader::Local(Arc::new(session.sandbox.clone())))
}

pub(super) fn run_grade(
    session: &Session,
    plan: &GradePlan,
    grader: repair::Grader<DockerSandbox>,
) -> Result<GradeReport, PipelineError> {
    interrupt::note(format!(
        "finished instances are in {}; rerun the same command to resume",
        plan.out.join("results.jsonl").display()
    ));
    let mut progress = ConsoleProgress::new();
    let graded = repair::grade(grader, plan, &mut progress as &mut dyn Reporter<_>);
    Ok(session.runtime.block_on(interrupt::until_stopped(graded))?)
}

/// `swe infer`: the model writes a patch per task into `plan.out`.
pub fn infer(model: &mut dyn LanguageModel, plan: &InferPlan) -> Result<InferSummary, PipelineError> {
    infer_on(model, plan, &Executor::local(), &[])
}

/// [`infer`], here or on the cluster `executor` names; `model_args` are a worker's model
/// flags besides the model itself.
pub fn infer_on(
    model: &mut dyn LanguageModel,
    plan: &InferPlan,
    executor: &Executor,
    model_args: &[String],
) -> Result<InferSummary, PipelineError> {
    let cluster = connect_cluster(executor, &plan.out)?
        .map(|ray| repair::remote::InferCluster { ray, args: model_args.to_vec() });
    interrupt::note(format!(
        "finished predictions are in {}; rerun the same command to resume",
        plan.out.display()
    ));
    let mut progress = ConsoleProgress::new();
    Ok(infer::infer_with(model, plan, &mut progress, cluster.as_ref())?)
}

/// `swe run`: infer into `grade.predictions`, then grade (here or on a cluster).
pub struct SweRunPlan {
    pub model: ModelChoice,
    pub infer: InferPlan,
    pub grade: GradePlan,
    pub executor: Executor,
}

/// `swe run`. The sandbox and the image are checked before the model spends any time.
pub fn swe_run(mut plan: SweRunPlan) -> Result<GradeReport, PipelineError> {
    create_dir(&plan.grade.out)?;
    let cluster = connect_cluster(&plan.executor, &plan.grade.out)?;
    let session = Session::start(grade_env_lifetime(&plan.grade.settings))?;
    let requested = Some(plan.grade.settings.image.clone());
    (plan.grade.settings.image, plan.grade.settings.image_id) = session.image(requested.as_deref())?;
    let mut model = load_model(&plan.model)?;
    infer_on(model.as_mut(), &plan.infer, &plan.executor, &model_worker_flags(&plan.model))?;
    let info = model.info().clone();
    drop(model);
    plan.grade.extra_manifest.insert("model".into(), to_json(&info));
    plan.grade.extra_manifest.insert(
        "inference".into(),
        serde_json::json!({
            "prompt": plan.infer.prompt,
            "max_tokens": plan.infer.max_tokens,
            "sampling": plan.infer.sampling,
        }),
    );
    let report = grade_on(&session, &plan.grade, cluster)?;
    write_grade_index("repairbench swe run", &plan.grade, &report, Some(&info))?;
    Ok(report)
}

pub(super) fn to_json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// `eval`: one suite, with a model unless the options bring completions.
pub struct EvalPlan {
    pub suite: Suite,
    pub options: EvalOptions,
    pub model: ModelChoice,
    /// Code suites: programs run side by side inside a container.
    pub workers: usize,
    /// Where the items are computed.
    pub executor: Executor,
}

/// Code-suite programs side by side when neither a flag nor the environment says.
pub const DEFAULT_CODE_WORKERS: usize = 2;

/// How long a code-suite container may live: far beyond any batch's budget.
pub(super) const CODE_ENV_LIFETIME: Duration = Duration::from_secs(2 * 3600);

pub(super) fn code_runner(
    session: &Session,
    workers: usize,
) -> Result<suites::SandboxCodeRunner<DockerSandbox>, PipelineError> {
    let (image, _) = session.image(None)?;
    Ok(suites::sandbox_runner(session.sandbox.clone(), image, session.runtime.handle().clone(), workers))
}

/// `eval`, here or on the cluster `plan.executor` names (then the model is loaded here only
/// for its identity, and a code suite's image built here only for its tag).
pub fn eval(plan: EvalPlan) -> Result<EvalSummary, PipelineError> {
    let cluster = connect_cluster(&plan.executor, &plan.options.out)?;
    interrupt::note(format!(
        "finished items are in {}; rerun the same command to resume",
        plan.options.out.join("samples.jsonl").display()
    ));
    let cluster = cluster.map(|ray| suites::ClusterEval { ray, args: eval_worker_args(&plan) });
    let summary = eval_with(&plan, &mut ConsoleProgress::new(), cluster.as_ref())?;
    let model = &summary.config["model"];
    let facts = match model.is_null() {
        true => vec![("model".to_owned(), "none (completions given, or the canonical solutions)".to_owned())],
        false => vec![
            ("model source".to_owned(), model["source"].as_str().unwrap_or_default().to_owned()),
            ("model sha256".to_owned(), model["sha256"].as_str().unwrap_or_default().to_owned()),
        ],
    };
    let title = format!("repairbench eval {}", summary.suite);
    super::index::write_single(
        &plan.options.out,
        &title,
        facts,
        &summary.config,
        super::index::suite_part(&summary, ""),
    )
    .map_err(|source| PipelineError::Index(Box::new(source)))?;
    Ok(summary)
}

pub(super) fn eval_with(
    plan: &EvalPlan,
    reporter: &mut dyn Reporter<suites::SampleRecord>,
    cluster: Option<&suites::ClusterEval>,
) -> Result<EvalSummary, PipelineError> {
    let needs_model = plan.options.samples.is_none() && !plan.options.canonical;
    // The sandbox first: a missing engine fails before the model loads.
    let session = match plan.suite.kind() {
        SuiteKind::Code => Some(Session::start(CODE_ENV_LIFETIME)?),
        _ => None,
    };
    let runner = session.as_ref().map(|s| code_runner(s, plan.workers)).transpose()?;
    let mut model = if needs_model { Some(load_model(&plan.model)?) } else { None };
    Ok(suites::evaluate_with(
        &plan.suite,
        &plan.options,
        model.as_mut().map(|m| m.as_mut() as &mut dyn LanguageModel),
        runner.as_ref().map(|r| r as &dyn suites::CodeRunner),
        reporter,
        cluster,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::{GradeReport, InstanceResult};

    /// A variant's infrastructure error is the run's even though the summary counts the
    /// dataset's own instances only.
    #[test]
    fn a_variants_infrastructure_error_fails_the_run() {
        let result = |id: &str, verdict: &str, variant: serde_json::Value| -> InstanceResult {
            serde_json::from_value(serde_json::json!({
                "instance_id": id, "verdict": verdict, "resolved": verdict == "resolved", "resolution": "NO",
                "patch_applied": true, "apply_method": null, "flaky_tests": [],
                "tests_status": {"FAIL_TO_PASS": {"success": [], "failure": []}, "PASS_TO_PASS": {"success": [], "failure": []}},
                "status_source": null, "test_exit": null, "detail": null, "model_name_or_path": null,
                "timings": {"prepare_s": 0.0, "tests_s": 0.0, "reruns_s": 0.0, "total_s": 0.0}, "log_dir": "logs/x",
                "perturbation": {"variant": variant},
            }))
            .unwrap()
        };
        let variant =
            serde_json::json!({"original": "x", "family": "statement.case", "index": 1, "applied": true});
        let report = GradeReport::new(
            vec![
                result("x", "resolved", serde_json::Value::Null),
                result("x@statement.case#1", "error", variant),
            ],
            Vec::new(),
        );
        assert_eq!((report.summary.total, report.summary.verdicts["error"]), (1, 0));
        assert_eq!(Completion::of_grade(&report), Completion::InfrastructureErrors);
    }
}

//! Grading SWE-bench-style predictions: per instance, check out the base commit, apply the
//! prediction (recording how), put the original tests back and apply test_patch, run the tests
//! in the sandbox, read the structured report, rerun failing PASS_TO_PASS tests to catch flaky
//! ones, and give one verdict. Instances run concurrently; one failing never stops the others.
//! Every finished instance is appended to `results.jsonl`; a rerun with the same output folder
//! keeps those whose inputs are unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::grade::{self, junit, pytest_log, Resolution, StatusMap, StatusSource, TestsStatus, Verdict};
use crate::patch::{self, ApplyMethod};
use crate::report::{self, JsonlAppender, Reporter, ResultEvent};
use crate::sandbox::{self, EnvSpec, ExecRequest, ExecResult, Limits, Sandbox};
use crate::tasks::{self, repos, Prediction, PredictionSource, RepoLocator, Skipped, SweTask};

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
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("loading the dataset")]
    Dataset(#[source] tasks::LoadError),
    #[error("loading the predictions")]
    Predictions(#[source] tasks::LoadError),
    #[error("writing results")]
    Report(#[source] report::ReportError),
}

/// Time spent in each stage of one instance, in seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    pub prepare_s: f64,
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
    /// Test files the prediction changed; they were put back before test_patch was applied.
    pub reverted_test_files: Vec<String>,
    pub status_source: Option<StatusSource>,
    /// How the test command ended (`exit 1`, `timeout`, ...).
    pub test_exit: Option<String>,
    /// Why, for every verdict other than resolved/unresolved (and notes for those).
    pub detail: Option<String>,
    pub model_name_or_path: Option<String>,
    /// Hash of everything that decides this result; a changed hash means a rerun.
    pub input_hash: String,
    pub timings: Timings,
    /// Folder with this instance's patch, test output and report, relative to the output.
    pub log_dir: String,
}

/// `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GradeReport {
    pub summary: Summary,
    pub instances: Vec<InstanceResult>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub total: usize,
    pub resolved: usize,
    /// resolved / total graded instances.
    pub resolved_rate: f64,
    /// Instances per verdict (every verdict listed, zeros included).
    pub verdicts: BTreeMap<String, usize>,
    pub apply_methods: BTreeMap<String, usize>,
    pub skipped: usize,
    pub flaky_tests: usize,
}

impl GradeReport {
    pub fn new(instances: Vec<InstanceResult>, skipped: Vec<Skipped>) -> Self {
        let mut summary = Summary { total: instances.len(), skipped: skipped.len(), ..Summary::default() };
        for verdict in Verdict::ALL {
            summary.verdicts.insert(verdict.as_str().into(), 0);
        }
        for result in &instances {
            *summary.verdicts.entry(result.verdict.as_str().into()).or_default() += 1;
            if let Some(method) = result.apply_method {
                *summary.apply_methods.entry(method.as_str().into()).or_default() += 1;
            }
            summary.resolved += usize::from(result.resolved);
            summary.flaky_tests += result.flaky_tests.len();
        }
        summary.resolved_rate =
            if instances.is_empty() { 0.0 } else { summary.resolved as f64 / instances.len() as f64 };
        Self { summary, instances, skipped }
    }
}

/// The files a run of `task` reads, hashed with the settings that change its result.
pub fn input_hash(task: &SweTask, prediction: &Prediction, settings: &GradeSettings) -> String {
    let mut hasher = Sha256::new();
    let task_json = serde_json::to_string(task).unwrap_or_default();
    hasher.update(task_json.as_bytes());
    hasher.update([0]);
    hasher.update(prediction.patch().as_bytes());
    hasher.update([0]);
    let image =
        task.environment.as_ref().and_then(|e| e.image.clone()).unwrap_or_else(|| settings.image.clone());
    hasher.update(
        format!(
            "{image}\0{}\0{}\0{:?}\0{}",
            settings.timeout.as_secs_f64(),
            settings.flaky_reruns,
            settings.limits,
            env!("CARGO_PKG_VERSION")
        )
        .as_bytes(),
    );
    if let Some(bundle) = &task.bundle {
        if let Ok(bytes) = std::fs::read(bundle) {
            hasher.update(Sha256::digest(&bytes));
        }
    }
    hex::encode(&hasher.finalize()[..16])
}

/// File-system-safe form of an instance id for log folders.
fn safe_name(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

fn sha256_file(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|b| hex::encode(Sha256::digest(&b)))
}

fn git_version() -> Option<String> {
    let out = std::process::Command::new("git").arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Grades every prediction of `plan`, writing `results.jsonl` as it goes, then `report.json`
/// and `manifest.json`. Returns the report.
pub async fn grade<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    plan: &GradePlan,
    reporter: &mut dyn Reporter<InstanceResult>,
) -> Result<GradeReport, RunError> {
    let started = Instant::now();
    let task_set = tasks::load_tasks(&plan.dataset).map_err(RunError::Dataset)?;
    let prediction_set =
        tasks::load_predictions(&plan.predictions, &task_set.tasks).map_err(RunError::Predictions)?;
    let mut skipped: Vec<Skipped> = task_set.skipped.clone();
    skipped.extend(prediction_set.skipped.iter().cloned());
    let mut work = Vec::new();
    for task in &task_set.tasks {
        match prediction_set.by_instance.get(&task.instance_id) {
            Some(prediction) => work.push((task.clone(), prediction.clone())),
            None => skipped.push(Skipped {
                location: task.origin.clone(),
                instance_id: Some(task.instance_id.clone()),
                reason: "no prediction for this instance".into(),
            }),
        }
    }

    std::fs::create_dir_all(&plan.out)
        .map_err(|source| RunError::Report(report::ReportError::Write { path: plan.out.clone(), source }))?;
    let results_path = plan.out.join("results.jsonl");
    // Results of an earlier run: the last record per instance wins.
    let (previous, unreadable): (Vec<InstanceResult>, Vec<String>) = report::read_jsonl(&results_path);
    for line in unreadable {
        tracing::warn!("ignoring unreadable earlier result {line}");
    }
    let mut kept: BTreeMap<String, InstanceResult> = BTreeMap::new();
    for result in previous {
        kept.insert(result.instance_id.clone(), result);
    }
    let mut finished: BTreeMap<String, InstanceResult> = BTreeMap::new();
    let mut todo = Vec::new();
    for (task, prediction) in work {
        let hash = input_hash(&task, &prediction, &plan.settings);
        match kept.remove(&task.instance_id) {
            // An `error` is ours or the task's, not the patch's: it is retried.
            Some(old) if old.input_hash == hash && old.verdict != Verdict::Error => {
                finished.insert(task.instance_id.clone(), old);
            }
            _ => todo.push((task, prediction, hash)),
        }
    }

    write_manifest(plan, &task_set.tasks).map_err(RunError::Report)?;
    let mut appender = JsonlAppender::open(&results_path).map_err(RunError::Report)?;
    reporter
        .report(&ResultEvent::RunStarted {
            run: "swe grade".into(),
            total: todo.len(),
            resumed: finished.len(),
        })
        .map_err(RunError::Report)?;
    for skip in &skipped {
        reporter.report(&skip.event()).map_err(RunError::Report)?;
    }

    let locator =
        Arc::new(RepoLocator::new(plan.repos.clone(), plan.url_template.clone(), plan.cache_dir.clone()));
    let settings = Arc::new(plan.settings.clone());
    let out = Arc::new(plan.out.clone());
    let permits = Arc::new(tokio::sync::Semaphore::new(plan.settings.workers.max(1)));
    let mut running = tokio::task::JoinSet::new();
    let mut ids = BTreeMap::new();
    for (task, prediction, hash) in todo {
        let (sandbox, locator, settings, out, permits) =
            (sandbox.clone(), locator.clone(), settings.clone(), out.clone(), permits.clone());
        let id = task.instance_id.clone();
        let handle = running.spawn(async move {
            let _permit = permits.acquire_owned().await;
            grade_instance(sandbox, &locator, &settings, &out, task, prediction, hash).await
        });
        ids.insert(handle.id(), id);
    }
    while let Some(joined) = running.join_next_with_id().await {
        let result = match joined {
            Ok((_, result)) => result,
            Err(e) => {
                // A panic in one instance is that instance's error, not the run's end.
                let id = ids.get(&e.id()).cloned().unwrap_or_default();
                error_result(&id, format!("internal error: {e}"))
            }
        };
        appender.append(&result).map_err(RunError::Report)?;
        reporter
            .report(&ResultEvent::ItemFinished {
                id: result.instance_id.clone(),
                outcome: result.verdict.as_str().into(),
                success: result.resolved,
                record: result.clone(),
            })
            .map_err(RunError::Report)?;
        if result.verdict == Verdict::Error {
            skipped.push(Skipped {
                location: result.instance_id.clone(),
                instance_id: Some(result.instance_id.clone()),
                reason: result.detail.clone().unwrap_or_else(|| "error".into()),
            });
        }
        finished.insert(result.instance_id.clone(), result);
    }

    // Scratch worktrees are removed as each instance is prepared; this drops their folder.
    let _ = std::fs::remove_dir(plan.out.join("work"));
    let report = GradeReport::new(finished.into_values().collect(), skipped);
    report::write_json_atomic(&plan.out.join("report.json"), &report).map_err(RunError::Report)?;
    reporter
        .report(&ResultEvent::RunFinished {
            counts: report
                .summary
                .verdicts
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            elapsed_s: started.elapsed().as_secs_f64(),
        })
        .map_err(RunError::Report)?;
    Ok(report)
}

fn write_manifest(plan: &GradePlan, tasks: &[SweTask]) -> Result<(), report::ReportError> {
    let predictions = match &plan.predictions {
        PredictionSource::Gold => serde_json::json!({"builtin": "gold"}),
        PredictionSource::Empty => serde_json::json!({"builtin": "empty"}),
        PredictionSource::File(path) => {
            serde_json::json!({"path": path, "sha256": sha256_file(path)})
        }
    };
    let mut manifest = serde_json::json!({
        "command": "swe grade",
        "repairbench_version": env!("CARGO_PKG_VERSION"),
        "started_unix_s": unix_now(),
        "dataset": {
            "path": plan.dataset,
            "sha256": sha256_file(&plan.dataset),
            "instances": tasks.len(),
            "bundles": tasks.iter().filter_map(|t| t.bundle.as_ref().map(|b| (t.instance_id.clone(), sha256_file(b)))).collect::<BTreeMap<_, _>>(),
        },
        "predictions": predictions,
        "repos": plan.repos,
        "url_template": plan.url_template.clone().unwrap_or_else(|| repos::DEFAULT_URL_TEMPLATE.into()),
        "settings": {
            "image": plan.settings.image,
            "image_id": plan.settings.image_id,
            "timeout_s": plan.settings.timeout.as_secs_f64(),
            "workers": plan.settings.workers,
            "flaky_reruns": plan.settings.flaky_reruns,
            "limits": plan.settings.limits,
            "junit_family": "xunit1",
        },
        "tools": {"git": git_version(), "libgit2": format!("{:?}", git2::Version::get().libgit2_version())},
        "host": {"os": std::env::consts::OS, "arch": std::env::consts::ARCH},
    });
    for (key, value) in &plan.extra_manifest {
        manifest[key] = value.clone();
    }
    report::write_json_atomic(&plan.out.join("manifest.json"), &manifest)
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
        reverted_test_files: Vec::new(),
        status_source: None,
        test_exit: None,
        detail: Some(detail),
        model_name_or_path: None,
        input_hash: String::new(),
        timings: Timings::default(),
        log_dir: format!("logs/{}", safe_name(id)),
    }
}

/// A prepared tree to test: the base commit with the prediction, original tests and test_patch.
struct Prepared {
    tar: Vec<u8>,
    apply_method: Option<ApplyMethod>,
    reverted: Vec<String>,
    apply_log: Vec<String>,
}

enum PrepareError {
    /// The prediction does not apply.
    Apply(String),
    /// The task (repository, commit, test_patch) is broken.
    Task(String),
}

/// The test files of a task: those test_patch touches and those its test ids name.
fn task_test_files(task: &SweTask) -> BTreeSet<String> {
    let mut files: BTreeSet<String> = patch::files_touched(&task.test_patch).into_iter().collect();
    for id in task.fail_to_pass.iter().chain(&task.pass_to_pass) {
        if let Some((file, _)) = id.split_once("::") {
            files.insert(file.to_owned());
        }
    }
    files
}

/// Builds the tree to test. `prediction_patch` of `None` is the base with test_patch only.
fn prepare(
    locator: &RepoLocator,
    task: &SweTask,
    prediction_patch: Option<&str>,
    scratch: &Path,
) -> Result<Prepared, PrepareError> {
    let source = locator.locate(task).map_err(|e| PrepareError::Task(error_chain(&e)))?;
    let _ = std::fs::remove_dir_all(scratch);
    let repo = repos::checkout(&source, &task.repo, &task.base_commit, scratch)
        .map_err(|e| PrepareError::Task(error_chain(&e)))?;
    let mut apply_log = Vec::new();
    let mut apply_method = None;
    let mut reverted = Vec::new();
    if let Some(patch_text) = prediction_patch {
        let applied = patch::apply(&repo, patch_text).map_err(|e| PrepareError::Apply(e.to_string()))?;
        apply_log.extend(applied.log.iter().cloned());
        apply_method = Some(applied.method);
        // The tests decide the grade, so the prediction's edits to them are undone.
        let test_files = task_test_files(task);
        for path in &applied.files {
            if test_files.contains(path) || patch::is_test_path(path) {
                let target = scratch.join(path);
                match repos::read_at_commit(&repo, &task.base_commit, path) {
                    Some(bytes) => std::fs::write(&target, bytes),
                    None => std::fs::remove_file(&target).or_else(|e| {
                        if e.kind() == std::io::ErrorKind::NotFound {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    }),
                }
                .map_err(|e| PrepareError::Task(format!("restoring {path}: {e}")))?;
                reverted.push(path.clone());
            }
        }
    }
    let applied = patch::apply(&repo, &task.test_patch)
        .map_err(|e| PrepareError::Task(format!("test_patch does not apply to {}: {e}", task.base_commit)))?;
    apply_log.push(format!("test_patch applied with {}", applied.method.as_str()));
    let tar = tar_tree(scratch).map_err(|e| PrepareError::Task(format!("packing the worktree: {e}")))?;
    Ok(Prepared { tar, apply_method, reverted, apply_log })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The worktree (without `.git`) as a tar archive owned by the sandbox user (uid 1000), with
/// directories writable so tests can write caches and reports.
fn tar_tree(root: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let dir = root.join(&relative);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            if relative.as_os_str().is_empty() && name == ".git" {
                continue;
            }
            let rel = relative.join(&name);
            let kind = entry.file_type()?;
            let mut header = tar::Header::new_gnu();
            header.set_uid(1000);
            header.set_gid(1000);
            header.set_mtime(0);
            if kind.is_dir() {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_data(&mut header, &rel, std::io::empty())?;
                stack.push(rel);
            } else if kind.is_file() {
                let bytes = std::fs::read(entry.path())?;
                #[cfg(unix)]
                let executable = {
                    use std::os::unix::fs::PermissionsExt;
                    entry.metadata()?.permissions().mode() & 0o111 != 0
                };
                #[cfg(not(unix))]
                let executable = false;
                header.set_mode(if executable { 0o777 } else { 0o666 });
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, &rel, bytes.as_slice())?;
            } else if kind.is_symlink() {
                let target = std::fs::read_link(entry.path())?;
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, &rel, target)?;
            }
        }
    }
    builder.into_inner()
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The shell command that runs `tests` (files or node ids) with pytest, writing JUnit XML to
/// `junit`. `-rA` makes the log carry the summary section the fallback parser reads.
fn pytest_command(tests: &[String], junit: &str) -> String {
    let mut words: Vec<String> =
        ["python3", "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    words.push(format!("--junitxml={junit}"));
    words.extend(tests.iter().cloned());
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

/// One test run's outcome inside the sandbox.
struct TestRun {
    exec: ExecResult,
    junit_xml: Option<String>,
}

impl TestRun {
    fn log(&self) -> String {
        format!("{}\n{}", self.exec.stdout, self.exec.stderr)
    }
}

fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", hasher.finish())
}

/// Runs one test command in an existing environment and fetches its JUnit report.
async fn exec_once<S: Sandbox>(
    sandbox: &S,
    handle: &S::Env,
    command: &str,
    junit: &str,
    timeout: Duration,
    env: &[(String, String)],
) -> Result<TestRun, sandbox::SandboxError> {
    let request = ExecRequest {
        cmd: vec!["sh".into(), "-c".into(), command.to_owned()],
        timeout,
        workdir: Some(WORKSPACE.into()),
        env: env.to_vec(),
    };
    let exec = sandbox.exec(handle, &request).await?;
    let junit_xml = if matches!(exec.verdict, sandbox::Verdict::Timeout) {
        None
    } else {
        match sandbox.copy_out(handle, junit).await {
            Ok(bytes) => first_file_in_tar(&bytes),
            Err(_) => None,
        }
    };
    Ok(TestRun { exec, junit_xml })
}

/// Runs `command` in a fresh environment holding `tar`, then removes the environment.
async fn run_in_sandbox<S: Sandbox>(
    sandbox: &S,
    spec: &EnvSpec,
    tar: &[u8],
    command: &str,
    junit: &str,
    timeout: Duration,
    env: &[(String, String)],
) -> Result<TestRun, sandbox::SandboxError> {
    let handle = sandbox.create(spec).await?;
    let outcome = async {
        sandbox.copy_in(&handle, WORKSPACE, tar.to_vec()).await?;
        exec_once(sandbox, &handle, command, junit, timeout, env).await
    }
    .await;
    if let Err(e) = sandbox.destroy(handle).await {
        tracing::warn!("removing a test environment failed: {e}");
    }
    outcome
}

fn first_file_in_tar(bytes: &[u8]) -> Option<String> {
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.header().entry_type().is_file() {
            let mut text = String::new();
            entry.read_to_string(&mut text).ok()?;
            return Some(text);
        }
    }
    None
}

/// Statuses of one run: the JUnit report when there is one, else the log's summary section.
fn statuses(run: &TestRun, known_files: &[String]) -> (StatusMap, Option<StatusSource>, Vec<String>) {
    if let Some(xml) = &run.junit_xml {
        match junit::parse(xml, known_files) {
            Ok(report) => return (report.statuses, Some(StatusSource::Junit), report.collection_errors),
            Err(e) => tracing::warn!("unreadable JUnit report, falling back to the log: {e}"),
        }
    }
    match pytest_log::parse_summary(&run.log()) {
        Some(map) => (map, Some(StatusSource::LogSummary), Vec::new()),
        None => (StatusMap::new(), None, Vec::new()),
    }
}

fn verdict_text(verdict: &sandbox::Verdict) -> String {
    match verdict {
        sandbox::Verdict::Exit(code) => format!("exit {code}"),
        sandbox::Verdict::Timeout => "timeout".into(),
        sandbox::Verdict::Oom => "oom".into(),
        sandbox::Verdict::Error(why) => format!("error: {why}"),
    }
}

/// Whether the test runner itself could not run (not the patch's doing).
fn runner_broken(exec: &ExecResult) -> Option<String> {
    let sandbox::Verdict::Exit(code) = exec.verdict else { return None };
    let log = format!("{}\n{}", exec.stdout, exec.stderr);
    if log.contains("No module named pytest") {
        return Some("pytest is not installed in the image".into());
    }
    match code {
        126 | 127 => Some(format!("the test command could not be started (exit {code})")),
        3 => Some("pytest internal error (exit 3)".into()),
        4 => Some("pytest usage error (exit 4)".into()),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn grade_instance<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    locator: &Arc<RepoLocator>,
    settings: &GradeSettings,
    out: &Path,
    task: SweTask,
    prediction: Prediction,
    input_hash: String,
) -> InstanceResult {
    let started = Instant::now();
    let log_rel = format!("logs/{}", safe_name(&task.instance_id));
    let log_dir = out.join(&log_rel);
    let _ = std::fs::create_dir_all(&log_dir);
    let _ = std::fs::write(log_dir.join("model.patch"), prediction.patch());
    let mut result = error_result(&task.instance_id, String::new());
    result.detail = None;
    result.input_hash = input_hash;
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

    if prediction.patch().trim().is_empty() {
        result.verdict = Verdict::EmptyPatch;
        result.detail = Some("the prediction has no patch; nothing was run".into());
        result.tests_status = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
        return finish(result, started);
    }

    let scratch_root = out.join("work");
    let scratch = scratch_root.join(format!("{}-{}", safe_name(&task.instance_id), random_token()));
    let prepared = {
        let (locator, task, patch_text, scratch) =
            (locator.clone(), task.clone(), prediction.patch().to_owned(), scratch.clone());
        tokio::task::spawn_blocking(move || {
            let prepared = prepare(&locator, &task, Some(&patch_text), &scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            prepared
        })
        .await
    };
    result.timings.prepare_s = started.elapsed().as_secs_f64();
    let prepared = match prepared {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(PrepareError::Apply(why))) => {
            let _ = std::fs::write(log_dir.join("apply.log"), &why);
            result.verdict = Verdict::PatchApplyFailed;
            result.detail = Some(why);
            result.tests_status =
                grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
            return finish(result, started);
        }
        Ok(Err(PrepareError::Task(why))) => {
            result.detail = Some(why);
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
    result.reverted_test_files = prepared.reverted.clone();

    // The test command.
    let image =
        task.environment.as_ref().and_then(|e| e.image.clone()).unwrap_or_else(|| settings.image.clone());
    let spec = EnvSpec {
        image,
        limits: settings.limits.clone(),
        workdir: WORKSPACE.into(),
        env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
        user: Default::default(),
    };
    // An unguessable report name, so code under test cannot simply write a fake one.
    let junit = format!("{WORKSPACE}/.repairbench-{}.xml", random_token());
    let test_files: Vec<String> = patch::files_touched(&task.test_patch);
    let mut env: Vec<(String, String)> = vec![("REPAIRBENCH_JUNIT".into(), junit.clone())];
    if let Some(extra) = task.environment.as_ref().map(|e| &e.env) {
        env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let command = match &task.test_cmd {
        Some(cmd) => cmd.clone(),
        None => pytest_command(&test_files, &junit),
    };
    let _ = std::fs::write(log_dir.join("test_command.txt"), &command);
    let tests_started = Instant::now();
    // One environment for the run and its reruns (so reruns cost no container start).
    let handle = match sandbox.create(&spec).await {
        Ok(handle) => handle,
        Err(e) => {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!("sandbox: {}", error_chain(&e)));
            return finish(result, started);
        }
    };
    let first = match sandbox.copy_in(&handle, WORKSPACE, prepared.tar.clone()).await {
        Ok(()) => exec_once(&*sandbox, &handle, &command, &junit, settings.timeout, &env).await,
        Err(e) => Err(e),
    };
    result.timings.tests_s = tests_started.elapsed().as_secs_f64();
    let context =
        Evaluation { sandbox: &*sandbox, handle: &handle, spec: &spec, env: &env, test_files: &test_files };
    let result = evaluate(&context, locator, settings, &task, &log_dir, &scratch, first, result).await;
    if let Err(e) = sandbox.destroy(handle).await {
        tracing::warn!("removing a test environment failed: {e}");
    }
    finish(result, started)
}

/// What [`evaluate`] needs to run more commands.
struct Evaluation<'a, S: Sandbox> {
    sandbox: &'a S,
    handle: &'a S::Env,
    spec: &'a EnvSpec,
    env: &'a [(String, String)],
    test_files: &'a [String],
}

/// From the first test run to a verdict: runner failures, the base check when nothing ran,
/// flaky reruns, then grading.
#[allow(clippy::too_many_arguments)]
async fn evaluate<S: Sandbox + 'static>(
    context: &Evaluation<'_, S>,
    locator: &Arc<RepoLocator>,
    settings: &GradeSettings,
    task: &SweTask,
    log_dir: &Path,
    scratch: &Path,
    first: Result<TestRun, sandbox::SandboxError>,
    mut result: InstanceResult,
) -> InstanceResult {
    let test_files = context.test_files;
    let run = match first {
        Ok(run) => run,
        Err(e) => {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!("sandbox: {}", error_chain(&e)));
            return result;
        }
    };
    let _ = std::fs::write(log_dir.join("test_output.txt"), run.log());
    if let Some(xml) = &run.junit_xml {
        let _ = std::fs::write(log_dir.join("junit.xml"), xml);
    }
    result.test_exit = Some(verdict_text(&run.exec.verdict));
    match &run.exec.verdict {
        sandbox::Verdict::Timeout => {
            result.verdict = Verdict::Timeout;
            result.detail = Some(format!("tests ran past {} s", settings.timeout.as_secs_f64()));
            result.tests_status =
                grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
            return result;
        }
        sandbox::Verdict::Error(why) => {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!("sandbox: {why}"));
            return result;
        }
        sandbox::Verdict::Oom => {
            result.detail = Some(format!("tests ran out of memory ({} bytes)", settings.limits.memory_bytes));
        }
        sandbox::Verdict::Exit(_) => {}
    }
    if let Some(why) = runner_broken(&run.exec) {
        result.verdict = Verdict::EnvError;
        result.detail = Some(why);
        return result;
    }
    let (mut map, source, collection_errors) = statuses(&run, test_files);
    result.status_source = source;

    if map.is_empty() {
        // Nothing ran. If the tests also cannot run without the prediction, the environment
        // is broken; otherwise the prediction broke them (e.g. an import error).
        let (locator, base_task, scratch) = (locator.clone(), task.clone(), scratch.to_owned());
        let base = tokio::task::spawn_blocking(move || {
            let prepared = prepare(&locator, &base_task, None, &scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            prepared
        })
        .await;
        let base_ok = match base {
            Ok(Ok(base)) => {
                let junit = format!("{WORKSPACE}/.repairbench-{}.xml", random_token());
                let command = task.test_cmd.clone().unwrap_or_else(|| pytest_command(test_files, &junit));
                let run = run_in_sandbox(
                    context.sandbox,
                    context.spec,
                    &base.tar,
                    &command,
                    &junit,
                    settings.timeout,
                    context.env,
                )
                .await;
                run.is_ok_and(|r| {
                    let (base_map, _, _) = statuses(&r, test_files);
                    let status = grade::tests_status(&[], &task.pass_to_pass, &base_map);
                    !base_map.is_empty() && status.pass_to_pass.failure.is_empty()
                })
            }
            _ => false,
        };
        if !base_ok {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!(
                "no test results, and none without the prediction either (collection errors: {})",
                if collection_errors.is_empty() {
                    "none reported".into()
                } else {
                    collection_errors.join(", ")
                }
            ));
            return result;
        }
        let note = "no test results with the prediction (the tests run without it)";
        result.detail = Some(match result.detail.take() {
            Some(d) => format!("{d}; {note}"),
            None => note.into(),
        });
    }

    // Failing PASS_TO_PASS tests get reruns before they count against the patch.
    let failing = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &map).pass_to_pass.failure;
    if !failing.is_empty() && !map.is_empty() && settings.flaky_reruns > 0 {
        let reruns_started = Instant::now();
        let mut rerun_maps = Vec::new();
        let mut rerun_log = String::new();
        for index in 0..settings.flaky_reruns {
            let junit = format!("{WORKSPACE}/.repairbench-{}.xml", random_token());
            let command = task.test_cmd.clone().unwrap_or_else(|| pytest_command(&failing, &junit));
            let Ok(run) =
                exec_once(context.sandbox, context.handle, &command, &junit, settings.timeout, context.env)
                    .await
            else {
                break;
            };
            rerun_log.push_str(&format!(
                "===== rerun {} ({}) =====\n{}\n",
                index + 1,
                verdict_text(&run.exec.verdict),
                run.log()
            ));
            let rerun_map = statuses(&run, test_files).0;
            let all_passed = grade::tests_status(&[], &failing, &rerun_map).pass_to_pass.failure.is_empty();
            rerun_maps.push(rerun_map);
            if all_passed {
                break;
            }
        }
        let _ = std::fs::write(log_dir.join("reruns.txt"), rerun_log);
        let (merged, flaky) = grade::merge_reruns(&map, &rerun_maps, &failing);
        map = merged;
        result.flaky_tests = flaky;
        result.timings.reruns_s = reruns_started.elapsed().as_secs_f64();
    }

    result.tests_status = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &map);
    result.resolution = grade::resolution(&result.tests_status);
    result.verdict =
        if result.resolution == Resolution::Full { Verdict::Resolved } else { Verdict::Unresolved };
    result
}

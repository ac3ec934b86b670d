//! Test runs in the sandbox, and the runs the verdict ([`super::verdict`]) asks for. Every run (the first, each flaky
//! rerun, the check without the prediction) gets a fresh environment holding the prepared
//! tree and a fresh results channel; results count only when the harness plugin signed them
//! and pytest's summary agrees ([`crate::grade::channel`]).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::grade::channel::{self, ResultsChannel, Tampered};
use crate::grade::runners::RunnerKind;
use crate::grade::{self, junit, pytest_log, StatusMap, StatusSource, Verdict};
use crate::sandbox::{self, EnvSpec, ExecRequest, ExecResult, Sandbox};
use crate::shell::{self, NulByte};
use crate::tasks::ci::CiJob;
use crate::tasks::services::RUNNER_NAME;
use crate::tasks::SweTask;

use super::environment::BEFORE_TESTS;
use super::imports::{self, ImportOrder};
use super::services;
use super::verdict::{self, RunFacts, Step};
use super::{InstanceResult, WORKSPACE};

/// What one run gave: how the command ended, and its statuses if they can be trusted.
pub struct TestRun {
    pub exec: ExecResult,
    /// Test id to status, and how many modules failed to be collected.
    pub results: Result<(StatusMap, usize), Tampered>,
    /// The signed JUnit XML, when there was one.
    pub junit_xml: Option<String>,
    /// The CI jobs the task selected, each also in `results` as `ci:JOB`.
    pub ci: Vec<super::runners::CiOutcome>,
    /// What the task's services did (their checks are in `results` as `service:NAME::CHECK`).
    pub services: Vec<super::services::ServiceOutcome>,
    /// Their logs and the checks' outcomes, for the grader to write.
    pub service_logs: super::services::ServiceLogs,
}

impl TestRun {
    /// The tests' run alone; CI jobs and services are added by [`TestPlan::run`].
    fn new(
        exec: ExecResult,
        results: Result<(StatusMap, usize), Tampered>,
        junit_xml: Option<String>,
    ) -> Self {
        Self {
            exec,
            results,
            junit_xml,
            ci: Vec::new(),
            services: Vec::new(),
            service_logs: Default::default(),
        }
    }

    /// A run that could not start because its command cannot be written.
    fn unrunnable(why: NulByte) -> Self {
        let exec = ExecResult::error(format!("the test command cannot be built: {why}"));
        Self::new(exec, Err(Tampered::Inconsistent(why.to_string())), None)
    }

    pub fn log(&self) -> String {
        format!("{}\n{}", self.exec.stdout, self.exec.stderr)
    }
}

/// pytest started as `python -m pytest` would be, except that the folder Python starts from is
/// not put first on `sys.path`: Pythons before 3.11 ignore `PYTHONSAFEPATH` and put it there
/// (as `''`), where a `pytest.py` or `_pytest/` a patch added would be imported in place of
/// pytest itself, results plugin included. The harness `sitecustomize` has put that folder at
/// the end of `sys.path` already ([`super::imports`]).
const PYTEST_LAUNCHER: &str = "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; \
import runpy; runpy.run_module('pytest', run_name='__main__', alter_sys=True)";

/// The shell command that runs `tests` (files or node ids) with pytest and the harness plugin.
fn pytest_command(tests: &[String], channel: &ResultsChannel) -> Result<String, NulByte> {
    let mut words: Vec<String> = vec!["python3".into(), "-c".into(), PYTEST_LAUNCHER.into()];
    words.extend(channel.pytest_args());
    words.extend(tests.iter().cloned());
    shell::join(&words)
}

/// `command`, after the environment's [`BEFORE_TESTS`] script where the image has one (it
/// rebuilds compiled extensions from the tree under test); exit 90 when that fails. For runners
/// read from their output; pytest's results plugin runs the script itself, after taking the
/// channel's key, so nothing the tree's build starts can read the hand-off file.
fn before_tests(command: &str) -> String {
    format!("if [ -x {BEFORE_TESTS} ]; then {BEFORE_TESTS} || exit 90; fi; {command}")
}

/// How one task's tests are run.
pub struct TestPlan<'a> {
    pub spec: &'a EnvSpec,
    pub task: &'a SweTask,
    /// The files test_patch touches: what pytest is given, and how JUnit class names map back.
    pub test_files: &'a [String],
    pub timeout: Duration,
    pub runner: RunnerKind,
    /// The repository's CI jobs to run after the tests, in stage order.
    pub ci_jobs: &'a [CiJob],
    /// Where CI job logs go (`ci/JOB.log`).
    pub log_dir: &'a Path,
}

impl TestPlan<'_> {
    /// The command a run uses (its plugin name differs per run); an error when a test file's
    /// name cannot be a shell argument.
    pub fn command(&self) -> Result<String, NulByte> {
        match (self.task.test_command(), self.runner) {
            (Some(cmd), _) => Ok(cmd.to_owned()),
            (None, RunnerKind::Pytest) => pytest_command(self.test_files, &ResultsChannel::new(WORKSPACE)),
            (None, runner) => {
                Ok(super::runners::default_command(runner, self.test_files)?.unwrap_or_default())
            }
        }
    }

    fn task_env_map(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        self.task.environment.as_ref().map(|e| &e.env)
    }

    /// Runs the tests once in a fresh environment holding `tree_tar`, then the selected CI
    /// jobs in another.
    pub async fn run<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
    ) -> Result<TestRun, sandbox::SandboxError> {
        let mut run = if self.task.services.is_empty() {
            self.run_tests(sandbox, tree_tar, None).await?
        } else {
            self.run_with_services(sandbox, tree_tar).await?
        };
        if !self.ci_jobs.is_empty() {
            let ci = super::runners::run_ci_jobs(
                sandbox,
                self.spec,
                tree_tar,
                self.ci_jobs,
                self.task_env_map(),
                self.timeout,
                self.log_dir,
            )
            .await?;
            if let Ok((map, _)) = run.results.as_mut() {
                for outcome in &ci {
                    map.insert(super::runners::CiOutcome::id(&outcome.job), outcome.status);
                }
            }
            run.ci = ci;
        }
        Ok(run)
    }

    /// The tests alone, in a fresh environment (on the services' network when `group` is given).
    async fn run_tests<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
        group: Option<&S::Services>,
    ) -> Result<TestRun, sandbox::SandboxError> {
        match self.runner {
            RunnerKind::Pytest => self.run_pytest(sandbox, tree_tar, group).await,
            runner => self.run_other(sandbox, tree_tar, runner, group).await,
        }
    }

    /// One attempt with the task's services: a fresh group on a private network, the tests
    /// on it, the checks inside the services, then every service's log and state recorded
    /// and the group removed, whatever happened to the tests.
    async fn run_with_services<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
    ) -> Result<TestRun, sandbox::SandboxError> {
        let specs = services::specs(self.task, tree_tar, &self.spec.limits);
        let group = sandbox
            // No service's declared readiness timeout holds the run past its own deadline.
            .start_services(&specs, self.timeout)
            .await
            .map_err(|e| sandbox::SandboxError::Services(Box::new(e)))?;
        let tested = self.run_tests(sandbox, tree_tar, Some(&group)).await;
        let ran = services::run_command_checks(sandbox, &group, self.task).await;
        let (states, removed) = sandbox.stop_services(group).await;
        if let Err(e) = removed {
            tracing::warn!("removing the services failed: {}", crate::error_chain(&e));
        }
        let checks = services::finish_checks(self.task, ran, &states);
        let mut run = tested?;
        if let Ok((map, _)) = run.results.as_mut() {
            for check in &checks {
                map.insert(check.id.clone(), check.status);
            }
        }
        (run.services, run.service_logs) = services::record(&states, checks);
        Ok(run)
    }

    /// A runner whose statuses come from its own output (or the JUnit files it leaves).
    async fn run_other<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
        runner: RunnerKind,
        group: Option<&S::Services>,
    ) -> Result<TestRun, sandbox::SandboxError> {
        let command = match self.command() {
            Ok(command) => command,
            Err(e) => return Ok(TestRun::unrunnable(e)),
        };
        let order = ImportOrder::new(WORKSPACE);
        let (env, pythonpath) = imports::command_env(self.task_env_map(), &order, None);
        let handle = create_env(sandbox, self.spec, group).await?;
        let outcome = async {
            sandbox.copy_in(&handle, WORKSPACE, tree_tar.to_vec()).await?;
            sandbox.copy_in(&handle, WORKSPACE, order.files(pythonpath.as_deref())).await?;
            let request = ExecRequest {
                cmd: vec!["sh".into(), "-c".into(), before_tests(&command)],
                timeout: self.timeout,
                workdir: Some(WORKSPACE.into()),
                env,
            };
            let exec = sandbox.exec(&handle, &request).await?;
            let junit_globs = self.task.environment.as_ref().map(|e| e.junit.clone()).unwrap_or_default();
            let junit = if runner == RunnerKind::Junit && !matches!(exec.verdict, sandbox::Verdict::Timeout) {
                super::runners::collect_junit(sandbox, &handle, &junit_globs).await?
            } else {
                Vec::new()
            };
            Ok::<_, sandbox::SandboxError>((exec, junit))
        }
        .await;
        if let Err(e) = sandbox.destroy(handle).await {
            tracing::warn!("removing a test environment failed: {e}");
        }
        let (exec, junit) = outcome?;
        let results = if command.is_empty() {
            Err(Tampered::Inconsistent(format!("the `{}` runner needs the task's test_cmd", runner.as_str())))
        } else {
            super::runners::statuses(runner, &exec, &junit).map(|map| (map, 0))
        };
        let junit_xml = junit.first().map(|(_, xml)| xml.clone());
        Ok(TestRun::new(exec, results, junit_xml))
    }

    /// pytest, with results through the signed channel.
    async fn run_pytest<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
        group: Option<&S::Services>,
    ) -> Result<TestRun, sandbox::SandboxError> {
        let channel = ResultsChannel::new(WORKSPACE);
        let order = ImportOrder::new(WORKSPACE);
        let (mut env, pythonpath) =
            imports::command_env(self.task_env_map(), &order, Some(&channel.plugin_path()));
        let command = match self.task.test_command() {
            Some(cmd) => {
                env.push(channel.addopts());
                cmd.to_owned()
            }
            // Our own command passes the plugin in argv.
            None => match pytest_command(self.test_files, &channel) {
                Ok(command) => command,
                Err(e) => return Ok(TestRun::unrunnable(e)),
            },
        };
        let handle = create_env(sandbox, self.spec, group).await?;
        let outcome = async {
            sandbox.copy_in(&handle, WORKSPACE, tree_tar.to_vec()).await?;
            sandbox.copy_in(&handle, WORKSPACE, order.files(pythonpath.as_deref())).await?;
            let files = channel.files();
            let entries: Vec<(&str, &[u8], bool)> =
                files.iter().map(|(path, content)| (path.as_str(), content.as_slice(), false)).collect();
            sandbox.copy_in(&handle, WORKSPACE, sandbox::archive::tar_files(&entries)).await?;
            let request = ExecRequest {
                cmd: vec!["sh".into(), "-c".into(), command.clone()],
                timeout: self.timeout,
                workdir: Some(WORKSPACE.into()),
                env,
            };
            let exec = sandbox.exec(&handle, &request).await?;
            let signed = if matches!(exec.verdict, sandbox::Verdict::Timeout) {
                None
            } else {
                sandbox
                    .copy_out(&handle, &channel.results_path())
                    .await
                    .ok()
                    .and_then(|tar| sandbox::archive::first_file(&tar))
            };
            Ok::<_, sandbox::SandboxError>((exec, signed))
        }
        .await;
        if let Err(e) = sandbox.destroy(handle).await {
            tracing::warn!("removing a test environment failed: {e}");
        }
        let (exec, signed) = outcome?;
        let opened = channel.open(signed.as_deref());
        let junit_xml = opened.as_ref().ok().cloned();
        let graded: Vec<String> =
            self.task.fail_to_pass.iter().chain(&self.task.pass_to_pass).cloned().collect();
        let results = opened.and_then(|xml| {
            let report = junit::parse(&xml, self.test_files)
                .map_err(|e| Tampered::BadSignature(format!("signed but unreadable: {e}")))?;
            let summary = pytest_log::parse_summary_outcomes(&exec.stdout);
            channel::cross_check(
                &report.statuses,
                report.collection_errors.len(),
                summary.as_ref(),
                &graded,
            )?;
            Ok((report.statuses, report.collection_errors.len()))
        });
        Ok(TestRun::new(exec, results, junit_xml))
    }
}

/// A fresh environment for the tests: alone with no network, or on the services' network
/// as [`RUNNER_NAME`].
async fn create_env<S: Sandbox>(
    sandbox: &S,
    spec: &EnvSpec,
    group: Option<&S::Services>,
) -> Result<S::Env, sandbox::SandboxError> {
    match group {
        None => sandbox.create(spec).await,
        Some(group) => sandbox.create_in(group, spec, RUNNER_NAME).await,
    }
}

/// Whether the test runner itself could not run.
fn runner_broken(exec: &ExecResult, runner: RunnerKind) -> Option<String> {
    let sandbox::Verdict::Exit(code) = exec.verdict else { return None };
    if runner != RunnerKind::Pytest {
        return matches!(code, 126 | 127)
            .then(|| format!("the test command could not be started (exit {code})"));
    }
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

/// Everything [`evaluate`] needs besides the first run.
pub struct Evaluation<'a, S: Sandbox> {
    pub sandbox: &'a S,
    pub plan: TestPlan<'a>,
    pub flaky_reruns: usize,
    pub log_dir: &'a Path,
    /// Builds the tree without the prediction, for telling a broken environment from a
    /// prediction that broke the tests.
    pub base_tar: &'a (dyn Fn() -> Option<Vec<u8>> + Send + Sync),
}

impl<S: Sandbox> Evaluation<'_, S> {
    /// Whether the tests run and PASS_TO_PASS holds without the prediction.
    async fn base_runs(&self) -> bool {
        let Some(tar) = (self.base_tar)() else { return false };
        match self.plan.run(self.sandbox, &tar).await {
            Ok(run) => {
                let dir = self.log_dir.join(services::FIRST_RUN_LOGS).join("without-prediction");
                services::write_logs(&dir, &run.service_logs);
                run.results.is_ok_and(|(map, _)| {
                    !map.is_empty()
                        && grade::tests_status(&[], &self.plan.task.pass_to_pass, &map)
                            .pass_to_pass
                            .failure
                            .is_empty()
                })
            }
            Err(_) => false,
        }
    }
}

fn apply(result: &mut InstanceResult, outcome: verdict::Outcome) {
    result.verdict = outcome.verdict;
    result.reason = outcome.reason.map(str::to_owned);
    result.detail = outcome.detail;
    result.tests_status = outcome.tests_status;
    result.resolution = outcome.resolution;
}

/// From the first run to a verdict ([`verdict`] decides; this runs what it asks for): the
/// check without the prediction when nothing usable came back, flaky reruns of the whole
/// command in fresh environments, then grading.
pub async fn evaluate<S: Sandbox>(
    context: &Evaluation<'_, S>,
    tree_tar: &[u8],
    first: Result<TestRun, sandbox::SandboxError>,
    mut result: InstanceResult,
) -> InstanceResult {
    let task = context.plan.task;
    let run = match first {
        Ok(run) => run,
        Err(e) => {
            result.verdict = Verdict::EnvError;
            if matches!(e, sandbox::SandboxError::Services(_)) {
                result.reason = Some("service_not_ready".into());
            }
            result.detail = Some(format!("sandbox: {}", crate::error_chain(&e)));
            return result;
        }
    };
    result.services = run.services.clone();
    services::write_logs(&context.log_dir.join(services::FIRST_RUN_LOGS), &run.service_logs);
    let _ = std::fs::write(context.log_dir.join("test_output.txt"), run.log());
    if let Some(xml) = &run.junit_xml {
        let _ = std::fs::write(context.log_dir.join("junit.xml"), xml);
    }
    result.test_exit = Some(run.exec.verdict.to_string());
    result.ci_jobs = run.ci.clone();
    let source = if context.plan.runner == RunnerKind::Pytest {
        StatusSource::Junit
    } else {
        StatusSource::RunnerOutput
    };
    let facts = RunFacts {
        exec: run.exec.verdict.clone(),
        runner_broken: runner_broken(&run.exec, context.plan.runner),
        results: run.results.clone().map(|(map, _)| map),
    };
    let step = verdict::first_step(
        task,
        &facts,
        context.plan.timeout.as_secs_f64(),
        context.plan.spec.limits.memory_bytes,
    );
    match step {
        Step::Done(outcome) => apply(&mut result, outcome),
        Step::CheckBase { why, note } => {
            let base_ok = context.base_runs().await;
            if base_ok {
                result.status_source = Some(source);
            }
            apply(&mut result, verdict::after_base_check(task, &facts, &why, note, base_ok));
        }
        Step::Grade { map, failing, note } => {
            result.status_source = Some(source);
            let mut reruns = Vec::new();
            if !failing.is_empty() && context.flaky_reruns > 0 {
                let reruns_started = Instant::now();
                let mut rerun_log = String::new();
                for index in 0..context.flaky_reruns {
                    let Ok(rerun) = context.plan.run(context.sandbox, tree_tar).await else { break };
                    let dir =
                        context.log_dir.join(services::FIRST_RUN_LOGS).join(format!("rerun-{}", index + 1));
                    services::write_logs(&dir, &rerun.service_logs);
                    rerun_log.push_str(&format!(
                        "===== rerun {} ({}) =====\n{}\n",
                        index + 1,
                        rerun.exec.verdict,
                        rerun.log()
                    ));
                    let Ok((rerun_map, _)) = rerun.results else {
                        rerun_log.push_str("(results not trusted; this rerun does not count)\n");
                        continue;
                    };
                    let all_passed =
                        grade::tests_status(&[], &failing, &rerun_map).pass_to_pass.failure.is_empty();
                    reruns.push(rerun_map);
                    if all_passed {
                        break;
                    }
                }
                let _ = std::fs::write(context.log_dir.join("reruns.txt"), rerun_log);
                result.timings.reruns_s = reruns_started.elapsed().as_secs_f64();
            }
            let (outcome, flaky) = verdict::graded(task, &map, &failing, &reruns, note);
            apply(&mut result, outcome);
            result.flaky_tests = flaky;
        }
    }
    if let Some(note) = services::crash_note(&result.services) {
        result.detail = Some(match result.detail.take() {
            Some(detail) => format!("{detail}; {note}"),
            None => note,
        });
    }
    result
}

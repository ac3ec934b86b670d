//! Test runs in the sandbox and the verdict they lead to. Every run (the first, each flaky
//! rerun, the check without the prediction) gets a fresh environment holding the prepared
//! tree and a fresh results channel; results count only when the harness plugin signed them
//! and pytest's summary agrees ([`crate::grade::channel`]).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::grade::channel::{self, ResultsChannel, Tampered};
use crate::grade::{self, junit, pytest_log, Resolution, StatusMap, StatusSource, Verdict};
use crate::sandbox::{self, EnvSpec, ExecRequest, ExecResult, Sandbox};
use crate::tasks::SweTask;

use super::{InstanceResult, WORKSPACE};

/// What one run gave: how the command ended, and its statuses if they can be trusted.
pub struct TestRun {
    pub exec: ExecResult,
    /// Test id to status, and how many modules failed to be collected.
    pub results: Result<(StatusMap, usize), Tampered>,
    /// The signed JUnit XML, when there was one.
    pub junit_xml: Option<String>,
}

impl TestRun {
    pub fn log(&self) -> String {
        format!("{}\n{}", self.exec.stdout, self.exec.stderr)
    }
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The shell command that runs `tests` (files or node ids) with pytest and the harness plugin.
fn pytest_command(tests: &[String], channel: &ResultsChannel) -> String {
    let mut words: Vec<String> = vec!["python3".into(), "-m".into(), "pytest".into()];
    words.extend(channel.pytest_args());
    words.extend(tests.iter().cloned());
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

/// How one task's tests are run.
pub struct TestPlan<'a> {
    pub spec: &'a EnvSpec,
    pub task: &'a SweTask,
    /// The files test_patch touches: what pytest is given, and how JUnit class names map back.
    pub test_files: &'a [String],
    pub timeout: Duration,
}

impl TestPlan<'_> {
    /// The command a run uses, for the logs (its plugin name differs per run).
    pub fn command_shown(&self) -> String {
        match &self.task.test_cmd {
            Some(cmd) => cmd.clone(),
            None => pytest_command(self.test_files, &ResultsChannel::new(WORKSPACE)),
        }
    }

    /// Runs the tests once in a fresh environment holding `tree_tar`.
    pub async fn run<S: Sandbox>(
        &self,
        sandbox: &S,
        tree_tar: &[u8],
    ) -> Result<TestRun, sandbox::SandboxError> {
        let channel = ResultsChannel::new(WORKSPACE);
        let task_env = self.task.environment.as_ref().map(|e| &e.env);
        let mut env: Vec<(String, String)> = task_env
            .map(|e| {
                e.iter()
                    .filter(|(k, _)| k.as_str() != "PYTHONPATH")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let existing_path = task_env.and_then(|e| e.get("PYTHONPATH")).map(String::as_str);
        let mut channel_env = channel.env(existing_path);
        let command = match &self.task.test_cmd {
            Some(cmd) => cmd.clone(),
            None => {
                // Our own command passes the plugin in argv already.
                channel_env.retain(|(k, _)| k != "PYTEST_ADDOPTS");
                pytest_command(self.test_files, &channel)
            }
        };
        env.extend(channel_env);
        let handle = sandbox.create(self.spec).await?;
        let outcome = async {
            sandbox.copy_in(&handle, WORKSPACE, tree_tar.to_vec()).await?;
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
                    .and_then(|tar| first_file_in_tar(&tar))
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
        Ok(TestRun { exec, results, junit_xml })
    }
}

fn first_file_in_tar(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.header().entry_type().is_file() {
            let mut out = Vec::new();
            // The results file is small; a huge one is not ours.
            entry.by_ref().take(64 << 20).read_to_end(&mut out).ok()?;
            return Some(out);
        }
    }
    None
}

fn verdict_text(verdict: &sandbox::Verdict) -> String {
    verdict.to_string()
}

/// Whether the test runner itself could not run.
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

/// Whether the test process was killed (out of memory, or by a signal) rather than finishing.
fn killed(exec: &ExecResult) -> bool {
    match exec.verdict {
        sandbox::Verdict::Oom => true,
        sandbox::Verdict::Exit(code) => code >= 128,
        _ => false,
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
            Ok(run) => run.results.is_ok_and(|(map, _)| {
                !map.is_empty()
                    && grade::tests_status(&[], &self.plan.task.pass_to_pass, &map)
                        .pass_to_pass
                        .failure
                        .is_empty()
            }),
            Err(_) => false,
        }
    }
}

fn add_detail(result: &mut InstanceResult, note: &str) {
    result.detail = Some(match result.detail.take() {
        Some(d) => format!("{d}; {note}"),
        None => note.into(),
    });
}

/// From the first run to a verdict: infrastructure failures, results that cannot be trusted,
/// the check without the prediction when nothing ran, flaky reruns, then grading.
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
            result.detail = Some(format!("sandbox: {}", crate::error_chain(&e)));
            return result;
        }
    };
    let _ = std::fs::write(context.log_dir.join("test_output.txt"), run.log());
    if let Some(xml) = &run.junit_xml {
        let _ = std::fs::write(context.log_dir.join("junit.xml"), xml);
    }
    result.test_exit = Some(verdict_text(&run.exec.verdict));
    let nothing = || grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &StatusMap::new());
    match &run.exec.verdict {
        sandbox::Verdict::Timeout => {
            result.verdict = Verdict::Timeout;
            result.detail = Some(format!("tests ran past {} s", context.plan.timeout.as_secs_f64()));
            result.tests_status = nothing();
            return result;
        }
        sandbox::Verdict::Error(why) => {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!("sandbox: {why}"));
            return result;
        }
        sandbox::Verdict::Oom => {
            result.detail =
                Some(format!("tests ran out of memory ({} bytes)", context.plan.spec.limits.memory_bytes));
        }
        sandbox::Verdict::Exit(_) => {}
    }

    // No usable results: the environment's fault when the tests cannot run without the
    // prediction either; otherwise the prediction's.
    let usable = match (&run.results, runner_broken(&run.exec)) {
        (Ok((map, _)), None) if !map.is_empty() => None,
        (_, Some(why)) => Some(why),
        (Ok(_), None) => Some("no test results with the prediction".to_owned()),
        (Err(tampered), None) => Some(tampered.to_string()),
    };
    if let Some(why) = usable {
        result.tests_status = nothing();
        if !context.base_runs().await {
            result.verdict = Verdict::EnvError;
            result.detail = Some(format!("{why}, and the tests do not run without the prediction either"));
            return result;
        }
        result.status_source = Some(StatusSource::Junit);
        match &run.results {
            Err(_) if killed(&run.exec) => {
                result.verdict = Verdict::Unresolved;
                result.reason = Some("tests_crashed".into());
                add_detail(
                    &mut result,
                    &format!("the test process was killed ({}) before reporting", run.exec.verdict),
                );
            }
            Err(tampered) => {
                result.verdict = Verdict::Error;
                result.reason = Some("results_tampered".into());
                add_detail(&mut result, &format!("{tampered} (test command: {})", run.exec.verdict));
            }
            Ok(_) => {
                result.verdict = Verdict::Unresolved;
                add_detail(&mut result, &format!("{why} (the tests run without it)"));
            }
        }
        return result;
    }
    let Ok((mut map, _)) = run.results else { unreachable!("checked above") };
    result.status_source = Some(StatusSource::Junit);

    // Failing PASS_TO_PASS tests get reruns of the whole command, each in a fresh environment,
    // before they count against the patch.
    let failing = grade::tests_status(&task.fail_to_pass, &task.pass_to_pass, &map).pass_to_pass.failure;
    if !failing.is_empty() && context.flaky_reruns > 0 {
        let reruns_started = Instant::now();
        let mut rerun_maps = Vec::new();
        let mut rerun_log = String::new();
        for index in 0..context.flaky_reruns {
            let Ok(rerun) = context.plan.run(context.sandbox, tree_tar).await else { break };
            rerun_log.push_str(&format!(
                "===== rerun {} ({}) =====\n{}\n",
                index + 1,
                verdict_text(&rerun.exec.verdict),
                rerun.log()
            ));
            let Ok((rerun_map, _)) = rerun.results else {
                rerun_log.push_str("(results not trusted; this rerun does not count)\n");
                continue;
            };
            let all_passed = grade::tests_status(&[], &failing, &rerun_map).pass_to_pass.failure.is_empty();
            rerun_maps.push(rerun_map);
            if all_passed {
                break;
            }
        }
        let _ = std::fs::write(context.log_dir.join("reruns.txt"), rerun_log);
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

//! Test runs for runners other than pytest (cargo, go, node, Django's and SymPy's own, any
//! JUnit writer), and the repository's own CI jobs as grading steps. Each runner's output
//! becomes per-test statuses through its parser in [`crate::grade::runners`]; each CI job is one
//! outcome `ci:JOB`.
//!
//! Unlike pytest's signed channel, these statuses are read from the runner's own output,
//! which code running inside the test process could imitate; the parsers' cross-checks
//! (per-test lines against the runner's summary, every started test finished) make that
//! harder, not impossible. The README's trust model says so.

use std::path::Path;
use std::time::Duration;

use crate::grade::channel::Tampered;
use crate::grade::runners::{self, RunnerKind, RunnerReport};
use crate::grade::{StatusMap, TestStatus};
use crate::sandbox::{self, EnvSpec, ExecRequest, ExecResult, Sandbox};
use crate::tasks::ci::CiJob;

use super::imports::{self, ImportOrder};
use super::WORKSPACE;
use crate::shell::{self, NulByte};

/// Marks where one test file's TAP starts in the output of the Node command.
const NODE_FILE_MARKER: &str = "# repairbench-file: ";

/// The command a runner's tests run with, unless the task gives `test_cmd`. `test_files`:
/// the task's test files (Node runs them one by one, so each test's id gets its file).
pub fn default_command(runner: RunnerKind, test_files: &[String]) -> Result<Option<String>, NulByte> {
    Ok(match runner {
        // Doctests and ignored tests run too but are not graded; `--offline` because the
        // dependencies were fetched when the environment was built.
        // The tree arrives with fixed file times, older than the environment's prebuilt
        // `target/`: touched first, or cargo would run the environment commit's test binaries.
        // libtest's lines and cargo's `Running` lines are read interleaved.
        RunnerKind::Cargo => Some(
            "find . -path ./target -prune -o -path ./.cargo-home -prune -o -type f -exec touch {} + \
             && cargo test --offline --no-fail-fast 2>&1"
                .into(),
        ),
        RunnerKind::Go => Some("go test -json ./...".into()),
        RunnerKind::Node if test_files.is_empty() => Some("node --test --test-reporter=tap".into()),
        RunnerKind::Node => {
            let mut steps = Vec::new();
            for file in test_files {
                let quoted = shell::quote(file)?;
                steps.push(format!(
                    "echo '{NODE_FILE_MARKER}'{quoted}; node --test --test-reporter=tap {quoted}"
                ));
            }
            Some(steps.join("; "))
        }
        // As SWE-bench runs them: Django's test labels are the test files' modules under
        // `tests/`, SymPy's runner takes the files.
        RunnerKind::Django => {
            let labels: Vec<String> = test_files
                .iter()
                .filter_map(|f| f.strip_prefix("tests/")?.strip_suffix(".py").map(|m| m.replace('/', ".")))
                .collect();
            let mut words: Vec<String> = ["python3", "tests/runtests.py", "--verbosity", "2"]
                .into_iter()
                .chain(["--settings=test_sqlite", "--parallel", "1"])
                .map(String::from)
                .collect();
            words.extend(labels);
            Some(format!("{} 2>&1", shell::join(&words)?))
        }
        RunnerKind::Sympy => {
            let mut words: Vec<String> =
                ["python3", "bin/test", "-C", "--verbose"].map(String::from).to_vec();
            words.extend(test_files.iter().cloned());
            Some(format!("{} 2>&1", shell::join(&words)?))
        }
        RunnerKind::Pytest | RunnerKind::Junit => None,
    })
}

/// Node's output read file by file (see [`default_command`]).
fn node_statuses(stdout: &str) -> RunnerReport {
    if !stdout.contains(NODE_FILE_MARKER) {
        return runners::tap::parse(stdout);
    }
    let mut all = RunnerReport { statuses: StatusMap::new(), summary: None, problems: Vec::new() };
    for section in stdout.split(NODE_FILE_MARKER).skip(1) {
        let (file, tap) = section.split_once('\n').unwrap_or((section, ""));
        let report = runners::tap::parse_for_file(tap, file.trim());
        all.statuses.extend(report.statuses);
        all.problems.extend(report.problems);
    }
    all
}

/// Statuses from a finished run's output (and, for JUnit, the report files it left).
pub fn statuses(
    runner: RunnerKind,
    exec: &ExecResult,
    junit_files: &[(String, String)],
) -> Result<StatusMap, Tampered> {
    let report: RunnerReport = match runner {
        RunnerKind::Cargo => runners::libtest::parse(&format!("{}\n{}", exec.stdout, exec.stderr)),
        RunnerKind::Go => runners::gotest::parse(&exec.stdout),
        RunnerKind::Node => node_statuses(&exec.stdout),
        RunnerKind::Django => runners::django::parse(&format!("{}\n{}", exec.stdout, exec.stderr)),
        RunnerKind::Sympy => runners::sympy::parse(&format!("{}\n{}", exec.stdout, exec.stderr)),
        RunnerKind::Junit => runners::junit_generic::parse(junit_files)
            .map_err(|e| Tampered::Inconsistent(format!("unreadable JUnit report: {e}")))?,
        RunnerKind::Pytest => unreachable!("pytest results come through the signed channel"),
    };
    if exec.stdout_truncated {
        return Err(Tampered::Inconsistent(
            "the runner's output was cut in the middle by the output cap (raise --output-cap)".into(),
        ));
    }
    if !report.problems.is_empty() {
        return Err(Tampered::Inconsistent(report.problems.join("; ")));
    }
    Ok(report.statuses)
}

/// Lists the files matching `globs` under the workspace (run in the environment after the
/// tests), then copies each out.
pub async fn collect_junit<S: Sandbox>(
    sandbox: &S,
    env: &S::Env,
    globs: &[String],
) -> Result<Vec<(String, String)>, sandbox::SandboxError> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let script = format!(
        "for f in {}; do [ -f \"$f\" ] && printf '%s\\n' \"$f\"; done; true",
        globs
            .iter()
            .map(|g| g.replace(['\'', '"', '`', '$', ';', '&', '|'], ""))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let request = ExecRequest {
        cmd: vec!["sh".into(), "-c".into(), script],
        timeout: Duration::from_secs(60),
        workdir: Some(WORKSPACE.into()),
        env: Vec::new(),
    };
    let listed = sandbox.exec(env, &request).await?;
    let mut files = Vec::new();
    for path in listed.stdout.lines().filter(|l| !l.is_empty()).take(1000) {
        let tar = sandbox.copy_out(env, &format!("{WORKSPACE}/{path}")).await?;
        if let Some(bytes) = sandbox::archive::first_file(&tar) {
            files.push((path.to_owned(), String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    Ok(files)
}

/// How one CI job went.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CiOutcome {
    pub job: String,
    pub status: TestStatus,
    /// `skipped_by_sandbox: why` for a job the sandbox cannot run; the exit otherwise.
    pub detail: String,
}

impl CiOutcome {
    pub fn id(job: &str) -> String {
        format!("ci:{job}")
    }
}

/// The shell script of one job: its variables, then each command, stopping at the first
/// failure as CI runners do.
fn job_script(job: &CiJob) -> Result<String, NulByte> {
    let mut script = String::from("set -e\n");
    for (name, value) in &job.variables {
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            script.push_str(&format!("export {name}={}\n", shell::quote(value)?));
        }
    }
    for command in &job.commands {
        script.push_str(command);
        script.push('\n');
    }
    Ok(script)
}

/// Runs `jobs` in the order given (stage order), each in a fresh environment of its own holding
/// `tree_tar`, with no network, so nothing one job leaves (a file, a background process) is
/// there for the next. Each job's log goes to `log_dir/ci/JOB.log`.
pub async fn run_ci_jobs<S: Sandbox>(
    sandbox: &S,
    spec: &EnvSpec,
    tree_tar: &[u8],
    jobs: &[CiJob],
    task_env: Option<&std::collections::BTreeMap<String, String>>,
    timeout: Duration,
    log_dir: &Path,
) -> Result<Vec<CiOutcome>, sandbox::SandboxError> {
    let ci_logs = log_dir.join("ci");
    let _ = std::fs::create_dir_all(&ci_logs);
    let mut outcomes = Vec::new();
    for job in jobs.iter().filter(|j| j.unsupported.is_some()) {
        let why = job.unsupported.clone().unwrap_or_default();
        let _ = std::fs::write(
            ci_logs.join(format!("{}.log", safe(&job.name))),
            format!("skipped_by_sandbox: {why}\n"),
        );
        outcomes.push(CiOutcome {
            job: job.name.clone(),
            status: TestStatus::Skipped,
            detail: format!("skipped_by_sandbox: {why}"),
        });
    }
    for job in jobs.iter().filter(|j| j.unsupported.is_none()) {
        let exec = match job_script(job) {
            Ok(script) => run_ci_job(sandbox, spec, tree_tar, job, script, task_env, timeout).await?,
            Err(e) => ExecResult::error(format!("the job's script cannot be written: {e}")),
        };
        let _ = std::fs::write(
            ci_logs.join(format!("{}.log", safe(&job.name))),
            format!(
                "$ {}\n{}\n{}\n[{}]\n",
                job.commands.join("\n$ "),
                exec.stdout,
                exec.stderr,
                exec.verdict
            ),
        );
        let status =
            if exec.verdict == sandbox::Verdict::Exit(0) { TestStatus::Passed } else { TestStatus::Failed };
        outcomes.push(CiOutcome { job: job.name.clone(), status, detail: exec.verdict.to_string() });
    }
    Ok(outcomes)
}

/// One CI job in a fresh environment, removed afterwards whatever happened.
async fn run_ci_job<S: Sandbox>(
    sandbox: &S,
    spec: &EnvSpec,
    tree_tar: &[u8],
    job: &CiJob,
    script: String,
    task_env: Option<&std::collections::BTreeMap<String, String>>,
    timeout: Duration,
) -> Result<ExecResult, sandbox::SandboxError> {
    let order = ImportOrder::new(WORKSPACE);
    let (mut env, pythonpath) = imports::command_env(task_env, &order, None);
    env.push(("CI".into(), "true".into()));
    env.push(("CI_JOB_NAME".into(), job.name.clone()));
    let handle = sandbox.create(spec).await?;
    let ran = async {
        sandbox.copy_in(&handle, WORKSPACE, tree_tar.to_vec()).await?;
        sandbox.copy_in(&handle, WORKSPACE, order.files(pythonpath.as_deref())).await?;
        let request = ExecRequest {
            cmd: vec!["sh".into(), "-c".into(), script],
            timeout,
            workdir: Some(WORKSPACE.into()),
            env,
        };
        sandbox.exec(&handle, &request).await
    }
    .await;
    if let Err(e) = sandbox.destroy(handle).await {
        tracing::warn!("removing a CI environment failed: {e}");
    }
    ran
}

fn safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_script_exports_its_variables_and_stops_at_the_first_failure() {
        let job = CiJob {
            name: "lint".into(),
            stage: "lint".into(),
            commands: vec!["python3 -m pyflakes src".into(), "echo done".into()],
            variables: [("LINT_STRICT".to_string(), "it's on".to_string()), ("BAD NAME".into(), "x".into())]
                .into_iter()
                .collect(),
            needs: Vec::new(),
            image: None,
            unsupported: None,
            notes: Vec::new(),
            source: "gitlab".into(),
        };
        let script = job_script(&job).unwrap();
        assert_eq!(script, "set -e\nexport LINT_STRICT=\"it's on\"\npython3 -m pyflakes src\necho done\n");
    }
}

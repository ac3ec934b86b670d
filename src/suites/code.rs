//! Executing generated programs: many per container, judged by harness/run_programs.py. A
//! program passes only when its whole body ran to its end (the runner's wrapper then reports a
//! per-program nonce on a pipe only the runner reads); any exit, signal or exception before that
//! fails it. Statuses come back on the runner's own output stream, out of the programs' reach.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::sandbox::archive::{tar_entries, Entry, Owner};
use crate::sandbox::{EnvSpec, ExecRequest, Sandbox, SandboxUser, Verdict};
use crate::stats::pass_at_k;

use super::SuiteError;

/// The in-container runner, shipped inside the binary.
pub const RUNNER_SCRIPT: &str = include_str!("../../harness/run_programs.py");

/// Address space of one program process (RLIMIT_AS): a hog gets MemoryError long before the
/// container is full.
pub const PROGRAM_MEMORY_BYTES: u64 = 1 << 30;
/// Processes and threads one program may have at once (RLIMIT_NPROC of its own uid).
pub const PROGRAM_NPROC: i64 = 64;
/// Container memory beyond the programs' own: the runner, the /tmp and /dev/shm tmpfs (64 MiB
/// each, charged to the container) and slack for page tables.
const CONTAINER_MEMORY_OVERHEAD: u64 = 512 << 20;
/// Container pids beyond the programs' own: init, the runner and its kill helpers.
const CONTAINER_PIDS_OVERHEAD: i64 = 64;
/// Runs per program when the harness, not the program, fails (the first and two reruns).
pub const HARNESS_ATTEMPTS: usize = 3;

/// One program to run; it passes when its body runs to its end within `timeout_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub source: String,
    pub timeout_s: f64,
}

/// How one program ended. A timeout is not a wrong answer; `Error` means the harness could
/// not produce a result for it (never something a program can choose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgramStatus {
    Passed,
    Failed,
    Timeout,
    Error,
}

/// Something that runs programs in isolation (the sandbox in production).
pub trait CodeRunner {
    /// One status per program, in order.
    fn run(&self, programs: &[Program]) -> Result<Vec<ProgramStatus>, SuiteError>;

    /// What the programs run in (an image), for the fingerprint of every result it judged.
    fn environment(&self) -> String;
}

/// Per-item scores of a code item from its programs' statuses. Harness errors are left out of
/// every rate and of pass@k's n (pass@k is skipped when fewer than k samples remain) and
/// counted in `harness_errors`.
pub fn code_scores(statuses: &[ProgramStatus], ks: &[usize]) -> BTreeMap<String, f64> {
    let count = |s: ProgramStatus| statuses.iter().filter(|&&x| x == s).count();
    let errors = count(ProgramStatus::Error);
    let n = statuses.len() - errors;
    let mut scores = BTreeMap::from([("harness_errors".to_string(), errors as f64)]);
    if n == 0 {
        return scores;
    }
    let (passed, timeouts) = (count(ProgramStatus::Passed), count(ProgramStatus::Timeout));
    for &k in ks.iter().filter(|&&k| k <= n) {
        scores.insert(format!("pass@{k}"), pass_at_k(n, passed, k));
    }
    scores.insert("timeout_rate".into(), timeouts as f64 / n as f64);
    scores.insert("wrong_rate".into(), (n - passed - timeouts) as f64 / n as f64);
    scores
}

/// The environment programs run in: `base` with the supervisor user and limits sized so that
/// `workers` programs at their own limits fit in the container together (one program's hog or
/// fork bomb hits its own rlimit, not its siblings).
pub fn program_env(base: &EnvSpec, workers: usize) -> EnvSpec {
    let workers = workers.max(1);
    let mut spec = base.clone();
    spec.user = SandboxUser::Supervisor;
    spec.limits.memory_bytes = workers as u64 * PROGRAM_MEMORY_BYTES + CONTAINER_MEMORY_OVERHEAD;
    spec.limits.pids = workers as i64 * PROGRAM_NPROC + CONTAINER_PIDS_OVERHEAD;
    // Status lines carry stderr tails; a cut stream would turn results into harness errors.
    spec.limits.output_cap_bytes = spec.limits.output_cap_bytes.max(16 << 20);
    spec
}

/// Runs programs in a fresh sandbox environment per batch.
pub struct SandboxCodeRunner<S: Sandbox> {
    pub sandbox: S,
    /// Image and CPUs; user and the other limits come from [`program_env`].
    pub spec: EnvSpec,
    pub runtime: tokio::runtime::Handle,
    /// Programs run side by side inside the container.
    pub workers: usize,
}

#[derive(Deserialize)]
struct RunnerResult {
    id: String,
    status: ProgramStatus,
    #[serde(default)]
    harness_error: Option<String>,
}

fn sandbox_err(op: &'static str, e: impl std::error::Error) -> SuiteError {
    SuiteError::Execution { op, message: crate::error_chain(&e) }
}

impl<S: Sandbox> SandboxCodeRunner<S> {
    /// One attempt: all `programs` in one fresh container. A program without a status line
    /// (the runner died, the exec timed out) gets `Error`; `Err` means the container itself
    /// failed.
    async fn run_once(&self, programs: &[Program]) -> Result<Vec<ProgramStatus>, SuiteError> {
        let workers = self.workers.max(1);
        let spec = program_env(&self.spec, workers);
        let workdir = spec.workdir.trim_end_matches('/').to_string();
        let mut jobs = Vec::new();
        let files: Vec<String> = (0..programs.len()).map(|i| format!("jobs/p{i}.py")).collect();
        for (i, p) in programs.iter().enumerate() {
            jobs.push(serde_json::json!({"id": format!("p{i}"), "file": format!("p{i}.py"), "timeout": p.timeout_s}));
        }
        let jobs = serde_json::to_vec(&jobs).expect("JSON of plain values");
        // Everything belongs to root, so the jobs directory (0700) is the runner's alone and the
        // scratch parent (1733) lets each program make its own directory without seeing the
        // others'.
        let mut entries = vec![
            Entry { path: "run_programs.py", mode: 0o644, contents: Some(RUNNER_SCRIPT.as_bytes()) },
            Entry { path: "jobs", mode: 0o700, contents: None },
            Entry { path: "scratch", mode: 0o1733, contents: None },
        ];
        for (file, p) in files.iter().zip(programs) {
            entries.push(Entry { path: file, mode: 0o600, contents: Some(p.source.as_bytes()) });
        }
        entries.push(Entry { path: "jobs/jobs.json", mode: 0o600, contents: Some(&jobs) });
        let tar = tar_entries(&entries, Owner::Root).map_err(|e| sandbox_err("pack programs", e))?;
        let budget: f64 = programs.iter().map(|p| p.timeout_s + 0.5).sum::<f64>() / workers as f64 + 60.0;
        let budget = crate::deadline::timeout_secs(budget).unwrap_or(crate::deadline::MAX_TIMEOUT);

        let env = self.sandbox.create(&spec).await.map_err(|e| sandbox_err("create", e))?;
        let result = async {
            self.sandbox.copy_in(&env, &workdir, tar).await.map_err(|e| sandbox_err("copy_in", e))?;
            let request = ExecRequest {
                cmd: vec![
                    "python3".into(),
                    "-I".into(),
                    format!("{workdir}/run_programs.py"),
                    format!("{workdir}/jobs"),
                    format!("{workdir}/scratch"),
                    workers.to_string(),
                    PROGRAM_MEMORY_BYTES.to_string(),
                    PROGRAM_NPROC.to_string(),
                ],
                timeout: budget,
                workdir: Some(workdir.clone()),
                env: Vec::new(),
            };
            self.sandbox.exec(&env, &request).await.map_err(|e| sandbox_err("exec", e))
        }
        .await;
        if let Err(e) = self.sandbox.destroy(env).await {
            tracing::warn!(error = %e, "could not remove the program runner's environment");
        }
        let exec = result?;
        if !matches!(exec.verdict, Verdict::Exit(0)) || exec.stdout_truncated {
            tracing::warn!(verdict = %exec.verdict, truncated = exec.stdout_truncated, stderr = %exec.stderr,
                "program runner did not finish cleanly; programs without a result are harness errors");
        }
        let mut by_id: HashMap<String, ProgramStatus> = HashMap::new();
        for line in exec.stdout.lines().filter(|l| !l.trim().is_empty()) {
            let r: RunnerResult = match serde_json::from_str(line) {
                Ok(r) => r,
                // A line cut by the output cap or a dying runner; its program reruns.
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable runner line");
                    continue;
                }
            };
            if let Some(message) = &r.harness_error {
                tracing::warn!(id = %r.id, %message, "the runner could not judge a program");
            }
            // Only the runner writes here; a repeated id would be its bug, so trust neither.
            let status = if by_id.contains_key(&r.id) { ProgramStatus::Error } else { r.status };
            by_id.insert(r.id, status);
        }
        Ok((0..programs.len())
            .map(|i| by_id.get(&format!("p{i}")).copied().unwrap_or(ProgramStatus::Error))
            .collect())
    }
}

impl<S: Sandbox> CodeRunner for SandboxCodeRunner<S> {
    fn environment(&self) -> String {
        self.spec.image.clone()
    }

    /// Programs the harness failed on are rerun in a fresh container, up to
    /// [`HARNESS_ATTEMPTS`] runs in all; those still failing stay `Error`. When no attempt
    /// got a container to run in, the error is returned instead: nothing was measured.
    fn run(&self, programs: &[Program]) -> Result<Vec<ProgramStatus>, SuiteError> {
        let mut statuses = vec![ProgramStatus::Error; programs.len()];
        let mut todo: Vec<usize> = (0..programs.len()).collect();
        let mut last_failure = None;
        let mut ran = false;
        for attempt in 1..=HARNESS_ATTEMPTS {
            if todo.is_empty() {
                break;
            }
            if attempt > 1 {
                tracing::warn!(attempt, programs = todo.len(), "rerunning programs after harness errors");
            }
            let batch: Vec<Program> = todo.iter().map(|&i| programs[i].clone()).collect();
            match self.runtime.block_on(self.run_once(&batch)) {
                Ok(got) => {
                    ran = true;
                    for (&i, status) in todo.iter().zip(got) {
                        statuses[i] = status;
                    }
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "the program container failed");
                    last_failure = Some(e);
                }
            }
            todo.retain(|&i| statuses[i] == ProgramStatus::Error);
        }
        match last_failure {
            Some(e) if !ran => Err(e),
            _ => Ok(statuses),
        }
    }
}

/// A runner on a connected Docker sandbox with `image` (the pipeline connects and picks it).
/// `runtime` must be the runtime the sandbox's calls run on.
pub fn sandbox_runner(
    sandbox: crate::sandbox::DockerSandbox,
    image: String,
    runtime: tokio::runtime::Handle,
    workers: usize,
) -> SandboxCodeRunner<crate::sandbox::DockerSandbox> {
    let mut spec = EnvSpec::new(image);
    // Programs run side by side; give the container a CPU per worker (up to the host's). The
    // other limits and the user are set per run by `program_env`.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    spec.limits.cpus = workers.clamp(1, cores) as f64;
    SandboxCodeRunner { sandbox, spec, runtime, workers }
}

//! Executing generated programs: many per container, each in its own subprocess with its own
//! timeout (harness/run_programs.py), one result line per program.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sandbox::{EnvSpec, ExecRequest, Sandbox, Verdict};

use super::SuiteError;

/// The in-container runner, shipped inside the binary.
pub const RUNNER_SCRIPT: &str = include_str!("../../harness/run_programs.py");

/// One program to run; it passes when it exits 0 within `timeout_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub source: String,
    pub timeout_s: f64,
}

/// How one program ended. A timeout is not a wrong answer; `Error` means the harness could
/// not produce a result for it.
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
}

/// Runs programs in a fresh sandbox environment per batch.
pub struct SandboxCodeRunner<S: Sandbox> {
    pub sandbox: S,
    pub spec: EnvSpec,
    pub runtime: tokio::runtime::Handle,
    /// Programs run side by side inside the container.
    pub workers: usize,
}

#[derive(Deserialize)]
struct RunnerResult {
    id: String,
    status: ProgramStatus,
}

fn tar_of(files: &[(String, Vec<u8>)]) -> Result<Vec<u8>, SuiteError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append_data(&mut header, name, bytes.as_slice())
            .map_err(|e| sandbox_err("pack programs", e))?;
    }
    builder.into_inner().map_err(|e| sandbox_err("pack programs", e))
}

fn sandbox_err(op: &'static str, e: impl std::error::Error) -> SuiteError {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    SuiteError::Execution { op, message }
}

impl<S: Sandbox> SandboxCodeRunner<S> {
    async fn run_async(&self, programs: &[Program]) -> Result<Vec<ProgramStatus>, SuiteError> {
        let workdir = self.spec.workdir.trim_end_matches('/').to_string();
        let mut files = vec![("run_programs.py".to_string(), RUNNER_SCRIPT.as_bytes().to_vec())];
        let mut jobs = Vec::new();
        for (i, p) in programs.iter().enumerate() {
            let file = format!("p{i}.py");
            jobs.push(serde_json::json!({"id": format!("p{i}"), "file": file, "timeout": p.timeout_s}));
            files.push((format!("jobs/{file}"), p.source.as_bytes().to_vec()));
        }
        files.push(("jobs/jobs.json".into(), serde_json::to_vec(&jobs).expect("JSON of plain values")));
        let workers = self.workers.max(1);
        let budget: f64 = programs.iter().map(|p| p.timeout_s + 0.5).sum::<f64>() / workers as f64 + 60.0;

        let env = self.sandbox.create(&self.spec).await.map_err(|e| sandbox_err("create", e))?;
        let result = async {
            self.sandbox.copy_in(&env, &workdir, tar_of(&files)?).await.map_err(|e| sandbox_err("copy_in", e))?;
            let request = ExecRequest {
                cmd: vec![
                    "python3".into(),
                    format!("{workdir}/run_programs.py"),
                    format!("{workdir}/jobs"),
                    format!("{workdir}/out/results.jsonl"),
                    workers.to_string(),
                ],
                timeout: Duration::from_secs_f64(budget),
                workdir: Some(workdir.clone()),
                env: Vec::new(),
            };
            let exec = self.sandbox.exec(&env, &request).await.map_err(|e| sandbox_err("exec", e))?;
            if !matches!(exec.verdict, Verdict::Exit(0)) {
                tracing::warn!(verdict = %exec.verdict, stderr = %exec.stderr, "program runner did not finish cleanly");
                if !matches!(exec.verdict, Verdict::Timeout) {
                    return Err(SuiteError::Execution {
                        op: "run programs",
                        message: format!("{}: {}", exec.verdict, exec.stderr.trim()),
                    });
                }
            }
            let tar = self
                .sandbox
                .copy_out(&env, &format!("{workdir}/out/results.jsonl"))
                .await
                .map_err(|e| sandbox_err("copy_out", e))?;
            let mut archive = tar::Archive::new(tar.as_slice());
            let mut text = String::new();
            for entry in archive.entries().map_err(|e| sandbox_err("read results", e))? {
                let mut entry = entry.map_err(|e| sandbox_err("read results", e))?;
                entry.read_to_string(&mut text).map_err(|e| sandbox_err("read results", e))?;
            }
            Ok::<_, SuiteError>(text)
        }
        .await;
        if let Err(e) = self.sandbox.destroy(env).await {
            tracing::warn!(error = %e, "could not remove the program runner's environment");
        }
        let text = result?;
        let mut by_id: HashMap<String, ProgramStatus> = HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let r: RunnerResult = serde_json::from_str(line).map_err(|e| sandbox_err("parse results", e))?;
            by_id.insert(r.id, r.status);
        }
        Ok((0..programs.len())
            .map(|i| by_id.get(&format!("p{i}")).copied().unwrap_or(ProgramStatus::Error))
            .collect())
    }
}

impl<S: Sandbox> CodeRunner for SandboxCodeRunner<S> {
    fn run(&self, programs: &[Program]) -> Result<Vec<ProgramStatus>, SuiteError> {
        if programs.is_empty() {
            return Ok(Vec::new());
        }
        self.runtime.block_on(self.run_async(programs))
    }
}

/// A runner on the local Docker engine with the default Python image (built if missing).
/// `runtime` must be the runtime later calls block on.
pub fn docker_runner(
    runtime: &tokio::runtime::Runtime,
    workers: usize,
) -> Result<SandboxCodeRunner<crate::sandbox::DockerSandbox>, SuiteError> {
    let (sandbox, image) = runtime.block_on(async {
        let sandbox =
            crate::sandbox::DockerSandbox::connect().await.map_err(|e| sandbox_err("connect", e))?;
        let image = crate::sandbox::ensure_default_image(sandbox.docker())
            .await
            .map_err(|e| sandbox_err("default image", e))?;
        Ok::<_, SuiteError>((sandbox, image))
    })?;
    let mut spec = EnvSpec::new(image);
    // Programs run side by side; give the container a CPU per worker (up to the host's).
    spec.limits.cpus = workers.clamp(1, crate::env::threads()) as f64;
    Ok(SandboxCodeRunner { sandbox, spec, runtime: runtime.handle().clone(), workers })
}

//! One command as a fresh container's main process (`sandbox run`, services' jobs).

use std::time::{Duration, Instant};

use bollard::errors::Error as DockerError;
use bollard::query_parameters::{AttachContainerOptionsBuilder, WaitContainerOptions};
use futures_util::StreamExt;

use super::super::output::{CappedOutput, OutputSink};
use super::super::{EnvSpec, ExecResult, SandboxError, Verdict};
use super::{backend, drain, DockerSandbox};

/// One command to run in a fresh container (see [`DockerSandbox::run_job`]).
#[derive(Debug, Clone, Default)]
pub struct Job {
    pub cmd: Vec<String>,
    pub timeout: Duration,
    /// Tar archive unpacked into the workspace before the command starts.
    pub files_in: Option<Vec<u8>>,
    /// Path (relative to the workspace, or absolute) returned as tar after the command.
    pub copy_out: Option<String>,
    /// Copy out even when the command timed out.
    pub copy_out_after_timeout: bool,
}

/// What [`DockerSandbox::run_job`] returns.
#[derive(Debug, Clone)]
pub struct JobOutput {
    pub result: ExecResult,
    pub files_out: Option<Vec<u8>>,
}

impl DockerSandbox {
    /// Runs one job in a fresh hardened container with the command as its main process
    /// (create, copy in, attach, start, wait, inspect, copy out, remove: the fewest round
    /// trips). The container is removed whatever happens.
    pub async fn run_job(
        &self,
        spec: &EnvSpec,
        job: &Job,
        sink: Option<OutputSink>,
    ) -> Result<JobOutput, SandboxError> {
        self.run_job_on(spec, job, sink, None).await
    }

    /// [`Self::run_job`] on a private network (`None`: no network), reachable there by `aliases`.
    pub async fn run_job_on(
        &self,
        spec: &EnvSpec,
        job: &Job,
        sink: Option<OutputSink>,
        network: Option<(&str, Vec<String>)>,
    ) -> Result<JobOutput, SandboxError> {
        // Files go in before the start and come out after the exit: a disk-backed workspace.
        let config =
            self.container_config(spec, with_own_deadline(job), network, super::policy::Workspace::Disk);
        let id = self.create_container(config, "job").await?;
        let outcome = self.run_job_in(&id, spec, job, sink).await;
        let removed = self.remove_container(&id).await;
        let output = outcome?;
        removed?;
        Ok(output)
    }

    async fn run_job_in(
        &self,
        id: &str,
        spec: &EnvSpec,
        job: &Job,
        sink: Option<OutputSink>,
    ) -> Result<JobOutput, SandboxError> {
        if let Some(tar) = &job.files_in {
            self.upload(id, &spec.workdir, tar.clone()).await?;
        }
        let attach = AttachContainerOptionsBuilder::default().stream(true).stdout(true).stderr(true).build();
        let attached = self.call("attach", self.docker.attach_container(id, Some(attach))).await?;
        let started = Instant::now();
        if let Err(e) = self.raw_call("start container", self.docker.start_container(id, None)).await? {
            // The command could not be started (e.g. no such executable): a result, not an
            // infrastructure failure.
            let message = match e {
                DockerError::DockerResponseServerError { message, .. } => message,
                other => other.to_string(),
            };
            let result = ExecResult { duration: started.elapsed(), ..ExecResult::error(message) };
            return Ok(JobOutput { result, files_out: None });
        }
        let deadline = tokio::time::Instant::from_std(started + job.timeout);
        let cap = spec.limits.output_cap_bytes;
        let mut out = CappedOutput::new(cap);
        let mut err = CappedOutput::new(cap);
        let finished = tokio::time::timeout_at(deadline, async {
            drain(attached.output, &mut out, &mut err, sink.as_ref()).await;
            let mut wait = self.docker.wait_container(id, None::<WaitContainerOptions>);
            // One item: the exit (bollard reports a non-zero exit as an error value).
            match wait.next().await {
                None | Some(Ok(_)) | Some(Err(DockerError::DockerContainerWaitError { .. })) => Ok(()),
                Some(Err(e)) => Err(backend("wait")(e)),
            }
        })
        .await;
        let mut verdict = match finished {
            Err(_elapsed) => {
                self.kill(id).await;
                Verdict::Timeout
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(())) => {
                let inspect = self.call("inspect", self.docker.inspect_container(id, None)).await?;
                let state = inspect.state.unwrap_or_default();
                if state.oom_killed == Some(true) {
                    Verdict::Oom
                } else {
                    Verdict::Exit(state.exit_code.unwrap_or(-1))
                }
            }
        };
        let stderr_truncated = err.truncated();
        let mut stderr = err.into_string();
        // `timeout` could not start the command (no such executable): the same result as the
        // engine's own refusal to start it.
        if let (Verdict::Exit(126 | 127), Some(rest)) =
            (&verdict, stderr.strip_prefix("timeout: failed to run command "))
        {
            verdict = Verdict::Error(rest.trim().to_owned());
            stderr.clear();
        }
        let duration = started.elapsed();
        let files_out = match &job.copy_out {
            Some(path) if verdict != Verdict::Timeout || job.copy_out_after_timeout => {
                Some(self.download(id, &self.resolve(spec, path)).await?)
            }
            _ => None,
        };
        let result = ExecResult {
            verdict,
            stdout_truncated: out.truncated(),
            stderr_truncated,
            stdout: out.into_string(),
            stderr,
            duration,
        };
        Ok(JobOutput { result, files_out })
    }

    fn resolve(&self, spec: &EnvSpec, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{}", spec.workdir.trim_end_matches('/'), path)
        }
    }
}

/// How long a job container may outlive its deadline: repairbench's own deadline (kill, then
/// remove) comes first; this one only matters when repairbench itself was killed.
const JOB_GRACE: Duration = Duration::from_secs(10);

/// The job's command under coreutils' `timeout`, so the container ends by itself shortly after
/// the job's deadline even when no repairbench process is left to stop it.
fn with_own_deadline(job: &Job) -> Vec<String> {
    let limit = (job.timeout + JOB_GRACE).as_secs().max(1);
    let mut cmd = vec!["timeout".to_string(), "-s".into(), "KILL".into(), limit.to_string()];
    cmd.extend(job.cmd.iter().cloned());
    cmd
}

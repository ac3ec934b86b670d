//! Environments: a created container that commands run in as execs ([`Sandbox`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};

use super::super::output::{CappedOutput, OutputSink};
use super::super::services::{ServiceError, ServiceGroup, ServiceSpec, ServiceState};
use super::super::{EnvSpec, ExecRequest, ExecResult, Sandbox, SandboxError, SandboxUser, Verdict};
use super::policy::{Workspace, WORKSPACE_SEED};
use super::{backend, drain, is_status, DockerSandbox};

/// Deadline of copying an image's prepared workspace into a fresh one.
const SEED_TIMEOUT: Duration = Duration::from_secs(600);

/// A created container. It starts on its first copy in or exec (its memory-backed workspace
/// holds data only while it runs); a timed-out exec kills it.
#[derive(Debug)]
pub struct DockerEnv {
    pub id: String,
    image: String,
    workdir: String,
    user: SandboxUser,
    output_cap: usize,
    started: AtomicBool,
    dead: AtomicBool,
    oom_kills_seen: AtomicU64,
}

impl DockerEnv {
    pub(crate) fn new(id: String, spec: &EnvSpec, started: bool) -> Self {
        Self {
            id,
            image: spec.image.clone(),
            workdir: spec.workdir.clone(),
            user: spec.user,
            output_cap: spec.limits.output_cap_bytes,
            started: AtomicBool::new(started),
            dead: AtomicBool::new(false),
            oom_kills_seen: AtomicU64::new(0),
        }
    }
}

impl DockerSandbox {
    /// [`Sandbox::create`] on a private network (`None`: no network), reachable there by `aliases`.
    pub async fn create_on(
        &self,
        spec: &EnvSpec,
        network: Option<(&str, Vec<String>)>,
    ) -> Result<DockerEnv, SandboxError> {
        // The main process only keeps the container alive, and only for the run's lifetime: if
        // we die without removing it, it stops by itself (commands run as execs).
        let lifetime = format!("{}", self.env_lifetime.as_secs().max(1));
        let config = self.container_config(spec, vec!["sleep".into(), lifetime], network, Workspace::Memory);
        let id = self.create_container(config, "env").await?;
        Ok(DockerEnv::new(id, spec, false))
    }

    /// Like [`Sandbox::exec`], also sending output to `sink` as it arrives.
    pub async fn exec_streaming(
        &self,
        env: &DockerEnv,
        request: &ExecRequest,
        sink: Option<OutputSink>,
    ) -> Result<ExecResult, SandboxError> {
        if env.dead.load(Ordering::SeqCst) {
            return Ok(ExecResult::error("the environment was killed (an earlier exec timed out)"));
        }
        self.ensure_started(env).await?;
        let mut exec_env = vec!["HOME=/tmp".to_string()];
        exec_env.extend(request.env.iter().map(|(k, v)| format!("{k}={v}")));
        let options = CreateExecOptions {
            cmd: Some(request.cmd.clone()),
            env: Some(exec_env),
            working_dir: Some(request.workdir.clone().unwrap_or_else(|| env.workdir.clone())),
            user: Some(env.user.uid_gid().to_string()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = self.call("create exec", self.docker.create_exec(&env.id, options)).await?;
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + request.timeout);
        let mut out = CappedOutput::new(env.output_cap);
        let mut err = CappedOutput::new(env.output_cap);
        let finished = tokio::time::timeout_at(deadline, async {
            match self
                .docker
                .start_exec(&exec.id, None::<StartExecOptions>)
                .await
                .map_err(backend("start exec"))?
            {
                StartExecResults::Attached { output, .. } => {
                    drain(output, &mut out, &mut err, sink.as_ref()).await
                }
                StartExecResults::Detached => {}
            }
            // The stream can end a moment before the engine records the exit code.
            loop {
                let inspect = self.docker.inspect_exec(&exec.id).await.map_err(backend("inspect exec"))?;
                if inspect.running != Some(true) {
                    return Ok::<_, SandboxError>(inspect.exit_code);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let verdict = match finished {
            Err(_elapsed) => {
                // Killing the container is the only sure way to stop everything the command
                // started; the environment is dead afterwards.
                env.dead.store(true, Ordering::SeqCst);
                self.kill(&env.id).await;
                Verdict::Timeout
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(code)) => {
                let code = code.unwrap_or(-1);
                if code == 137 && self.oom_killed_since_last(env).await {
                    Verdict::Oom
                } else {
                    Verdict::Exit(code)
                }
            }
        };
        Ok(ExecResult {
            verdict,
            stdout_truncated: out.truncated(),
            stderr_truncated: err.truncated(),
            stdout: out.into_string(),
            stderr: err.into_string(),
            duration: started.elapsed(),
        })
    }

    async fn ensure_started(&self, env: &DockerEnv) -> Result<(), SandboxError> {
        if env.started.load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.raw_call("start container", self.docker.start_container(&env.id, None)).await? {
            Ok(()) => {}
            Err(e) if is_status(&e, 304) => {}
            Err(e) => return Err(backend("start container")(e)),
        }
        env.started.store(true, Ordering::SeqCst);
        if self.has_workspace_seed(&env.image).await? {
            self.seed_workspace(env).await?;
        }
        Ok(())
    }

    /// Copies the image's prepared workspace ([`WORKSPACE_SEED`]) into the fresh one, as the
    /// sandbox user.
    async fn seed_workspace(&self, env: &DockerEnv) -> Result<(), SandboxError> {
        let options = CreateExecOptions {
            cmd: Some(vec![
                "cp".to_string(),
                "-a".into(),
                format!("{WORKSPACE_SEED}/."),
                format!("{}/", env.workdir),
            ]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: Some(super::SANDBOX_USER.to_string()),
            ..Default::default()
        };
        let copy = async {
            let exec = self.docker.create_exec(&env.id, options).await?;
            if let StartExecResults::Attached { output, .. } = self.docker.start_exec(&exec.id, None).await? {
                let mut out = CappedOutput::new(64 << 10);
                let mut err = CappedOutput::new(64 << 10);
                drain(output, &mut out, &mut err, None).await;
                let code = self.docker.inspect_exec(&exec.id).await?.exit_code;
                return Ok::<_, bollard::errors::Error>((code, err.into_string()));
            }
            Ok((None, String::new()))
        };
        match self.raw_call_within("seed workspace", SEED_TIMEOUT, copy).await? {
            Ok((Some(0), _)) => Ok(()),
            Ok((code, stderr)) => Err(SandboxError::Seed(format!("cp exited {code:?}: {}", stderr.trim()))),
            Err(e) => Err(backend("seed workspace")(e)),
        }
    }

    /// Whether the kernel OOM-killed a process in the container since we last looked. An exec
    /// is not the container's main process, so the engine's `OOMKilled` flag does not cover
    /// it; the memory cgroup's own counter does (cgroup v1 `memory.oom_control`, v2
    /// `memory.events`), read from inside the container.
    async fn oom_killed_since_last(&self, env: &DockerEnv) -> bool {
        let options = CreateExecOptions {
            cmd: Some(vec![
                "cat".to_string(),
                "/sys/fs/cgroup/memory/memory.oom_control".to_string(),
                "/sys/fs/cgroup/memory.events".to_string(),
            ]),
            attach_stdout: Some(true),
            attach_stderr: Some(false),
            user: Some(env.user.uid_gid().to_string()),
            ..Default::default()
        };
        let read = async {
            let exec = self.docker.create_exec(&env.id, options).await.ok()?;
            let Ok(StartExecResults::Attached { output, .. }) = self.docker.start_exec(&exec.id, None).await
            else {
                return None;
            };
            let mut out = CappedOutput::new(64 << 10);
            let mut err = CappedOutput::new(0);
            drain(output, &mut out, &mut err, None).await;
            Some(out.into_string())
        };
        let Some(Some(text)) = crate::deadline::within(crate::deadline::DOCKER_CALL, read).await else {
            return false;
        };
        let kills: u64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let before = env.oom_kills_seen.swap(kills, Ordering::SeqCst);
        kills > before
    }
}

impl Sandbox for DockerSandbox {
    type Env = DockerEnv;

    async fn create(&self, spec: &EnvSpec) -> Result<DockerEnv, SandboxError> {
        self.create_on(spec, None).await
    }

    async fn copy_in(&self, env: &DockerEnv, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        // The workspace holds data only while the container runs.
        self.ensure_started(env).await?;
        self.upload(&env.id, dest, tar).await
    }

    async fn copy_out(&self, env: &DockerEnv, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.download(&env.id, path).await
    }

    async fn exec(&self, env: &DockerEnv, request: &ExecRequest) -> Result<ExecResult, SandboxError> {
        self.exec_streaming(env, request, None).await
    }

    async fn destroy(&self, env: DockerEnv) -> Result<(), SandboxError> {
        self.remove_container(&env.id).await
    }

    async fn ensure_layer(
        &self,
        layer: &crate::sandbox::LayerSpec,
    ) -> Result<String, crate::sandbox::ImageError> {
        crate::sandbox::layers::ensure_layer(self.docker(), layer).await
    }

    type Services = ServiceGroup;

    async fn start_services(
        &self,
        services: &[ServiceSpec],
        ready_timeout: Duration,
    ) -> Result<ServiceGroup, ServiceError> {
        ServiceGroup::start(self, services, ready_timeout).await
    }

    async fn create_in(
        &self,
        services: &ServiceGroup,
        spec: &EnvSpec,
        alias: &str,
    ) -> Result<DockerEnv, SandboxError> {
        services.create_env(spec, alias).await
    }

    async fn exec_in_service(
        &self,
        services: &ServiceGroup,
        service: &str,
        request: &ExecRequest,
    ) -> Result<ExecResult, SandboxError> {
        services.exec(service, request).await
    }

    async fn stop_services(&self, services: ServiceGroup) -> (Vec<ServiceState>, Result<(), SandboxError>) {
        let states = services.states().await;
        (states, services.teardown().await)
    }
}

//! The Docker backend (bollard): hardened containers, capped output, deadlines we enforce,
//! and labels on everything so nothing outlives its run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::errors::Error as DockerError;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig, Mount, MountType,
    MountVolumeOptions, NetworkingConfig,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, ListNetworksOptionsBuilder,
    ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};

use super::output::{CappedOutput, OutputChunk, OutputSink, StreamKind};
use super::{EnvSpec, ExecRequest, ExecResult, Sandbox, SandboxError, SandboxUser, Verdict};

/// Label every container, network, volume and image of ours carries.
pub const LABEL_OWNER: &str = "repairbench.owner";
pub const OWNER: &str = "repairbench";
/// Label naming the run (one [`DockerSandbox`]) that made a resource.
pub const LABEL_RUN: &str = "repairbench.run";
/// Labels identifying the creating process: pid, its start time, and the host it ran on, so a
/// later start can tell a crashed run's leftovers from a live run's resources.
pub const LABEL_PID: &str = "repairbench.pid";
pub const LABEL_PID_START: &str = "repairbench.pid_start";
pub const LABEL_HOST: &str = "repairbench.host";

/// The unprivileged user untrusted code runs as (the default image names it `sandbox`).
pub const SANDBOX_USER: &str = "1000:1000";
/// Size of the private `/tmp` (memory-backed, charged to the container's memory limit).
const TMP_SIZE: &str = "64m";

fn backend(op: &'static str) -> impl FnOnce(DockerError) -> SandboxError {
    move |e| SandboxError::Backend { op, source: Box::new(e) }
}

fn is_status(e: &DockerError, code: u16) -> bool {
    matches!(e, DockerError::DockerResponseServerError { status_code, .. } if *status_code == code)
}

/// Start time (clock ticks since boot) of a process, from `/proc/PID/stat`; with the pid it
/// identifies the process even when pids are reused.
fn process_start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its closing paren are plain.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_string)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// The Docker sandbox. Cheap to clone; clones share the run id.
#[derive(Clone)]
pub struct DockerSandbox {
    docker: Docker,
    run_id: String,
    labels: HashMap<String, String>,
    counter: std::sync::Arc<AtomicU64>,
    reaped_at_connect: Reaped,
}

/// What [`DockerSandbox::reap_leftovers`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub containers: usize,
    pub networks: usize,
    pub volumes: usize,
}

impl DockerSandbox {
    /// Connects to the local engine (`DOCKER_HOST` or the default socket), negotiates the API
    /// version, and removes what crashed runs left behind.
    pub async fn connect() -> Result<Self, SandboxError> {
        let unavailable = |e: DockerError| SandboxError::EngineUnavailable(Box::new(e));
        // Long builds and imports stream for minutes; our own deadlines bound runs instead.
        let docker = Docker::connect_with_local_defaults()
            .map_err(unavailable)?
            .with_timeout(Duration::from_secs(6 * 3600));
        let docker = docker.negotiate_version().await.map_err(unavailable)?;
        docker.ping().await.map_err(unavailable)?;
        let pid = std::process::id().to_string();
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let run_id = format!("{pid}-{:x}", nanos & 0xffff_ffff_ffff);
        let labels = HashMap::from([
            (LABEL_OWNER.to_string(), OWNER.to_string()),
            (LABEL_RUN.to_string(), run_id.clone()),
            (LABEL_PID_START.to_string(), process_start_time(&pid).unwrap_or_default()),
            (LABEL_PID.to_string(), pid),
            (LABEL_HOST.to_string(), host_name()),
        ]);
        let mut sandbox = Self {
            docker,
            run_id,
            labels,
            counter: Default::default(),
            reaped_at_connect: Reaped::default(),
        };
        let reaped = sandbox.reap_leftovers().await?;
        sandbox.reaped_at_connect = reaped.clone();
        if reaped != Reaped::default() {
            tracing::info!(
                "removed leftovers of crashed runs: {} containers, {} networks, {} volumes",
                reaped.containers,
                reaped.networks,
                reaped.volumes
            );
        }
        Ok(sandbox)
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// What [`Self::connect`] removed of crashed runs.
    pub fn reaped_at_connect(&self) -> &Reaped {
        &self.reaped_at_connect
    }

    /// The id every resource of this run is labelled with (`repairbench.run`).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Labels for a new resource of this run.
    pub fn labels(&self) -> HashMap<String, String> {
        self.labels.clone()
    }

    /// A fresh resource name within this run.
    pub(crate) fn next_name(&self, what: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("repairbench-{}-{what}{n}", self.run_id)
    }

    fn owner_filter(extra: Option<String>) -> HashMap<&'static str, Vec<String>> {
        let mut labels = vec![format!("{LABEL_OWNER}={OWNER}")];
        labels.extend(extra);
        HashMap::from([("label", labels)])
    }

    /// Whether the process that made a resource (by its labels) is gone.
    fn creator_is_gone(labels: &HashMap<String, String>) -> bool {
        if labels.get(LABEL_HOST).map(String::as_str) != Some(host_name().as_str()) {
            // Made by a process on another machine sharing this engine: not ours to judge.
            return false;
        }
        let Some(pid) = labels.get(LABEL_PID) else { return true };
        match process_start_time(pid) {
            None => true,
            Some(start) => labels.get(LABEL_PID_START).is_some_and(|s| *s != start),
        }
    }

    /// Removes containers, networks and volumes whose creating process no longer exists.
    pub async fn reap_leftovers(&self) -> Result<Reaped, SandboxError> {
        self.remove_matching(None, Self::creator_is_gone).await
    }

    /// Removes everything this run made (used on Ctrl-C and at the end of a run).
    pub async fn remove_run_resources(&self) -> Result<Reaped, SandboxError> {
        self.remove_matching(Some(format!("{LABEL_RUN}={}", self.run_id)), |_| true).await
    }

    async fn remove_matching(
        &self,
        extra: Option<String>,
        select: impl Fn(&HashMap<String, String>) -> bool,
    ) -> Result<Reaped, SandboxError> {
        let filters = Self::owner_filter(extra);
        let mut reaped = Reaped::default();
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default().all(true).filters(&filters).build(),
            ))
            .await
            .map_err(backend("list containers"))?;
        for c in containers {
            if select(&c.labels.clone().unwrap_or_default()) {
                if let Some(id) = c.id {
                    if self.remove_container(&id).await.is_ok() {
                        reaped.containers += 1;
                    }
                }
            }
        }
        let networks = self
            .docker
            .list_networks(Some(ListNetworksOptionsBuilder::default().filters(&filters).build()))
            .await
            .map_err(backend("list networks"))?;
        for n in networks {
            if select(&n.labels.clone().unwrap_or_default()) {
                if let Some(id) = n.id {
                    match self.docker.remove_network(&id).await {
                        Ok(()) => reaped.networks += 1,
                        Err(e) if is_status(&e, 404) => {}
                        Err(e) => tracing::warn!("could not remove network {id}: {e}"),
                    }
                }
            }
        }
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptionsBuilder::default().filters(&filters).build()))
            .await
            .map_err(backend("list volumes"))?;
        for v in volumes.volumes.unwrap_or_default() {
            if select(&v.labels) {
                match self
                    .docker
                    .remove_volume(&v.name, None::<bollard::query_parameters::RemoveVolumeOptions>)
                    .await
                {
                    Ok(()) => reaped.volumes += 1,
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => tracing::warn!("could not remove volume {}: {e}", v.name),
                }
            }
        }
        Ok(reaped)
    }

    /// Force-removes a container and its anonymous volumes; a missing one is fine.
    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), SandboxError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            // 409: removal already in progress (e.g. Ctrl-C cleanup racing the normal path).
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(backend("remove container")(e)),
        }
    }

    /// The hardened container configuration for untrusted code, the one place it is built:
    /// the spec's user (see [`SandboxUser`]), no capabilities beyond the supervisor's three,
    /// no new privileges, read-only root, limits, a private workspace and `/tmp`. `network` is
    /// `None` for no network at all, or a private network (see [`super::services`]) with aliases.
    pub(crate) fn container_config(
        &self,
        spec: &EnvSpec,
        cmd: Vec<String>,
        network: Option<(&str, Vec<String>)>,
    ) -> ContainerCreateBody {
        let limits = &spec.limits;
        let mut env = vec!["HOME=/tmp".to_string()];
        env.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        let volume_labels = self.labels();
        let no_network = network.is_none();
        let (network_mode, networking_config) = match network {
            None => ("none".to_string(), None),
            Some((name, aliases)) => (
                name.to_string(),
                Some(NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(
                        name.to_string(),
                        EndpointSettings { aliases: Some(aliases), ..Default::default() },
                    )])),
                }),
            ),
        };
        // The supervisor is root only for switching uids and killing what they leave.
        let cap_add = match spec.user {
            SandboxUser::Unprivileged => None,
            SandboxUser::Supervisor => Some(["SETUID", "SETGID", "KILL"].map(String::from).to_vec()),
        };
        ContainerCreateBody {
            image: Some(spec.image.clone()),
            user: Some(spec.user.uid_gid().to_string()),
            entrypoint: Some(vec![]),
            cmd: Some(cmd),
            env: Some(env),
            working_dir: Some(spec.workdir.clone()),
            labels: Some(self.labels()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            network_disabled: Some(no_network),
            networking_config,
            host_config: Some(HostConfig {
                network_mode: Some(network_mode),
                memory: Some(limits.memory_bytes as i64),
                // Equal to memory: no swap, so a hog hits the limit instead of the disk.
                memory_swap: Some(limits.memory_bytes as i64),
                nano_cpus: Some((limits.cpus * 1e9) as i64),
                pids_limit: Some(limits.pids),
                cap_drop: Some(vec!["ALL".to_string()]),
                cap_add,
                security_opt: Some(vec!["no-new-privileges".to_string()]),
                readonly_rootfs: Some(true),
                // A tiny init as pid 1 reaps orphans so they do not eat the pids limit.
                init: Some(true),
                tmpfs: Some(HashMap::from([(
                    "/tmp".to_string(),
                    format!("rw,nosuid,nodev,exec,size={TMP_SIZE},mode=1777"),
                )])),
                // The workspace is a container-private anonymous volume: writable, seeded from
                // the image (owner included), removed with the container, and reachable by the
                // archive API even before start or after exit, unlike a tmpfs.
                mounts: Some(vec![Mount {
                    target: Some(spec.workdir.clone()),
                    typ: Some(MountType::VOLUME),
                    volume_options: Some(MountVolumeOptions {
                        labels: Some(volume_labels),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                // Output is read from the attach stream with a cap; the engine keeps no log
                // file a flood could fill the disk with.
                log_config: Some(HostConfigLogConfig { typ: Some("none".to_string()), config: None }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) async fn create_container(
        &self,
        config: ContainerCreateBody,
        what: &str,
    ) -> Result<String, SandboxError> {
        let image = config.image.clone().unwrap_or_default();
        let options = CreateContainerOptionsBuilder::default().name(&self.next_name(what)).build();
        match self.docker.create_container(Some(options), config).await {
            Ok(created) => Ok(created.id),
            Err(e) if is_status(&e, 404) => Err(SandboxError::ImageNotFound(image)),
            Err(e) => Err(backend("create container")(e)),
        }
    }

    async fn upload(&self, id: &str, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptionsBuilder::default().path(dest).build();
        self.docker
            .upload_to_container(id, Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(backend("copy in"))
    }

    async fn download(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
        let mut stream = self.docker.download_from_container(id, Some(options));
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.map_err(backend("copy out"))?);
        }
        Ok(out)
    }

    async fn kill(&self, id: &str) {
        let options = KillContainerOptionsBuilder::default().signal("KILL").build();
        if let Err(e) = self.docker.kill_container(id, Some(options)).await {
            // 409: not running any more, which is what we wanted.
            if !is_status(&e, 409) && !is_status(&e, 404) {
                tracing::warn!("could not kill container {id}: {e}");
            }
        }
    }

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
        let config = self.container_config(spec, job.cmd.clone(), network);
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
        let attached = self.docker.attach_container(id, Some(attach)).await.map_err(backend("attach"))?;
        let started = Instant::now();
        if let Err(e) = self.docker.start_container(id, None).await {
            // The command could not be started (e.g. no such executable): a result, not an
            // infrastructure failure.
            let result = ExecResult {
                verdict: Verdict::Error(start_error_message(&e)),
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                duration: started.elapsed(),
            };
            return Ok(JobOutput { result, files_out: None });
        }
        let deadline = tokio::time::Instant::from_std(started + job.timeout);
        let cap = spec.limits.output_cap_bytes;
        let mut out = CappedOutput::new(cap);
        let mut err = CappedOutput::new(cap);
        let finished = tokio::time::timeout_at(deadline, async {
            drain(attached.output, &mut out, &mut err, sink.as_ref()).await;
            let mut wait =
                self.docker.wait_container(id, None::<bollard::query_parameters::WaitContainerOptions>);
            // One item: the exit (bollard reports a non-zero exit as an error value).
            match wait.next().await {
                None | Some(Ok(_)) | Some(Err(DockerError::DockerContainerWaitError { .. })) => Ok(()),
                Some(Err(e)) => Err(backend("wait")(e)),
            }
        })
        .await;
        let verdict = match finished {
            Err(_elapsed) => {
                self.kill(id).await;
                Verdict::Timeout
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(())) => {
                let inspect = self.docker.inspect_container(id, None).await.map_err(backend("inspect"))?;
                let state = inspect.state.unwrap_or_default();
                if state.oom_killed == Some(true) {
                    Verdict::Oom
                } else {
                    Verdict::Exit(state.exit_code.unwrap_or(-1))
                }
            }
        };
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
            stderr_truncated: err.truncated(),
            stdout: out.into_string(),
            stderr: err.into_string(),
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
        let exec = self.docker.create_exec(&env.id, options).await.map_err(backend("create exec"))?;
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
        match self.docker.start_container(&env.id, None).await {
            Ok(()) => {}
            Err(e) if is_status(&e, 304) => {}
            Err(e) => return Err(backend("start container")(e)),
        }
        env.started.store(true, Ordering::SeqCst);
        Ok(())
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
        let Ok(exec) = self.docker.create_exec(&env.id, options).await else { return false };
        let Ok(StartExecResults::Attached { output, .. }) = self.docker.start_exec(&exec.id, None).await
        else {
            return false;
        };
        let mut out = CappedOutput::new(64 << 10);
        let mut err = CappedOutput::new(0);
        drain(output, &mut out, &mut err, None).await;
        let kills: u64 = out
            .into_string()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let before = env.oom_kills_seen.swap(kills, Ordering::SeqCst);
        kills > before
    }
}

/// Reads an attach/exec stream to its end into capped buffers, forwarding to `sink`.
async fn drain(
    mut stream: std::pin::Pin<
        Box<dyn Stream<Item = Result<bollard::container::LogOutput, DockerError>> + Send>,
    >,
    out: &mut CappedOutput,
    err: &mut CappedOutput,
    sink: Option<&OutputSink>,
) {
    use bollard::container::LogOutput;
    while let Some(item) = stream.next().await {
        let (kind, bytes) = match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                (StreamKind::Stdout, message)
            }
            Ok(LogOutput::StdErr { message }) => (StreamKind::Stderr, message),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                tracing::debug!("output stream ended: {e}");
                break;
            }
        };
        let buffer = if kind == StreamKind::Stdout { &mut *out } else { &mut *err };
        let kept = buffer.push(&bytes);
        if let Some(sink) = sink {
            if !kept.is_empty() {
                let _ = sink.send(OutputChunk { stream: kind, bytes: kept.to_vec() });
            }
        }
    }
}

fn start_error_message(e: &DockerError) -> String {
    match e {
        DockerError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

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

/// A created container. It starts on its first exec; a timed-out exec kills it.
#[derive(Debug)]
pub struct DockerEnv {
    pub id: String,
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
        // The main process only keeps the container alive; commands run as execs.
        let config = self.container_config(spec, vec!["sleep".into(), "infinity".into()], network);
        let id = self.create_container(config, "env").await?;
        Ok(DockerEnv::new(id, spec, false))
    }
}

impl Sandbox for DockerSandbox {
    type Env = DockerEnv;

    async fn create(&self, spec: &EnvSpec) -> Result<DockerEnv, SandboxError> {
        self.create_on(spec, None).await
    }

    async fn copy_in(&self, env: &DockerEnv, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
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
}

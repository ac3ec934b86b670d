//! The Docker backend (bollard): hardened containers ([`policy`]), capped output, deadlines we
//! enforce, and labels on everything so nothing outlives its run ([`cleanup`]).

mod cleanup;
mod exec;
mod job;
pub mod policy;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::errors::Error as DockerError;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, KillContainerOptionsBuilder,
    RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};

use super::output::{CappedOutput, OutputChunk, OutputSink, StreamKind};
use super::{EnvSpec, SandboxError};
use crate::deadline::DOCKER_CALL;

pub use cleanup::{Reaped, LABEL_HOST, LABEL_OWNER, LABEL_PID, LABEL_PID_START, LABEL_RUN, OWNER};
pub use exec::DockerEnv;
pub use job::{Job, JobOutput};
pub use policy::SANDBOX_USER;

/// Bytes one copy out of a container may bring back; more is an error, never host memory.
pub const COPY_OUT_CAP: usize = 64 << 20;
/// Deadline of one copy into or out of a container (a repository's tree can be large).
const COPY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long an environment's container lives when the run sets no lifetime of its own.
pub const DEFAULT_ENV_LIFETIME: Duration = Duration::from_secs(6 * 3600);
/// The engine's own limit on any one request: only long image builds and imports come near it;
/// every other call has a deadline of its own (see [`DockerSandbox::call`]).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

fn backend(op: &'static str) -> impl FnOnce(DockerError) -> SandboxError {
    move |e| SandboxError::Backend { op, source: Box::new(e) }
}

fn is_status(e: &DockerError, code: u16) -> bool {
    matches!(e, DockerError::DockerResponseServerError { status_code, .. } if *status_code == code)
}

/// The Docker sandbox. Cheap to clone; clones share the run id and its stop switch.
#[derive(Clone)]
pub struct DockerSandbox {
    docker: Docker,
    run_id: String,
    labels: HashMap<String, String>,
    counter: Arc<AtomicU64>,
    reaped_at_connect: Reaped,
    env_lifetime: Duration,
    /// Set once the run is stopping: no new containers from then on.
    stopping: Arc<AtomicBool>,
    /// Container creations under way, waited for before a stopping run removes what it made.
    creating: Arc<AtomicUsize>,
    /// Image to whether it carries a workspace seed ([`Self::has_workspace_seed`]).
    seeded: Arc<std::sync::Mutex<HashMap<String, bool>>>,
}

impl DockerSandbox {
    /// Connects to the local engine (`DOCKER_HOST` or the default socket), negotiates the API
    /// version, and removes what runs whose process is gone left behind.
    pub async fn connect() -> Result<Self, SandboxError> {
        let unavailable = |e: DockerError| SandboxError::EngineUnavailable(Box::new(e));
        let docker = Docker::connect_with_local_defaults().map_err(unavailable)?.with_timeout(CLIENT_TIMEOUT);
        let handshake = async {
            let docker = docker.negotiate_version().await?;
            docker.ping().await?;
            Ok(docker)
        };
        let docker = crate::deadline::within(DOCKER_CALL, handshake)
            .await
            .ok_or(SandboxError::Deadline { op: "connect", seconds: DOCKER_CALL.as_secs() })?
            .map_err(unavailable)?;
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let run_id = format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff);
        let mut sandbox = Self {
            docker,
            labels: cleanup::run_labels(&run_id),
            run_id,
            counter: Default::default(),
            reaped_at_connect: Reaped::default(),
            env_lifetime: DEFAULT_ENV_LIFETIME,
            stopping: Default::default(),
            creating: Default::default(),
            seeded: Default::default(),
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

    /// How long an environment's container may live: its main process ends by itself then,
    /// so a container outlives a killed run by at most this. Longer than any exec in it.
    pub fn with_env_lifetime(mut self, lifetime: Duration) -> Self {
        self.env_lifetime = lifetime.max(Duration::from_secs(1));
        self
    }

    /// How long an environment's or a service's container may live (see [`Self::with_env_lifetime`]).
    pub fn env_lifetime(&self) -> Duration {
        self.env_lifetime
    }

    /// A fresh resource name within this run.
    pub(crate) fn next_name(&self, what: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("repairbench-{}-{what}{n}", self.run_id)
    }

    /// A short Docker call under [`DOCKER_CALL`]; its own error is kept for the caller to judge.
    pub(crate) async fn raw_call<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, DockerError>>,
    ) -> Result<Result<T, DockerError>, SandboxError> {
        self.raw_call_within(op, DOCKER_CALL, call).await
    }

    async fn raw_call_within<T>(
        &self,
        op: &'static str,
        limit: Duration,
        call: impl Future<Output = Result<T, DockerError>>,
    ) -> Result<Result<T, DockerError>, SandboxError> {
        crate::deadline::within(limit, call)
            .await
            .ok_or(SandboxError::Deadline { op, seconds: limit.as_secs() })
    }

    /// A short Docker call under [`DOCKER_CALL`].
    pub(crate) async fn call<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, DockerError>>,
    ) -> Result<T, SandboxError> {
        self.raw_call(op, call).await?.map_err(backend(op))
    }

    /// Stops the run: no container is created from now on, creations under way finish, then
    /// everything the run made is removed (on a signal). Uses a client of its own, so it works
    /// from any runtime, whatever the run's own runtime is doing.
    pub async fn stop_and_remove(&self) -> Result<Reaped, SandboxError> {
        self.stopping.store(true, Ordering::SeqCst);
        let unavailable = |e: DockerError| SandboxError::EngineUnavailable(Box::new(e));
        let mut this = self.clone();
        let docker = Docker::connect_with_local_defaults().map_err(unavailable)?.with_timeout(DOCKER_CALL);
        this.docker = docker.negotiate_version().await.map_err(unavailable)?;
        let started = Instant::now();
        while self.creating.load(Ordering::SeqCst) > 0 && started.elapsed() < DOCKER_CALL {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut reaped = this.remove_run_resources().await?;
        // A request the engine got just before we listed may still be finishing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let late = this.remove_run_resources().await?;
        reaped.containers += late.containers;
        reaped.networks += late.networks;
        reaped.volumes += late.volumes;
        Ok(reaped)
    }

    /// Force-removes a container and its anonymous volumes; a missing one is fine.
    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), SandboxError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.raw_call("remove container", self.docker.remove_container(id, Some(options))).await? {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            // 409: removal already in progress (e.g. signal cleanup racing the normal path).
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(backend("remove container")(e)),
        }
    }

    /// [`policy::container_config`] with this run's labels.
    pub(crate) fn container_config(
        &self,
        spec: &EnvSpec,
        cmd: Vec<String>,
        network: Option<(&str, Vec<String>)>,
        workspace: policy::Workspace,
    ) -> ContainerCreateBody {
        policy::container_config(spec, cmd, self.labels(), network, workspace)
    }

    /// Whether `image` carries a prepared workspace to copy into a fresh one (its
    /// [`policy::WORKSPACE_SEED_LABEL`]); asked of the engine once per image.
    pub(crate) async fn has_workspace_seed(&self, image: &str) -> Result<bool, SandboxError> {
        if let Some(known) = self.seeded.lock().unwrap_or_else(|e| e.into_inner()).get(image) {
            return Ok(*known);
        }
        let inspect = self.docker.inspect_image(image);
        let seeded = match self.raw_call("inspect image", inspect).await? {
            Ok(found) => found
                .config
                .and_then(|c| c.labels)
                .is_some_and(|labels| labels.contains_key(policy::WORKSPACE_SEED_LABEL)),
            Err(_) => return Err(SandboxError::ImageNotFound(image.to_owned())),
        };
        self.seeded.lock().unwrap_or_else(|e| e.into_inner()).insert(image.to_owned(), seeded);
        Ok(seeded)
    }

    pub(crate) async fn create_container(
        &self,
        config: ContainerCreateBody,
        what: &str,
    ) -> Result<String, SandboxError> {
        // Counted until this future ends or is dropped, so a stop waits for it.
        struct Creating<'a>(&'a AtomicUsize);
        impl Drop for Creating<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.creating.fetch_add(1, Ordering::SeqCst);
        let _creating = Creating(&self.creating);
        // Checked after counting ourselves in, so a stop either sees us or we see it.
        if self.stopping.load(Ordering::SeqCst) {
            return Err(SandboxError::Stopping);
        }
        let image = config.image.clone().unwrap_or_default();
        let options = CreateContainerOptionsBuilder::default().name(&self.next_name(what)).build();
        match self.raw_call("create container", self.docker.create_container(Some(options), config)).await? {
            Ok(created) => Ok(created.id),
            Err(e) if is_status(&e, 404) => Err(SandboxError::ImageNotFound(image)),
            Err(e) => Err(backend("create container")(e)),
        }
    }

    pub(crate) async fn upload(&self, id: &str, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptionsBuilder::default().path(dest).build();
        let upload = self.docker.upload_to_container(id, Some(options), bollard::body_full(tar.into()));
        self.raw_call_within("copy in", COPY_TIMEOUT, upload).await?.map_err(backend("copy in"))
    }

    /// `path` as a tar archive, at most [`COPY_OUT_CAP`] bytes.
    async fn download(&self, id: &str, path: &str) -> Result<Vec<u8>, SandboxError> {
        let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
        let mut stream = self.docker.download_from_container(id, Some(options));
        let collect = async {
            let mut out = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(backend("copy out"))?;
                if out.len() + chunk.len() > COPY_OUT_CAP {
                    return Err(SandboxError::CopyOutTooLarge { path: path.to_string(), cap: COPY_OUT_CAP });
                }
                out.extend_from_slice(&chunk);
            }
            Ok(out)
        };
        crate::deadline::within(COPY_TIMEOUT, collect)
            .await
            .unwrap_or(Err(SandboxError::Deadline { op: "copy out", seconds: COPY_TIMEOUT.as_secs() }))
    }

    async fn kill(&self, id: &str) {
        let options = KillContainerOptionsBuilder::default().signal("KILL").build();
        match self.raw_call("kill container", self.docker.kill_container(id, Some(options))).await {
            // 409: not running any more, which is what we wanted.
            Ok(Err(e)) if !is_status(&e, 409) && !is_status(&e, 404) => {
                tracing::warn!("could not kill container {id}: {e}")
            }
            Err(e) => tracing::warn!("could not kill container {id}: {e}"),
            Ok(_) => {}
        }
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

//! Where untrusted code runs. The [`Sandbox`] trait is small (create an environment, copy
//! files in and out as tar, exec with a deadline, tear down) so a Kubernetes backend can sit
//! beside the Docker one. Nothing here knows about models or grading.

pub mod apt;
pub mod archive;
pub mod docker;
pub mod images;
pub mod layers;
pub mod output;
pub mod services;

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use docker::{DockerEnv, DockerSandbox, Job, JobOutput};
pub use images::{ensure_default_image, ImageError};
pub use layers::{LayerSpec, ParentImage};

/// Resource limits for one environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Bytes of stdout (and, separately, stderr) kept per exec: the first half and the last half;
    /// the middle is cut and flagged.
    pub output_cap_bytes: usize,
    /// Bytes the workspace of an environment or service may hold. It is memory-backed, so
    /// nothing written there reaches the host's disk, and it counts against `memory_bytes`.
    #[serde(default = "default_workspace_bytes")]
    pub workspace_bytes: u64,
}

/// The workspace's default size cap: 1 GiB.
pub const DEFAULT_WORKSPACE_BYTES: u64 = 1 << 30;

fn default_workspace_bytes() -> u64 {
    DEFAULT_WORKSPACE_BYTES
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 2 << 30,
            cpus: 1.0,
            pids: 256,
            output_cap_bytes: 1 << 20,
            workspace_bytes: DEFAULT_WORKSPACE_BYTES,
        }
    }
}

/// Who the container's processes (main and execs) run as.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SandboxUser {
    /// uid 1000 (`sandbox` in the default image), no capabilities at all.
    #[default]
    Unprivileged,
    /// uid 0 holding only CAP_SETUID, CAP_SETGID and CAP_KILL: a judge that starts each
    /// untrusted program under a uid of its own and kills what it leaves behind. Without
    /// CAP_DAC_OVERRIDE it is an ordinary owner for file permissions (it cannot write the
    /// image user's workspace, only what it owns).
    Supervisor,
}

impl SandboxUser {
    /// The `uid:gid` the engine runs processes as.
    pub fn uid_gid(self) -> &'static str {
        match self {
            SandboxUser::Unprivileged => docker::SANDBOX_USER,
            SandboxUser::Supervisor => "0:0",
        }
    }
}

/// What environment to create.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnvSpec {
    /// Image reference (tag or id).
    pub image: String,
    pub limits: Limits,
    /// The only writable directory; exec runs here unless told otherwise.
    pub workdir: String,
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub user: SandboxUser,
}

impl EnvSpec {
    /// Default limits, `/workspace` as the workdir, no extra environment, unprivileged.
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            limits: Limits::default(),
            workdir: "/workspace".into(),
            env: Vec::new(),
            user: SandboxUser::Unprivileged,
        }
    }
}

/// One command to run in an environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecRequest {
    pub cmd: Vec<String>,
    pub timeout: Duration,
    pub workdir: Option<String>,
    pub env: Vec<(String, String)>,
}

/// How an exec ended. A non-zero exit is a result, not an infrastructure failure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Verdict {
    Exit(i64),
    Timeout,
    Oom,
    Error(String),
}

impl Verdict {
    /// Short name: `exit`, `timeout`, `oom` or `error`.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Exit(_) => "exit",
            Verdict::Timeout => "timeout",
            Verdict::Oom => "oom",
            Verdict::Error(_) => "error",
        }
    }
}

/// The one-line verdict: `exit N`, `timeout`, `oom`, `error: ...`.
impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Exit(code) => write!(f, "exit {code}"),
            Verdict::Timeout => f.write_str("timeout"),
            Verdict::Oom => f.write_str("oom"),
            Verdict::Error(message) => write!(f, "error: {message}"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecResult {
    pub verdict: Verdict,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
}

impl ExecResult {
    /// A result for a command that could not run.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Error(message.into()),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration: Duration::ZERO,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("no Docker engine reachable (is the daemon running?)")]
    EngineUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("image {0} not found; build it with `repairbench images build`")]
    ImageNotFound(String),
    #[error("copying the image's prepared workspace into the container failed: {0}")]
    Seed(String),
    #[error("the Docker engine did not answer `{op}` within {seconds} s")]
    Deadline { op: &'static str, seconds: u64 },
    #[error("copying {path} out of the container: more than {cap} bytes")]
    CopyOutTooLarge { path: String, cap: usize },
    #[error("the run is stopping; no new containers")]
    Stopping,
    #[error("starting the services")]
    Services(#[source] Box<services::ServiceError>),
    #[error("sandbox operation `{op}` failed")]
    Backend {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A backend that runs untrusted code in isolated environments.
pub trait Sandbox: Send + Sync {
    type Env: Send + Sync;

    fn create(&self, spec: &EnvSpec) -> impl Future<Output = Result<Self::Env, SandboxError>> + Send;
    /// Unpacks a tar archive into `dest` inside the environment.
    fn copy_in(
        &self,
        env: &Self::Env,
        dest: &str,
        tar: Vec<u8>,
    ) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Returns `path` from the environment as a tar archive.
    fn copy_out(
        &self,
        env: &Self::Env,
        path: &str,
    ) -> impl Future<Output = Result<Vec<u8>, SandboxError>> + Send;
    fn exec(
        &self,
        env: &Self::Env,
        request: &ExecRequest,
    ) -> impl Future<Output = Result<ExecResult, SandboxError>> + Send;
    /// Removes the environment and everything it made. Idempotent.
    fn destroy(&self, env: Self::Env) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Builds the image `layer` describes (and its parents) unless built; returns its tag.
    /// Builds may use the network; environments never do.
    fn ensure_layer(&self, layer: &LayerSpec) -> impl Future<Output = Result<String, ImageError>> + Send;

    /// A started group of services on a private network of its own (see [`services`]).
    type Services: Send + Sync;
    /// Starts `services` in dependency order and waits until each is ready.
    fn start_services(
        &self,
        services: &[services::ServiceSpec],
        ready_timeout: Duration,
    ) -> impl Future<Output = Result<Self::Services, services::ServiceError>> + Send;
    /// [`Self::create`] on the group's network, where the services reach it as `alias`.
    fn create_in(
        &self,
        services: &Self::Services,
        spec: &EnvSpec,
        alias: &str,
    ) -> impl Future<Output = Result<Self::Env, SandboxError>> + Send;
    /// Runs a command inside one service.
    fn exec_in_service(
        &self,
        services: &Self::Services,
        service: &str,
        request: &ExecRequest,
    ) -> impl Future<Output = Result<ExecResult, SandboxError>> + Send;
    /// Reads each service's state and log, then removes the whole group (states are returned
    /// even when the removal failed).
    fn stop_services(
        &self,
        services: Self::Services,
    ) -> impl Future<Output = (Vec<services::ServiceState>, Result<(), SandboxError>)> + Send;
}

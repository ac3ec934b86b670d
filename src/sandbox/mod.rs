//! Where untrusted code runs. The [`Sandbox`] trait is small (create an environment, copy
//! files in and out as tar, exec with a deadline, tear down) so a Kubernetes backend can sit
//! beside the Docker one. Nothing here knows about models or grading.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Resource limits for one environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: i64,
    /// Bytes of stdout (and, separately, stderr) kept per exec; the rest is dropped and flagged.
    pub output_cap_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { memory_bytes: 2 << 30, cpus: 1.0, pids: 256, output_cap_bytes: 1 << 20 }
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecResult {
    pub verdict: Verdict,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("no Docker engine reachable (is the daemon running?)")]
    EngineUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("image {0} not found; build it with `repairbench images build`")]
    ImageNotFound(String),
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
}

//! Several containers on one private network: an internal bridge (no egress), each service
//! reachable by its name, started in dependency order, each waited for with a readiness
//! command, and all torn down together. The base for multi-service tasks.

mod group;

use std::time::Duration;

pub use group::{tail, ServiceGroup};

use super::{Limits, SandboxError, Verdict};

/// One service of a group.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Name other containers reach it by (a network alias).
    pub name: String,
    pub image: String,
    /// Its main process.
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Services that must be ready before this one starts.
    pub depends_on: Vec<String>,
    /// Command run inside the service until it exits 0; `None`: ready once started.
    pub ready: Option<Vec<String>>,
    /// How long `ready` may keep failing; `None`: the group's timeout.
    pub ready_timeout: Option<Duration>,
    pub limits: Limits,
    /// Tar unpacked into the service's workspace before it starts (the tree under test).
    pub files_in: Option<Vec<u8>>,
    /// Writable directories for its data: memory-backed, owned by the service's user, made
    /// for this group and gone with it (the root file system stays read-only).
    pub data_dirs: Vec<String>,
}

impl ServiceSpec {
    /// A service with no dependencies, readiness check, files or data directories.
    pub fn new(name: impl Into<String>, image: impl Into<String>, cmd: Vec<String>) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            cmd,
            env: Vec::new(),
            depends_on: Vec::new(),
            ready: None,
            ready_timeout: None,
            limits: Limits::default(),
            files_in: None,
            data_dirs: Vec::new(),
        }
    }
}

/// What a service did, read just before its group is removed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceState {
    pub name: String,
    /// Still running when read (a service is expected to run until it is removed).
    pub running: bool,
    /// How its main process ended, when it did.
    pub exit: Option<Verdict>,
    /// Seconds from the group's start until it was ready.
    pub ready_after_s: f64,
    /// Its output (stdout and stderr interleaved), up to the output cap.
    pub log: String,
    pub log_truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Order(#[from] crate::order::OrderError),
    #[error("service `{service}` was not ready within {seconds:.0} s (last check: {last}); its log ends with:\n{log_tail}")]
    NotReady { service: String, seconds: f64, last: String, log_tail: String },
    #[error("service `{service}` exited ({exit}) before it was ready; its log ends with:\n{log_tail}")]
    Exited { service: String, exit: String, log_tail: String },
    #[error("service `{service}`")]
    Sandbox {
        service: String,
        #[source]
        source: SandboxError,
    },
}

/// The order to start services in: every service after its dependencies, otherwise in the
/// order given.
pub fn start_order(services: &[ServiceSpec]) -> Result<Vec<usize>, ServiceError> {
    let nodes: Vec<(&str, &[String])> =
        services.iter().map(|s| (s.name.as_str(), &s.depends_on[..])).collect();
    Ok(crate::order::dependency_order(&nodes)?)
}

//! Several containers on one private network: an internal bridge (no egress), each service
//! reachable by its name, started in dependency order, each waited for with a readiness
//! command, and all torn down together. The base for multi-service tasks.

mod group;

use std::collections::{HashMap, HashSet};
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
    #[error("service `{0}` is declared twice")]
    Duplicate(String),
    #[error("service `{service}` depends on `{missing}`, which is not declared")]
    UnknownDependency { service: String, missing: String },
    #[error("services depend on each other in a cycle: {0}")]
    Cycle(String),
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
    let mut index = HashMap::new();
    for (i, s) in services.iter().enumerate() {
        if index.insert(s.name.as_str(), i).is_some() {
            return Err(ServiceError::Duplicate(s.name.clone()));
        }
    }
    for s in services {
        for dep in &s.depends_on {
            if !index.contains_key(dep.as_str()) {
                return Err(ServiceError::UnknownDependency {
                    service: s.name.clone(),
                    missing: dep.clone(),
                });
            }
        }
    }
    let mut order = Vec::new();
    let mut placed = HashSet::new();
    while order.len() < services.len() {
        let next = services.iter().enumerate().find(|(i, s)| {
            !placed.contains(i) && s.depends_on.iter().all(|d| placed.contains(&index[d.as_str()]))
        });
        match next {
            Some((i, _)) => {
                placed.insert(i);
                order.push(i);
            }
            None => {
                let stuck: Vec<&str> = services
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !placed.contains(i))
                    .map(|(_, s)| s.name.as_str())
                    .collect();
                return Err(ServiceError::Cycle(stuck.join(", ")));
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, deps: &[&str]) -> ServiceSpec {
        let mut spec = ServiceSpec::new(name, "x", vec![]);
        spec.depends_on = deps.iter().map(|d| d.to_string()).collect();
        spec
    }

    #[test]
    fn dependencies_start_first() {
        let services = [service("web", &["db", "cache"]), service("db", &[]), service("cache", &["db"])];
        let order: Vec<&str> =
            start_order(&services).unwrap().iter().map(|&i| services[i].name.as_str()).collect();
        assert_eq!(order, ["db", "cache", "web"]);
    }

    #[test]
    fn cycles_unknown_and_duplicate_names_are_errors() {
        let cycle = [service("a", &["b"]), service("b", &["a"])];
        assert!(matches!(start_order(&cycle), Err(ServiceError::Cycle(s)) if s == "a, b"));
        let unknown = [service("a", &["nope"])];
        assert!(matches!(start_order(&unknown), Err(ServiceError::UnknownDependency { .. })));
        let twice = [service("a", &[]), service("a", &[])];
        assert!(matches!(start_order(&twice), Err(ServiceError::Duplicate(_))));
    }
}

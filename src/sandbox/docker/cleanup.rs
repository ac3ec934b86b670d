//! Labels on everything we make, and removal: of a whole run (at its end, on a signal) and of
//! what runs whose process is gone left behind (at every start).

use std::collections::HashMap;

use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, ListVolumesOptionsBuilder, RemoveVolumeOptions,
};

use super::{is_status, DockerSandbox, SandboxError};

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

/// What [`DockerSandbox::reap_leftovers`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub containers: usize,
    pub networks: usize,
    pub volumes: usize,
}

/// Start time (clock ticks since boot) of a live process, from `/proc/PID/stat`; with the pid
/// it identifies the process even when pids are reused. A zombie (killed, not yet waited for
/// by its parent) counts as gone: it will never clean up.
pub(super) fn process_start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its closing paren are plain.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18).map(str::to_string)
}

pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// The labels of every resource the current process makes under `run_id`.
pub(super) fn run_labels(run_id: &str) -> HashMap<String, String> {
    let pid = std::process::id().to_string();
    HashMap::from([
        (LABEL_OWNER.to_string(), OWNER.to_string()),
        (LABEL_RUN.to_string(), run_id.to_string()),
        (LABEL_PID_START.to_string(), process_start_time(&pid).unwrap_or_default()),
        (LABEL_PID.to_string(), pid),
        (LABEL_HOST.to_string(), host_name()),
    ])
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

impl DockerSandbox {
    /// Removes containers, networks and volumes whose creating process no longer exists.
    pub async fn reap_leftovers(&self) -> Result<Reaped, SandboxError> {
        self.remove_matching(None, creator_is_gone).await
    }

    /// Removes everything this run made (used on a signal and at the end of a run).
    pub async fn remove_run_resources(&self) -> Result<Reaped, SandboxError> {
        self.remove_matching(Some(format!("{LABEL_RUN}={}", self.run_id)), |_| true).await
    }

    async fn remove_matching(
        &self,
        extra: Option<String>,
        select: impl Fn(&HashMap<String, String>) -> bool,
    ) -> Result<Reaped, SandboxError> {
        let filters = owner_filter(extra);
        let mut reaped = Reaped::default();
        let list = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let containers = self.call("list containers", self.docker.list_containers(Some(list))).await?;
        for c in containers {
            if select(&c.labels.clone().unwrap_or_default()) {
                if let Some(id) = c.id {
                    match self.remove_container(&id).await {
                        Ok(()) => reaped.containers += 1,
                        Err(e) => {
                            tracing::warn!("could not remove container {id}: {}", crate::error_chain(&e))
                        }
                    }
                }
            }
        }
        let list = ListNetworksOptionsBuilder::default().filters(&filters).build();
        let networks = self.call("list networks", self.docker.list_networks(Some(list))).await?;
        for n in networks {
            if select(&n.labels.clone().unwrap_or_default()) {
                if let Some(id) = n.id {
                    match self.raw_call("remove network", self.docker.remove_network(&id)).await? {
                        Ok(()) => reaped.networks += 1,
                        Err(e) if is_status(&e, 404) => {}
                        Err(e) => tracing::warn!("could not remove network {id}: {e}"),
                    }
                }
            }
        }
        let list = ListVolumesOptionsBuilder::default().filters(&filters).build();
        let volumes = self.call("list volumes", self.docker.list_volumes(Some(list))).await?;
        for v in volumes.volumes.unwrap_or_default() {
            if select(&v.labels) {
                let removal = self.docker.remove_volume(&v.name, None::<RemoveVolumeOptions>);
                match self.raw_call("remove volume", removal).await? {
                    Ok(()) => reaped.volumes += 1,
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => tracing::warn!("could not remove volume {}: {e}", v.name),
                }
            }
        }
        Ok(reaped)
    }
}

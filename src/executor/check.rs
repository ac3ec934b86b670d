//! `executor check`: a cluster's nodes, and a probe job on each node with slots.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::ray::{self, JobRequest, RayClient};
use super::{ExecutorError, SLOT_RESOURCE};

/// What `executor check` tells of one node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeCheck {
    #[serde(flatten)]
    pub node: ray::NodeInfo,
    /// What a probe job on the node found (`None` for a node without slots: it runs no job).
    pub probe: Option<String>,
    pub ok: bool,
}

/// The shell probe run on each node with slots: the Docker engine, git, and glibc.
const PROBE: &str = "docker version --format 'docker {{.Server.Version}}' 2>&1 | tail -1; \
git --version 2>&1; ldd --version 2>&1 | head -1";

/// `(major, minor)` of the last `N.N` in `ldd --version`'s first line.
pub fn glibc_version(text: &str) -> Option<(u32, u32)> {
    let line = text.split(';').find(|l| l.contains("GLIBC") || l.contains("libc"))?;
    let version = line.split_whitespace().last()?;
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?))
}

/// Lists the cluster's nodes and runs a probe job on each node that offers slots; a node
/// passes with a Docker engine that answers, git, and a glibc at least `glibc` (the
/// coordinator's, which its executable was linked against).
pub fn check(
    client: &RayClient,
    timeout: Duration,
    glibc: Option<(u32, u32)>,
) -> Result<Vec<NodeCheck>, ExecutorError> {
    let nodes = client.nodes()?;
    let stamp = format!(
        "{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
    );
    let mut probes = Vec::new();
    for node in nodes.iter().filter(|n| n.alive && n.slots > 0.0) {
        let id = format!("rb-check-{stamp}-{}", &node.node_id[..node.node_id.len().min(12)]);
        client.submit(&JobRequest {
            entrypoint: PROBE.into(),
            submission_id: id.clone(),
            runtime_env: serde_json::json!({}),
            metadata: BTreeMap::new(),
            // A tiny share of the node's own resource pins the probe to it.
            entrypoint_resources: BTreeMap::from([
                (format!("node:{}", node.ip), 0.001),
                (SLOT_RESOURCE.into(), 0.001),
            ]),
        })?;
        probes.push((node.node_id.clone(), id));
    }
    let started = Instant::now();
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for (node_id, id) in &probes {
        loop {
            let info = client.job(id)?;
            if info.status.is_terminal() {
                found.insert(node_id.clone(), client.logs(id).unwrap_or_default());
                break;
            }
            if started.elapsed() > timeout {
                let _ = client.stop(id);
                found.insert(node_id.clone(), "the probe did not finish in time".into());
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    Ok(nodes
        .into_iter()
        .map(|node| {
            let probe = found.remove(&node.node_id).map(|log| {
                log.lines()
                    .filter(|l| !l.contains("INFO") && !l.starts_with("Running entrypoint"))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let ok = match &probe {
                Some(p) => {
                    let docker = p.split("; ").any(|l| l.starts_with("docker ") && !l.contains("rror"));
                    let libc = matches!((glibc_version(p), glibc), (Some(there), Some(here)) if there >= here)
                        || (glibc.is_none() && glibc_version(p).is_some());
                    docker && p.contains("git version") && libc
                }
                None => node.slots == 0.0,
            };
            NodeCheck { node, probe, ok }
        })
        .collect())
}

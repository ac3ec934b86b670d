//! `executor check`: a cluster's nodes, and a probe job on each node with slots.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::ray::{self, JobRequest, JobStatus, RayClient};
use super::{ExecutorError, SLOT_RESOURCE};

/// What `executor check` tells of one node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeCheck {
    #[serde(flatten)]
    pub node: ray::NodeInfo,
    /// What a probe job on the node found (`None` for a node without slots: it runs no job).
    pub probe: Option<String>,
    /// Whether the node's engine has the coordinator's default image, by content id (`None`:
    /// not asked, or the coordinator has none built).
    pub image: Option<ImageCheck>,
    pub ok: bool,
}

/// The coordinator's default image on a node: records are fingerprinted with its content id,
/// so a node must hold the same image (`docker save` here, `docker load` there), not one
/// built again (a bootstrapped base differs from host to host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageCheck {
    Same,
    Missing,
    Differs,
}

/// The shell probe run on each node with slots: the Docker engine, git, and glibc.
const PROBE: &str = "docker version --format 'docker {{.Server.Version}}' 2>&1 | tail -1; \
git --version 2>&1; ldd --version 2>&1 | head -1";

/// The probe's last line: a log without it was read before it was whole.
const PROBE_END: &str = "end of probe";

/// The probe's line for the image `tag`: its content id, or what the engine said.
const IMAGE_LINE: &str = "image ";

fn probe_command(image: Option<&(String, String)>) -> String {
    match image.and_then(|(tag, _)| crate::shell::quote(tag).ok()) {
        Some(tag) => format!(
            "{PROBE}; echo \"{IMAGE_LINE}$(docker image inspect --format '{{{{.Id}}}}' {tag} 2>/dev/null || echo missing)\"; echo '{PROBE_END}'"
        ),
        None => format!("{PROBE}; echo '{PROBE_END}'"),
    }
}

/// What the probe's log says of the image whose content id is `id`.
/// `None` where the log has no image line (it came back incomplete).
fn image_check(probe: &str, id: &str) -> Option<ImageCheck> {
    let there = probe.lines().find_map(|l| l.strip_prefix(IMAGE_LINE))?;
    Some(if there == id {
        ImageCheck::Same
    } else if there.starts_with("sha256:") {
        ImageCheck::Differs
    } else {
        ImageCheck::Missing
    })
}

/// A finished probe's log. Ray can answer a job's logs with nothing for a moment after the job
/// ends (the driver's log is read from its node's agent), so an empty or partial log is asked
/// for again, a few times, before the node is judged by it.
fn finished_log(client: &RayClient, id: &str) -> String {
    let mut log = String::new();
    for attempt in 0..20 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(250));
        }
        log = client.logs(id).unwrap_or_default();
        if log.lines().any(|l| l == PROBE_END) {
            return log;
        }
    }
    log.push_str("\nthe probe's log came back incomplete (it did not reach its last line)\n");
    log
}

/// `(major, minor)` of the last `N.N` in `ldd --version`'s first line.
pub fn glibc_version(text: &str) -> Option<(u32, u32)> {
    let line = text.split(';').find(|l| l.contains("GLIBC") || l.contains("libc"))?;
    let version = line.split_whitespace().last()?;
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?))
}

/// Lists the cluster's nodes and runs a probe job on each node that offers slots; a node
/// passes with a Docker engine that answers, git, a glibc at least `glibc` (the
/// coordinator's, which its executable was linked against), and the coordinator's default
/// `image` (tag, content id) when it has one built.
pub fn check(
    client: &RayClient,
    timeout: Duration,
    glibc: Option<(u32, u32)>,
    image: Option<&(String, String)>,
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
            entrypoint: probe_command(image),
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
                found.insert(node_id.clone(), finished_log(client, id));
                break;
            }
            if started.elapsed() > timeout {
                let _ = client.stop(id);
                let state = match info.status {
                    JobStatus::Pending => "was still waiting to start",
                    _ => "started but did not finish",
                };
                let said =
                    info.message.filter(|m| !m.trim().is_empty()).map(|m| format!(" (Ray: {})", m.trim()));
                found.insert(
                    node_id.clone(),
                    format!("the probe {state} after {} s{}", timeout.as_secs(), said.unwrap_or_default()),
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let image_asked = image.is_some();
    Ok(nodes
        .into_iter()
        .map(|node| {
            let log = found.remove(&node.node_id);
            let whole = log.as_deref().is_some_and(|l| l.lines().any(|l| l == PROBE_END));
            let image = log.as_deref().zip(image).and_then(|(log, (_, id))| image_check(log, id));
            let probe = log.map(|log| {
                log.lines()
                    .filter(|l| {
                        !l.contains("INFO")
                            && !l.starts_with("Running entrypoint")
                            && !l.starts_with(IMAGE_LINE)
                            && *l != PROBE_END
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let ok = match &probe {
                Some(p) => {
                    let docker = p.split("; ").any(|l| l.starts_with("docker ") && !l.contains("rror"));
                    let libc = matches!((glibc_version(p), glibc), (Some(there), Some(here)) if there >= here)
                        || (glibc.is_none() && glibc_version(p).is_some());
                    whole
                        && docker
                        && p.contains("git version")
                        && libc
                        && (!image_asked || image == Some(ImageCheck::Same))
                }
                None => node.slots == 0.0,
            };
            NodeCheck { node, probe, image, ok }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_asks_for_the_image_and_its_answer_is_read() {
        let image = ("repairbench/python:ab12".to_owned(), "sha256:1111".to_owned());
        let command = probe_command(Some(&image));
        assert!(command.starts_with(PROBE) && command.contains("docker image inspect"), "{command}");
        assert!(command.contains("repairbench/python:ab12"), "{command}");
        assert_eq!(probe_command(None), format!("{PROBE}; echo '{PROBE_END}'"));
        let log = |line: &str| format!("docker 28.2.2\ngit version 2.47.3\n{line}\n");
        assert_eq!(image_check(&log("image sha256:1111"), "sha256:1111"), Some(ImageCheck::Same));
        assert_eq!(image_check(&log("image sha256:2222"), "sha256:1111"), Some(ImageCheck::Differs));
        assert_eq!(image_check(&log("image missing"), "sha256:1111"), Some(ImageCheck::Missing));
        // A log cut short says nothing of the image.
        assert_eq!(image_check(&log(""), "sha256:1111"), None);
    }
}

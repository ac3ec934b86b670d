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

/// The probe's line for the image `tag`: its content id, or what the engine said.
const IMAGE_LINE: &str = "image ";

fn probe_command(image: Option<&(String, String)>) -> String {
    match image.and_then(|(tag, _)| crate::shell::quote(tag).ok()) {
        Some(tag) => format!(
            "{PROBE}; echo \"{IMAGE_LINE}$(docker image inspect --format '{{{{.Id}}}}' {tag} 2>/dev/null || echo missing)\""
        ),
        None => PROBE.to_owned(),
    }
}

/// What the probe's log says of the image whose content id is `id`.
fn image_check(probe: &str, id: &str) -> ImageCheck {
    match probe.lines().find_map(|l| l.strip_prefix(IMAGE_LINE)) {
        Some(there) if there == id => ImageCheck::Same,
        Some(there) if there.starts_with("sha256:") => ImageCheck::Differs,
        _ => ImageCheck::Missing,
    }
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
            let log = found.remove(&node.node_id);
            let image = log.as_deref().zip(image).map(|(log, (_, id))| image_check(log, id));
            let probe = log.map(|log| {
                log.lines()
                    .filter(|l| {
                        !l.contains("INFO")
                            && !l.starts_with("Running entrypoint")
                            && !l.starts_with(IMAGE_LINE)
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let ok = match &probe {
                Some(p) => {
                    let docker = p.split("; ").any(|l| l.starts_with("docker ") && !l.contains("rror"));
                    let libc = matches!((glibc_version(p), glibc), (Some(there), Some(here)) if there >= here)
                        || (glibc.is_none() && glibc_version(p).is_some());
                    docker
                        && p.contains("git version")
                        && libc
                        && image.as_ref().is_none_or(|i| *i == ImageCheck::Same)
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
        assert_eq!(probe_command(None), PROBE);
        let log = |line: &str| format!("docker 28.2.2\ngit version 2.47.3\n{line}\n");
        assert_eq!(image_check(&log("image sha256:1111"), "sha256:1111"), ImageCheck::Same);
        assert_eq!(image_check(&log("image sha256:2222"), "sha256:1111"), ImageCheck::Differs);
        assert_eq!(image_check(&log("image missing"), "sha256:1111"), ImageCheck::Missing);
        assert_eq!(image_check(&log(""), "sha256:1111"), ImageCheck::Missing);
    }
}

//! The container security policy: the one function that builds the configuration every
//! container running untrusted code gets. Review changes here with care.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig, Mount, MountType,
    MountVolumeOptions, MountVolumeOptionsDriverConfig, NetworkingConfig,
};

use super::super::{EnvSpec, SandboxUser};

/// The unprivileged user untrusted code runs as (the default image names it `sandbox`).
pub const SANDBOX_USER: &str = "1000:1000";
/// Size of the private `/tmp` (memory-backed, charged to the container's memory limit).
const TMP_SIZE: &str = "64m";

/// Size of each data directory a service gets (memory-backed, charged to its memory limit).
const DATA_DIR_SIZE: &str = "256m";

/// Where a layer keeps what it prepared in `/workspace` (a warm `target/`, `node_modules`, a
/// service's files): a container's workspace is a fresh memory-backed volume that hides the
/// image's own `/workspace`, so the sandbox copies this folder into it when the container
/// starts ([`Workspace::Memory`]; the steps: [`crate::sandbox::layers::workspace_seed_steps`]).
pub const WORKSPACE_SEED: &str = "/opt/repairbench/workspace-seed";
/// The image label that says a layer has a [`WORKSPACE_SEED`].
pub const WORKSPACE_SEED_LABEL: &str = "org.repairbench.workspace-seed";

/// Where a container's workspace lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workspace {
    /// A memory-backed volume of `Limits::workspace_bytes`, owned by the sandbox user: nothing
    /// written there reaches the host's disk, and a write past the cap fails with "no space
    /// left". It holds data only while the container runs, so files go in after the start and
    /// an image's prepared workspace is copied in from its seed ([`WORKSPACE_SEED`]).
    /// Environments and services.
    Memory,
    /// A disk-backed volume seeded from the image, readable before the start and after the
    /// exit: one-shot jobs (`sandbox run`), whose files go in first and come out last.
    Disk,
}

/// Adds writable data directories to a service's configuration: private tmpfs mounts owned by
/// the container's user, so a database can write its files while the root stays read-only.
/// They hold no executables and vanish with the container.
pub fn add_data_dirs(config: &mut ContainerCreateBody, dirs: &[String]) {
    let owner = config.user.clone().unwrap_or_else(|| SANDBOX_USER.to_string());
    let (uid, gid) = owner.split_once(':').unwrap_or((owner.as_str(), owner.as_str()));
    let host = config.host_config.get_or_insert_with(Default::default);
    let tmpfs = host.tmpfs.get_or_insert_with(Default::default);
    for dir in dirs {
        tmpfs.insert(
            dir.clone(),
            format!("rw,nosuid,nodev,noexec,size={DATA_DIR_SIZE},uid={uid},gid={gid},mode=0700"),
        );
    }
}

/// The hardened container configuration for untrusted code: the spec's user (see
/// [`SandboxUser`]), no capabilities beyond the supervisor's three, no new privileges,
/// read-only root, limits, a private workspace and `/tmp`, every resource carrying `labels`.
/// `network` is `None` for no network at all, or a private network (see
/// [`crate::sandbox::services`]) with aliases.
pub fn container_config(
    spec: &EnvSpec,
    cmd: Vec<String>,
    labels: HashMap<String, String>,
    network: Option<(&str, Vec<String>)>,
    workspace: Workspace,
) -> ContainerCreateBody {
    let limits = &spec.limits;
    let mut env = vec!["HOME=/tmp".to_string()];
    env.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
    // Network mode `none` (a namespace with only loopback), not `network_disabled`: with that
    // the engine writes no /etc/hosts, and a test server on `localhost` (Django's live server)
    // cannot be found.
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
        labels: Some(labels.clone()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
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
            // The workspace is a container-private anonymous volume, removed with the container
            // and reachable by the archive API (a plain tmpfs mount is not).
            mounts: Some(vec![Mount {
                target: Some(spec.workdir.clone()),
                typ: Some(MountType::VOLUME),
                volume_options: Some(workspace_volume(workspace, limits.workspace_bytes, labels)),
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

/// The workspace volume's options: the local driver mounting a tmpfs of `bytes` owned by the
/// sandbox user for [`Workspace::Memory`], a plain (disk) volume otherwise.
fn workspace_volume(workspace: Workspace, bytes: u64, labels: HashMap<String, String>) -> MountVolumeOptions {
    let driver_config = (workspace == Workspace::Memory).then(|| {
        let (uid, gid) = SANDBOX_USER.split_once(':').unwrap_or((SANDBOX_USER, SANDBOX_USER));
        let options = format!("size={bytes},uid={uid},gid={gid},mode=0755,nosuid,nodev");
        MountVolumeOptionsDriverConfig {
            name: Some("local".to_string()),
            options: Some(HashMap::from([
                ("type".to_string(), "tmpfs".to_string()),
                ("device".to_string(), "tmpfs".to_string()),
                ("o".to_string(), options),
            ])),
        }
    });
    MountVolumeOptions { labels: Some(labels), driver_config, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dirs_are_private_tmpfs_owned_by_the_user_and_hold_no_executables() {
        let spec = EnvSpec::new("img");
        let mut config =
            container_config(&spec, vec!["true".into()], HashMap::new(), None, Workspace::Memory);
        add_data_dirs(&mut config, &["/var/lib/db".to_string()]);
        let host = config.host_config.unwrap();
        let tmpfs = host.tmpfs.unwrap();
        let options = &tmpfs["/var/lib/db"];
        for part in ["uid=1000", "gid=1000", "mode=0700", "noexec", "nosuid", "size=256m"] {
            assert!(options.split(',').any(|o| o == part), "{part} in {options}");
        }
        assert!(tmpfs.contains_key("/tmp"), "the private /tmp stays");
        assert_eq!(host.readonly_rootfs, Some(true));
    }
}

//! Docker helpers shared by the sandbox and grading tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::OnceLock;

use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, ListVolumesOptionsBuilder,
};
use repairbench::sandbox::docker::{LABEL_OWNER, LABEL_PID, LABEL_RUN, OWNER};
use repairbench::sandbox::{ensure_default_image, DockerSandbox};

/// The default image, built once per test binary (about a minute the very first time on a
/// machine; afterwards two inspections). Fails loudly when there is no engine.
pub fn default_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            std::thread::spawn(|| {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(async {
                    let sandbox = DockerSandbox::connect()
                        .await
                        .expect("these tests need a running Docker engine; none is reachable");
                    ensure_default_image(sandbox.docker()).await.expect("building the default sandbox image")
                })
            })
            .join()
            .expect("image build thread panicked")
        })
        .clone()
}

pub async fn connect() -> DockerSandbox {
    DockerSandbox::connect().await.expect("these tests need a running Docker engine; none is reachable")
}

/// Containers, networks and volumes of ours carrying `label=value`.
pub async fn resources_with(sandbox: &DockerSandbox, label: &str, value: &str) -> (usize, usize, usize) {
    let filters =
        HashMap::from([("label", vec![format!("{LABEL_OWNER}={OWNER}"), format!("{label}={value}")])]);
    let docker = sandbox.docker();
    let containers = docker
        .list_containers(Some(ListContainersOptionsBuilder::default().all(true).filters(&filters).build()))
        .await
        .unwrap()
        .len();
    let networks = docker
        .list_networks(Some(ListNetworksOptionsBuilder::default().filters(&filters).build()))
        .await
        .unwrap()
        .len();
    let volumes = docker
        .list_volumes(Some(ListVolumesOptionsBuilder::default().filters(&filters).build()))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default()
        .len();
    (containers, networks, volumes)
}

pub async fn assert_run_left_nothing(sandbox: &DockerSandbox) {
    assert_eq!(
        resources_with(sandbox, LABEL_RUN, sandbox.run_id()).await,
        (0, 0, 0),
        "containers, networks, volumes left"
    );
}

pub async fn resources_of_pid(sandbox: &DockerSandbox, pid: u32) -> (usize, usize, usize) {
    resources_with(sandbox, LABEL_PID, &pid.to_string()).await
}

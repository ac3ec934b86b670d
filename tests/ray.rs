//! The Ray executor against a real cluster (a head and two worker nodes, started here): the
//! bundled issues graded on it, suites evaluated on it and predictions generated on it with a
//! served model agree with the local run record for record; a rerun submits nothing; a node killed mid-unit costs one resubmission and leaves nothing behind; an
//! interrupted or killed coordinator loses nothing and duplicates nothing; and the errors say
//! what is wrong. One cluster serves the steps in order, and is stopped by pid at the end.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cli::repairbench;
use common::ray::{RayCluster, TOKEN, WORKERS};
use common::serve::Server;

/// Seconds each slow task's failing test sleeps before it checks.
const SLOW_SECONDS: u64 = 12;

fn grade(executor: &str, dataset: &Path, out: &Path, extra: &[&str], token: Option<&str>) -> Command {
    let mut command = repairbench();
    command.args(["swe", "grade", "--dataset"]).arg(dataset);
    command.args(["--predictions", "gold", "--timeout", "120", "--out"]).arg(out);
    command.args(["--executor", executor]).args(extra);
    command.env_remove("RAY_AUTH_TOKEN");
    if let Some(token) = token {
        command.env("RAY_AUTH_TOKEN", token);
    }
    command
}

fn eval(executor: &str, args: &[&str], out: &Path, extra: &[&str]) -> Command {
    let mut command = repairbench();
    command.arg("eval").args(args).arg("--out").arg(out).args(["--executor", executor]).args(extra);
    command.env("RAY_AUTH_TOKEN", TOKEN);
    command
}

/// Every record of a suite run's `samples.jsonl` by its key (`SEED:DOC_ID`), whole.
fn samples(out: &Path) -> BTreeMap<String, serde_json::Value> {
    let text = std::fs::read_to_string(out.join("samples.jsonl")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            (format!("{}:{}", record["seed"], record["doc_id"].as_str().unwrap()), record)
        })
        .collect()
}

/// Each prediction line's patch, full output and fingerprint by instance.
fn predictions(file: &Path) -> BTreeMap<String, serde_json::Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| {
            let p: serde_json::Value = serde_json::from_str(line).unwrap();
            let id = p["instance_id"].as_str().unwrap().to_owned();
            (
                id,
                serde_json::json!([
                    p["model_patch"],
                    p["full_output"],
                    p["fingerprint"],
                    p["generation_error"]
                ]),
            )
        })
        .collect()
}

fn metrics(results: &[u8]) -> serde_json::Value {
    serde_json::from_slice::<serde_json::Value>(results).unwrap()["metrics"].clone()
}

fn run(mut command: Command) -> Output {
    command.output().expect("running repairbench")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `instance_id → (verdict, fingerprint)` of every line of `results.jsonl`, and how many lines
/// each instance has.
fn results(out: &Path) -> (BTreeMap<String, (String, String)>, BTreeMap<String, usize>) {
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default();
    let mut latest = BTreeMap::new();
    let mut lines = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["instance_id"].as_str().unwrap().to_owned();
        *lines.entry(id.clone()).or_default() += 1;
        latest.insert(id, (v["verdict"].as_str().unwrap().to_owned(), v["fingerprint"].to_string()));
    }
    (latest, lines)
}

fn manifest_executor(out: &Path) -> serde_json::Value {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    manifest["executor"].clone()
}

/// Containers our sandbox labelled, alive or not.
fn labelled_containers() -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=repairbench.owner=repairbench"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `count` task folders of one small Python project whose failing test sleeps first, so a
/// unit is in the middle of its tests for a while.
fn slow_tasks(root: &Path, count: usize) -> PathBuf {
    sleeping_tasks(root, "slow", count, SLOW_SECONDS)
}

/// `count` task folders under `root/NAME` whose failing test sleeps `seconds` first.
fn sleeping_tasks(root: &Path, name: &str, count: usize, seconds: u64) -> PathBuf {
    let repo = root.join(format!("{name}-src"));
    std::fs::create_dir_all(repo.join("calc")).unwrap();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(repo.join("calc/__init__.py"), "def add(a, b):\n    return a - b\n").unwrap();
    let tests = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n";
    std::fs::write(repo.join("tests/test_calc.py"), tests).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "calc"]);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let slow_test = format!(
        "import time\n{tests}\n\ndef test_add():\n    time.sleep({seconds})\n    assert add(1, 2) == 3\n"
    );
    std::fs::write(repo.join("tests/test_calc.py"), slow_test).unwrap();
    let test_patch = git(&repo, &["diff"]);
    git(&repo, &["checkout", "-q", "--", "."]);
    std::fs::write(repo.join("calc/__init__.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let patch = git(&repo, &["diff"]);
    git(&repo, &["checkout", "-q", "--", "."]);
    let dataset = root.join(name);
    for n in 0..count {
        let folder = dataset.join(format!("{name}-{n}"));
        std::fs::create_dir_all(&folder).unwrap();
        git(&repo, &["bundle", "create", "-q", folder.join("repo.bundle").to_str().unwrap(), "--all"]);
        let task = serde_json::json!({
            "repo": "acme/calc",
            "instance_id": format!("acme__calc-{n}"),
            "base_commit": base,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": "add() subtracts",
            "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
        });
        std::fs::write(folder.join("task.json"), serde_json::to_string_pretty(&task).unwrap()).unwrap();
    }
    dataset
}

/// A call of the cluster's jobs API (POST with a body, else GET).
fn ray_call(cluster: &RayCluster, path: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    let url = format!("{}{path}", cluster.dashboard);
    let auth = format!("Bearer {TOKEN}");
    let mut response = match body {
        Some(body) => ureq::post(&url).header("Authorization", &auth).send(body.to_string()),
        None => ureq::get(&url).header("Authorization", &auth).call(),
    }
    .unwrap_or_else(|e| panic!("{url}: {e}"));
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap_or_default()
}

/// Our jobs on the cluster, as `(submission id, status, node id)`.
fn jobs(cluster: &RayCluster) -> Vec<(String, String, Option<String>)> {
    let jobs = ray_call(cluster, "/api/jobs/", None);
    jobs.as_array()
        .unwrap()
        .iter()
        .filter(|j| j["metadata"]["repairbench_run"].is_string())
        .map(|j| {
            (
                j["submission_id"].as_str().unwrap_or("").to_owned(),
                j["status"].as_str().unwrap_or("").to_owned(),
                j["driver_node_id"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn wait_until(what: &str, limit: Duration, done: impl FnMut() -> bool) {
    assert!(waited(limit, done), "waited {limit:?} for {what}");
}

/// Whether `done` came true within `limit`.
fn waited(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    true
}

fn signal(child: &std::process::Child, signal: i32) {
    unsafe { libc::kill(child.id() as i32, signal) };
}

#[test]
fn grading_on_a_real_ray_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let issues = Path::new(env!("CARGO_MANIFEST_DIR")).join("issues");
    let started = Instant::now();
    let cluster = RayCluster::start();
    eprintln!("cluster up in {:.1}s", started.elapsed().as_secs_f64());
    let ray = cluster.executor();
    let node_ip: BTreeMap<String, String> = cluster.nodes().into_iter().map(|n| (n.1, n.0)).collect();

    // Errors first (fast): an unreachable cluster, a missing token, a worker's own failure.
    let t = Instant::now();
    let unreachable = run(grade("ray:http://127.0.0.9:9", &issues, &root.join("x"), &[], Some(TOKEN)));
    assert_eq!(unreachable.status.code(), Some(1), "{}", text(&unreachable));
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    assert!(text(&unreachable).contains("cannot be reached"), "{}", text(&unreachable));
    let no_token = run(grade(&ray, &issues, &root.join("y"), &[], None));
    assert_eq!(no_token.status.code(), Some(1), "{}", text(&no_token));
    assert!(text(&no_token).contains("(401): set RAY_AUTH_TOKEN"), "{}", text(&no_token));
    let check = run({
        let mut c = repairbench();
        c.args(["executor", "check", &ray]).env("RAY_AUTH_TOKEN", TOKEN);
        c
    });
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    assert!(text(&check).contains("3 alive nodes, 2 repairbench slots"), "{}", text(&check));
    assert_eq!(text(&check).matches("docker ").count(), 2, "{}", text(&check));

    let bundled = repairbench::tasks::load_tasks(&issues).unwrap().tasks.len();
    // 1. The bundled issues, locally and on the cluster: the same records.
    let local = root.join("local");
    let t = Instant::now();
    let out = run(grade("local", &issues, &local, &["--workers", "2"], None));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let local_s = t.elapsed().as_secs_f64();
    let on_ray = root.join("ray");
    let t = Instant::now();
    let out = run(grade(&ray, &issues, &on_ray, &[], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    eprintln!("bundled issues: local {local_s:.1}s, ray {:.1}s", t.elapsed().as_secs_f64());
    let (local_records, _) = results(&local);
    let (ray_records, lines) = results(&on_ray);
    assert_eq!(local_records.len(), bundled);
    assert_eq!(ray_records, local_records, "verdicts and fingerprints differ");
    assert!(lines.values().all(|n| *n == 1));
    let executor = manifest_executor(&on_ray);
    let used: BTreeSet<String> = executor["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| node_ip[a["node_id"].as_str().unwrap_or_else(|| panic!("no node: {a}"))].clone())
        .collect();
    assert_eq!(used, WORKERS.iter().map(|w| w.to_string()).collect(), "units ran on {used:?}");
    assert_eq!(executor["jobs_submitted"], bundled);
    for id in local_records.keys() {
        let log_dir = on_ray.join("logs").join(id.replace('/', "_"));
        assert!(log_dir.join("result.json").exists() && log_dir.join("model.patch").exists(), "{id}: logs");
    }
    // With the default image built here, the check compares each node's by content id (the
    // nodes share this machine's engine, so theirs is the same).
    let check = run({
        let mut c = repairbench();
        c.args(["executor", "check", &ray]).env("RAY_AUTH_TOKEN", TOKEN);
        c
    });
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    assert_eq!(text(&check).matches("the default image: the same as here").count(), 2, "{}", text(&check));
    let compared = run({
        let mut c = repairbench();
        c.args(["compare", "--json"]).arg(&local).arg(&on_ray);
        c
    });
    assert_eq!(compared.status.code(), Some(0), "{}", text(&compared));
    let comparison: serde_json::Value = serde_json::from_slice(&compared.stdout).unwrap();
    assert_eq!(comparison["verdict"], "no_significant_change");
    assert_eq!(
        comparison["regressions"].as_array().unwrap().len()
            + comparison["improvements"].as_array().unwrap().len(),
        0
    );

    // Perturbed: a task's variants graded on the cluster as here (workers expand the task as
    // the coordinator does, and their records carry what robustness reads).
    let intervals = issues.join("intervals-touching");
    let perturb = ["--perturb", "statement.case,context.order", "--variants", "1"];
    let (here, there) = (root.join("perturbed-local"), root.join("perturbed-ray"));
    let out = run(grade("local", &intervals, &here, &perturb, None));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(grade(&ray, &intervals, &there, &perturb, Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (local_records, _) = results(&here);
    assert_eq!(local_records.len(), 3, "{local_records:?}");
    assert_eq!(results(&there).0, local_records, "perturbed: verdicts and fingerprints differ");
    let robustness = |out: &Path| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(out.join("report.json")).unwrap())
            .unwrap()["robustness"]
            .clone()
    };
    assert_eq!(robustness(&there), robustness(&here));
    assert_eq!(robustness(&there)["statement.case"]["items"], 1);

    // 2. A rerun submits nothing and reuses every record.
    let out = run(grade(&ray, &issues, &on_ray, &[], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(manifest_executor(&on_ray)["jobs_submitted"], 0);
    assert_eq!(results(&on_ray).1.values().sum::<usize>(), bundled, "the rerun appended records");

    // 3. Suites on the cluster: the same records as here. Multiple choice with the real model
    // (which travels in the package), and a code suite's reference solutions in the sandbox.
    let mmlu = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu/test.jsonl");
    let mmlu_args = ["mmlu", "--data", mmlu.to_str().unwrap(), "--shots", "2", "--seeds", "0,1"];
    let humaneval_args = ["humaneval", "--canonical", "--limit", "6", "--batch", "3"];
    for (name, args, unit) in [("mmlu", &mmlu_args[..], "4"), ("humaneval", &humaneval_args[..], "3")] {
        let here = root.join(format!("{name}-local"));
        let out = run(eval("local", args, &here, &[]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let there = root.join(format!("{name}-ray"));
        let t = Instant::now();
        let out = run(eval(&ray, args, &there, &["--unit-size", unit]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        eprintln!("{name} on ray: {:.1}s", t.elapsed().as_secs_f64());
        let (local_samples, ray_samples) = (samples(&here), samples(&there));
        assert!(local_samples.len() >= 6, "{name}: {} records", local_samples.len());
        assert_eq!(ray_samples, local_samples, "{name}: records differ");
        let executor = manifest_executor(&there);
        let jobs = local_samples.len().div_ceil(unit.parse().unwrap());
        assert_eq!(executor["jobs_submitted"], jobs, "{name}: {executor}");
        assert_eq!(
            std::fs::read(here.join("results.json")).map(|r| metrics(&r)).unwrap(),
            std::fs::read(there.join("results.json")).map(|r| metrics(&r)).unwrap()
        );
        // A rerun sends nothing.
        let out = run(eval(&ray, args, &there, &["--unit-size", unit]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(manifest_executor(&there)["jobs_submitted"], 0, "{name}");
        assert_eq!(samples(&there).len(), local_samples.len());
    }

    // 4. Inference on the cluster with a served model: the workers call the same server and
    // write the same predictions.
    let server = Server::start();
    let infer = |executor: &str, out: &Path| {
        let mut command = repairbench();
        command.args(["swe", "infer", "--dataset"]).arg(&issues).arg("--out").arg(out);
        command.args(["--model", &format!("openai:{}", server.base), "--max-tokens", "12"]);
        command.args(["--max-files", "1", "--max-file-chars", "1500", "--executor", executor]);
        command.args(["--unit-size", "4"]).env("RAY_AUTH_TOKEN", TOKEN);
        run(command)
    };
    let (here, there) = (root.join("infer-local.jsonl"), root.join("infer-ray.jsonl"));
    let out = infer("local", &here);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = Instant::now();
    let out = infer(&ray, &there);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    eprintln!("inference on ray: {:.1}s", t.elapsed().as_secs_f64());
    let (local_predictions, ray_predictions) = (predictions(&here), predictions(&there));
    assert_eq!(local_predictions.len(), bundled);
    assert_eq!(ray_predictions, local_predictions, "predictions differ");
    let prefix = first_run_id(&there);
    let submitted = || jobs(&cluster).iter().filter(|(id, _, _)| id.starts_with(&prefix)).count();
    // Units of four instances.
    assert_eq!(submitted(), bundled.div_ceil(4));
    let out = infer(&ray, &there);
    assert!(
        text(&out).contains("wrote 0 predictions") && text(&out).contains(&format!("{bundled} kept")),
        "{}",
        text(&out)
    );
    assert_eq!(submitted(), bundled.div_ceil(4), "the rerun submitted jobs");
    drop(server);

    let slow = slow_tasks(root, 4);

    // 5. A worker node killed in the middle of a unit.
    let lost = root.join("lost");
    let child = grade(&ray, &slow, &lost, &[], Some(TOKEN))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let victim = WORKERS[0];
    let victim_id = node_ip.iter().find(|(_, ip)| *ip == victim).unwrap().0.clone();
    wait_until("a unit running on the victim node", Duration::from_secs(90), || {
        jobs(&cluster)
            .iter()
            .any(|(_, status, node)| status == "RUNNING" && node.as_deref() == Some(&victim_id))
    });
    // Its test is under way (it sleeps), not finished.
    std::thread::sleep(Duration::from_secs(3));
    let killed = cluster.kill_node(victim);
    let killed_at = Instant::now();
    assert!(!killed.is_empty());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let (records, lines) = results(&lost);
    assert_eq!(records.len(), 4);
    assert!(lines.values().all(|n| *n == 1), "an instance recorded twice: {lines:?}");
    assert!(records.values().all(|(verdict, _)| verdict == "resolved"), "{records:?}");
    let attempts = manifest_executor(&lost)["attempts"].as_array().unwrap().clone();
    assert!(attempts.iter().any(|a| a["attempt"] == 2), "no second attempt: {attempts:?}");
    wait_until("the killed unit's processes and containers to go", Duration::from_secs(120 + 30), || {
        killed.iter().all(|pid| !common::ray::alive(*pid)) && labelled_containers().is_empty()
    });
    eprintln!("lost node: cleaned up {:.1}s after the kill", killed_at.elapsed().as_secs_f64());
    cluster.start_worker(victim);
    cluster.wait_for_slots(2.0);

    // 6. SIGINT stops every job within 10 s and leaves no container; a rerun resumes.
    let interrupted = root.join("interrupted");
    let child = grade(&ray, &slow, &interrupted, &[], Some(TOKEN))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let two_running = waited(Duration::from_secs(90), || {
        jobs(&cluster).iter().filter(|(_, status, _)| status == "RUNNING").count() >= 2
    });
    if !two_running {
        signal(&child, libc::SIGINT);
        let output = child.wait_with_output().unwrap();
        panic!("waited 90s for two units running: {:?}\n{}", jobs(&cluster), text(&output));
    }
    std::thread::sleep(Duration::from_secs(2));
    signal(&child, libc::SIGINT);
    let t = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", text(&output));
    assert!(t.elapsed() < Duration::from_secs(10), "stopping took {:?}", t.elapsed());
    assert!(
        jobs(&cluster).iter().all(|(_, status, _)| status != "RUNNING" && status != "PENDING"),
        "{:?}",
        jobs(&cluster)
    );
    wait_until("no container left", Duration::from_secs(10), || labelled_containers().is_empty());
    let out = run(grade(&ray, &slow, &interrupted, &[], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(results(&interrupted).0.len(), 4);

    // 6b. A worker whose Ray supervisor dies while its node lives stops on its parent-death
    // signal and removes its container at once, long before its test (300 s) would end.
    let stuck = sleeping_tasks(root, "stuck", 1, 300);
    let orphaned = root.join("orphaned");
    let mut child = grade(&ray, &stuck, &orphaned, &[], Some(TOKEN))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker_of = || {
        common::ray::processes()
            .into_iter()
            .find(|(_, _, cmd)| cmd.contains("worker grade") && cmd.contains("dataset/stuck"))
    };
    wait_until("the stuck unit's test running", Duration::from_secs(90), || {
        worker_of().is_some() && !labelled_containers().is_empty()
    });
    std::thread::sleep(Duration::from_secs(3));
    let (worker, supervisor, _) = worker_of().unwrap();
    // Its own containers: the coordinator retries the failed unit, whose new worker makes others.
    let its_containers = labelled_containers();
    let supervisor_cmd = common::ray::processes().into_iter().find(|p| p.0 == supervisor).unwrap().2;
    assert!(supervisor_cmd.contains("ray::JobSupervisor"), "the worker's parent: {supervisor_cmd}");
    unsafe { libc::kill(supervisor as i32, libc::SIGKILL) };
    let t = Instant::now();
    wait_until("the orphaned worker and its container to go", Duration::from_secs(20), || {
        let left = labelled_containers();
        !common::ray::alive(worker) && its_containers.iter().all(|c| !left.contains(c))
    });
    eprintln!(
        "orphaned worker: gone with its container {:.1}s after its supervisor",
        t.elapsed().as_secs_f64()
    );
    signal(&child, libc::SIGINT);
    let _ = child.wait();
    wait_until("no container left", Duration::from_secs(20), || labelled_containers().is_empty());

    // 6c. A dataset whose repository bundles would take the package over Ray's limit (100
    // MiB): refused, naming the way out, unless workers can fetch the repositories
    // themselves (`--repos` on storage they share); then the bundles stay here.
    let big = sleeping_tasks(root, "big", 1, 0);
    let big_src = root.join("big-src");
    git(&big_src, &["checkout", "-q", "-b", "junk"]);
    let mut junk = vec![0u8; 101 << 20];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in junk.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(big_src.join("junk.bin"), junk).unwrap();
    git(&big_src, &["add", "junk.bin"]);
    git(&big_src, &["commit", "-q", "-m", "junk"]);
    git(&big_src, &["checkout", "-q", "main"]);
    let bundle = big.join("big-0/repo.bundle");
    std::fs::remove_file(&bundle).unwrap();
    git(&big_src, &["bundle", "create", "-q", bundle.to_str().unwrap(), "--all"]);
    assert!(std::fs::metadata(&bundle).unwrap().len() > 100 << 20);
    let submitted_before = jobs(&cluster).len();
    let refused = run(grade(&ray, &big, &root.join("big-refused"), &[], Some(TOKEN)));
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("over the cluster's limit") && text(&refused).contains("--repos"),
        "{}",
        text(&refused)
    );
    assert_eq!(jobs(&cluster).len(), submitted_before, "a refused run submitted jobs");
    let repos = root.join("repos");
    std::fs::create_dir_all(repos.join("acme")).unwrap();
    git(
        root,
        &["clone", "-q", "--bare", "--single-branch", "--branch", "main", "big-src", "repos/acme/calc.git"],
    );
    let fetched = root.join("big-fetched");
    let out = run(grade(&ray, &big, &fetched, &["--repos", repos.to_str().unwrap()], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(results(&fetched).0.values().next().unwrap().0, "resolved");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fetched.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["repositories"]["in_package"], false, "{}", manifest["repositories"]);

    // 7. After a kill -9 of the coordinator, a rerun collects what finished and submits the
    // rest. The coordinator is held (SIGSTOP) while its first units finish, so their records
    // are on the cluster only.
    let killed_run = root.join("killed");
    let prefix = first_run_id(&killed_run);
    let mut child = grade(&ray, &slow, &killed_run, &[], Some(TOKEN))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("two units running", Duration::from_secs(90), || {
        jobs(&cluster).iter().filter(|(id, status, _)| status == "RUNNING" && id.starts_with(&prefix)).count()
            >= 2
    });
    signal(&child, libc::SIGSTOP);
    wait_until("both units finished", Duration::from_secs(120), || {
        jobs(&cluster)
            .iter()
            .filter(|(id, status, _)| status == "SUCCEEDED" && id.starts_with(&prefix))
            .count()
            >= 2
    });
    signal(&child, libc::SIGKILL);
    let _ = child.wait();
    let before = results(&killed_run).0.len();
    let out = run(grade(&ray, &slow, &killed_run, &[], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let executor = manifest_executor(&killed_run);
    let (records, lines) = results(&killed_run);
    assert_eq!(records.len(), 4);
    assert!(lines.values().all(|n| *n == 1), "duplicates: {lines:?}");
    let collected = executor["collected_from_earlier"].as_u64().unwrap() as usize;
    assert_eq!(before + collected, 2, "the finished units were not collected: {executor}");
    assert_eq!(executor["jobs_submitted"], 2, "{executor}");

    // 8. A worker that fails on its own (no Docker engine on its node) is not retried. Jobs
    // that only sleep take the two good nodes' slots first, then the broken node joins with one
    // slot, so the unit can only go to it. (Ray's job system does not survive losing every
    // worker node at once, so the good nodes stay.)
    let blockers: Vec<String> = (0..2).map(|n| format!("blocker-{}-{n}", std::process::id())).collect();
    for id in &blockers {
        ray_call(
            &cluster,
            "/api/jobs/",
            Some(serde_json::json!({
                "entrypoint": "sleep 300", "submission_id": id, "entrypoint_resources": {"repairbench": 1}
            })),
        );
    }
    wait_until("the good nodes' slots taken", Duration::from_secs(60), || {
        blockers.iter().all(|id| ray_call(&cluster, &format!("/api/jobs/{id}"), None)["status"] == "RUNNING")
    });
    cluster.start_worker_with("127.0.0.5", &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")]);
    cluster.wait_for_slots(3.0);
    let broken = root.join("broken");
    let out = run(grade(&ray, &slow, &broken, &["--unit-size", "4"], Some(TOKEN)));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let executor = manifest_executor(&broken);
    assert_eq!(executor["jobs_submitted"], 1, "{executor}");
    let result: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(broken.join("results.jsonl")).unwrap().lines().next().unwrap(),
    )
    .unwrap();
    assert_eq!(result["reason"], "executor_worker_error", "{result}");
    assert!(result["detail"].as_str().unwrap().contains("exited with 1"), "{result}");
    for id in &blockers {
        ray_call(&cluster, &format!("/api/jobs/{id}/stop"), Some(serde_json::json!({})));
    }
    drop(cluster);
    eprintln!("all steps in {:.1}s", started.elapsed().as_secs_f64());
}

/// The run id the coordinator uses for `out` (the prefix of its jobs' submission ids).
fn first_run_id(out: &Path) -> String {
    format!("rb-{}-", repairbench::executor::run_id(out))
}

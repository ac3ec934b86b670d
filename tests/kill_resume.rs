//! `kill -9` at pseudo-random points of `swe grade`, `swe infer` and `eval`, then a rerun
//! into the same output: the results equal those of an uninterrupted run, every item is
//! recorded exactly once, and the killed runs leave no container behind.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::sandbox::{connect, default_image, resources_of_pid};

/// Kills per command.
const KILLS: usize = 5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A command of the real binary writing into `out`, with the test's cache.
fn command(args: &[String], cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_repairbench"));
    command.args(args).env(repairbench::env::CACHE_DIR, cache).stdout(Stdio::null()).stderr(Stdio::piped());
    command
}

fn run_to_end(args: &[String], cache: &Path) -> Duration {
    let started = Instant::now();
    let output = command(args, cache).output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    started.elapsed()
}

/// Delays spread over the run's length, from a fixed seed (so a failure can be replayed).
fn kill_points(length: Duration, seed: u64) -> Vec<Duration> {
    let mut state = seed;
    (0..KILLS)
        .map(|k| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let jitter = (state >> 33) as f64 / (1u64 << 31) as f64;
            length.mul_f64(((k as f64 + jitter) / KILLS as f64).clamp(0.05, 0.95))
        })
        .collect()
}

/// Starts `args`, kills it with SIGKILL after `delay` (if still running), and returns its pid.
fn kill_after(args: &[String], cache: &Path, delay: Duration) -> u32 {
    let mut child = command(args, cache).spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    pid
}

/// Lines per key of a JSONL file (`key` reads the key of a record).
fn lines_per_key(path: &Path, key: impl Fn(&serde_json::Value) -> String) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{path:?}: {e}: {line}"));
        *counts.entry(key(&value)).or_default() += 1;
    }
    counts
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Kills each run of `args(out)` at [`kill_points`], reruns it, and hands both output folders
/// to `same` for comparison with the uninterrupted run in `baseline`.
fn kill_and_resume(
    name: &str,
    args: impl Fn(&Path) -> Vec<String>,
    records: impl Fn(&Path) -> PathBuf,
    key: impl Fn(&serde_json::Value) -> String + Copy,
    same: impl Fn(&Path, &Path),
) -> Vec<u32> {
    let dir = tempfile::tempdir().unwrap();
    let cache = repairbench::env::cache_dir();
    let baseline = dir.path().join("baseline");
    let length = run_to_end(&args(&baseline), &cache);
    let expected = lines_per_key(&records(&baseline), key);
    assert!(expected.values().all(|&n| n == 1), "{name}: {expected:?}");
    let mut pids = Vec::new();
    for (k, delay) in kill_points(length, 0x5eed + name.len() as u64).into_iter().enumerate() {
        let out = dir.path().join(format!("killed-{k}"));
        pids.push(kill_after(&args(&out), &cache, delay));
        run_to_end(&args(&out), &cache);
        let counts = lines_per_key(&records(&out), key);
        assert_eq!(counts, expected, "{name}: killed after {delay:?}: every item exactly once");
        same(&baseline, &out);
    }
    pids
}

#[test]
fn killed_runs_resume_to_the_uninterrupted_results() {
    let _ = default_image();
    // Five bundled samples (three plain pytest projects, a cargo one, one with a service):
    // the kill points fall in each kind of work, and the test stays within CI's time (all
    // eleven samples made it 943 s).
    let samples = tempfile::tempdir().unwrap();
    for name in [
        "intervals-touching",
        "invoicer-rounding",
        "textkit-slugify",
        "rangeset-rust",
        "kvstore-client-server",
    ] {
        let (from, to) = (root().join("issues").join(name), samples.path().join(name));
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(&from).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
    }
    let issues = samples.path().to_owned();
    let mut pids = Vec::new();

    // swe grade: the samples, gold patches, one worker.
    let grade_args = |out: &Path| -> Vec<String> {
        ["swe", "grade", "--dataset", issues.to_str().unwrap(), "--predictions", "gold", "--workers", "1"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--out".to_string(), out.display().to_string()])
            .collect()
    };
    let verdicts = |out: &Path| -> Vec<(String, String, serde_json::Value)> {
        let report = json(&out.join("report.json"));
        report["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["instance_id"].to_string(), r["verdict"].to_string(), r["tests_status"].clone()))
            .collect()
    };
    pids.extend(kill_and_resume(
        "swe grade",
        grade_args,
        |out| out.join("results.jsonl"),
        |v| v["instance_id"].to_string(),
        |a, b| assert_eq!(verdicts(a), verdicts(b)),
    ));

    // swe infer: the default model, a short answer per sample.
    let infer_args = |out: &Path| -> Vec<String> {
        [
            "swe",
            "infer",
            "--dataset",
            issues.to_str().unwrap(),
            "--max-tokens",
            "16",
            "--max-files",
            "1",
            "--max-file-chars",
            "800",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--out".to_string(), out.join("preds.jsonl").display().to_string()])
        .collect()
    };
    let predictions = |out: &Path| -> BTreeMap<String, (serde_json::Value, serde_json::Value)> {
        std::fs::read_to_string(out.join("preds.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["instance_id"].to_string(), (v["model_patch"].clone(), v["full_output"].clone()))
            })
            .collect()
    };
    kill_and_resume(
        "swe infer",
        infer_args,
        |out| out.join("preds.jsonl"),
        |v| v["instance_id"].to_string(),
        |a, b| assert_eq!(predictions(a), predictions(b)),
    );

    // eval: the MMLU fixture, scored by the default model, each item with its rotations and a
    // typo variant (the robustness section must come out the same too).
    let mmlu = root().join("tests/fixtures/suites/mmlu");
    let eval_args = |out: &Path| -> Vec<String> {
        let perturb = ["--perturb", "options.circular,text.typo"];
        ["eval", "mmlu", "--data", mmlu.to_str().unwrap(), "--shots", "1", "--seeds", "0,1"]
            .iter()
            .chain(&perturb)
            .map(|s| s.to_string())
            .chain(["--out".to_string(), out.display().to_string()])
            .collect()
    };
    let item_key = |v: &serde_json::Value| {
        format!("{}:{}@{}#{}", v["seed"], v["doc_id"], v["variant"]["family"], v["variant"]["index"])
    };
    let scores = |out: &Path| -> (serde_json::Value, serde_json::Value, BTreeMap<String, serde_json::Value>) {
        let samples = std::fs::read_to_string(out.join("samples.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (item_key(&v), v["choices"].clone())
            })
            .collect();
        let results = json(&out.join("results.json"));
        (results["metrics"].clone(), results["robustness"].clone(), samples)
    };
    kill_and_resume(
        "eval",
        eval_args,
        |out| out.join("samples.jsonl"),
        item_key,
        |a, b| {
            let (a, b) = (scores(a), scores(b));
            assert_eq!(a.2.len(), 2 * 5 * (1 + 3 + 1), "originals, rotations and typos of both seeds");
            assert!(a.1["options.circular"]["worst_case"].is_number());
            assert_eq!(a, b);
        },
    );

    // Whatever the killed grading runs had started was removed by the runs after them.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let sandbox = connect().await;
        for pid in pids {
            assert_eq!(resources_of_pid(&sandbox, pid).await, (0, 0, 0), "left by killed pid {pid}");
        }
    });
}

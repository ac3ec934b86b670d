use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::load::{Records, RunDir};
use super::*;
use crate::grade::{Resolution, TestsStatus, Verdict as SweVerdict};
use crate::kernel::fingerprint::FingerprintBuilder;
use crate::repair::{GradeReport, InstanceResult, Timings};
use crate::suites::record::OutputRecord;
use crate::suites::record::RunShape;
use crate::suites::SampleRecord;

fn instance(id: &str, verdict: SweVerdict, task: &str) -> InstanceResult {
    InstanceResult {
        instance_id: id.into(),
        verdict,
        resolved: verdict == SweVerdict::Resolved,
        resolution: if verdict == SweVerdict::Resolved { Resolution::Full } else { Resolution::No },
        patch_applied: true,
        apply_method: None,
        tests_status: TestsStatus::default(),
        flaky_tests: Vec::new(),
        tampering: Vec::new(),
        status_source: None,
        runner: None,
        python: None,
        packages_as_of: None,
        environment_spec: None,
        ci_jobs: Vec::new(),
        services: Vec::new(),
        test_exit: None,
        detail: None,
        reason: None,
        model_name_or_path: None,
        perturbation: None,
        fingerprint: Some(FingerprintBuilder::new().id("task", task).id("prediction", id).finish()),
        timings: Timings::default(),
        log_dir: format!("logs/{id}"),
    }
}

fn swe_run(manifest: Value, instances: Vec<InstanceResult>) -> RunDir {
    RunDir {
        dir: PathBuf::from("run"),
        manifest,
        records: Records::Swe(GradeReport::new(instances, Vec::new())),
        notes: Vec::new(),
    }
}

fn swe_manifest() -> Value {
    json!({
        "command": "swe grade",
        "dataset": {"path": "tasks.jsonl", "sha256": "d1", "instances": 3, "bundles": {}},
        "settings": {"image": "img", "timeout_s": 1800.0, "workers": 2, "flaky_reruns": 2,
                     "limits": {"memory_bytes": 2147483648u64, "cpus": 1.0, "pids": 256}},
        "model": {"source": "a.gguf", "sha256": "m1"},
        "inference": {"prompt": {"retrieval": "bm25", "max_files": 3, "max_file_chars": 6000},
                      "max_tokens": 768, "sampling": {"temperature": 0.0, "seed": 0}},
    })
}

fn fields(drift: &[Drift]) -> Vec<String> {
    drift.iter().map(|d| format!("{}: {}", d.file, d.field)).collect()
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn verdict_needs_direction_significance_and_size() {
    assert_eq!(Verdict::of(-0.2, 0.01, 0.05, 0.0), Verdict::Regression);
    assert_eq!(Verdict::of(0.2, 0.01, 0.05, 0.0), Verdict::Improvement);
    assert_eq!(Verdict::of(-0.2, 0.05, 0.05, 0.0), Verdict::NoSignificantChange, "p must be below alpha");
    assert_eq!(Verdict::of(-0.02, 0.001, 0.05, 0.05), Verdict::NoSignificantChange, "too small to count");
    assert_eq!(Verdict::of(-0.05, 0.001, 0.05, 0.05), Verdict::Regression, "|delta| >= min delta counts");
    assert_eq!(Verdict::of(0.0, 0.0, 0.05, 0.0), Verdict::NoSignificantChange);
}

#[test]
fn swe_drift_is_the_yardstick_not_the_model() {
    let base = swe_run(swe_manifest(), vec![]);
    let mut other = swe_manifest();
    // What is being compared: another model, sampling, token limit, workers, image.
    other["model"] = json!({"source": "b.gguf", "sha256": "m2"});
    other["inference"]["sampling"] = json!({"temperature": 0.7, "seed": 3});
    other["inference"]["max_tokens"] = json!(2048);
    other["settings"]["workers"] = json!(8);
    other["settings"]["image"] = json!("other-image");
    // A limit only one version records is not a difference.
    other["settings"]["limits"]["output_cap_bytes"] = json!(1024);
    let new = swe_run(other.clone(), vec![]);
    assert_eq!(drift::find(&base, &new, &ids(&[])), vec![]);

    other["dataset"]["sha256"] = json!("d2");
    other["settings"]["timeout_s"] = json!(60.0);
    other["settings"]["limits"]["memory_bytes"] = json!(1u64 << 30);
    other["inference"]["prompt"]["retrieval"] = json!("oracle");
    let drift = drift::find(&base, &swe_run(other, vec![]), &ids(&[]));
    assert_eq!(
        fields(&drift),
        [
            "manifest.json: dataset.sha256",
            "manifest.json: inference.prompt.retrieval",
            "manifest.json: settings.timeout_s",
            "manifest.json: settings.limits.memory_bytes",
        ]
    );
    assert_eq!(drift[0].base, json!("d1"));
    assert_eq!(drift[0].new, json!("d2"));
    assert_eq!(drift[0].to_string(), "manifest.json: dataset.sha256: base \"d1\", new \"d2\"");
}

#[test]
fn swe_prompt_settings_compare_across_swe_run_and_run() {
    let mut run_config = swe_manifest();
    run_config.as_object_mut().unwrap().remove("inference");
    run_config["run_config"] =
        json!({"seed": 0, "repair": {"retrieval": "bm25", "max_files": 5, "max_file_chars": 6000}});
    let drift = drift::find(&swe_run(swe_manifest(), vec![]), &swe_run(run_config, vec![]), &ids(&[]));
    assert_eq!(fields(&drift), ["manifest.json: inference.prompt.max_files / run_config.repair.max_files"]);
    // A plain `swe grade` of a predictions file records no prompt: nothing to compare.
    let mut grade_only = swe_manifest();
    grade_only.as_object_mut().unwrap().remove("inference");
    assert!(drift::find(&swe_run(swe_manifest(), vec![]), &swe_run(grade_only, vec![]), &ids(&[])).is_empty());
}

#[test]
fn folder_datasets_compare_each_paired_task() {
    // A folder of tasks has no dataset hash: the tasks' own content hashes decide.
    let mut manifest = swe_manifest();
    manifest["dataset"]["sha256"] = Value::Null;
    manifest["dataset"]["bundles"] = json!({"a": "ba", "b": "bb"});
    let base = swe_run(
        manifest.clone(),
        vec![instance("a", SweVerdict::Resolved, "ta"), instance("b", SweVerdict::Resolved, "tb")],
    );
    let same = swe_run(
        manifest.clone(),
        vec![instance("a", SweVerdict::Unresolved, "ta"), instance("b", SweVerdict::Resolved, "tb")],
    );
    assert!(drift::find(&base, &same, &ids(&["a", "b"])).is_empty());

    manifest["dataset"]["bundles"]["b"] = json!("bb2");
    let changed = swe_run(
        manifest,
        vec![instance("a", SweVerdict::Resolved, "ta-edited"), instance("b", SweVerdict::Resolved, "tb")],
    );
    let drift = drift::find(&base, &changed, &ids(&["a", "b"]));
    assert_eq!(
        fields(&drift),
        ["report.json: instances.a.fingerprint.parts.task", "manifest.json: dataset.bundles.b"]
    );
    // Only paired instances count.
    assert!(drift::find(&base, &changed, &ids(&[])).is_empty());
}

fn suite_manifest() -> Value {
    json!({
        "tool": "repairbench",
        "suite": "mmlu",
        "fingerprint": {"suite_sha256": "s1", "fewshot_data": "f1", "shots": 5, "model_sha256": "m1"},
        "model": {"source": "a.gguf", "sha256": "m1"},
        "data": [{"path": "/data/test.jsonl", "sha256": "t1"}, {"path": "/data/dev.jsonl", "sha256": "f1"}],
        "items": 3,
        "seeds": [0, 1],
    })
}

fn suite_run(manifest: Value) -> RunDir {
    RunDir {
        dir: PathBuf::from("run"),
        manifest,
        records: Records::Suite {
            shape: RunShape { suite: None, seeds: vec![0, 1], items: 0 },
            by_key: BTreeMap::new(),
        },
        notes: Vec::new(),
    }
}

#[test]
fn suite_drift_is_suite_file_data_and_shots() {
    let base = suite_run(suite_manifest());
    let mut other = suite_manifest();
    other["model"] = json!({"source": "b.gguf", "sha256": "m2"});
    other["fingerprint"]["model_sha256"] = json!("m2");
    other["seeds"] = json!([3]);
    other["items"] = json!(2);
    // The same files elsewhere on another machine.
    other["data"][0]["path"] = json!("/ci/test.jsonl");
    assert_eq!(drift::find(&base, &suite_run(other.clone()), &ids(&[])), vec![]);

    other["fingerprint"]["suite_sha256"] = json!("s2");
    other["fingerprint"]["shots"] = json!(0);
    other["data"][1]["sha256"] = json!("f2");
    assert_eq!(
        fields(&drift::find(&base, &suite_run(other.clone()), &ids(&[]))),
        [
            "manifest.json: fingerprint.suite_sha256",
            "manifest.json: fingerprint.shots",
            "manifest.json: data.1.sha256"
        ]
    );
    other["suite"] = json!("arc_easy");
    other["data"] = json!([{"path": "x", "sha256": "t1"}]);
    let drift = fields(&drift::find(&base, &suite_run(other), &ids(&[])));
    assert!(
        drift.contains(&"manifest.json: suite".to_owned())
            && drift.contains(&"manifest.json: data".to_owned())
    );
}

fn sample(seed: u64, doc: &str, index: usize, scores: &[(&str, f64)], outputs: usize) -> SampleRecord {
    SampleRecord {
        suite: "t".into(),
        seed,
        doc_id: doc.into(),
        index,
        group: None,
        prompt: format!("prompt {doc}"),
        prompt_sha256: String::new(),
        target: json!(1),
        outputs: (0..outputs)
            .map(|i| OutputRecord { text: format!("out {i}"), finish: None, status: None })
            .collect(),
        choices: Vec::new(),
        extracted: BTreeMap::new(),
        scores: scores.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        variant: None,
        fingerprint: None,
    }
}

fn write_suite(dir: &Path, records: &[SampleRecord], seeds: &[u64], items: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let lines: String = records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
    std::fs::write(dir.join("samples.jsonl"), lines).unwrap();
    let results =
        json!({"suite": "t", "kind": "multiple_choice", "items": items, "seeds": seeds, "metrics": {}});
    std::fs::write(dir.join("results.json"), results.to_string()).unwrap();
    let mut manifest = suite_manifest();
    manifest["seeds"] = json!(seeds);
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
}

#[test]
fn the_default_metric_is_the_suites_primary_one() {
    let dir = tempfile::tempdir().unwrap();
    let open = |records: &[SampleRecord]| {
        write_suite(dir.path(), records, &[0], records.len());
        RunDir::open(dir.path()).unwrap()
    };
    let mc = open(&[sample(0, "a", 0, &[("acc", 1.0), ("acc_norm", 0.0)], 0)]);
    assert_eq!(mc.default_metric().unwrap(), "acc");
    let code = open(&[sample(0, "a", 0, &[("pass@1", 0.5), ("pass@2", 1.0), ("harness_errors", 0.0)], 2)]);
    assert_eq!(code.default_metric().unwrap(), "pass@1");
    let one = open(&[sample(0, "a", 0, &[("exact_match_strict", 1.0), ("invalid_strict", 0.0)], 1)]);
    assert_eq!(one.default_metric().unwrap(), "exact_match_strict");
    let two = open(&[sample(0, "a", 0, &[("exact_match_strict", 1.0), ("exact_match_flexible", 1.0)], 1)]);
    let err = two.default_metric().unwrap_err().to_string();
    assert!(
        err.contains("samples.jsonl") && err.contains("exact_match_flexible, exact_match_strict"),
        "{err}"
    );
}

#[test]
fn suite_pairs_by_seed_and_document_and_picks_the_test() {
    let root = tempfile::tempdir().unwrap();
    let (base_dir, new_dir) = (root.path().join("base"), root.path().join("new"));
    let acc = |v: f64| [("acc", v)];
    // One seed, one sample per item, 0/1 scores: McNemar. `c` regresses, `d` improves, `e`
    // is only in base, `f` had a harness error in the new run, and an old record of a seed
    // this run did not use is ignored.
    write_suite(
        &base_dir,
        &[
            sample(0, "a", 0, &acc(1.0), 0),
            sample(0, "b", 1, &acc(0.0), 0),
            sample(0, "c", 2, &acc(1.0), 0),
            sample(0, "d", 3, &acc(0.0), 0),
            sample(0, "e", 4, &acc(1.0), 0),
            sample(0, "f", 5, &acc(1.0), 0),
            sample(9, "a", 0, &acc(0.0), 0),
        ],
        &[0],
        6,
    );
    write_suite(
        &new_dir,
        &[
            sample(0, "a", 0, &acc(1.0), 0),
            sample(0, "b", 1, &acc(0.0), 0),
            // A resumed run: the last record per item wins.
            sample(0, "c", 2, &acc(1.0), 0),
            sample(0, "c", 2, &acc(0.0), 0),
            sample(0, "d", 3, &acc(1.0), 0),
            sample(0, "f", 5, &[("acc", 0.0), ("harness_errors", 1.0)], 0),
        ],
        &[0],
        5,
    );
    let c = compare(&base_dir, &new_dir, &CompareOptions::default()).unwrap();
    assert_eq!(c.metric, "acc");
    assert_eq!(c.test, TestName::McnemarExact);
    assert_eq!((c.n_pairs, c.n_units), (4, 4));
    assert_eq!(c.regressions, ["0:c"]);
    assert_eq!(c.improvements, ["0:d"]);
    assert_eq!(c.only_in_base, ["0:e"]);
    assert_eq!(
        c.excluded,
        [Excluded { id: "0:f".into(), base: None, new: Some("1 harness error(s)".into()) }]
    );
    assert_eq!(c.p_value, 1.0);
    assert_eq!((c.base, c.new, c.delta), (0.5, 0.5, 0.0));
    assert!(
        c.notes.iter().any(|n| n.contains("1 records of seeds or items outside this run")),
        "{:?}",
        c.notes
    );

    // Two samples per item make pass@1 a fraction even when it happens to be 0 or 1.
    let pass = |v: f64| [("pass@1", v)];
    write_suite(&base_dir, &[sample(0, "a", 0, &pass(1.0), 2), sample(0, "b", 1, &pass(0.5), 2)], &[0], 2);
    write_suite(&new_dir, &[sample(0, "a", 0, &pass(1.0), 2), sample(0, "b", 1, &pass(0.0), 2)], &[0], 2);
    let c = compare(&base_dir, &new_dir, &CompareOptions::default()).unwrap();
    assert_eq!((c.metric.as_str(), c.test), ("pass@1", TestName::PairedBootstrap));
    assert_eq!(c.regressions, ["0:b"]);
    assert!((c.delta - -0.25).abs() < 1e-12);

    // Several seeds: a document is one unit, its seeds averaged.
    let seeds = |v: [f64; 2]| vec![sample(0, "a", 0, &acc(v[0]), 0), sample(1, "a", 0, &acc(v[1]), 0)];
    write_suite(&base_dir, &seeds([1.0, 1.0]), &[0, 1], 1);
    write_suite(&new_dir, &seeds([1.0, 0.0]), &[0, 1], 1);
    let c = compare(&base_dir, &new_dir, &CompareOptions::default()).unwrap();
    assert_eq!((c.test, c.n_pairs, c.n_units), (TestName::PairedBootstrap, 2, 1));
    assert_eq!((c.base, c.new), (1.0, 0.5));
    assert_eq!(c.regressions, ["1:a"]);

    let err =
        compare(&base_dir, &new_dir, &CompareOptions { metric: Some("f1".into()), ..Default::default() })
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("base/samples.jsonl") && err.contains("`f1`") && err.contains("available: acc"),
        "{err}"
    );
}

#[test]
fn render_lists_flips_and_escapes_xml() {
    let pair = |id: &str, base: f64, new: f64| Pair {
        id: id.into(),
        base,
        new,
        base_label: format!("{base}"),
        new_label: format!("{new}"),
    };
    let c = Comparison {
        metric: "resolved".into(),
        base: 0.5,
        new: 0.25,
        delta: -0.25,
        ci95: [-0.5, -0.01],
        p_value: 0.0034,
        test: TestName::McnemarExact,
        n_pairs: 2,
        regressions: vec!["a<&>\"".into()],
        improvements: vec![],
        verdict: Verdict::Regression,
        kind: RunKind::Swe,
        base_dir: "b".into(),
        new_dir: "n".into(),
        alpha: 0.05,
        min_delta: 0.0,
        n_units: 2,
        only_in_base: vec![],
        only_in_new: (0..25).map(|i| format!("x{i}")).collect(),
        excluded: vec![],
        drift: vec![],
        notes: vec![],
        pairs: vec![pair("a<&>\"", 1.0, 0.0), pair("b", 0.0, 0.0)],
    };
    let xml = junit(&c);
    assert!(xml.contains("name=\"a&lt;&amp;&gt;&quot;\""), "{xml}");
    assert!(xml.contains("message=\"regressed: base 1, new 0\""), "{xml}");
    assert_eq!(xml.matches("<testcase").count(), 2);
    assert_eq!(xml.matches("<failure").count(), 1);
    let md = markdown(&c);
    assert!(md.contains("**Verdict: `regression`**"), "{md}");
    assert!(md.contains("Only in new (25):") && md.contains("`x19` and 5 more"), "{md}");
    let text = summary_text(&c);
    assert!(text.contains("verdict: regression") && text.contains("p = 0.0034"), "{text}");
}

/// A model locked on the letter A against one that reads the content, on questions whose gold
/// is at A as published: plain accuracy cannot tell them apart, the circular worst case can.
#[test]
fn a_position_locked_model_regresses_on_robust_circular_only() {
    use crate::suites::robust::fixtures::circular_run;
    let root = tempfile::tempdir().unwrap();
    let (base_dir, new_dir) = (root.path().join("base"), root.path().join("new"));
    let reads_content = circular_run([0.0; 4], 2.0, &|_| 0);
    let locked_on_a = circular_run([3.0, 0.0, 0.0, 0.0], 1.0, &|_| 0);
    let with_perturb = |dir: &Path, records: &BTreeMap<String, SampleRecord>, seed: u64| {
        let records: Vec<SampleRecord> = records.values().cloned().collect();
        write_suite(dir, &records, &[0], 12);
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        manifest["perturb"] =
            json!({"families": ["options.circular"], "seed": seed, "variants": 1, "version": 1});
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    };
    with_perturb(&base_dir, &reads_content, 0);
    with_perturb(&new_dir, &locked_on_a, 0);
    let plain = compare(&base_dir, &new_dir, &CompareOptions::default()).unwrap();
    assert_eq!((plain.metric.as_str(), plain.n_pairs, plain.delta), ("acc", 12, 0.0));
    assert_eq!(plain.verdict, Verdict::NoSignificantChange);
    let robust_metric = "robust@options.circular";
    let options = CompareOptions { metric: Some(robust_metric.into()), ..Default::default() };
    let robust = compare(&base_dir, &new_dir, &options).unwrap();
    assert_eq!((robust.n_pairs, robust.base, robust.new), (12, 1.0, 0.0));
    assert_eq!(robust.verdict, Verdict::Regression, "p = {}", robust.p_value);
    assert_eq!(robust.regressions.len(), 12);
    // Another perturbation seed: refused, the field named.
    with_perturb(&new_dir, &locked_on_a, 1);
    let err = compare(&base_dir, &new_dir, &options).unwrap_err().to_string();
    assert!(err.contains("manifest.json: perturb.seed: base 0, new 1"), "{err}");
}

/// A perturbed SWE run: its variants are no instances of their own, and `robust@FAMILY` asks
/// for an instance resolved on its original and on every variant of the family.
#[test]
fn a_perturbed_swe_run_pairs_its_originals_and_scores_robust_families() {
    use crate::repair::perturb::{PerturbedResult, VariantOf};
    let perturbed = |id: &str, verdict: SweVerdict| {
        let mut r = instance(id, verdict, "t");
        let variant = crate::perturb::split_key(id).map(|(original, family, index)| VariantOf {
            original: original.into(),
            family: family.into(),
            index,
            applied: true,
        });
        r.perturbation = Some(PerturbedResult { variant, prompt_sha256: None, change_sha256: None });
        r
    };
    let mut manifest = swe_manifest();
    manifest["perturb"] = json!({"families": ["statement.typo"], "seed": 0, "variants": 1, "version": 1});
    let run = swe_run(
        manifest.clone(),
        vec![
            perturbed("x-1", SweVerdict::Resolved),
            perturbed("x-1@statement.typo#1", SweVerdict::Resolved),
            perturbed("x-2", SweVerdict::Resolved),
            perturbed("x-2@statement.typo#1", SweVerdict::Unresolved),
            perturbed("x-3", SweVerdict::Unresolved),
        ],
    );
    assert_eq!(run.keys(), ids(&["x-1", "x-2", "x-3"]));
    assert_eq!(run.metrics().into_iter().collect::<Vec<_>>(), ["resolved", "robust@statement.typo"]);
    let score =
        |items: &load::Items| items.scored.iter().map(|(k, s)| (k.clone(), s.value)).collect::<Vec<_>>();
    let plain = run.items("resolved");
    assert_eq!(score(&plain), [("x-1".into(), 1.0), ("x-2".into(), 1.0), ("x-3".into(), 0.0)]);
    let robust = run.items("robust@statement.typo");
    assert_eq!(score(&robust), [("x-1".into(), 1.0), ("x-2".into(), 0.0)]);
    assert_eq!(robust.excluded["x-3"], "no statement.typo variants");
    // Another perturbation seed makes the two runs incomparable.
    let mut other = manifest;
    other["perturb"]["seed"] = json!(5);
    let drift = drift::find(&run, &swe_run(other, vec![]), &ids(&[]));
    assert_eq!(fields(&drift), ["manifest.json: perturb.seed"]);
}

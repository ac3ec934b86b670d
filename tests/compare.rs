//! `repairbench compare` on output folders written here: SWE runs from the crate's own report
//! types, suite runs by the real suite engine with a scripted model. No Docker, no model file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use repairbench::grade::{Resolution, TestsStatus, Verdict};
use repairbench::kernel::fingerprint::FingerprintBuilder;
use repairbench::model::{
    ChatMessage, GenerateOutput, GenerateRequest, LanguageModel, ModelError, ModelInfo, ScoreOutput,
    ScoreRequest,
};
use repairbench::repair::{GradeReport, InstanceResult, Timings};
use repairbench::rng::SplitMix64;
use repairbench::suites::config::Suite;
use repairbench::suites::{evaluate, EvalOptions};
use serde_json::{json, Value};

fn compare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .arg("compare")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), stderr(out)))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn instance(id: &str, verdict: Verdict) -> InstanceResult {
    InstanceResult {
        instance_id: id.into(),
        verdict,
        resolved: verdict == Verdict::Resolved,
        resolution: if verdict == Verdict::Resolved { Resolution::Full } else { Resolution::No },
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
        test_exit: Some("exit 0".into()),
        detail: (verdict == Verdict::EnvError).then(|| "the environment did not build".into()),
        reason: (verdict == Verdict::EnvError).then(|| "environment_build_failed".into()),
        model_name_or_path: Some("model".into()),
        perturbation: None,
        fingerprint: Some(
            FingerprintBuilder::new().value("task", &id).bytes("prediction", id.as_bytes()).finish(),
        ),
        timings: Timings::default(),
        log_dir: format!("logs/{id}"),
    }
}

/// A `swe grade` output folder: report.json as the grader writes it, and its manifest.
fn write_swe(dir: &Path, instances: Vec<InstanceResult>, dataset_sha256: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let report = GradeReport::new(instances, Vec::new());
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let manifest = json!({
        "command": "swe grade",
        "repairbench_version": "0.1.0",
        "started_unix_s": 1.0,
        "dataset": {"path": "tasks.jsonl", "sha256": dataset_sha256, "instances": report.instances.len(), "bundles": {}},
        "predictions": {"path": dir.join("predictions.jsonl"), "sha256": "p"},
        "repos": null,
        "url_template": "https://github.com/{repo}.git",
        "settings": {"image": "repairbench-base", "image_id": null, "timeout_s": 1800.0, "workers": 2,
                     "flaky_reruns": 2, "junit_family": "xunit1",
                     "limits": {"memory_bytes": 2147483648u64, "cpus": 1.0, "pids": 256, "output_cap_bytes": 1048576}},
        "tools": {"git": "git version 2.39.5", "libgit2": "(1, 9, 0)"},
        "host": {"os": "linux", "arch": "x86_64"},
    });
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("repo__i{i:02}")).collect()
}

/// Base resolves i00..i14 of 20. New: i00..i11 regress, i15 improves, i19 fails to build its
/// environment (left out), and i20 is new.
fn regression_runs(root: &Path) -> (PathBuf, PathBuf) {
    let (base, new) = (root.join("base"), root.join("new"));
    let base_instances = ids(0..20)
        .iter()
        .enumerate()
        .map(|(i, id)| instance(id, if i < 15 { Verdict::Resolved } else { Verdict::Unresolved }))
        .collect();
    write_swe(&base, base_instances, "d1");
    let new_instances = ids(0..21)
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let verdict = match i {
                0..=11 => Verdict::Unresolved,
                12..=15 => Verdict::Resolved,
                19 => Verdict::EnvError,
                _ => Verdict::PatchApplyFailed,
            };
            instance(id, verdict)
        })
        .collect();
    write_swe(&new, new_instances, "d1");
    (base, new)
}

#[test]
fn identical_runs_show_no_change() {
    let root = tempfile::tempdir().unwrap();
    let (base, _) = regression_runs(root.path());
    let copy = root.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for file in ["report.json", "manifest.json"] {
        std::fs::copy(base.join(file), copy.join(file)).unwrap();
    }
    let out = compare(&[s(&base), s(&copy), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = stdout_json(&out);
    assert_eq!(c["verdict"], "no_significant_change");
    assert_eq!(c["test"], "mcnemar_exact");
    assert_eq!(
        (c["base"].as_f64(), c["new"].as_f64(), c["delta"].as_f64()),
        (Some(0.75), Some(0.75), Some(0.0))
    );
    assert_eq!(c["p_value"], 1.0);
    assert_eq!(c["n_pairs"], 20);
    assert_eq!(c["regressions"], json!([]));
    assert_eq!(c["improvements"], json!([]));
    let [lo, hi] = [c["ci95"][0].as_f64().unwrap(), c["ci95"][1].as_f64().unwrap()];
    assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");

    let text = compare(&[s(&base), s(&copy)]);
    assert_eq!(text.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&text.stdout).contains("verdict: no_significant_change"));
}

#[test]
fn twelve_regressions_against_one_improvement_fail_the_gate() {
    let root = tempfile::tempdir().unwrap();
    let (base, new) = regression_runs(root.path());
    let (md, xml) = (root.path().join("note.md"), root.path().join("reports/junit.xml"));
    let page = root.path().join("reports/compare.html");
    let out =
        compare(&[s(&base), s(&new), "--json", "--markdown", s(&md), "--junit", s(&xml), "--html", s(&page)]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let c = stdout_json(&out);
    for key in [
        "metric",
        "base",
        "new",
        "delta",
        "ci95",
        "p_value",
        "test",
        "n_pairs",
        "regressions",
        "improvements",
        "verdict",
    ] {
        assert!(c.get(key).is_some(), "{key} missing from {c}");
    }
    assert_eq!(c["metric"], "resolved");
    assert_eq!(c["verdict"], "regression");
    assert_eq!(c["test"], "mcnemar_exact");
    // Exact McNemar: 2 * (C(13,0) + C(13,1)) / 2^13.
    assert_eq!(c["p_value"], 28.0 / 8192.0);
    assert_eq!(c["n_pairs"], 19);
    assert_eq!(c["regressions"], json!(ids(0..12)));
    assert_eq!(c["improvements"], json!(["repo__i15"]));
    // Over the 19 pairs: base resolved 15, new 4.
    assert!((c["delta"].as_f64().unwrap() - (4.0 - 15.0) / 19.0).abs() < 1e-12, "{c}");
    assert!(c["ci95"][1].as_f64().unwrap() < 0.0, "{c}");
    assert_eq!(c["only_in_new"], json!(["repo__i20"]));
    assert_eq!(c["excluded"][0]["id"], "repo__i19");
    assert_eq!(c["excluded"][0]["new"], "env_error: environment_build_failed");

    // The page: the verdict, and each flipped instance with both runs' verdicts.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<div class=\"value\" id=\"verdict\"><span class=\"regression\">regression</span>"));
    assert_eq!(
        html.matches("<td class=\"regression\">regression</td><td>resolved</td><td>unresolved</td>").count(),
        12
    );
    assert_eq!(html.matches("<td class=\"improvement\">improvement</td>").count(), 1);

    let note = std::fs::read_to_string(&md).unwrap();
    assert!(note.contains("**Verdict: `regression`**"), "{note}");
    assert!(note.contains("Regressions (12):") && note.contains("`repo__i00`"), "{note}");

    // The JUnit file is well-formed XML with one failing test case per regression.
    let text = std::fs::read_to_string(&xml).unwrap();
    let mut reader = quick_xml::Reader::from_str(&text);
    let (mut cases, mut failed, mut messages, mut current) = (0, Vec::new(), Vec::new(), String::new());
    loop {
        match reader.read_event().unwrap_or_else(|e| panic!("invalid XML: {e}\n{text}")) {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let attr = |name: &[u8]| {
                    e.try_get_attribute(name).unwrap().map(|a| a.unescape_value().unwrap().into_owned())
                };
                match e.name().as_ref() {
                    b"testcase" => {
                        cases += 1;
                        current = attr(b"name").unwrap();
                    }
                    b"failure" => {
                        failed.push(current.clone());
                        messages.push(attr(b"message").unwrap());
                    }
                    _ => {}
                }
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(cases, 19);
    assert_eq!(failed, ids(0..12));
    assert!(messages.iter().all(|m| m == "regressed: base resolved, new unresolved"), "{messages:?}");

    // --min-delta above the drop turns the verdict, and the exit status, around.
    let out = compare(&[s(&base), s(&new), "--json", "--min-delta", "0.6"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["verdict"], "no_significant_change");
    // Swapped, the same flips are an improvement.
    let out = compare(&[s(&new), s(&base), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let swapped = stdout_json(&out);
    assert_eq!(swapped["verdict"], "improvement");
    assert_eq!(swapped["p_value"], 28.0 / 8192.0);

    // What a person reads, and the Markdown note a CI job posts.
    let out = compare(&[s(&base), s(&new)]);
    assert_eq!(out.status.code(), Some(4));
    let paths = [(root.path(), "[ROOT]")];
    insta::assert_snapshot!("regression_human", common::cli::transcript(&out, &paths));
    insta::assert_snapshot!("regression_markdown", common::cli::redact(&note, &paths));
}

#[test]
fn dataset_drift_is_refused_unless_allowed() {
    let root = tempfile::tempdir().unwrap();
    let instances = || ids(0..5).iter().map(|id| instance(id, Verdict::Resolved)).collect();
    let (base, new) = (root.path().join("base"), root.path().join("new"));
    write_swe(&base, instances(), "d1");
    write_swe(&new, instances(), "d2");
    let out = compare(&[s(&base), s(&new)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("manifest.json: dataset.sha256: base \"d1\", new \"d2\""), "{err}");
    assert!(err.contains("--allow-drift"), "{err}");

    let out = compare(&[s(&base), s(&new), "--allow-drift", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = stdout_json(&out);
    assert_eq!(c["verdict"], "no_significant_change");
    assert_eq!(
        c["drift"],
        json!([{"file": "manifest.json", "field": "dataset.sha256", "base": "d1", "new": "d2"}])
    );
}

#[test]
fn bad_input_names_the_file() {
    let root = tempfile::tempdir().unwrap();
    let (base, new) = regression_runs(root.path());
    std::fs::remove_file(new.join("manifest.json")).unwrap();
    let out = compare(&[s(&base), s(&new)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("{} is missing", new.join("manifest.json").display())),
        "{}",
        stderr(&out)
    );

    let empty = root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = compare(&[s(&base), s(&empty)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("neither report.json"), "{}", stderr(&out));

    let suite = root.path().join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    std::fs::write(suite.join("samples.jsonl"), "").unwrap();
    std::fs::write(suite.join("results.json"), r#"{"seeds": [0], "items": 0}"#).unwrap();
    std::fs::write(suite.join("manifest.json"), "{}").unwrap();
    let out = compare(&[s(&base), s(&suite)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("different kinds"), "{}", stderr(&out));

    let out = compare(&[s(&base), s(&base), "--alpha", "1.5"]);
    assert_eq!(out.status.code(), Some(2), "a bad flag is a usage error");
}

/// Scores a two-option item: the option ending in "right" wins with probability `skill`.
struct Scripted {
    info: ModelInfo,
    skill: f64,
    rng: SplitMix64,
}

impl Scripted {
    fn new(name: &str, skill: f64, seed: u64) -> Self {
        let info = ModelInfo {
            source: format!("{name}.gguf"),
            path: PathBuf::from(format!("{name}.gguf")),
            sha256: format!("sha-{name}"),
            architecture: "scripted".into(),
            name: Some(name.into()),
            parameters: 0,
            quantization: "F32".into(),
            context_length: 4096,
            vocab_size: 0,
            bos_token: None,
            eos_token: None,
            add_bos: false,
            chat_template: None,
            served: None,
        };
        Self { info, skill, rng: SplitMix64::new(seed) }
    }
}

impl LanguageModel for Scripted {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn generate(&mut self, _: &GenerateRequest) -> Result<GenerateOutput, ModelError> {
        Err(ModelError::EmptyPrompt)
    }

    fn score(&mut self, requests: &[ScoreRequest]) -> Result<Vec<ScoreOutput>, ModelError> {
        let right = self.rng.next_f64() < self.skill;
        Ok(requests
            .iter()
            .map(|r| {
                let gold = r.continuation.ends_with("right");
                ScoreOutput {
                    tokens: Vec::new(),
                    sum_logprob: if gold == right { -1.0 } else { -4.0 },
                    is_greedy: false,
                }
            })
            .collect())
    }

    fn render_chat(&self, _: &[ChatMessage]) -> Result<String, ModelError> {
        Err(ModelError::NoChatTemplate { path: "scripted".into() })
    }
}

const TOY_SUITE: &str = r#"name = "toy"
kind = "multiple_choice"

[data]
test = "test.jsonl"
fields = ["question", "choices", "answer"]

[prompt]
text = "Question: {{ question }}"

[choices]
list = "choices"
gold = "answer"
"#;

/// Runs the toy suite over 40 questions with seeds 0, 1 and 2 into `out`.
fn eval_toy(root: &Path, suite_text: &str, model: &mut Scripted, out: &Path) {
    let data = root.join("test.jsonl");
    let rows: String = (0..40)
        .map(|i| {
            json!({"question": format!("q{i}"), "choices": ["wrong", "right"], "answer": 1}).to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let suite = Suite::parse(&root.join("toy.toml"), suite_text.to_owned()).unwrap();
    let mut options = EvalOptions::new(out);
    options.data = Some(data);
    options.seeds = vec![0, 1, 2];
    evaluate(&suite, &options, Some(model), None).unwrap();
}

#[test]
fn suites_with_several_seeds_use_the_paired_bootstrap() {
    let root = tempfile::tempdir().unwrap();
    let (base, worse, same) = (root.path().join("base"), root.path().join("worse"), root.path().join("same"));
    eval_toy(root.path(), TOY_SUITE, &mut Scripted::new("base", 0.9, 1), &base);
    eval_toy(root.path(), TOY_SUITE, &mut Scripted::new("worse", 0.5, 2), &worse);
    eval_toy(root.path(), TOY_SUITE, &mut Scripted::new("same", 0.9, 3), &same);

    let out = compare(&[s(&base), s(&worse), "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let c = stdout_json(&out);
    assert_eq!(c["metric"], "acc");
    assert_eq!(c["test"], "paired_bootstrap");
    assert_eq!((c["n_pairs"].as_u64(), c["n_units"].as_u64()), (Some(120), Some(40)));
    assert_eq!(c["verdict"], "regression");
    assert!(c["p_value"].as_f64().unwrap() < 0.001, "{c}");
    assert!(c["ci95"][1].as_f64().unwrap() < 0.0, "{c}");
    let regressed = c["regressions"].as_array().unwrap();
    assert!(regressed.len() > 20 && regressed.iter().all(|id| id.as_str().unwrap().contains(':')), "{c}");
    // Deterministic: the same runs give the same interval, byte for byte.
    assert_eq!(compare(&[s(&base), s(&worse), "--json"]).stdout, out.stdout);
    // The page lists each regressed (seed, document) with its two scores.
    let page = root.path().join("compare.html");
    compare(&[s(&base), s(&worse), "--html", s(&page)]);
    let html = std::fs::read_to_string(&page).unwrap();
    let rows = "<td class=\"regression\">regression</td><td>1</td><td>0</td>";
    assert_eq!(html.matches(rows).count(), regressed.len(), "{html}");

    // The engine's subscribers wrote the views; `repairbench report` writes them again from the
    // folder, byte for byte: one code path.
    let views = ["report.md", "junit.xml", "report.html"];
    let written: Vec<Vec<u8>> = views.iter().map(|v| std::fs::read(base.join(v)).unwrap()).collect();
    for view in views {
        std::fs::remove_file(base.join(view)).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_repairbench")).arg("report").arg(&base).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let again: Vec<Vec<u8>> = views.iter().map(|v| std::fs::read(base.join(v)).unwrap()).collect();
    assert!(written == again, "regenerated views differ");

    // Another draw of an equally good model is no regression.
    let out = compare(&[s(&base), s(&same), "--json", "--metric", "acc_norm"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = stdout_json(&out);
    assert_eq!((c["metric"].as_str(), c["test"].as_str()), (Some("acc_norm"), Some("paired_bootstrap")));
    assert_eq!(c["verdict"], "no_significant_change", "{c}");
    assert!(c["ci95"][0].as_f64().unwrap() < 0.0 && c["ci95"][1].as_f64().unwrap() > 0.0, "{c}");

    // Another prompt template is another yardstick: refused, with the field named.
    let reworded = root.path().join("reworded");
    let text = TOY_SUITE.replace("Question: ", "Q: ");
    eval_toy(root.path(), &text, &mut Scripted::new("base", 0.9, 1), &reworded);
    let out = compare(&[s(&base), s(&reworded)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("manifest.json: fingerprint.suite_sha256"), "{}", stderr(&out));
    let out = compare(&[s(&base), s(&reworded), "--allow-drift", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = stdout_json(&out);
    assert_eq!(c["drift"][0]["field"], "fingerprint.suite_sha256");
    // The same model and seeds under the new wording score the same here.
    assert_eq!(c["delta"], 0.0);
}

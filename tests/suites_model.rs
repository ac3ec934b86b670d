//! Suites through the real default model (SmolLM2-135M, GGUF) on small fixtures: multiple
//! choice with per-subject results, GSM8K extraction side by side, seeds, determinism, resume
//! and a bad row in the middle of a run.

use std::path::{Path, PathBuf};

use repairbench::model::{Engine, LanguageModel};
use repairbench::suites::config::Suite;
use repairbench::suites::{evaluate, load_suite, EvalOptions, SampleRecord, SuiteError};

const MODEL: &str = repairbench::model::DEFAULT_MODEL;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites")
}

fn model() -> Engine {
    Engine::load(MODEL).expect("the default model GGUF must be present")
}

fn records(out: &Path) -> Vec<SampleRecord> {
    std::fs::read_to_string(out.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn mmlu_fixture_is_scored_per_subject_and_reproducibly() {
    let mut engine = model();
    let suite = load_suite("mmlu").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = EvalOptions::new(dir.path().join("a"));
    opts.data = Some(fixtures().join("mmlu"));
    opts.shots = Some(1);
    let first = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!((first.items, first.computed), (5, 5));
    for name in ["acc", "acc_norm", "acc_norm_tokens", "acc_group_mean", "acc_group_std"] {
        let m = &first.metrics[name];
        assert!((0.0..=1.0).contains(&m.value), "{name} = {}", m.value);
    }
    assert_eq!(first.metrics["acc"].n, 5);
    assert_eq!(first.metrics["acc_group_mean"].n, 2);
    assert_eq!(first.groups.keys().collect::<Vec<_>>(), ["elementary_mathematics", "high_school_chemistry"]);
    assert_eq!(first.groups["elementary_mathematics"]["acc"].n, 3);
    // The size-weighted score is the item mean; the subject average weighs subjects equally.
    let g = &first.groups;
    let avg = (g["elementary_mathematics"]["acc"].value + g["high_school_chemistry"]["acc"].value) / 2.0;
    assert!((first.metrics["acc_group_mean"].value - avg).abs() < 1e-12);
    let recs = records(&dir.path().join("a"));
    for r in &recs {
        assert_eq!(r.choices.len(), 4);
        assert!(r
            .choices
            .iter()
            .all(|c| c.loglikelihood.is_finite() && c.loglikelihood < 0.0 && c.tokens >= 1));
        assert!(r.prompt.contains("Answer: "), "one-shot prompt: {}", r.prompt);
        assert_eq!(r.choices[0].continuation, " A");
    }
    // The CI views, from the same records: per-subject table, one test case per item.
    let md = std::fs::read_to_string(dir.path().join("a/report.md")).unwrap();
    assert!(md.contains("acc per subject") && md.contains("| elementary_mathematics |"), "{md}");
    let xml = std::fs::read_to_string(dir.path().join("a/junit.xml")).unwrap();
    let right = recs.iter().filter(|r| r.scores["acc"] > 0.0).count();
    assert_eq!(xml.matches("<testcase").count(), 5, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 5 - right, "{xml}");
    let html = std::fs::read_to_string(dir.path().join("a/report.html")).unwrap();
    assert_eq!(html.matches("<tr class=\"item expandable\"").count(), 5, "one row per item");
    assert!(html.contains(">elementary_mathematics</text>"), "the per-subject chart");

    // Same run again, into another directory: identical per-item results, byte for byte.
    let mut again = opts.clone();
    again.out = dir.path().join("b");
    evaluate(&suite, &again, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("a/samples.jsonl")).unwrap(),
        std::fs::read(dir.path().join("b/samples.jsonl")).unwrap()
    );

    // A rerun into the same directory resumes: nothing is recomputed.
    let resumed = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!((resumed.computed, resumed.resumed), (0, 5));
    assert_eq!(resumed.metrics, first.metrics);

    // A changed prompt template (the suite file) recomputes every item, and says why.
    let text = std::fs::read_to_string(&suite.path).unwrap().replace("Answer:", "Answer :");
    let edited = Suite::parse(&suite.path, text).unwrap();
    let changed = evaluate(&edited, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!((changed.computed, changed.resumed), (5, 0));
    assert_eq!(changed.recomputed, [("suite changed".to_string(), 5)].into());
    // Records another build of repairbench made are recomputed too.
    let samples = dir.path().join("a/samples.jsonl");
    let stale: Vec<String> = std::fs::read_to_string(&samples)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["fingerprint"]["parts"]["code"] = "0000000-another-build".into();
            v["fingerprint"]["hash"] = "stale".into();
            v.to_string()
        })
        .collect();
    std::fs::write(&samples, stale.join("\n") + "\n").unwrap();
    let rebuilt = evaluate(&edited, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!(rebuilt.recomputed, [("code changed".to_string(), 5)].into());
    // --force recomputes everything.
    let mut other = opts.clone();
    other.force = true;
    let forced = evaluate(&edited, &other, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!(forced.recomputed, [("forced".to_string(), 5)].into());
}

#[test]
fn bad_row_mid_run_keeps_finished_items_and_resume_picks_up() {
    let mut engine = model();
    let suite = load_suite("arc_easy").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("test.jsonl");
    let good = std::fs::read_to_string(fixtures().join("arc/test.jsonl")).unwrap();
    // Row 3's answer key names no option: found only when the run reaches it.
    let bad = good.replace("\"answerKey\": \"A\"", "\"answerKey\": \"Z\"");
    assert_ne!(good, bad);
    std::fs::write(&data, &bad).unwrap();
    let mut opts = EvalOptions::new(dir.path().join("out"));
    opts.data = Some(data.clone());
    let err = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap_err();
    assert!(matches!(err, SuiteError::DataRow { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("test.jsonl:3:") && err.to_string().contains("`Z`"), "{err}");
    assert_eq!(records(&dir.path().join("out")).len(), 2, "the two finished items are kept");

    std::fs::write(&data, &good).unwrap();
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!((summary.resumed, summary.computed), (2, 1));

    // A torn last line (a crash mid-write) is dropped and that item recomputed.
    let samples = dir.path().join("out/samples.jsonl");
    let text = std::fs::read_to_string(&samples).unwrap();
    let cut = text.trim_end().rfind('\n').unwrap() + 40;
    std::fs::write(&samples, &text[..cut]).unwrap();
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!((summary.resumed, summary.computed), (2, 1));
    assert_eq!(std::fs::read_to_string(&samples).unwrap(), text);
}

#[test]
fn gpqa_over_seeds_reports_spread() {
    let mut engine = model();
    let suite = load_suite("gpqa").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = EvalOptions::new(dir.path());
    opts.data = Some(fixtures().join("gpqa/test.jsonl"));
    opts.seeds = vec![0, 1, 2];
    opts.limit = Some(2);
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    let acc = &summary.metrics["acc"];
    assert_eq!(acc.per_seed.len(), 3);
    let spread = acc.across_seeds.as_ref().expect("three seeds give a spread");
    assert_eq!(spread.n, 3);
    let [lo, hi] = spread.ci95.unwrap();
    assert!(lo <= spread.mean && spread.mean <= hi);
    let recs = records(dir.path());
    assert_eq!(recs.len(), 6);
    // Each seed shows the options in its own order; the gold follows the correct answer.
    let orders: std::collections::HashSet<&str> =
        recs.iter().filter(|r| r.doc_id == "0").map(|r| r.prompt.as_str()).collect();
    assert!(orders.len() >= 2);
}

#[test]
fn gsm8k_extractions_side_by_side() {
    let mut engine = model();
    let text = std::fs::read_to_string(repairbench::suites::suites_dir().join("gsm8k.toml"))
        .unwrap()
        .replace("max_tokens = 256", "max_tokens = 24");
    let suite = Suite::parse(&repairbench::suites::suites_dir().join("gsm8k.toml"), text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = EvalOptions::new(dir.path().join("a"));
    opts.data = Some(fixtures().join("gsm8k"));
    opts.limit = Some(2);
    opts.shots = Some(1);
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    for name in ["strict", "flexible", "boxed"] {
        assert!(summary.metrics.contains_key(&format!("exact_match_{name}")));
        assert!(summary.metrics.contains_key(&format!("invalid_{name}")));
    }
    assert!(summary.metrics.contains_key("agree_strict_flexible"));
    assert!(summary.metrics.contains_key("agree_all"));
    let recs = records(&dir.path().join("a"));
    assert_eq!(recs[0].target, "12");
    assert_eq!(recs[1].target, "180");
    for r in &recs {
        assert_eq!(r.outputs.len(), 1);
        assert_eq!(r.extracted.len(), 3);
        assert_eq!(r.prompt_sha256.len(), 64);
        assert!(r.prompt.ends_with("\nAnswer:"));
        // The invalid count matches what was extracted.
        let invalid = r.extracted.values().filter(|v| v.is_none()).count() as f64;
        let counted: f64 =
            ["strict", "flexible", "boxed"].iter().map(|n| r.scores[&format!("invalid_{n}")]).sum();
        assert_eq!(invalid, counted);
    }
    let mut again = opts.clone();
    again.out = dir.path().join("b");
    evaluate(&suite, &again, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("a/samples.jsonl")).unwrap(),
        std::fs::read(dir.path().join("b/samples.jsonl")).unwrap()
    );
}

//! The model in the loop, with the real default model on a bundled sample: the prompt holds
//! the issue and retrieved files, the predictions file keeps the full output and how the patch
//! was extracted, and a rerun with the same prompt reuses the earlier prediction.

use std::path::Path;

use repairbench::model::{Engine, LanguageModel, Sampling, DEFAULT_MODEL};
use repairbench::repair::infer::{self, InferPlan};
use repairbench::report::ConsoleProgress;
use repairbench::tasks::prompt::{PromptSettings, Retrieval};
use repairbench::tasks::{self, PredictionSource};

#[test]
fn infer_writes_swebench_predictions_with_the_full_output() {
    let mut model = Engine::load(DEFAULT_MODEL).expect("the default model loads");
    let dir = tempfile::tempdir().unwrap();
    let dataset = Path::new(env!("CARGO_MANIFEST_DIR")).join("issues/intervals-touching");
    let out = dir.path().join("preds.jsonl");
    let plan = InferPlan {
        dataset: dataset.clone(),
        repos: None,
        url_template: None,
        cache_dir: dir.path().join("cache"),
        out: out.clone(),
        prompt: PromptSettings { retrieval: Retrieval::Bm25, max_files: 1, max_file_chars: 1200 },
        max_tokens: 24,
        sampling: Sampling::GREEDY,
        force: false,
        only: None,
        perturb: None,
    };
    let summary = infer::infer(&mut model, &plan, &mut ConsoleProgress::hidden()).unwrap();
    assert_eq!((summary.written, summary.kept), (1, 0));

    let task_set = tasks::load_tasks(&dataset).unwrap();
    let preds = tasks::load_predictions(&PredictionSource::File(out.clone()), &task_set.tasks).unwrap();
    assert!(preds.skipped.is_empty(), "{:?}", preds.skipped);
    let prediction = &preds.by_instance["acme__intervals-42"];
    assert_eq!(
        prediction.model_name_or_path.as_deref(),
        model.info().name.as_deref().or(Some(DEFAULT_MODEL))
    );
    let output = prediction.extra["full_output"].as_str().unwrap();
    assert!(!output.is_empty(), "greedy decoding produced text");
    assert_eq!(prediction.extra["generated_tokens"], 24);
    // BM25 on the issue text ("merge", "intervals", "touching") finds the module with the bug.
    assert_eq!(prediction.extra["context_files"], serde_json::json!(["intervals/merge.py"]));
    assert!(prediction.extra["extraction_method"].is_string());

    // Same inputs: kept, not generated again.
    let again = infer::infer(&mut model, &plan, &mut ConsoleProgress::hidden()).unwrap();
    assert_eq!((again.written, again.kept), (0, 1));

    // Each input that changes the prediction makes it generated again, and the grader reads
    // the newest line.
    let rerun = |model: &mut dyn LanguageModel, plan: &InferPlan, reason: &str| {
        let summary = infer::infer(model, plan, &mut ConsoleProgress::hidden()).unwrap();
        assert_eq!((summary.written, summary.kept), (1, 0), "recomputed");
        assert_eq!(summary.recomputed.keys().collect::<Vec<_>>(), [reason]);
        let preds = tasks::load_predictions(&PredictionSource::File(out.clone()), &task_set.tasks).unwrap();
        preds.by_instance["acme__intervals-42"].clone()
    };
    let mut sampled = plan.clone();
    sampled.sampling = Sampling { temperature: 0.8, seed: 7, ..Sampling::GREEDY };
    let newest = rerun(&mut model, &sampled, "sampling changed");
    assert_ne!(
        newest.extra["fingerprint"]["parts"]["sampling"],
        prediction.extra["fingerprint"]["parts"]["sampling"]
    );
    let mut longer = sampled.clone();
    longer.max_tokens = 12;
    assert_eq!(
        rerun(&mut model, &longer, "max_tokens changed").extra["generated_tokens"],
        12,
        "the newest line is the one graded"
    );
    let mut other_prompt = longer.clone();
    other_prompt.prompt.max_file_chars = 600;
    let changed = rerun(&mut model, &other_prompt, "prompt changed");
    assert_ne!(changed.extra["prompt_sha256"], prediction.extra["prompt_sha256"]);

    // Another model: the same weights under another sha256 (one byte appended to the file).
    let copy = dir.path().join("other-model.gguf");
    let mut bytes = std::fs::read(&model.info().path).unwrap();
    bytes.push(0);
    std::fs::write(&copy, bytes).unwrap();
    let mut other_model = Engine::load(copy.to_str().unwrap()).expect("the copy loads");
    assert_ne!(other_model.info().sha256, model.info().sha256);
    rerun(&mut other_model, &other_prompt, "model changed");

    // Another build of repairbench made the line: its code part differs.
    let text = std::fs::read_to_string(&out).unwrap();
    let last = text.lines().last().unwrap();
    let mut record: serde_json::Value = serde_json::from_str(last).unwrap();
    record["fingerprint"]["parts"]["code"] = "0000000-another-build".into();
    record["fingerprint"]["hash"] = "stale".into();
    std::fs::write(&out, format!("{text}{record}\n")).unwrap();
    rerun(&mut other_model, &other_prompt, "code changed");
    let unchanged = infer::infer(&mut other_model, &other_prompt, &mut ConsoleProgress::hidden()).unwrap();
    assert_eq!((unchanged.written, unchanged.kept), (0, 1));
    let mut forced = other_prompt.clone();
    forced.force = true;
    rerun(&mut other_model, &forced, "forced");
}

//! The model in the loop, with the real default model on a bundled sample: the prompt holds
//! the issue and retrieved files, the predictions file keeps the full output and how the patch
//! was extracted, and a rerun with the same prompt reuses the earlier prediction.

use std::path::Path;

use repairbench::model::{Engine, LanguageModel, Sampling, DEFAULT_MODEL};
use repairbench::report::ConsoleProgress;
use repairbench::run::swe_infer::{self, InferPlan};
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
    };
    let summary = swe_infer::infer(&mut model, &plan, &mut ConsoleProgress::hidden()).unwrap();
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

    // Same prompt: kept, not generated again.
    let again = swe_infer::infer(&mut model, &plan, &mut ConsoleProgress::hidden()).unwrap();
    assert_eq!((again.written, again.kept), (0, 1));
}

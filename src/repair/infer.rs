//! The model in the loop: one prompt per task (issue + retrieved files), one generation, a
//! patch extracted from it, and a SWE-bench predictions line that also keeps the full output.
//! Lines are appended as each task finishes; a rerun keeps a line only when its fingerprint
//! (model sha256, sampling, token limit, prompt, code version) is unchanged, and the grader
//! reads the last line per instance.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::digest::sha256_hex;
use crate::kernel::fingerprint::{Fingerprint, FingerprintBuilder};
use crate::kernel::store::StoredRecord;
use crate::kernel::Kernel;
use crate::model::{GenerateRequest, LanguageModel, Prompt, Sampling};
use crate::patch::{self, extract, extract::ExtractMethod};
use crate::repair::RunError;
use crate::report::{Reporter, ResultEvent, Tally};
use crate::tasks::prompt::{self, PromptSettings, Retrieval};
use crate::tasks::{self, repos, Prediction, RepoLocator, Skipped, SweTask};

/// Tasks handed to the model at once: as many as the local engine decodes together by default.
const INFER_CHUNK: usize = crate::model::batch::DEFAULT_BATCH;

#[derive(Debug, Clone)]
pub struct InferPlan {
    pub dataset: PathBuf,
    pub repos: Option<PathBuf>,
    pub url_template: Option<String>,
    pub cache_dir: PathBuf,
    /// The predictions file written (JSONL).
    pub out: PathBuf,
    pub prompt: PromptSettings,
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Generate everything again, reusing no earlier line.
    pub force: bool,
    /// Only these instances (a cluster worker's unit).
    pub only: Option<std::collections::BTreeSet<String>>,
    /// Ask for each task's variants too (`--perturb`), each written as a line of its own.
    pub perturb: Option<super::perturb::SwePerturbSpec>,
}

/// What an inference run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InferSummary {
    pub written: usize,
    pub kept: usize,
    /// Tasks generated again although an earlier line existed, by reason (`model changed`...).
    pub recomputed: BTreeMap<String, usize>,
    pub empty_patches: usize,
    pub extraction_methods: BTreeMap<String, usize>,
    pub skipped: Vec<Skipped>,
}

impl InferSummary {
    /// The answers written now, in words: how many contained a diff, and where it was found.
    fn tally(&self) -> Tally {
        let counts: BTreeMap<String, usize> = self.extraction_methods.clone();
        let answers: usize = counts.values().sum();
        let found: Vec<String> = counts
            .iter()
            .filter(|(method, _)| method.as_str() != "none")
            .map(|(method, n)| {
                let how = serde_json::from_value::<ExtractMethod>(serde_json::json!(method))
                    .map_or_else(|_| method.clone(), |m| m.describe().to_owned());
                format!("{n} {how}")
            })
            .collect();
        let with_diff = answers - counts.get("none").copied().unwrap_or(0);
        let mut words = format!("patches: {with_diff} of {answers} answer(s) contained a diff");
        match (found.is_empty(), answers - with_diff) {
            (true, none) => words.push_str(&format!(" ({none} had none)")),
            (false, 0) => words.push_str(&format!(" ({})", found.join(", "))),
            (false, none) => words.push_str(&format!(" ({}; {none} had none)", found.join(", "))),
        }
        Tally { counts, words }
    }

    /// Counts a prediction written now.
    fn count(&mut self, prediction: &Prediction) {
        let (method, has_patch) = outcome_of(prediction);
        *self.extraction_methods.entry(method).or_default() += 1;
        self.empty_patches += usize::from(!has_patch);
        self.written += 1;
    }
}

/// A prediction's outcome for reporters (how its patch was extracted) and whether it has one.
pub(super) fn outcome_of(prediction: &Prediction) -> (String, bool) {
    let method = prediction.extra.get("extraction_method").and_then(|m| m.as_str()).unwrap_or("none");
    (method.to_owned(), !prediction.patch().is_empty())
}

/// The base commit's files chosen for the prompt, in order of relevance.
pub fn relevant_files(
    repo: &git2::Repository,
    task: &SweTask,
    retrieval: Retrieval,
    max_files: usize,
) -> Vec<(String, String)> {
    let read = |path: &str| {
        repos::read_at_commit(repo, &task.base_commit, path).and_then(|bytes| String::from_utf8(bytes).ok())
    };
    match retrieval {
        Retrieval::Oracle => patch::files_touched(&task.patch)
            .into_iter()
            .filter_map(|path| read(&path).map(|text| (path, text)))
            .take(max_files)
            .collect(),
        Retrieval::Bm25 => {
            // Only the issue text and the base commit: the gold patch is never read here. Test
            // files are left out: edits to them are undone before grading.
            let documents: Vec<(String, String)> = repos::list_files(repo, &task.base_commit)
                .into_iter()
                .filter(|path| !patch::is_test_path(path))
                .filter_map(|path| {
                    let text = read(&path)?;
                    prompt::is_candidate_file(&path, text.len()).then_some((path, text))
                })
                .collect();
            prompt::bm25_rank(&task.problem_statement, &documents)
                .into_iter()
                .take(max_files)
                .map(|(index, _)| documents[index].clone())
                .collect()
        }
    }
}

/// Field of a prediction line holding what it was made from.
pub(super) const FINGERPRINT_FIELD: &str = "fingerprint";

impl StoredRecord for Prediction {
    fn key(&self) -> String {
        self.instance_id.clone()
    }

    fn fingerprint(&self) -> Option<Fingerprint> {
        serde_json::from_value(self.extra.get(FINGERPRINT_FIELD)?.clone()).ok()
    }

    fn is_infrastructure_failure(&self) -> bool {
        self.extra.contains_key("generation_error")
    }
}

/// One task ready for the model: its prompt and the files shown in it.
struct InferItem<'t> {
    task: &'t SweTask,
    repo: git2::Repository,
    files: Vec<(String, String)>,
    messages: Vec<crate::model::ChatMessage>,
    prompt_sha256: String,
    /// For a variant: which, and whether its prompt differs from the original's.
    variant: Option<super::perturb::PredictionVariant>,
}

/// Generates a prediction for every task of `plan.dataset`, appending to `plan.out`; a rerun
/// keeps the lines whose model, sampling, token limit, prompt and code are unchanged.
pub fn infer(
    model: &mut dyn LanguageModel,
    plan: &InferPlan,
    reporter: &mut dyn Reporter<Prediction>,
) -> Result<InferSummary, RunError> {
    infer_with(model, plan, reporter, None)
}

/// [`infer`], with the tasks left to generate sent to `cluster` when one is given (`model`
/// then gives only its identity; the prompts are built here too, for their fingerprints).
pub fn infer_with(
    model: &mut dyn LanguageModel,
    plan: &InferPlan,
    reporter: &mut dyn Reporter<Prediction>,
    cluster: Option<&super::remote::InferCluster>,
) -> Result<InferSummary, RunError> {
    let mut task_set = tasks::load_tasks(&plan.dataset).map_err(RunError::Dataset)?;
    let mut summary = InferSummary { skipped: task_set.skipped.clone(), ..InferSummary::default() };
    let model_name = model.info().name.clone().unwrap_or_else(|| model.info().source.clone());
    let model_sha = model.info().sha256.clone();
    let locator = RepoLocator::new(plan.repos.clone(), plan.url_template.clone(), plan.cache_dir.clone());
    let tasks = match &plan.perturb {
        Some(spec) => super::perturb::expand(std::mem::take(&mut task_set.tasks), spec),
        None => std::mem::take(&mut task_set.tasks),
    };
    let mut items = Vec::new();
    for task in &tasks {
        if plan.only.as_ref().is_some_and(|only| !only.contains(&task.instance_id)) {
            continue;
        }
        let repo = match locator.locate(task).map_err(|e| crate::error_chain(&e)).and_then(|path| {
            git2::Repository::open(&path).map_err(|e| format!("opening {}: {e}", path.display()))
        }) {
            Ok(repo) => repo,
            Err(reason) => {
                summary.skipped.push(Skipped::new(
                    task.origin.clone(),
                    Some(task.instance_id.clone()),
                    reason,
                ));
                continue;
            }
        };
        let files = relevant_files(&repo, task, plan.prompt.retrieval, plan.prompt.max_files);
        let mut shown = prompt::shown_files(&files, &plan.prompt);
        let mut moved = false;
        if let Some(key) = task.variant.as_ref().and_then(|v| v.context_order) {
            let order = crate::rng::permutation(shown.len(), key);
            moved = order.iter().enumerate().any(|(i, &j)| i != j);
            shown = order.into_iter().map(|i| shown[i].clone()).collect();
        }
        let messages = prompt::build_messages(&task.problem_statement, &shown);
        let prompt_sha256 = sha256_hex(serde_json::to_string(&messages).unwrap_or_default());
        let variant = task.variant.as_ref().map(|v| super::perturb::PredictionVariant {
            of: super::perturb::VariantOf {
                original: v.original.clone(),
                family: v.family.clone(),
                index: v.index,
                applied: v.statement_edited || moved,
            },
            files_shown: shown.iter().map(|(path, _)| path.clone()).collect(),
        });
        items.push(InferItem { task, repo, files, messages, prompt_sha256, variant });
    }
    let mut kernel = Kernel::open("swe infer", &plan.out, plan.force, reporter).map_err(RunError::Report)?;
    let todo = kernel
        .plan(items, |item| {
            let fingerprint = FingerprintBuilder::new()
                .id("model", &model_sha)
                .value("sampling", &plan.sampling)
                .value("max_tokens", &plan.max_tokens)
                .id("prompt", &item.prompt_sha256)
                .finish();
            (item.task.instance_id.clone(), fingerprint)
        })
        .map_err(RunError::Report)?;
    summary.kept = kernel.resume_summary().reused;
    summary.recomputed = kernel.resume_summary().recomputed_again();
    for skip in &summary.skipped {
        kernel.report(&skip.event()).map_err(RunError::Report)?;
    }
    // On a cluster, what comes back is stored there and nothing is left to generate here.
    let todo = match cluster {
        Some(cluster) => {
            let ids: Vec<(String, Fingerprint)> = todo
                .into_iter()
                .map(|(item, fingerprint)| (item.task.instance_id.clone(), fingerprint))
                .collect();
            for prediction in super::remote::infer_on_ray(cluster, &mut kernel, &ids, plan, model.info())? {
                summary.count(&prediction);
            }
            Vec::new()
        }
        None => todo,
    };
    // A few tasks per call, so that the model decodes them together; each prediction is kept
    // as soon as its chunk is done.
    for chunk in todo.chunks(INFER_CHUNK) {
        for (item, _) in chunk {
            kernel
                .report(&ResultEvent::ItemStarted { id: item.task.instance_id.clone() })
                .map_err(RunError::Report)?;
        }
        let requests: Vec<GenerateRequest> = chunk
            .iter()
            .map(|(item, _)| GenerateRequest {
                prompt: Prompt::Chat(item.messages.clone()),
                max_tokens: plan.max_tokens,
                sampling: plan.sampling,
                stop: vec!["</patch>".into()],
                n: 1,
            })
            .collect();
        let outputs = model.generate_many(&requests);
        for ((item, fingerprint), generated) in chunk.iter().zip(outputs) {
            let task = &item.task;
            let (output, record_extra) = match generated {
                Ok(out) => {
                    let sequence = out.sequences.into_iter().next();
                    let text = sequence.as_ref().map(|s| s.text.clone()).unwrap_or_default();
                    let mut extra = BTreeMap::new();
                    extra.insert("prompt_tokens".into(), serde_json::json!(out.prompt_tokens));
                    extra.insert(
                        "generated_tokens".into(),
                        serde_json::json!(sequence.as_ref().map_or(0, |s| s.tokens.len())),
                    );
                    extra.insert("finish".into(), serde_json::json!(sequence.as_ref().map(|s| s.finish)));
                    extra.insert("decode_tok_s".into(), serde_json::json!(out.decode_tok_s));
                    (text, extra)
                }
                Err(e) => {
                    let mut extra = BTreeMap::new();
                    extra.insert("generation_error".into(), serde_json::json!(crate::error_chain(&e)));
                    (String::new(), extra)
                }
            };
            // The stop string ends generation before `</patch>`; the extractor accepts that.
            let read_file = |path: &str| {
                repos::read_at_commit(&item.repo, &task.base_commit, path)
                    .and_then(|b| String::from_utf8(b).ok())
            };
            let shown: Vec<String> = item.files.iter().map(|(path, _)| path.clone()).collect();
            let extracted = extract::extract_patch(&output, &read_file, &shown);
            let method = serde_json::to_value(extracted.method).unwrap_or_default();
            let mut extra = record_extra;
            extra.insert("full_output".into(), serde_json::json!(output));
            extra.insert("extraction_method".into(), method);
            extra.insert("prompt_sha256".into(), serde_json::json!(item.prompt_sha256));
            extra.insert("retrieval".into(), serde_json::json!(plan.prompt.retrieval));
            extra.insert("context_files".into(), serde_json::json!(shown));
            if let Some(variant) = &item.variant {
                extra.insert("variant".into(), serde_json::json!(variant));
            }
            extra.insert(FINGERPRINT_FIELD.into(), serde_json::json!(fingerprint));
            let prediction = Prediction {
                instance_id: task.instance_id.clone(),
                model_name_or_path: Some(model_name.clone()),
                model_patch: Some(extracted.patch),
                extra,
            };
            summary.count(&prediction);
            let (outcome, success) = outcome_of(&prediction);
            kernel.finish_item(prediction, &outcome, success).map_err(RunError::Report)?;
        }
    }
    let tally = summary.tally();
    kernel.finish_with(|_| tally.clone()).map_err(RunError::Report)?;
    Ok(summary)
}

//! The model in the loop: one prompt per task (issue + retrieved files), one generation, a
//! patch extracted from it, and a SWE-bench predictions line that also keeps the full output.
//! Lines are appended as each task finishes; a rerun skips tasks whose prompt is unchanged.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::model::{GenerateRequest, LanguageModel, Prompt, Sampling};
use crate::patch::{self, extract};
use crate::report::{self, JsonlAppender, Reporter, ResultEvent};
use crate::run::swe::RunError;
use crate::tasks::prompt::{self, PromptSettings, Retrieval};
use crate::tasks::{self, repos, Prediction, RepoLocator, Skipped, SweTask};

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
}

/// What an inference run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InferSummary {
    pub written: usize,
    pub kept: usize,
    pub empty_patches: usize,
    pub extraction_methods: BTreeMap<String, usize>,
    pub skipped: Vec<Skipped>,
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

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Generates a prediction for every task of `plan.dataset`, appending to `plan.out`.
pub fn infer(
    model: &mut dyn LanguageModel,
    plan: &InferPlan,
    reporter: &mut dyn Reporter<Prediction>,
) -> Result<InferSummary, RunError> {
    let task_set = tasks::load_tasks(&plan.dataset).map_err(RunError::Dataset)?;
    let mut summary = InferSummary { skipped: task_set.skipped.clone(), ..InferSummary::default() };
    let model_name = model.info().name.clone().unwrap_or_else(|| model.info().source.clone());
    let (earlier, _): (Vec<Prediction>, _) = report::read_jsonl(&plan.out);
    let done: HashSet<(String, String)> = earlier
        .iter()
        .filter_map(|p| Some((p.instance_id.clone(), p.extra.get("prompt_sha256")?.as_str()?.to_owned())))
        .collect();
    let mut appender = JsonlAppender::open(&plan.out).map_err(RunError::Report)?;
    let locator = RepoLocator::new(plan.repos.clone(), plan.url_template.clone(), plan.cache_dir.clone());
    reporter
        .report(&ResultEvent::RunStarted { run: "swe infer".into(), total: task_set.tasks.len(), resumed: 0 })
        .map_err(RunError::Report)?;
    for skip in &summary.skipped {
        reporter.report(&skip.event()).map_err(RunError::Report)?;
    }
    let started = std::time::Instant::now();
    for task in &task_set.tasks {
        reporter
            .report(&ResultEvent::ItemStarted { id: task.instance_id.clone() })
            .map_err(RunError::Report)?;
        let repo = match locator.locate(task).map_err(|e| e.to_string()).and_then(|path| {
            git2::Repository::open(&path).map_err(|e| format!("opening {}: {e}", path.display()))
        }) {
            Ok(repo) => repo,
            Err(reason) => {
                let skip = Skipped {
                    location: task.origin.clone(),
                    instance_id: Some(task.instance_id.clone()),
                    reason,
                };
                reporter.report(&skip.event()).map_err(RunError::Report)?;
                summary.skipped.push(skip);
                continue;
            }
        };
        let files = relevant_files(&repo, task, plan.prompt.retrieval, plan.prompt.max_files);
        let messages = prompt::build_messages(&task.problem_statement, &files, &plan.prompt);
        let prompt_sha256 = sha256_hex(&serde_json::to_string(&messages).unwrap_or_default());
        if done.contains(&(task.instance_id.clone(), prompt_sha256.clone())) {
            summary.kept += 1;
            continue;
        }
        let request = GenerateRequest {
            prompt: Prompt::Chat(messages),
            max_tokens: plan.max_tokens,
            sampling: plan.sampling,
            stop: vec!["</patch>".into()],
            n: 1,
        };
        let (output, record_extra) = match model.generate(&request) {
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
                extra.insert("generation_error".into(), serde_json::json!(format!("{e:#}")));
                (String::new(), extra)
            }
        };
        // The stop string ends generation before `</patch>`; the extractor accepts that.
        let read_file = |path: &str| {
            repos::read_at_commit(&repo, &task.base_commit, path).and_then(|b| String::from_utf8(b).ok())
        };
        let shown: Vec<String> = files.iter().map(|(path, _)| path.clone()).collect();
        let extracted = extract::extract_patch(&output, &read_file, &shown);
        let method = serde_json::to_value(extracted.method).unwrap_or_default();
        *summary.extraction_methods.entry(method.as_str().unwrap_or("none").to_owned()).or_default() += 1;
        summary.empty_patches += usize::from(extracted.patch.is_empty());
        let mut extra = record_extra;
        extra.insert("full_output".into(), serde_json::json!(output));
        extra.insert("extraction_method".into(), method);
        extra.insert("prompt_sha256".into(), serde_json::json!(prompt_sha256));
        extra.insert("retrieval".into(), serde_json::json!(plan.prompt.retrieval));
        extra.insert(
            "context_files".into(),
            serde_json::json!(files.iter().map(|(p, _)| p).collect::<Vec<_>>()),
        );
        let prediction = Prediction {
            instance_id: task.instance_id.clone(),
            model_name_or_path: Some(model_name.clone()),
            model_patch: Some(extracted.patch),
            extra,
        };
        appender.append(&prediction).map_err(RunError::Report)?;
        summary.written += 1;
        reporter
            .report(&ResultEvent::ItemFinished {
                id: task.instance_id.clone(),
                outcome: prediction.extra["extraction_method"].as_str().unwrap_or("none").to_owned(),
                success: !prediction.patch().is_empty(),
                record: prediction,
            })
            .map_err(RunError::Report)?;
    }
    reporter
        .report(&ResultEvent::RunFinished {
            counts: summary.extraction_methods.clone().into_iter().collect(),
            elapsed_s: started.elapsed().as_secs_f64(),
        })
        .map_err(RunError::Report)?;
    Ok(summary)
}

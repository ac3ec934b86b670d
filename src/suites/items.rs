//! How items become records: a multiple-choice item scored, generation items sent to the model
//! together, a code batch's completions run in one sandbox environment.

use std::collections::{BTreeMap, HashMap};

use crate::model::{
    Boundary, ChatMessage, GenerateOutput, GenerateRequest, LanguageModel, Prompt, Sampling, ScoreOutput,
    ScoreRequest,
};

use super::code::{code_scores, CodeRunner, Program, ProgramStatus};
use super::config::Suite;
use super::perturb::{Family, PromptFormat, Variant, VariantRecord};
use super::prompt::{
    build_prompt_shown, choice_item, choice_item_shown, fewshot_examples, render_with, Doc, Shown,
};
use super::record::{ChoiceRecord, OutputRecord, SampleRecord};
use super::SuiteError;
use crate::digest::{sha256_hex, stable_hash};

/// Docs handed to the model at once by generation suites: enough to keep a batch of decoding
/// sequences full while records are still kept every few dozen docs.
pub(super) const GENERATE_CHUNK: usize = 32;

/// An item to compute: a document, as it is or as a variant shows it.
pub(super) type Job<'d> = (&'d Doc, Option<Variant>);

/// The request for one item of a generation suite: the suite's generation settings, and a
/// sampling seed from (run seed, document id) so an item's output does not depend on order
/// (and from the variant's salt for `identity`).
fn generation_request(suite: &Suite, text: &str, seed: u64, (doc, variant): Job<'_>) -> GenerateRequest {
    let g = suite.generation().expect("generation suites have [generation]");
    let salt = variant.and_then(|v| v.sampling_salt(&doc.id));
    let sample_seed = match salt {
        Some(salt) => stable_hash(&[b"sample", &seed.to_le_bytes(), doc.id.as_bytes(), &salt.to_le_bytes()]),
        None => stable_hash(&[b"sample", &seed.to_le_bytes(), doc.id.as_bytes()]),
    };
    GenerateRequest {
        prompt: to_model_prompt(suite, text),
        max_tokens: g.max_tokens,
        sampling: Sampling { temperature: g.temperature, top_k: g.top_k, top_p: g.top_p, seed: sample_seed },
        stop: match (variant.and_then(|v| v.format(suite)), &suite.def.prompt.format) {
            // The stops that are the prompt's own field names follow its format.
            (Some(shown), Some(own)) => {
                let own = PromptFormat::of(own.get_ref());
                g.stop.iter().map(|s| shown.restyle_stop(&own, s)).collect()
            }
            _ => g.stop.clone(),
        },
        n: g.n,
    }
}

fn to_model_prompt(suite: &Suite, text: &str) -> Prompt {
    if suite.def.prompt.chat {
        Prompt::Chat(vec![ChatMessage::new("user", text)])
    } else {
        Prompt::Text(text.to_string())
    }
}

/// One run's inputs: what the model (or the completions file) and the sandbox turn into records.
pub(super) struct Run<'a, 'm> {
    pub(super) suite: &'a Suite,
    pub(super) pool: Vec<Doc>,
    pub(super) shots: usize,
    /// Which tokens are a scored option's (multiple choice).
    pub(super) boundary: Boundary,
    pub(super) model: Option<&'m mut dyn LanguageModel>,
    pub(super) runner: Option<&'a dyn CodeRunner>,
    pub(super) completions: Option<HashMap<String, Vec<String>>>,
    /// Code suites: the completion is the reference solution of the item as shown (a
    /// variant's renamed solution for a renamed variant).
    pub(super) canonical: bool,
    /// The scores of the item last scored, by request: a variant that shows
    /// the same prompt (options reordered where the prompt never lists them) reuses them
    /// instead of scoring again.
    pub(super) scored: ScoreCache,
}

/// See [`Run::scored`].
#[derive(Default)]
pub(super) struct ScoreCache {
    item: (u64, String),
    scores: HashMap<ScoreRequest, ScoreOutput>,
}

impl Run<'_, '_> {
    /// The prompt of `doc` as `variant` shows it (its prose or code edited, the few-shot
    /// examples in its order), the variant's record given the options it showed, and the row
    /// as the variant edited it (the program and reference solution of a code variant come
    /// from it).
    fn prompt_for(
        &self,
        seed: u64,
        (doc, variant): Job<'_>,
        item: Option<&super::prompt::ChoiceItem>,
        option_order: Option<Vec<usize>>,
    ) -> Result<(String, Option<VariantRecord>, Option<Doc>), SuiteError> {
        // The examples are counted only for the variant that reorders them: choosing them
        // again for every item would double that work on the plain path.
        let reorders = variant.filter(|v| v.family == Family::FewshotOrder);
        let shown = Shown {
            fewshot_order: reorders.and_then(|v| {
                v.fewshot_order(
                    &doc.id,
                    fewshot_examples(self.suite, &self.pool, doc, self.shots, seed).len(),
                )
            }),
            format: variant.and_then(|v| v.format(self.suite)),
        };
        let edited = variant.and_then(|v| v.edited(self.suite, doc));
        let row_edited = edited.as_ref().is_some_and(|e| e.row.fields != doc.row.fields);
        let prompt = build_prompt_shown(
            self.suite,
            &self.pool,
            edited.as_ref().unwrap_or(doc),
            item,
            self.shots,
            seed,
            &shown,
        )?;
        Ok((prompt, variant.map(|v| VariantRecord::new(&v, &shown, option_order, row_edited)), edited))
    }

    fn base_record(
        &self,
        seed: u64,
        doc: &Doc,
        prompt: String,
        variant: Option<VariantRecord>,
    ) -> SampleRecord {
        SampleRecord {
            suite: self.suite.def.name.clone(),
            seed,
            doc_id: doc.id.clone(),
            index: doc.row.index,
            group: self.suite.def.group_by.as_deref().and_then(|f| doc.field_text(f)),
            prompt_sha256: sha256_hex(&prompt),
            prompt,
            target: serde_json::Value::Null,
            outputs: Vec::new(),
            choices: Vec::new(),
            extracted: BTreeMap::new(),
            scores: BTreeMap::new(),
            variant,
            fingerprint: None,
        }
    }

    fn model(&mut self) -> &mut dyn LanguageModel {
        // Callers check for a model before starting (see `evaluate`).
        &mut **self.model.as_mut().expect("checked before the run")
    }

    pub(super) fn multiple_choice(&mut self, seed: u64, job: Job<'_>) -> Result<SampleRecord, SuiteError> {
        let (doc, variant) = job;
        let mut item = choice_item(self.suite, doc, seed)?;
        let option_order = variant.and_then(|v| v.option_order(&doc.id, item.choices.len()));
        if let Some(order) = &option_order {
            item = choice_item_shown(self.suite, doc, seed, Some(order))?;
        }
        let (context, variant, _) = self.prompt_for(seed, job, Some(&item), option_order)?;
        let delimiter = self.suite.def.prompt.target_delimiter.clone();
        let requests: Vec<ScoreRequest> = item
            .continuations
            .iter()
            .map(|c| ScoreRequest {
                context: context.clone(),
                continuation: format!("{delimiter}{c}"),
                boundary: self.boundary,
            })
            .collect();
        let scored = self.score(seed, doc, &requests)?;
        let mut record = self.base_record(seed, doc, context, variant);
        record.target = item.gold.into();
        for ((req, cont), out) in requests.iter().zip(&item.continuations).zip(&scored) {
            record.choices.push(ChoiceRecord {
                continuation: req.continuation.clone(),
                loglikelihood: out.sum_logprob,
                tokens: out.tokens.len(),
                chars: cont.chars().count(),
                is_greedy: out.is_greedy,
            });
        }
        let preds = mc_predictions(&record.choices);
        for (name, pred) in preds {
            record.extracted.insert(name.into(), Some(pred.to_string()));
            record.scores.insert(name.into(), f64::from(u8::from(pred == item.gold)));
        }
        Ok(record)
    }

    /// The model's scores of `requests` for `doc`, those an earlier variant of the same item
    /// asked already taken from [`Run::scored`].
    fn score(
        &mut self,
        seed: u64,
        doc: &Doc,
        requests: &[ScoreRequest],
    ) -> Result<Vec<ScoreOutput>, SuiteError> {
        let item = (seed, doc.id.clone());
        if self.scored.item != item {
            self.scored = ScoreCache { item, scores: HashMap::new() };
        }
        let missing: Vec<ScoreRequest> =
            requests.iter().filter(|r| !self.scored.scores.contains_key(*r)).cloned().collect();
        if !missing.is_empty() {
            let outputs = self
                .model()
                .score(&missing)
                .map_err(|source| SuiteError::Model { doc_id: doc.id.clone(), source: Box::new(source) })?;
            for (request, output) in missing.iter().zip(outputs) {
                self.scored.scores.insert(request.clone(), output);
            }
        }
        Ok(requests.iter().map(|r| self.scored.scores[r].clone()).collect())
    }

    /// Generates for `docs` together (the model may batch them); one result per doc, in order.
    pub(super) fn generate(&mut self, seed: u64, docs: &[Job<'_>]) -> Vec<Result<SampleRecord, SuiteError>> {
        let mut requests = Vec::with_capacity(docs.len());
        let mut variants = Vec::with_capacity(docs.len());
        for &job in docs {
            match self.prompt_for(seed, job, None, None) {
                Ok((prompt, variant, _)) => {
                    requests.push(generation_request(self.suite, &prompt, seed, job));
                    variants.push(variant);
                }
                // Docs before the bad one still run; the run stops at its error.
                Err(e) => {
                    let mut results = self.generate(seed, &docs[..requests.len()]);
                    results.push(Err(e));
                    return results;
                }
            }
        }
        let outputs = self.model().generate_many(&requests);
        docs.iter()
            .zip(outputs)
            .zip(variants)
            .map(|((&(doc, _), out), variant)| {
                let out = out.map_err(|source| SuiteError::Model {
                    doc_id: doc.id.clone(),
                    source: Box::new(source),
                })?;
                self.generation_record(seed, doc, out, variant)
            })
            .collect()
    }

    fn generation_record(
        &self,
        seed: u64,
        doc: &Doc,
        out: GenerateOutput,
        variant: Option<VariantRecord>,
    ) -> Result<SampleRecord, SuiteError> {
        let mut record = self.base_record(seed, doc, out.prompt_text.clone(), variant);
        let target_text = render_with(self.suite, doc, "answer_target", &[])?;
        let answer_match = self.suite.answer_match.as_ref().expect("generate suites declare [answer]");
        let target = answer_match.normalize(&target_text);
        record.target = target.clone().into();
        let text = out.sequences.first().map(|s| s.text.clone()).unwrap_or_default();
        for s in &out.sequences {
            record.outputs.push(OutputRecord { text: s.text.clone(), finish: Some(s.finish), status: None });
        }
        // Recorded as found (lm-eval's filtered response); scored and compared normalized.
        let mut answers = Vec::new();
        for ex in &self.suite.extractors {
            let answer = ex.extract(&text);
            let normalized = answer.as_deref().map(|a| answer_match.normalize(a));
            record.scores.insert(
                format!("exact_match_{}", ex.name),
                f64::from(u8::from(normalized.as_deref() == Some(&target))),
            );
            record.scores.insert(format!("invalid_{}", ex.name), f64::from(u8::from(answer.is_none())));
            record.extracted.insert(ex.name.clone(), answer);
            answers.push((ex.name.clone(), normalized));
        }
        for (i, (a, x)) in answers.iter().enumerate() {
            for (b, y) in &answers[i + 1..] {
                let agree = x.is_some() && x == y;
                record.scores.insert(format!("agree_{a}_{b}"), f64::from(u8::from(agree)));
            }
        }
        if answers.len() > 2 {
            let first = &answers[0].1;
            let all = first.is_some() && answers.iter().all(|(_, y)| y == first);
            record.scores.insert("agree_all".into(), f64::from(u8::from(all)));
        }
        Ok(record)
    }

    /// Generates (or looks up) completions for a batch of items, runs their programs in one
    /// sandbox environment, and returns the finished records.
    pub(super) fn code_batch(
        &mut self,
        seed: u64,
        batch: &[Job<'_>],
    ) -> Result<Vec<SampleRecord>, SuiteError> {
        let code = self.suite.code().expect("checked at load").clone();
        let mut records = Vec::new();
        let mut programs = Vec::new();
        let mut prompts = Vec::with_capacity(batch.len());
        let mut variants = Vec::with_capacity(batch.len());
        let mut shown_docs = Vec::with_capacity(batch.len());
        for &job in batch {
            let (prompt, variant, edited) = self.prompt_for(seed, job, None, None)?;
            prompts.push(prompt);
            variants.push(variant);
            shown_docs.push(edited.unwrap_or_else(|| job.0.clone()));
        }
        // Every completion of the batch first (the model decodes them together), then one
        // sandbox run for all their programs.
        let generated: Vec<(String, Vec<String>)> = match &self.completions {
            Some(_) if self.canonical => shown_docs
                .iter()
                .zip(&prompts)
                .map(|(shown, prompt)| {
                    Ok((prompt.clone(), vec![render_with(self.suite, shown, "canonical", &[])?]))
                })
                .collect::<Result<_, SuiteError>>()?,
            Some(map) => batch
                .iter()
                .zip(&prompts)
                .map(|((doc, _), prompt)| (prompt.clone(), map.get(&doc.id).cloned().unwrap_or_default()))
                .collect(),
            None => {
                let requests: Vec<GenerateRequest> = batch
                    .iter()
                    .zip(&prompts)
                    .map(|(&job, prompt)| {
                        let mut sent = prompt.clone();
                        if self.suite.def.prompt.strip_trailing_newline && sent.ends_with('\n') {
                            sent.pop();
                            if sent.ends_with('\r') {
                                sent.pop();
                            }
                        }
                        generation_request(self.suite, &sent, seed, job)
                    })
                    .collect();
                let outputs = self.model().generate_many(&requests);
                batch
                    .iter()
                    .zip(outputs)
                    .map(|((doc, _), out)| {
                        let out = out.map_err(|source| SuiteError::Model {
                            doc_id: doc.id.clone(),
                            source: Box::new(source),
                        })?;
                        Ok((out.prompt_text, out.sequences.into_iter().map(|s| s.text).collect()))
                    })
                    .collect::<Result<_, SuiteError>>()?
            }
        };
        for ((((&(doc, _), prompt), (sent, completions)), variant), shown) in
            batch.iter().zip(&prompts).zip(generated).zip(variants).zip(&shown_docs)
        {
            let mut record = self.base_record(seed, doc, sent, variant);
            for completion in completions {
                let source = render_with(
                    self.suite,
                    shown,
                    "program",
                    &[("completion", completion.clone().into()), ("prompt_text", prompt.clone().into())],
                )?;
                programs.push(Program { source, timeout_s: code.timeout_s });
                record.outputs.push(OutputRecord { text: completion, finish: None, status: None });
            }
            records.push(record);
        }
        let runner = self.runner.ok_or_else(|| SuiteError::Needs {
            suite: self.suite.def.name.clone(),
            what: "a sandbox to execute programs in",
        })?;
        let statuses = runner.run(&programs)?;
        let mut statuses = statuses.into_iter();
        for record in &mut records {
            for output in &mut record.outputs {
                output.status = Some(statuses.next().unwrap_or(ProgramStatus::Error));
            }
            if record.outputs.is_empty() {
                continue;
            }
            let statuses: Vec<ProgramStatus> = record.outputs.iter().filter_map(|o| o.status).collect();
            record.scores = code_scores(&statuses, &code.ks);
        }
        Ok(records)
    }
}

/// The option each multiple-choice metric picks: `acc` by total log-likelihood, `acc_norm`
/// by log-likelihood per character of the option, `acc_norm_tokens` per token. Ties go to
/// the first option.
pub fn mc_predictions(choices: &[ChoiceRecord]) -> [(&'static str, usize); 3] {
    let argmax = |key: &dyn Fn(&ChoiceRecord) -> f64| -> usize {
        let mut best = 0;
        for (i, c) in choices.iter().enumerate() {
            if key(c) > key(&choices[best]) {
                best = i;
            }
        }
        best
    };
    [
        ("acc", argmax(&|c| c.loglikelihood)),
        ("acc_norm", argmax(&|c| c.loglikelihood / c.chars.max(1) as f64)),
        ("acc_norm_tokens", argmax(&|c| c.loglikelihood / c.tokens.max(1) as f64)),
    ]
}

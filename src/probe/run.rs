//! Runs a probe: both sets' items through the run kernel (scored, stored, reported one by
//! one), then each statistic's separation of target from control, and the run's files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::items::{load_set, ProbeItem};
use super::record::{ProbeRecord, ScoredToken, LOWEST_SHOWN};
use super::{Method, ProbeError, ProbePlan, Side, BOOTSTRAP_SEED, RESAMPLES};
use crate::digest::sha256_hex;
use crate::kernel::fingerprint::FingerprintBuilder;
use crate::kernel::Kernel;
use crate::model::{LanguageModel, ModelError, ScoreOutput, ScoreRequest};
use crate::report::{Fanout, FinalWriter, Reporter, RunRecords, Skipped, Tally};
use crate::stats::separation::{auroc_with_interval, min_k_count, min_k_percent};

/// What scoring or answering one item gave.
struct Scored {
    tokens: usize,
    values: BTreeMap<String, f64>,
    lowest: Vec<ScoredToken>,
    answers: BTreeMap<String, String>,
}

/// Items scored per call to the model (a served model answers them concurrently).
const SCORE_CHUNK: usize = 8;

/// A statistic's values on one set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetStats {
    pub n: usize,
    pub mean: f64,
    pub stderr: f64,
}

impl SetStats {
    fn of(values: &[f64]) -> Self {
        Self {
            n: values.len(),
            mean: crate::stats::mean(values),
            stderr: crate::stats::stderr_of_mean(values),
        }
    }
}

/// How well one statistic of one part tells target items from control items: AUROC is the
/// chance that a target item scores higher (more likely seen) than a control item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Separation {
    pub statistic: String,
    pub part: String,
    pub target: SetStats,
    pub control: SetStats,
    pub auroc: f64,
    pub auroc_ci95: [f64; 2],
}

impl Separation {
    /// What the interval says, in words.
    pub fn reading(&self) -> &'static str {
        if self.auroc_ci95[0] > 0.5 {
            "target scores higher: evidence the model has seen it"
        } else if self.auroc_ci95[1] < 0.5 {
            "control scores higher"
        } else {
            "no separation"
        }
    }
}

/// `guided` on one set and part: how much closer to the true second halves the completions
/// under the prompt naming the dataset come than those under the general prompt. `p_above` is
/// the one-sided paired-bootstrap p-value of "no gain".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuidedGain {
    pub side: Side,
    pub part: String,
    pub n: usize,
    pub guided_rouge_l: f64,
    pub general_rouge_l: f64,
    pub gain: f64,
    pub gain_ci95: [f64; 2],
    pub p_above: f64,
}

impl GuidedGain {
    /// What the test says, in words.
    pub fn reading(&self) -> &'static str {
        if self.p_above < 0.05 {
            "the dataset's name helps (p < 0.05): evidence the model has seen it"
        } else {
            "no gain from the dataset's name"
        }
    }
}

/// The `guided` gain of each set and part the records have.
pub fn guided_gains(records: &BTreeMap<String, ProbeRecord>) -> Vec<GuidedGain> {
    let mut pairs: BTreeMap<(Side, String), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in records.values() {
        if let (Some(g), Some(c)) = (r.values.get("guided_rouge_l"), r.values.get("general_rouge_l")) {
            let entry = pairs.entry((r.side, r.part.clone())).or_default();
            entry.0.push(*g);
            entry.1.push(*c);
        }
    }
    pairs
        .into_iter()
        .map(|((side, part), (guided, general))| {
            let b = crate::stats::paired::paired_bootstrap(&general, &guided, RESAMPLES, BOOTSTRAP_SEED);
            GuidedGain {
                side,
                part,
                n: guided.len(),
                guided_rouge_l: crate::stats::mean(&guided),
                general_rouge_l: crate::stats::mean(&general),
                gain: b.delta,
                gain_ci95: b.ci95,
                p_above: b.p_above,
            }
        })
        .collect()
}

/// What [`probe`] returns (and `results.json` holds, with the run's configuration).
#[derive(Debug, Clone)]
pub struct ProbeSummary {
    pub method: Method,
    pub separations: Vec<Separation>,
    pub guided_gains: Vec<GuidedGain>,
    pub computed: usize,
    pub resumed: usize,
    /// Items that could not be scored (their records say why).
    pub errors: usize,
    /// Items whose error came from the model's engine or server: a rerun retries them.
    pub infrastructure_errors: usize,
    pub skipped: Vec<Skipped>,
    pub records: BTreeMap<String, ProbeRecord>,
}

/// The separations of every statistic and part the records have, in name order.
pub fn separations(records: &BTreeMap<String, ProbeRecord>) -> Vec<Separation> {
    let mut values: BTreeMap<(String, String), [Vec<f64>; 2]> = BTreeMap::new();
    for record in records.values() {
        for (statistic, value) in &record.values {
            let sets = values.entry((statistic.clone(), record.part.clone())).or_default();
            sets[(record.side == Side::Control) as usize].push(*value);
        }
    }
    values
        .into_iter()
        .filter(|(_, [target, control])| !target.is_empty() && !control.is_empty())
        .map(|((statistic, part), [target, control])| {
            let (auroc, auroc_ci95) = auroc_with_interval(&target, &control, RESAMPLES, BOOTSTRAP_SEED);
            Separation {
                statistic,
                part,
                target: SetStats::of(&target),
                control: SetStats::of(&control),
                auroc,
                auroc_ci95,
            }
        })
        .collect()
}

/// An item's statistics from its tokens' log-probabilities: Min-K% at `k`, Min-K%++ when
/// every token carries its distribution's moments, and the mean log-probability.
fn min_k_values(scored: &ScoreOutput, k: u32) -> (BTreeMap<String, f64>, Vec<ScoredToken>) {
    let logprobs: Vec<f64> = scored.tokens.iter().map(|t| t.logprob).collect();
    let mut values = BTreeMap::new();
    if let Some(v) = min_k_percent(&logprobs, k) {
        values.insert("min_k".to_owned(), v);
        values.insert("mean_logprob".to_owned(), crate::stats::mean(&logprobs));
    }
    // Min-K%++ (Zhang et al. 2024): each token's log-probability standardized by the mean and
    // deviation of log p over its position's whole distribution; a flat distribution (std 0)
    // says nothing about the token and is left out.
    let normalized: Option<Vec<f64>> = scored
        .tokens
        .iter()
        .map(|t| t.moments.map(|m| if m.std > 0.0 { (t.logprob - m.mean) / m.std } else { 0.0 }))
        .collect();
    if let Some(v) = normalized.and_then(|n| min_k_percent(&n, k)) {
        values.insert("min_k_plus_plus".to_owned(), v);
    }
    let mut lowest: Vec<ScoredToken> =
        scored.tokens.iter().map(|t| ScoredToken { text: t.text.clone(), logprob: t.logprob }).collect();
    lowest.sort_by(|a, b| a.logprob.total_cmp(&b.logprob));
    lowest.truncate(min_k_count(logprobs.len(), k).min(LOWEST_SHOWN));
    (values, lowest)
}

/// `results`, unless one says the model cannot score at all: then no item can be, and the run
/// stops with that error rather than filling the store with it.
fn checked(
    results: Vec<Result<ScoreOutput, ModelError>>,
    method: &str,
) -> Result<Vec<Result<ScoreOutput, ModelError>>, ProbeError> {
    let cannot = |r: &Result<ScoreOutput, ModelError>| {
        matches!(r, Err(ModelError::Remote(crate::model::openai::RemoteError::MissingCapability { .. })))
    };
    match results.iter().position(cannot) {
        Some(i) => {
            let source = results.into_iter().nth(i).and_then(Result::err).expect("an error at i");
            Err(ProbeError::CannotScore { method: method.to_owned(), source: Box::new(source) })
        }
        None => Ok(results),
    }
}

fn is_infrastructure(err: &ModelError) -> bool {
    matches!(err, ModelError::Remote(_) | ModelError::Compute(_))
}

/// Scores `items` with `model`, a chunk at a time; a chunk that fails is scored item by item,
/// so that one bad item (too long for the context) costs only its own record.
fn score_all(model: &mut dyn LanguageModel, items: &[&ProbeItem]) -> Vec<Result<ScoreOutput, ModelError>> {
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(SCORE_CHUNK) {
        let requests: Vec<ScoreRequest> =
            chunk.iter().map(|i| ScoreRequest::new("", i.text.clone())).collect();
        match model.score(&requests) {
            Ok(scored) => out.extend(scored.into_iter().map(Ok)),
            Err(_) if requests.len() > 1 => out.extend(
                requests.iter().map(|r| model.score(std::slice::from_ref(r)).map(|mut s| s.remove(0))),
            ),
            Err(e) => out.push(Err(e)),
        }
    }
    out
}

/// Runs `plan` with `model`, reporting each scored item to `reporter` after it is stored, and
/// writes `results.json`, `report.md`, `junit.xml`, `report.html` and `manifest.json`.
pub fn probe(
    plan: &ProbePlan,
    model: &mut dyn LanguageModel,
    reporter: &mut dyn Reporter<ProbeRecord>,
) -> Result<ProbeSummary, ProbeError> {
    let mut items = Vec::new();
    let mut skipped = Vec::new();
    for (side, source) in [(Side::Target, &plan.target), (Side::Control, &plan.control)] {
        let (set, bad) = load_set(source, side, plan.limit, plan.method)?;
        if set.is_empty() {
            return Err(ProbeError::EmptySet { side: side.as_str(), source_name: source.describe() });
        }
        items.extend(set);
        skipped.extend(bad);
    }
    let info = model.info().clone();
    let method = plan.method.label();
    let parts = FingerprintBuilder::new().value("method", &method).value("model", &info.sha256);
    let identify = |item: &ProbeItem| {
        let key = ProbeRecord::key_of(item.side, &item.part, &item.id);
        let fingerprint =
            parts.clone().id("text", &sha256_hex(&item.text)).value("expected", &item.expected).finish();
        (key, fingerprint)
    };
    let config = serde_json::json!({
        "probe": "contamination",
        "method": method,
        "target": plan.target.describe(),
        "control": plan.control.describe(),
        "limit": plan.limit,
        "bootstrap": {"resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "interval": "95% percentile, stratified"},
        "model": {"source": info.source, "sha256": info.sha256},
    });
    std::fs::create_dir_all(&plan.out)
        .map_err(|source| ProbeError::Read { path: plan.out.clone(), source })?;
    let results_path = plan.out.join("results.json");
    let mut results_json = FinalWriter::new(|run: &RunRecords<ProbeRecord>| {
        let results = serde_json::json!({
            "probe": "contamination",
            "method": method,
            "items": run.records.len(),
            "errors": run.records.values().filter(|r| r.error.is_some()).count(),
            "separations": separations(&run.records),
            "guided_gains": guided_gains(&run.records),
            "config": config,
        });
        crate::report::write_json_atomic(&results_path, &results)
    });
    let mut views = FinalWriter::new(|run: &RunRecords<ProbeRecord>| {
        super::views::write_views(&plan.out, &method, &run.records)
    });
    let mut subscribers = Fanout::new(vec![&mut results_json, &mut views, reporter]);
    let samples = plan.out.join("samples.jsonl");
    let mut kernel = Kernel::open("probe contamination", &samples, plan.force, &mut subscribers)?;
    let todo = kernel.plan(items, identify)?;
    // After the plan: its start event clears what subscribers gathered.
    for s in &skipped {
        kernel.report(&s.event())?;
    }
    let resumed = kernel.resume_summary().reused;
    let mut computed = 0;
    for chunk in todo.chunks(SCORE_CHUNK * 4) {
        let batch: Vec<&ProbeItem> = chunk.iter().map(|(item, _)| item).collect();
        let results: Vec<Result<Scored, ModelError>> = match plan.method {
            Method::MinK { k } => checked(score_all(model, &batch), &method)?
                .into_iter()
                .map(|r| {
                    r.map(|scored| {
                        let (values, lowest) = min_k_values(&scored, k);
                        Scored { tokens: scored.tokens.len(), values, lowest, answers: BTreeMap::new() }
                    })
                })
                .collect(),
            Method::PathGuess | Method::PatchPrefix | Method::TsGuess | Method::Guided => {
                super::generate::answer_all(model, &batch)
                    .into_iter()
                    .map(|r| {
                        r.map(|(answers, values)| Scored { tokens: 0, values, lowest: Vec::new(), answers })
                    })
                    .collect()
            }
        };
        for ((item, fingerprint), result) in chunk.iter().zip(results) {
            let mut record = ProbeRecord {
                side: item.side,
                id: item.id.clone(),
                part: item.part.clone(),
                method: method.clone(),
                text_sha256: sha256_hex(&item.text),
                chars: item.text.chars().count(),
                tokens: 0,
                values: BTreeMap::new(),
                lowest: Vec::new(),
                answers: BTreeMap::new(),
                error: None,
                infrastructure: false,
                fingerprint: Some(fingerprint.clone()),
            };
            match result {
                Ok(scored) => {
                    record.tokens = scored.tokens;
                    record.values = scored.values;
                    record.lowest = scored.lowest;
                    record.answers = scored.answers;
                }
                Err(e) => {
                    record.infrastructure = is_infrastructure(&e);
                    record.error = Some(crate::error_chain(&e));
                }
            }
            let (outcome, success) = match (&record.error, record.values.iter().next()) {
                (None, Some((name, value))) => (format!("{name} {value:.3}"), true),
                (None, None) => ("scored".to_owned(), true),
                (Some(_), _) => ("error".to_owned(), false),
            };
            computed += 1;
            kernel.finish_item(record, &outcome, success)?;
        }
    }
    let run = kernel.finish_with(tally)?;
    let records = run.records;
    let errors = records.values().filter(|r| r.error.is_some()).count();
    let infrastructure_errors = records.values().filter(|r| r.infrastructure).count();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let manifest = serde_json::json!({
        "tool": "repairbench",
        "version": env!("CARGO_PKG_VERSION"),
        "finished_unix": now,
        "code": crate::kernel::fingerprint::BUILD_COMMIT,
        "config": config,
        "model": info,
        "inputs": {"target": source_files(&plan.target), "control": source_files(&plan.control)},
        "items": records.len(),
        "computed": computed,
        "resumed": resumed,
        "files": {"results": "results.json", "samples": "samples.jsonl", "views": super::views::VIEWS},
    });
    crate::report::write_json_atomic(&plan.out.join("manifest.json"), &manifest)?;
    Ok(ProbeSummary {
        method: plan.method,
        separations: separations(&records),
        guided_gains: guided_gains(&records),
        computed,
        resumed,
        errors,
        infrastructure_errors,
        skipped: run.skipped,
        records,
    })
}

/// The input file of a set with its sha256 (a folder or a suite's own data: its path only).
fn source_files(source: &super::SetSource) -> serde_json::Value {
    let path = match source {
        super::SetSource::Texts(p) | super::SetSource::Dataset(p) => Some(p),
        super::SetSource::Suite { data, .. } => data.as_ref(),
    };
    let sha256 = path.filter(|p| p.is_file()).and_then(|p| crate::digest::sha256_file(p).ok());
    serde_json::json!({"source": source.describe(), "path": path, "sha256": sha256})
}

fn tally(records: &BTreeMap<String, ProbeRecord>) -> Tally {
    let mut counts = BTreeMap::new();
    for record in records.values() {
        *counts.entry(if record.error.is_some() { "error" } else { "scored" }.to_owned()).or_default() += 1;
    }
    let scored = counts.get("scored").copied().unwrap_or(0);
    let words = format!("{scored} of {} text(s) scored", records.len());
    Tally { counts, words }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LogprobMoments, TokenLogprob};

    fn token(logprob: f64, moments: Option<(f64, f64)>) -> TokenLogprob {
        TokenLogprob {
            id: 0,
            text: format!("{logprob}"),
            logprob,
            moments: moments.map(|(mean, std)| LogprobMoments { mean, std }),
        }
    }

    #[test]
    fn min_k_and_min_k_plus_plus_of_one_item() {
        let tokens: Vec<TokenLogprob> =
            [-0.1, -5.0, -0.2, -3.0, -0.05].iter().map(|&l| token(l, Some((-1.0, 2.0)))).collect();
        let sum = tokens.iter().map(|t| t.logprob).sum();
        let scored = ScoreOutput { tokens, sum_logprob: sum, is_greedy: false };
        let (values, lowest) = min_k_values(&scored, 40);
        assert_eq!(values["min_k"], -4.0);
        // (-5 + 1) / 2 = -2 and (-3 + 1) / 2 = -1.
        assert_eq!(values["min_k_plus_plus"], -1.5);
        assert!((values["mean_logprob"] - (-8.35 / 5.0)).abs() < 1e-12);
        assert_eq!(lowest.iter().map(|t| t.logprob).collect::<Vec<_>>(), [-5.0, -3.0]);
        // Without moments (a served model) there is no Min-K%++.
        let plain =
            ScoreOutput { tokens: scored.tokens.iter().map(|t| token(t.logprob, None)).collect(), ..scored };
        assert!(!min_k_values(&plain, 40).0.contains_key("min_k_plus_plus"));
    }
}

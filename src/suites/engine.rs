//! Runs a suite: per seed and item, builds the prompt, asks the model (or reads completions
//! made elsewhere), grades, and appends one [`SampleRecord`] per item to `samples.jsonl` as
//! soon as it is done. A rerun with the same configuration skips what the file already holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::kernel::fingerprint::{Fingerprint, FingerprintBuilder};
use crate::kernel::Kernel;
use crate::model::{Boundary, LanguageModel};
use crate::report::{ConsoleProgress, Fanout, FinalWriter, Reporter, RunRecords};

use super::code::CodeRunner;
use super::config::Suite;
use super::data::{load_rows, read_completions};
use super::def::{HubDataDef, SuiteKind};
pub use super::items::mc_predictions;
use super::items::{Job, Run, GENERATE_CHUNK};
use super::metrics::{aggregate_run, Aggregate, MetricResult};
use super::perturb::{PerturbSpec, Variant};
use super::prompt::{make_docs, render_with, Doc};
use super::record::SampleRecord;
use super::remote::ClusterEval;
use super::reports::{count_outcomes, outcome_label};
use super::source::{hub_files, local_file, DataSource};
use super::SuiteError;
use crate::digest::sha256_hex;

/// What to evaluate and where to write it.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Replaces the suite's data source: a directory holding its files, or the test file.
    pub data: Option<PathBuf>,
    /// Evaluate only the first N rows.
    pub limit: Option<usize>,
    /// Replaces the suite's few-shot count.
    pub shots: Option<usize>,
    /// One full run per seed (few-shot choice, option shuffling and sampling depend on it).
    pub seeds: Vec<u64>,
    /// Grade human-eval style `{task_id, completion}` JSONL instead of running a model.
    pub samples: Option<PathBuf>,
    pub out: PathBuf,
    /// Code suites: items whose programs share one container.
    pub code_batch: usize,
    /// Code suites: grade the reference solutions (the suite's `canonical` template) instead
    /// of model output, to check the suite and the sandbox themselves.
    pub canonical: bool,
    /// Compute every item again instead of resuming from `samples.jsonl`.
    pub force: bool,
    /// Only the items with these keys (`SEED:DOC_ID`): a cluster worker's unit.
    pub only: Option<BTreeSet<String>>,
    /// Multiple-choice suites: which tokens are a scored option's.
    pub boundary: Boundary,
    /// Variants of every item besides the original (`--perturb`).
    pub perturb: Option<PerturbSpec>,
}

impl EvalOptions {
    pub fn new(out: impl Into<PathBuf>) -> Self {
        Self {
            data: None,
            limit: None,
            shots: None,
            seeds: vec![0],
            samples: None,
            out: out.into(),
            code_batch: 16,
            canonical: false,
            force: false,
            only: None,
            boundary: Boundary::default(),
            perturb: None,
        }
    }
}

/// What [`evaluate`] returns (also written to `results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalSummary {
    pub suite: String,
    pub kind: SuiteKind,
    pub items: usize,
    pub seeds: Vec<u64>,
    pub metrics: BTreeMap<String, MetricResult>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub groups: BTreeMap<String, BTreeMap<String, MetricResult>>,
    /// Per perturbation family, how the primary metric holds up (`robustness` in
    /// `results.json`); empty without `--perturb`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub robustness: BTreeMap<String, super::robust::FamilyRobustness>,
    pub config: serde_json::Value,
    /// Items computed now and items taken from an earlier, interrupted run.
    pub computed: usize,
    pub resumed: usize,
    /// Items computed again although an earlier record existed, by reason (`model changed`...).
    #[serde(default)]
    pub recomputed: BTreeMap<String, usize>,
    pub out_dir: PathBuf,
    /// Every record of the run by key (not written: `samples.jsonl` holds them).
    #[serde(skip)]
    pub records: BTreeMap<String, SampleRecord>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SuiteError + '_ {
    move |source| SuiteError::Io { path: path.to_path_buf(), source }
}

fn file_sha256(path: &Path) -> Result<String, SuiteError> {
    crate::digest::sha256_file(path).map_err(io_err(path))
}

fn row_sha256(doc: &Doc) -> String {
    sha256_hex(serde_json::to_string(&doc.row.fields).expect("a JSON map serializes"))
}

/// The test and few-shot files, and the hub dataset they came from when they did: `--data`
/// first, then the suite's `source`, then its published dataset on the hub.
fn data_files<'s>(
    suite: &'s Suite,
    opts: &EvalOptions,
) -> Result<(PathBuf, Option<PathBuf>, Option<&'s HubDataDef>), SuiteError> {
    let def = &suite.def.data;
    if let Some(data) = &opts.data {
        if data.is_dir() {
            let src = DataSource::Local(data.clone());
            return Ok((
                src.resolve(&def.test)?,
                def.fewshot.as_deref().map(|f| src.resolve(f)).transpose()?,
                None,
            ));
        }
        let parent = data.parent().unwrap_or(Path::new("."));
        let fewshot = def.fewshot.as_deref().map(|f| local_file(parent, f)).filter(|p| p.is_file());
        return Ok((data.clone(), fewshot, None));
    }
    if let Some(spec) = &def.source {
        let base = suite.path.parent().unwrap_or(Path::new("."));
        let src = DataSource::parse(spec, base);
        return Ok((
            src.resolve(&def.test)?,
            def.fewshot.as_deref().map(|f| src.resolve(f)).transpose()?,
            None,
        ));
    }
    if let Some(hub) = &def.hub {
        let hub = hub.get_ref();
        let roots = crate::model::source::CacheRoots::from_env();
        let (test, fewshot) = hub_files(&suite.def.name, def, hub, &roots)?;
        return Ok((test, fewshot, Some(hub)));
    }
    Err(SuiteError::Needs { suite: suite.def.name.clone(), what: "a data source (pass --data PATH)" })
}

/// The test documents of `suite`, read from `data` (a directory or the test file) or else its
/// source or hub dataset, with the test file's path and sha256.
pub fn test_docs(suite: &Suite, data: Option<&Path>) -> Result<(Vec<Doc>, PathBuf, String), SuiteError> {
    let mut opts = EvalOptions::new(PathBuf::new());
    opts.data = data.map(Path::to_path_buf);
    let (test, _, _) = data_files(suite, &opts)?;
    let docs = make_docs(suite, load_rows(&test, &suite.def.data.fields)?)?;
    let sha256 = file_sha256(&test)?;
    Ok((docs, test, sha256))
}

/// Evaluates `suite` and writes `results.json`, `samples.jsonl` and `manifest.json` to
/// `opts.out`. `model` is needed unless `opts.samples` gives the completions; `runner` is
/// needed for code suites.
pub fn evaluate(
    suite: &Suite,
    opts: &EvalOptions,
    model: Option<&mut dyn LanguageModel>,
    runner: Option<&dyn CodeRunner>,
) -> Result<EvalSummary, SuiteError> {
    evaluate_with(suite, opts, model, runner, &mut ConsoleProgress::new(), None)
}

/// [`evaluate`], reporting each finished item to `reporter` after it is stored, with the items
/// left to compute sent to `cluster` when one is given (`model` and `runner` then give only
/// what the fingerprints name: the model's hash, the sandbox image).
pub fn evaluate_with(
    suite: &Suite,
    opts: &EvalOptions,
    model: Option<&mut dyn LanguageModel>,
    runner: Option<&dyn CodeRunner>,
    reporter: &mut dyn Reporter<SampleRecord>,
    cluster: Option<&ClusterEval>,
) -> Result<EvalSummary, SuiteError> {
    let kind = suite.kind();
    let (test_path, fewshot_path, hub) = data_files(suite, opts)?;
    let fields = &suite.def.data.fields;
    let all_docs = make_docs(suite, load_rows(&test_path, fields)?)?;
    let pool = match &fewshot_path {
        Some(p) => make_docs(suite, load_rows(p, fields)?)?,
        None => all_docs.clone(),
    };
    let completions = match &opts.samples {
        Some(path) => {
            if kind != SuiteKind::Code {
                return Err(SuiteError::Needs {
                    suite: suite.def.name.clone(),
                    what: "a model: --samples grades code completions only",
                });
            }
            Some(read_completions(path, &all_docs)?)
        }
        None if opts.canonical => {
            if kind != SuiteKind::Code || !suite.templates.has("canonical") {
                return Err(SuiteError::Needs {
                    suite: suite.def.name.clone(),
                    what: "a [code] canonical template for --canonical",
                });
            }
            let mut map = HashMap::new();
            for doc in &all_docs {
                map.insert(doc.id.clone(), vec![render_with(suite, doc, "canonical", &[])?]);
            }
            Some(map)
        }
        None => None,
    };
    if completions.is_none() && model.is_none() {
        return Err(SuiteError::Needs { suite: suite.def.name.clone(), what: "a model" });
    }
    if kind == SuiteKind::Code && runner.is_none() {
        return Err(SuiteError::Needs {
            suite: suite.def.name.clone(),
            what: "a sandbox to execute programs in",
        });
    }
    let mut docs = all_docs;
    if let Some(completions) = &completions {
        docs.retain(|d| completions.contains_key(&d.id));
    }
    if let Some(limit) = opts.limit {
        docs.truncate(limit);
    }
    let shots = opts.shots.unwrap_or(suite.def.fewshot.k);
    let seeds = if opts.seeds.is_empty() { vec![0] } else { opts.seeds.clone() };

    // Each data file with its sha256, and for a hub dataset its repository, commit and path
    // there.
    let mut data_hashes = vec![(test_path.clone(), file_sha256(&test_path)?)];
    let mut hub_files_read = vec![hub.map(|h| h.test.clone())];
    if let Some(p) = &fewshot_path {
        data_hashes.push((p.clone(), file_sha256(p)?));
        hub_files_read.push(hub.and_then(|h| h.fewshot.clone()));
    }
    let data_entries: Vec<serde_json::Value> = data_hashes
        .iter()
        .zip(&hub_files_read)
        .map(|((path, sha256), hub_path)| {
            let mut entry = serde_json::json!({"path": path, "sha256": sha256});
            if let (Some(hub), Some(file)) = (hub, hub_path) {
                entry["hub"] = serde_json::json!({"repo": hub.repo, "revision": hub.revision, "file": file});
            }
            entry
        })
        .collect();
    let model_info = model.as_ref().map(|m| m.info().clone());
    // Only scored options depend on the boundary rule.
    let boundary = (kind == SuiteKind::MultipleChoice).then(|| opts.boundary.as_str());
    let config = serde_json::json!({
        "suite": suite.def.name,
        "suite_file": suite.path,
        "suite_sha256": sha256_hex(&suite.text),
        "kind": kind,
        "data": data_entries,
        "limit": opts.limit,
        "shots": shots,
        "generation": suite.generation(),
        "canonical": opts.canonical,
        "boundary": boundary,
        "samples_file": match &opts.samples { Some(p) => Some(serde_json::json!({"path": p, "sha256": file_sha256(p)?})), None => None },
        "model": model_info.as_ref().map(|m| serde_json::json!({"source": m.source, "sha256": m.sha256})),
        "perturb": opts.perturb.as_ref().map(PerturbSpec::to_json),
    });
    // The fingerprint leaves out paths (a moved cache or output directory still resumes), the
    // limit (records are per item) and the data (each record carries its row's hash).
    let fingerprint = serde_json::json!({
        "suite_sha256": config["suite_sha256"],
        // Few-shot examples come from this file (the test file itself when there is no pool).
        "fewshot_data": if shots > 0 { data_hashes.last().map(|(_, h)| h.clone()) } else { None },
        "shots": shots,
        "samples_sha256": config["samples_file"].get("sha256"),
        "canonical": opts.canonical,
        "boundary": boundary,
        "model_sha256": model_info.as_ref().map(|m| m.sha256.clone()),
    });
    // Image tags are hashes of their inputs, so the tag names the environment exactly.
    let run_image = runner.map(|r| r.environment());
    let run_parts = FingerprintBuilder::new()
        .value("suite", &fingerprint["suite_sha256"])
        .value("fewshot_data", &fingerprint["fewshot_data"])
        .value("shots", &shots)
        .value("samples", &fingerprint["samples_sha256"])
        .value("canonical", &opts.canonical)
        .value("boundary", &boundary)
        .value("model", &fingerprint["model_sha256"])
        .value("image", &run_image);
    let item_fingerprint = |doc: &Doc, variant: &Option<Variant>| {
        let parts = run_parts.clone().id("row", &row_sha256(doc));
        match variant {
            Some(v) => parts.value("perturb", &v.fingerprint()).finish(),
            None => parts.finish(),
        }
    };
    let key_of = |seed: u64, doc: &Doc, variant: &Option<Variant>| match variant {
        Some(v) => SampleRecord::variant_key(seed, &doc.id, v.family.name(), v.index),
        None => SampleRecord::key_of(seed, &doc.id),
    };
    if let Some(spec) = &opts.perturb {
        if cluster.is_some() {
            return Err(SuiteError::Perturb {
                suite: suite.def.name.clone(),
                message: "perturbed runs run on this machine; leave out --executor".into(),
            });
        }
        if opts.samples.is_some() {
            return Err(SuiteError::Perturb {
                suite: suite.def.name.clone(),
                message: "--samples holds completions of the original prompts only; perturbed runs need a model (or --canonical)".into(),
            });
        }
        if let Some(message) = spec.families.iter().find_map(|&f| PerturbSpec::refusal(f, suite, shots)) {
            return Err(SuiteError::Perturb { suite: suite.def.name.clone(), message });
        }
        // A variant's key is its original's with `@FAMILY#INDEX` added: an id holding `@`
        // could take another item's key.
        if let Some(doc) = docs.iter().find(|d| d.id.contains('@')) {
            return Err(doc
                .err(format!("document id `{}` holds `@`, which perturbed runs keep for variants", doc.id)));
        }
    }

    std::fs::create_dir_all(&opts.out).map_err(io_err(&opts.out))?;
    let samples_path = opts.out.join("samples.jsonl");
    let doc_ids: Vec<String> = docs.iter().map(|d| d.id.clone()).collect();
    let results_path = opts.out.join("results.json");
    let mut results_json = FinalWriter::new(|run: &RunRecords<SampleRecord>| {
        let Aggregate { metrics, groups } = aggregate_run(&run.records, &seeds, &doc_ids);
        let mut results = serde_json::json!({
            "suite": suite.def.name,
            "kind": kind,
            "items": doc_ids.len(),
            "seeds": seeds,
            "metrics": metrics,
            "groups": groups,
            "config": config,
        });
        if opts.perturb.is_some() {
            results["robustness"] =
                serde_json::json!(super::robust::robustness(&run.records, &seeds, &doc_ids));
        }
        crate::report::write_json_atomic(&results_path, &results)
    });
    let mut report_files = super::reports::report_files(&opts.out, &suite.def.name, &seeds, &doc_ids);
    let mut subscribers = Fanout::new(vec![&mut results_json, &mut report_files, reporter]);
    let mut kernel =
        Kernel::open(&format!("eval {}", suite.def.name), &samples_path, opts.force, &mut subscribers)
            .map_err(SuiteError::Report)?;
    let mut items: Vec<(u64, Doc, Option<Variant>)> = Vec::new();
    for &seed in &seeds {
        for doc in &docs {
            items.push((seed, doc.clone(), None));
            if let Some(spec) = &opts.perturb {
                let options = match kind {
                    SuiteKind::MultipleChoice => super::prompt::choice_item(suite, doc, seed)?.choices.len(),
                    _ => 0,
                };
                items.extend(spec.variants_of(options).into_iter().map(|v| (seed, doc.clone(), Some(v))));
            }
        }
    }
    if let Some(only) = &opts.only {
        items.retain(|(seed, doc, variant)| only.contains(&key_of(*seed, doc, variant)));
    }
    let todo = kernel
        .plan(items, |(seed, doc, variant)| (key_of(*seed, doc, variant), item_fingerprint(doc, variant)))
        .map_err(SuiteError::Report)?;
    let resumed = kernel.resume_summary().reused;
    let recomputed = kernel.resume_summary().recomputed_again();
    let mut executor = None;
    let mut computed = 0usize;
    if let Some(cluster) = cluster {
        let inputs = super::remote::Inputs {
            suite,
            test: &test_path,
            fewshot: fewshot_path.as_deref(),
            samples: opts.samples.as_deref(),
            model: model_info.as_ref().filter(|_| completions.is_none()),
            force: opts.force,
        };
        let items =
            todo.iter().map(|((seed, doc, variant), f)| (key_of(*seed, doc, variant), f.to_json())).collect();
        let (report, stored) = super::remote::evaluate_on_ray(cluster, &mut kernel, items, &inputs)?;
        computed = stored;
        executor = Some(cluster.ray.manifest_entry(&report));
    }
    let todo = if cluster.is_some() { Vec::new() } else { todo };
    let mut run = Run {
        suite,
        pool,
        shots,
        boundary: opts.boundary,
        model,
        runner,
        completions,
        canonical: opts.canonical,
        scored: Default::default(),
    };
    // Each record is stored as soon as it exists, so a crash keeps it.
    let mut keep =
        |kernel: &mut Kernel<'_, SampleRecord>, mut record: SampleRecord, fingerprint: &Fingerprint| {
            record.fingerprint = Some(fingerprint.clone());
            let outcome = outcome_label(&record);
            computed += 1;
            kernel.finish_item(record, &outcome.0, outcome.1).map_err(SuiteError::Report)
        };
    for &seed in &seeds {
        let todo: Vec<(Job<'_>, &Fingerprint)> =
            todo.iter().filter(|((s, _, _), _)| *s == seed).map(|((_, d, v), f)| ((d, *v), f)).collect();
        match kind {
            SuiteKind::MultipleChoice => {
                for &(job, fingerprint) in &todo {
                    keep(&mut kernel, run.multiple_choice(seed, job)?, fingerprint)?;
                }
            }
            // Several docs per call so that the model can decode them together; each record is
            // kept as soon as its chunk is done.
            SuiteKind::Generate => {
                for chunk in todo.chunks(GENERATE_CHUNK) {
                    let jobs: Vec<Job<'_>> = chunk.iter().map(|(job, _)| *job).collect();
                    for (record, (_, fingerprint)) in run.generate(seed, &jobs).into_iter().zip(chunk) {
                        keep(&mut kernel, record?, fingerprint)?;
                    }
                }
            }
            // Many programs per container, to keep the sandbox overhead low.
            SuiteKind::Code => {
                for batch in todo.chunks(opts.code_batch.max(1)) {
                    let jobs: Vec<Job<'_>> = batch.iter().map(|(job, _)| *job).collect();
                    for (record, (_, fingerprint)) in run.code_batch(seed, &jobs)?.into_iter().zip(batch) {
                        keep(&mut kernel, record, fingerprint)?;
                    }
                }
            }
        }
    }
    let run_records =
        kernel.finish_with(|records| count_outcomes(kind, records)).map_err(SuiteError::Report)?;
    let Aggregate { metrics, groups } = aggregate_run(&run_records.records, &seeds, &doc_ids);
    let robustness = super::robust::robustness(&run_records.records, &seeds, &doc_ids);
    let summary = EvalSummary {
        suite: suite.def.name.clone(),
        kind,
        items: docs.len(),
        seeds: seeds.clone(),
        metrics,
        groups,
        robustness,
        config: config.clone(),
        computed,
        resumed,
        recomputed,
        out_dir: opts.out.clone(),
        records: run_records.records,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut manifest = serde_json::json!({
        "tool": "repairbench",
        "version": env!("CARGO_PKG_VERSION"),
        "finished_unix": now,
        "suite": suite.def.name,
        "suite_file": suite.path,
        "fingerprint": fingerprint,
        "code": crate::kernel::fingerprint::BUILD_COMMIT,
        "model": model_info,
        "data": config["data"],
        "samples_file": config["samples_file"],
        "perturb": config["perturb"],
        "items": summary.items,
        "seeds": summary.seeds,
        "computed": computed,
        "resumed": resumed,
        "files": {"results": "results.json", "samples": "samples.jsonl"},
    });
    if let Some(executor) = executor {
        manifest["executor"] = executor;
    }
    write_json(&opts.out.join("manifest.json"), &manifest)?;
    Ok(summary)
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), SuiteError> {
    crate::report::write_json_atomic(path, value).map_err(SuiteError::Report)
}

/// The slice of HumanEval the top-level `repairbench run` shows: the first `limit` problems,
/// one greedy sample each from `model` (`None`: the canonical solutions), executed in the
/// sandbox through `runner`.
pub fn humaneval_slice(
    model: Option<&mut dyn LanguageModel>,
    runner: &dyn CodeRunner,
    limit: usize,
    out: &Path,
) -> Result<EvalSummary, SuiteError> {
    let suite = super::load_suite("humaneval")?;
    let mut opts = EvalOptions::new(out);
    opts.limit = Some(limit);
    opts.code_batch = limit.max(1);
    opts.canonical = model.is_none();
    evaluate(&suite, &opts, model, Some(runner))
}

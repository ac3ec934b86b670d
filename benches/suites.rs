//! Suite speed on the default model: multiple-choice items/s with the shared context scored
//! once for all options (prefix reuse) against each option scored on its own, and generated
//! tokens/s of one n-sample request against n single-sequence requests, and what a circular
//! perturbation run costs per item against a plain one.
//!
//! `cargo bench --bench suites` (env: SUITES_BENCH_MODEL, SUITES_BENCH_N).

use std::path::Path;
use std::time::Instant;

use repairbench::model::{Engine, GenerateRequest, LanguageModel, Prompt, Sampling, ScoreRequest};
use repairbench::suites::data::load_rows;
use repairbench::suites::load_suite;
use repairbench::suites::prompt::{build_prompt, choice_item, make_docs};

fn main() -> anyhow::Result<()> {
    let model_path = std::env::var(repairbench::env::BENCH_MODEL)
        .unwrap_or_else(|_| repairbench::model::DEFAULT_MODEL.to_string());
    let mut engine = Engine::load(&model_path)?;
    println!("model: {model_path}\nCPU: {}", repairbench::model::kernels::cpu_description());
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu");

    // Multiple choice: MMLU fixture items with two same-subject examples each.
    let suite = load_suite("mmlu")?;
    let test = make_docs(&suite, load_rows(&fixtures.join("test.jsonl"), &suite.def.data.fields)?)?;
    let pool = make_docs(&suite, load_rows(&fixtures.join("dev.jsonl"), &suite.def.data.fields)?)?;
    let mut items = Vec::new();
    for doc in &test {
        let item = choice_item(&suite, doc, 0)?;
        let context = build_prompt(&suite, &pool, doc, Some(&item), 2, 0)?;
        let requests: Vec<ScoreRequest> =
            item.continuations.iter().map(|c| ScoreRequest::new(context.clone(), format!(" {c}"))).collect();
        items.push(requests);
    }
    let context_tokens: usize = items.iter().map(|r| r[0].context.len()).sum::<usize>() / items.len();
    // Warm up once (allocations, caches) so the first timed pass is not penalised.
    engine.score(&items[0])?;

    let start = Instant::now();
    let mut shared = Vec::new();
    for requests in &items {
        shared.push(engine.score(requests)?);
    }
    let shared_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut separate = Vec::new();
    for requests in &items {
        let mut outs = Vec::new();
        for r in requests {
            outs.extend(engine.score(std::slice::from_ref(r))?);
        }
        separate.push(outs);
    }
    let separate_s = start.elapsed().as_secs_f64();
    let max_diff = shared
        .iter()
        .flatten()
        .zip(separate.iter().flatten())
        .map(|(a, b)| (a.sum_logprob - b.sum_logprob).abs())
        .fold(0.0f64, f64::max);
    let n_items = items.len() as f64;
    println!(
        "multiple choice: {} MMLU-style items, 4 options, 2-shot (~{context_tokens} context chars)",
        items.len()
    );
    // Both share the prefix: within a call, and across calls through the engine's kept cache.
    println!("  one call per item   {:8.2} items/s  ({:.2} s)", n_items / shared_s, shared_s);
    println!("  one call per option {:8.2} items/s  ({:.2} s)", n_items / separate_s, separate_s);
    println!("  ratio               {:8.2}x   max |Δ loglik| {max_diff:.2e} nats", separate_s / shared_s);

    // Generation: n samples of one prompt sharing its KV cache vs n single-sequence requests.
    let n: usize = std::env::var("SUITES_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(4);
    let prompt = "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"";
    let request = |n: usize, seed: u64| GenerateRequest {
        prompt: Prompt::Text(prompt.to_string()),
        max_tokens: 48,
        sampling: Sampling { temperature: 0.8, top_k: None, top_p: Some(0.95), seed },
        stop: Vec::new(),
        n,
    };
    engine.generate(&request(1, 99))?;
    let start = Instant::now();
    let batch = engine.generate(&request(n, 7))?;
    let batch_s = start.elapsed().as_secs_f64();
    let batch_tokens: usize = batch.sequences.iter().map(|s| s.tokens.len()).sum();

    let start = Instant::now();
    let mut single_tokens = 0usize;
    let mut same_text = true;
    for i in 0..n {
        let out = engine.generate(&request(1, 7 + i as u64))?;
        single_tokens += out.sequences[0].tokens.len();
        same_text &= out.sequences[0].text == batch.sequences[i].text;
    }
    let single_s = start.elapsed().as_secs_f64();
    println!("generation: n = {n} samples of {} tokens max, temperature 0.8", 48);
    println!(
        "  one n-sample request   {:8.1} tok/s  ({batch_tokens} tokens, {:.2} s)",
        batch_tokens as f64 / batch_s,
        batch_s
    );
    println!(
        "  {n} single requests     {:8.1} tok/s  ({single_tokens} tokens, {:.2} s)",
        single_tokens as f64 / single_s,
        single_s
    );
    println!(
        "  speed-up               {:8.2}x   same texts as single runs: {same_text}",
        (batch_tokens as f64 / batch_s) / (single_tokens as f64 / single_s)
    );
    perturbation_cost(&mut engine)
}

/// What `--perturb options.circular` costs per item against a plain run, through `evaluate`
/// as a user runs it: on MMLU, whose prompt lists the options (each rotation is a new prompt
/// whose few-shot examples and question are a prefix the engine's kept cache shares), and on
/// ARC, whose prompt does not (every rotation reuses the original's scores).
fn perturbation_cost(engine: &mut Engine) -> anyhow::Result<()> {
    use repairbench::suites::perturb::{Family, PerturbSpec};
    use repairbench::suites::{evaluate, EvalOptions};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites");
    println!("perturbation cost: evaluate, seconds per original item (variants included)");
    for (suite_name, data, shots) in [("mmlu", "mmlu", 0), ("mmlu", "mmlu", 2), ("arc_easy", "arc", 0)] {
        let suite = load_suite(suite_name)?;
        let mut seconds = Vec::new();
        for perturb in
            [None, Some(PerturbSpec { families: vec![Family::OptionsCircular], seed: 0, variants: 1 })]
        {
            let dir = tempfile::tempdir()?;
            let mut opts = EvalOptions::new(dir.path());
            opts.data = Some(fixtures.join(data));
            opts.shots = Some(shots);
            opts.perturb = perturb;
            let start = Instant::now();
            let summary = evaluate(&suite, &opts, Some(engine as &mut dyn LanguageModel), None)?;
            seconds.push((start.elapsed().as_secs_f64() / summary.items as f64, summary.computed));
        }
        let [(plain, plain_records), (circular, circular_records)] = [seconds[0], seconds[1]];
        println!(
            "  {suite_name:<9} {shots}-shot plain {plain:.3} s/item ({plain_records} records), options.circular {circular:.3} s/item ({circular_records} records), {:.2}x",
            circular / plain
        );
    }
    Ok(())
}

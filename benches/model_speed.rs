//! Speed of the inference core, side by side with llama.cpp on the same GGUF files and thread
//! counts, in one table with a row per file and thread count. Run: `cargo bench --bench
//! model_speed`.
//!
//! Files: the default model (Q4_1) and what llama-quantize makes of it (Q4_K_M, Q5_K_M, Q6_K,
//! Q8_0, F16; tests/common/llama.rs), at 1 and 2 threads.
//! 1. Our engine, in a child process (so its peak RSS is its own): prefill tok/s of a 512-token
//!    prompt, decode tok/s of 128 tokens from an empty context (what `llama-bench -p 512 -n 128`
//!    measures), and for the default model per-token log-probs of the fidelity fixture's text.
//! 2. llama.cpp: `llama-bench -p 512 -n 128 -t N -o json` (built by scripts/build-llama-cpp into
//!    the cache if missing), also a child process, its peak RSS from `wait4`.
//!
//! The kernels alone, per weight matrix, are measured by `benches/kernels.rs`.
//!
//! Environment: `REPAIRBENCH_BENCH_MODEL` (one model source instead of the files above),
//! `REPAIRBENCH_THREADS` (one thread count instead of 1 and 2), `REPAIRBENCH_BENCH_REPS`
//! (repetitions, default 3), `LLAMA_CPP_BIN` (a directory holding llama.cpp's binaries, skips
//! the build).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use repairbench::model::transformer::Logits;
use repairbench::model::{Engine, LanguageModel, DEFAULT_MODEL};
use serde::{Deserialize, Serialize};

#[path = "../tests/common/llama.rs"]
mod common_llama;

const CHILD_FLAG: &str = "--engine-child";
const FIXTURE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fidelity/smollm2-135m-instruct-q4_1.json");

#[derive(Serialize, Deserialize)]
struct EngineFigures {
    path: PathBuf,
    quantization: String,
    sha256: String,
    prefill_tok_s: Vec<f64>,
    decode_tok_s: Vec<f64>,
    /// Peak RSS after the speed runs, before the fidelity pass (whose all-position logits
    /// llama-bench has no counterpart of).
    speed_peak_rss_mib: f64,
    fidelity: Option<Fidelity>,
}

#[derive(Serialize, Deserialize)]
struct Fidelity {
    tokens: usize,
    ours_mean_abs: f64,
    ours_max_abs: f64,
    ours_argmax: f64,
    llama_single_mean_abs: f64,
    llama_single_max_abs: f64,
    llama_single_argmax: f64,
}

#[derive(Deserialize)]
struct FixtureEval {
    next_logprob: Vec<f64>,
    argmax: Vec<u32>,
}

#[derive(Deserialize)]
struct Fixture {
    model_sha256: String,
    tokens: Vec<u32>,
    batched: FixtureEval,
    token_by_token: FixtureEval,
}

/// The files of the speed table: the default model and what llama-quantize makes of it.
const QUANTIZATIONS: [&str; 5] = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize =
        std::env::var(repairbench::env::BENCH_REPS).ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    if args.iter().any(|a| a == CHILD_FLAG) {
        let source = std::env::var(repairbench::env::BENCH_MODEL).unwrap_or_else(|_| DEFAULT_MODEL.into());
        let figures = engine_child(&source, reps)?;
        println!("{}", serde_json::to_string(&figures)?);
        return Ok(());
    }
    // One file when REPAIRBENCH_BENCH_MODEL names it; else the default model and its
    // requantizations; at the thread counts of REPAIRBENCH_THREADS, else 1 and 2.
    let files: Vec<(String, PathBuf)> = match std::env::var(repairbench::env::BENCH_MODEL) {
        Ok(source) => vec![("given".into(), repairbench::model::source::resolve(&source)?.path)],
        Err(_) => std::iter::once(("Q4_1".to_string(), common_llama::default_model_path()))
            .chain(QUANTIZATIONS.iter().map(|k| (k.to_string(), common_llama::quantized_model(k))))
            .collect(),
    };
    let thread_counts: Vec<usize> =
        match std::env::var(repairbench::env::THREADS).ok().and_then(|v| v.parse().ok()) {
            Some(t) => vec![t],
            None => vec![1, 2],
        };
    println!("CPU: {}", repairbench::model::kernels::cpu_description());
    println!(
        "llama.cpp: {}",
        std::fs::read_to_string(common_llama::llama_bin().join("../../VERSION"))?.trim()
    );
    println!("prefill: 512 tokens; decode: 128 tokens from an empty context; mean of {reps} repetitions\n");
    println!(
        "{:<8} {:>7} {:>4} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>9} {:>9}",
        "file", "weights", "thr", "prefill", "llama", "ratio", "decode", "llama", "ratio", "RSS MiB", "llama"
    );
    let mut fidelity = None;
    for &threads in &thread_counts {
        for (kind, path) in &files {
            let (ours, _) = run_engine_child(threads, path)?;
            let llama = run_llama_bench(path, threads, reps)?;
            let (p, d) = (mean(&ours.prefill_tok_s), mean(&ours.decode_tok_s));
            println!(
                "{kind:<8} {:>7} {threads:>4} {p:>9.1} {:>9.1} {:>5.2}x {d:>9.1} {:>9.1} {:>5.2}x {:>9.0} {:>9.0}",
                ours.quantization,
                llama.prefill_tok_s,
                p / llama.prefill_tok_s,
                llama.decode_tok_s,
                d / llama.decode_tok_s,
                ours.speed_peak_rss_mib,
                llama.peak_rss_mib,
            );
            if fidelity.is_none() {
                fidelity = ours.fidelity;
            }
        }
    }
    if let Some(f) = &fidelity {
        println!(
            "\nFidelity on the fixture's HumanEval text ({} tokens), per-token log-prob of the next token:",
            f.tokens
        );
        println!("{:<44} {:>14} {:>10} {:>10}", "", "mean |Δ| nats", "max |Δ|", "argmax =");
        println!(
            "{:<44} {:>14.4} {:>10.4} {:>9.2}%",
            "ours (one pass) vs llama.cpp n_batch 512",
            f.ours_mean_abs,
            f.ours_max_abs,
            100.0 * f.ours_argmax
        );
        println!(
            "{:<44} {:>14.4} {:>10.4} {:>9.2}%",
            "llama.cpp n_batch 1 vs llama.cpp n_batch 512",
            f.llama_single_mean_abs,
            f.llama_single_max_abs,
            100.0 * f.llama_single_argmax
        );
        println!("(every file's fidelity against llama.cpp is checked by tests/llama_cpp_quants.rs)");
    }
    Ok(())
}

/// Peak resident set of a child in MiB, from `wait4` (which reaps it).
fn wait_with_peak_rss(child: &std::process::Child) -> anyhow::Result<(i32, f64)> {
    let mut status = 0;
    // SAFETY: plain syscall on our own child's pid with valid out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    if pid < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    Ok((status, usage.ru_maxrss as f64 / 1024.0))
}

fn run_engine_child(threads: usize, model: &Path) -> anyhow::Result<(EngineFigures, f64)> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg(CHILD_FLAG)
        .env(repairbench::env::THREADS, threads.to_string())
        .env(repairbench::env::BENCH_MODEL, model)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut out = String::new();
    child.stdout.take().expect("piped").read_to_string(&mut out)?;
    let (status, rss) = wait_with_peak_rss(&child)?;
    if status != 0 {
        bail!("the engine benchmark process failed (status {status})");
    }
    let figures = serde_json::from_str(out.trim()).context("engine benchmark output")?;
    Ok((figures, rss))
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn engine_child(source: &str, reps: usize) -> anyhow::Result<EngineFigures> {
    let engine = Engine::load(source)?;
    let model = engine.transformer();
    let vocab = engine.info().vocab_size as u64;
    // Deterministic token ids spread over the vocabulary, like llama-bench's random prompt.
    let prompt: Vec<u32> = (0..512u64).map(|i| ((i * 2654435761 + 12345) % vocab) as u32).collect();

    let mut prefill = Vec::new();
    let mut decode = Vec::new();
    for rep in 0..=reps {
        let mut cache = model.new_cache(512);
        let started = Instant::now();
        model.forward(&prompt, &mut cache, Logits::Last)?;
        let prefill_s = started.elapsed().as_secs_f64();

        let mut cache = model.new_cache(128);
        let started = Instant::now();
        let mut token = prompt[0];
        for _ in 0..128 {
            let logits = model.forward(&[token], &mut cache, Logits::Last)?;
            token = logits.flatten_all()?.argmax(0)?.to_scalar::<u32>()?;
        }
        let decode_s = started.elapsed().as_secs_f64();
        if rep > 0 {
            // Repetition 0 warms caches and the thread pool, as llama-bench's warm-up run does.
            prefill.push(512.0 / prefill_s);
            decode.push(128.0 / decode_s);
        }
    }

    let speed_peak_rss_mib = own_peak_rss_mib()?;
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(FIXTURE)?)?;
    let fidelity = if fixture.model_sha256 == engine.info().sha256 {
        let ours = engine.logprobs_for_tokens(&fixture.tokens, usize::MAX)?;
        let ours_eval = FixtureEval {
            next_logprob: ours.iter().map(|p| p.logprob).collect(),
            argmax: ours.iter().map(|p| p.argmax).collect(),
        };
        let (om, ox, oa) = agreement(&ours_eval, &fixture.batched);
        let (lm, lx, la) = agreement(&fixture.token_by_token, &fixture.batched);
        Some(Fidelity {
            tokens: fixture.tokens.len(),
            ours_mean_abs: om,
            ours_max_abs: ox,
            ours_argmax: oa,
            llama_single_mean_abs: lm,
            llama_single_max_abs: lx,
            llama_single_argmax: la,
        })
    } else {
        None
    };
    Ok(EngineFigures {
        path: engine.info().path.clone(),
        quantization: engine.info().quantization.clone(),
        sha256: engine.info().sha256.clone(),
        prefill_tok_s: prefill,
        decode_tok_s: decode,
        speed_peak_rss_mib,
        fidelity,
    })
}

/// This process's peak resident set so far (`VmHWM`), in MiB.
fn own_peak_rss_mib() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmHWM in /proc/self/status")?;
    Ok(kib / 1024.0)
}

/// (mean |Δ|, max |Δ|, argmax agreement) of `a` against `b`.
fn agreement(a: &FixtureEval, b: &FixtureEval) -> (f64, f64, f64) {
    let diffs: Vec<f64> = a.next_logprob.iter().zip(&b.next_logprob).map(|(x, y)| (x - y).abs()).collect();
    let same = a.argmax.iter().zip(&b.argmax).filter(|(x, y)| x == y).count();
    (mean(&diffs), diffs.iter().copied().fold(0.0, f64::max), same as f64 / diffs.len() as f64)
}

struct LlamaFigures {
    prefill_tok_s: f64,
    decode_tok_s: f64,
    peak_rss_mib: f64,
}

fn run_llama_bench(model: &Path, threads: usize, reps: usize) -> anyhow::Result<LlamaFigures> {
    let bench = common_llama::llama_bin().join("llama-bench");
    let mut child = Command::new(&bench)
        .args(["-m", &model.to_string_lossy(), "-p", "512", "-n", "128", "-t", &threads.to_string()])
        .args(["-r", &reps.to_string(), "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| bench.display().to_string())?;
    let mut out = String::new();
    child.stdout.take().expect("piped").read_to_string(&mut out)?;
    let (status, rss) = wait_with_peak_rss(&child)?;
    if status != 0 {
        bail!("llama-bench failed (status {status})");
    }
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out).context("llama-bench JSON")?;
    let rate = |prompt: u64, gen: u64| {
        runs.iter()
            .find(|r| r["n_prompt"].as_u64() == Some(prompt) && r["n_gen"].as_u64() == Some(gen))
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| format!("llama-bench result for n_prompt={prompt} n_gen={gen}"))
    };
    Ok(LlamaFigures { prefill_tok_s: rate(512, 0)?, decode_tok_s: rate(0, 128)?, peak_rss_mib: rss })
}

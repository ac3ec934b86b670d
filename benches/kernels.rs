//! Speed of our quantized matmul kernels on the model's own weight matrices, against candle's
//! `QMatMul` on the same weights. Run: `cargo bench --bench kernels`.
//!
//! Files: the default model (Q4_1) and what llama-quantize makes of it (Q4_K_M, Q5_K_M, Q6_K,
//! Q8_0, F16; tests/common/llama.rs). For each distinct weight type and shape of the first layer
//! and the output projection, at 1, 8 and 512 activation rows: the median time per call, the
//! time per weight block and activation row, and for one row (decode) the rate at which weight
//! bytes are read. One thread unless `REPAIRBENCH_THREADS` says otherwise.
//!
//! Environment: `REPAIRBENCH_BENCH_MODEL` (one model source instead of the files above),
//! `REPAIRBENCH_THREADS`, `LLAMA_CPP_BIN` (as for `model_speed`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use repairbench::model::kernels::QLinear;

#[path = "../tests/common/llama.rs"]
mod common_llama;

const QUANTIZATIONS: [&str; 5] = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16"];
const TENSORS: [&str; 6] = [
    "blk.0.attn_q.weight",
    "blk.0.attn_k.weight",
    "blk.0.ffn_up.weight",
    "blk.0.ffn_down.weight",
    "output.weight",
    "token_embd.weight",
];

fn main() -> anyhow::Result<()> {
    let threads = std::env::var(repairbench::env::THREADS).ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global()?;
    // candle's matmuls are timed from inside rayon's pool (the calling thread is a worker), so
    // their figures carry no hand-off from outside it; ours run on the engine's spinning team.
    rayon::scope(|_| run(threads))
}

fn run(threads: usize) -> anyhow::Result<()> {
    let files: Vec<(String, PathBuf)> = match std::env::var(repairbench::env::BENCH_MODEL) {
        Ok(source) => vec![("given".into(), repairbench::model::source::resolve(&source)?.path)],
        Err(_) => std::iter::once(("Q4_1".to_string(), common_llama::default_model_path()))
            .chain(QUANTIZATIONS.iter().map(|k| (k.to_string(), common_llama::quantized_model(k))))
            .collect(),
    };
    println!("CPU: {}", repairbench::model::kernels::cpu_description());
    println!("threads: {threads}; median per call; ratio = candle time / our time\n");
    println!(
        "{:<8} {:<20} {:>6} {:>11} {:>5} {:>11} {:>11} {:>7} {:>12} {:>8}",
        "file", "tensor", "dtype", "shape", "rows", "ours", "candle", "ratio", "ns/blk·row", "GB/s"
    );
    let mut seen = HashSet::new();
    for (kind, path) in &files {
        let mut file = std::fs::File::open(path)?;
        let content = gguf_file::Content::read(&mut file)?;
        for name in TENSORS {
            let Ok(weight) = content.tensor(&mut file, name, &Device::Cpu) else { continue };
            let dtype = weight.dtype();
            let bytes = weight.storage_size_in_bytes();
            let blocks = weight.shape().elem_count() / dtype.block_size();
            let layer = QLinear::new(Arc::new(weight))?;
            let (n, k) = (layer.out_features(), layer.in_features());
            if !seen.insert((format!("{dtype:?}"), n, k)) {
                continue;
            }
            for m in [1usize, 8, 512] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?;
                let budget = Duration::from_millis(if m == 512 { 1500 } else { 400 });
                let ours = time_it(budget, || {
                    layer.forward(&x).unwrap();
                });
                let candle = time_it(budget, || {
                    layer.forward_candle(&x).unwrap();
                });
                let secs = ours.as_secs_f64();
                println!(
                    "{kind:<8} {name:<20} {:>6} {:>11} {m:>5} {:>9.1}µs {:>9.1}µs {:>6.2}x {:>12.2} {:>8}",
                    format!("{dtype:?}"),
                    format!("{n}x{k}"),
                    secs * 1e6,
                    candle.as_secs_f64() * 1e6,
                    candle.as_secs_f64() / secs,
                    secs * 1e9 / (blocks * m) as f64,
                    if m == 1 { format!("{:.2}", bytes as f64 / secs / 1e9) } else { String::new() },
                );
            }
        }
    }
    Ok(())
}

/// Runs `f` repeatedly for about `budget` and returns the median time of one call.
fn time_it(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || times.len() < 3 {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

//! Speed of the inference core, side by side with llama.cpp (`cargo bench --bench model_speed`).
//!
//! 1. QLinear micro-benchmark: our quantized matmul against candle's `QMatMul` on the GGUF's own
//!    weight matrices, one row (decode) and 512 rows (prefill).
//!
//! Environment: `REPAIRBENCH_BENCH_MODEL` (GGUF path, default the SmolLM2 Q4_1 file),
//! `REPAIRBENCH_THREADS` (default 2 here, for both engines).

use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use repairbench::model::kernels::{KernelPath, QLinear};

const DEFAULT_MODEL: &str = "/work/models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn main() -> anyhow::Result<()> {
    let model = std::env::var("REPAIRBENCH_BENCH_MODEL").unwrap_or_else(|_| DEFAULT_MODEL.into());
    let threads =
        std::env::var(repairbench::env::THREADS).ok().and_then(|v| v.parse().ok()).unwrap_or(2usize);
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global()?;
    println!("model: {model}\nthreads: {threads}\nkernel path: {:?}\n", KernelPath::detect());
    qlinear_micro(&model)?;
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

fn qlinear_micro(model: &str) -> anyhow::Result<()> {
    let mut file = std::fs::File::open(model)?;
    let content = gguf_file::Content::read(&mut file)?;
    let names =
        ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"];
    println!("QLinear micro-benchmark (median per call; ratio = candle time / our time)");
    println!(
        "{:<24} {:>6} {:>12} {:>5} {:>12} {:>12} {:>8}",
        "tensor", "dtype", "shape", "rows", "ours", "candle", "ratio"
    );
    for name in names {
        let Ok(weight) = content.tensor(&mut file, name, &Device::Cpu) else { continue };
        let dtype = weight.dtype();
        let layer = QLinear::new(Arc::new(weight))?;
        let (n, k) = (layer.out_features(), layer.in_features());
        for m in [1usize, 512] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu)?;
            let budget = Duration::from_millis(if m == 1 { 300 } else { 1500 });
            let ours = time_it(budget, || {
                layer.forward(&x).unwrap();
            });
            let candle = time_it(budget, || {
                layer.forward_candle(&x).unwrap();
            });
            println!(
                "{:<24} {:>6} {:>12} {:>5} {:>10.1}µs {:>10.1}µs {:>7.2}x",
                name,
                format!("{dtype:?}"),
                format!("{n}x{k}"),
                m,
                ours.as_secs_f64() * 1e6,
                candle.as_secs_f64() * 1e6,
                candle.as_secs_f64() / ours.as_secs_f64()
            );
        }
    }
    println!();
    Ok(())
}

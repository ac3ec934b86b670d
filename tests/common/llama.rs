//! llama.cpp as the reference in tests: built once by scripts/build-llama-cpp (idempotent, into
//! the cache), quantized copies of the default model made by its llama-quantize, and
//! per-token log-probs from our scripts/llama-logprobs.cpp. Shared by the tests that compare
//! against llama.cpp (`common::llama`). Nothing here skips: a failed build fails the test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

/// The directory of llama.cpp's binaries (built on first use).
pub fn llama_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-llama-cpp");
        let out = Command::new(&script).output().unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect("the script prints its bin directory").trim())
    })
}

/// The default model's GGUF (fetched into the cache on first use).
pub fn default_model_path() -> PathBuf {
    repairbench::model::source::resolve(repairbench::model::DEFAULT_MODEL)
        .expect("the default model resolves")
        .path
}

/// The default model requantized by llama-quantize to `kind` (`Q4_K_M`, `Q8_0`, `F16`, ...),
/// kept in the cache beside llama.cpp's build.
pub fn quantized_model(kind: &str) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let source = default_model_path();
    let dir = llama_bin().join("../../quantized");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("SmolLM2-135M-Instruct.{kind}.gguf"));
    if !out.exists() {
        let partial = out.with_extension("partial");
        let status = Command::new(llama_bin().join("llama-quantize"))
            .arg("--allow-requantize")
            .arg(&source)
            .arg(&partial)
            .arg(kind)
            .arg("2")
            .output()
            .expect("llama-quantize runs");
        assert!(
            status.status.success(),
            "llama-quantize {kind}: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        std::fs::rename(&partial, &out).unwrap();
    }
    out
}

/// One llama.cpp evaluation of a text: its tokens, and per position the log-prob of the next
/// token and the argmax.
#[derive(Debug, Deserialize)]
pub struct LlamaEval {
    pub add_bos: bool,
    pub tokens: Vec<u32>,
    pub next_logprob: Vec<f64>,
    pub argmax: Vec<u32>,
}

/// `llama-logprobs MODEL TEXT N_BATCH 2`.
pub fn llama_logprobs(model: &Path, text: &Path, n_batch: usize) -> LlamaEval {
    let out = Command::new(llama_bin().join("llama-logprobs"))
        .arg(model)
        .arg(text)
        .arg(n_batch.to_string())
        .arg("2")
        .output()
        .expect("llama-logprobs runs");
    assert!(
        out.status.success(),
        "llama-logprobs {}: {}",
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("llama-logprobs prints JSON")
}

/// Mean absolute log-prob difference and argmax agreement of two evaluations.
pub fn compare(a: &[f64], a_argmax: &[u32], b: &[f64], b_argmax: &[u32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let mean = a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64;
    let agree = a_argmax.iter().zip(b_argmax).filter(|(x, y)| x == y).count() as f64 / a.len() as f64;
    (mean, agree)
}

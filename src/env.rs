//! Every environment variable repairbench reads, in one place (documented in README.md).

use std::path::PathBuf;

/// Root of repairbench's cache (models, wheels, repository mirrors, image build inputs).
pub const CACHE_DIR: &str = "REPAIRBENCH_CACHE";
/// Hugging Face hub cache root, as the hub's own tools use it.
pub const HF_HOME: &str = "HF_HOME";
/// Hugging Face hub endpoint for `hf:` model sources.
pub const HF_ENDPOINT: &str = "HF_ENDPOINT";
/// Hugging Face access token for gated repositories.
pub const HF_TOKEN: &str = "HF_TOKEN";
/// Log filter for `tracing` (e.g. `repairbench=debug`).
pub const LOG: &str = "REPAIRBENCH_LOG";
/// Worker threads for the inference core (default: available cores).
pub const THREADS: &str = "REPAIRBENCH_THREADS";
/// Model source the speed benchmark (`benches/model_speed.rs`) measures (default: the default model).
pub const BENCH_MODEL: &str = "REPAIRBENCH_BENCH_MODEL";
/// Timed repetitions per measurement in the speed benchmark (default 3).
pub const BENCH_REPS: &str = "REPAIRBENCH_BENCH_REPS";
/// Directory holding an already built `llama-bench`/`llama-logprobs`; when unset,
/// `scripts/build-llama-cpp` builds them into `$REPAIRBENCH_CACHE/llama.cpp/`.
/// (That script also reads `LLAMA_CPP_PYTHON_VERSION` and `LLAMA_CPP_BUILD_JOBS`.)
pub const LLAMA_CPP_BIN: &str = "LLAMA_CPP_BIN";

/// The cache root: `$REPAIRBENCH_CACHE`, else `$XDG_CACHE_HOME/repairbench`, else
/// `$HOME/.cache/repairbench`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_DIR) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("repairbench");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("repairbench")
}

/// Threads the inference core uses.
pub fn threads() -> usize {
    std::env::var(THREADS)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

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
/// GitLab token for `tasks harvest --gitlab` (the default of `--token-env`).
pub const GITLAB_TOKEN: &str = "GITLAB_TOKEN";
/// API key for `openai:` models (the default of `--api-key-env`).
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// Log filter for `tracing` (e.g. `repairbench=debug`).
pub const LOG: &str = "REPAIRBENCH_LOG";
/// Directory with the suite definitions (`suites/*.toml`); default: the source tree's `harness/`.
pub const HARNESS_DIR: &str = "REPAIRBENCH_HARNESS";
/// Worker threads for the inference core (default: available cores).
pub const THREADS: &str = "REPAIRBENCH_THREADS";
/// Debian mirror URL the sandbox base image is bootstrapped from (default: the host's apt
/// configuration, the source serving the base suite).
pub const DEBIAN_MIRROR: &str = "REPAIRBENCH_DEBIAN_MIRROR";
/// Sandbox workers: `swe grade` instances at once, code-suite programs side by side (a
/// `--workers` flag wins).
pub const SANDBOX_WORKERS: &str = "REPAIRBENCH_SANDBOX_WORKERS";
/// One model source for the speed benchmark (`benches/model_speed.rs`; default: the default
/// model and its llama-quantize requantizations) and the batching benchmark.
pub const BENCH_MODEL: &str = "REPAIRBENCH_BENCH_MODEL";
/// Timed repetitions per measurement in the speed benchmark (default 3).
pub const BENCH_REPS: &str = "REPAIRBENCH_BENCH_REPS";
/// Directory holding an already built llama.cpp (`llama-bench`, `llama-logprobs`,
/// `llama-quantize`, `llama-server`); when unset, `scripts/build-llama-cpp` builds them into
/// `$REPAIRBENCH_CACHE/llama.cpp/` (benchmarks and the tests that compare with llama.cpp).
/// (That script also reads `LLAMA_CPP_PYTHON_VERSION` and `LLAMA_CPP_BUILD_JOBS`.)
pub const LLAMA_CPP_BIN: &str = "LLAMA_CPP_BIN";
/// HumanEval prompts of the batching benchmark (`benches/batching.rs`; default 32).
pub const BATCHING_BENCH_PROMPTS: &str = "BATCHING_BENCH_PROMPTS";
/// New tokens per prompt of the batching benchmark (default 128).
pub const BATCHING_BENCH_TOKENS: &str = "BATCHING_BENCH_TOKENS";

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

/// A variable that is set but not usable.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value}: expected {expected}")]
pub struct BadVariable {
    pub name: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// `REPAIRBENCH_SANDBOX_WORKERS`, when set: the sandbox workers of every command that has
/// them (`swe grade`/`swe run` instances at once, code-suite programs side by side) unless a
/// `--workers` flag says otherwise.
pub fn sandbox_workers() -> Result<Option<usize>, BadVariable> {
    let Some(value) = std::env::var_os(SANDBOX_WORKERS) else { return Ok(None) };
    let value = value.to_string_lossy().into_owned();
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(BadVariable {
            name: SANDBOX_WORKERS,
            value,
            expected: "a whole number of workers, at least 1",
        }),
    }
}

/// URL template for cloning task repositories not found locally (`{repo}`, `{owner}`, `{name}`).
pub const REPO_URL_TEMPLATE: &str = "REPAIRBENCH_REPO_URL_TEMPLATE";

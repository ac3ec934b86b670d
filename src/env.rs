//! Every environment variable repairbench reads, in one place (documented in README.md): each
//! is a constant here, and every read in the library goes through [`get`] or [`get_os`].

use std::ffi::OsString;
use std::path::PathBuf;

/// Root of repairbench's cache (models, wheels, repository mirrors, image build inputs).
pub const CACHE_DIR: &str = "REPAIRBENCH_CACHE";
/// Hugging Face hub cache root, as the hub's own tools use it.
pub const HF_HOME: &str = "HF_HOME";
/// Hugging Face hub endpoint for `hf:` model sources and suites' published datasets.
pub const HF_ENDPOINT: &str = "HF_ENDPOINT";
/// Hugging Face access token for gated repositories.
pub const HF_TOKEN: &str = "HF_TOKEN";
/// Set (`1`, `true`, `yes`, `on`): hub files come from the hub cache only, as the hub's own
/// tools read it.
pub const HF_HUB_OFFLINE: &str = "HF_HUB_OFFLINE";
/// GitLab token for `tasks harvest --gitlab` (the default of `--token-env`).
pub const GITLAB_TOKEN: &str = "GITLAB_TOKEN";
/// API key for `openai:` models (the default of `--api-key-env`; cluster workers read it from
/// their own environment).
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// Token of a Ray cluster started with `RAY_AUTH_MODE=token`, sent as a bearer token on every
/// request to its jobs API (`--executor ray:URL`, `executor check`).
pub const RAY_AUTH_TOKEN: &str = "RAY_AUTH_TOKEN";
/// The Python environment holding Ray's command line tool (`ray`), for the tests and
/// `scripts/setup` (default: `$REPAIRBENCH_CACHE/ray-venv`).
pub const RAY_VENV: &str = "REPAIRBENCH_RAY_VENV";
/// The Python environment holding pinned `transformers` and `tokenizers`, in which the tests
/// load an exported tokenizer (default: `$REPAIRBENCH_CACHE/hf-venv`).
pub const HF_VENV: &str = "REPAIRBENCH_HF_VENV";
/// The venv with SWE-bench's harness (pinned) that `scripts/setup` prepares for the tests (default
/// `$REPAIRBENCH_CACHE/swebench-venv`).
pub const SWEBENCH_VENV: &str = "REPAIRBENCH_SWEBENCH_VENV";
/// Log filter for `tracing` (e.g. `repairbench=debug`).
pub const LOG: &str = "REPAIRBENCH_LOG";
/// Directory with the suite definitions (`suites/*.toml`); default: the source tree's `harness/`.
pub const HARNESS_DIR: &str = "REPAIRBENCH_HARNESS";
/// Worker threads for the inference core (default: available cores).
pub const THREADS: &str = "REPAIRBENCH_THREADS";
/// Which implementation of the quantized kernels the inference core runs: `avx512`, `avx2` or
/// `scalar`, one this CPU has (default: the fastest it has). Results are the same bits on every
/// path; this is for checking that, and for timing one path against another.
pub const KERNEL_PATH: &str = "REPAIRBENCH_KERNEL_PATH";
/// Debian mirror URL the sandbox base image is bootstrapped from (default: the host's apt
/// configuration, the source serving the base suite).
pub const DEBIAN_MIRROR: &str = "REPAIRBENCH_DEBIAN_MIRROR";
/// URL template for cloning task repositories not found locally (`{repo}`, `{owner}`, `{name}`).
pub const REPO_URL_TEMPLATE: &str = "REPAIRBENCH_REPO_URL_TEMPLATE";
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
/// The host's home and cache folders, for the default cache and hub cache roots.
pub const HOME: &str = "HOME";
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
/// Where `debootstrap` is looked for (besides /usr/sbin and /sbin).
pub const PATH: &str = "PATH";
/// The `rustc` whose toolchain the `cargo` runner copies into its layer (default: `rustc`).
pub const RUSTC: &str = "RUSTC";
/// The host's CA bundle, trusted while layers are built (the first that is set; else Debian's).
pub const HOST_CA_BUNDLE: &[&str] = &["SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"];
/// Host settings passed to every layer build as build arguments, so a layer that installs
/// packages uses the same package index, proxy or mirror as the host. A Dockerfile declares
/// the ones it uses with `ARG`.
pub const PASSED_BUILD_ARGS: &[&str] = &[
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "GOPROXY",
    "GONOSUMDB",
    "GOFLAGS",
    "NPM_CONFIG_REGISTRY",
    "CARGO_REGISTRIES_CRATES_IO_PROTOCOL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];
/// HumanEval prompts of the batching benchmark (`benches/batching.rs`; default 32).
pub const BATCHING_BENCH_PROMPTS: &str = "BATCHING_BENCH_PROMPTS";
/// New tokens per prompt of the batching benchmark (default 128).
pub const BATCHING_BENCH_TOKENS: &str = "BATCHING_BENCH_TOKENS";

/// The value of `name` (one of the constants here), when it is set to non-empty UTF-8.
pub fn get(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The value of `name` as the operating system holds it (a path), when it is set.
pub fn get_os(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// The user's home folder (`.` when `HOME` is unset).
pub fn home() -> PathBuf {
    PathBuf::from(get_os(HOME).unwrap_or_else(|| ".".into()))
}

/// The cache root: `$REPAIRBENCH_CACHE`, else `$XDG_CACHE_HOME/repairbench`, else
/// `$HOME/.cache/repairbench`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = get_os(CACHE_DIR) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = get_os(XDG_CACHE_HOME) {
        return PathBuf::from(dir).join("repairbench");
    }
    home().join(".cache").join("repairbench")
}

/// Threads the inference core uses: `REPAIRBENCH_THREADS`, else the available cores; a value
/// that is not a whole number of threads is an error, never silently ignored.
pub fn threads() -> Result<usize, BadVariable> {
    positive(THREADS, "a whole number of threads, at least 1")
        .map(|n| n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// `name` as a whole number of at least 1, when set.
fn positive(name: &'static str, expected: &'static str) -> Result<Option<usize>, BadVariable> {
    parse_positive(name, get_os(name), expected)
}

fn parse_positive(
    name: &'static str,
    value: Option<OsString>,
    expected: &'static str,
) -> Result<Option<usize>, BadVariable> {
    let Some(value) = value else { return Ok(None) };
    let value = value.to_string_lossy().into_owned();
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(BadVariable { name, value, expected }),
    }
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
    positive(SANDBOX_WORKERS, "a whole number of workers, at least 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_count_is_an_error_naming_the_variable() {
        let parse =
            |value: Option<&str>| parse_positive(THREADS, value.map(OsString::from), "a whole number");
        let err = parse(Some("four")).unwrap_err();
        assert_eq!(err.to_string(), "REPAIRBENCH_THREADS=four: expected a whole number");
        assert!(parse(Some("0")).is_err());
        assert_eq!(parse(Some(" 3 ")).unwrap(), Some(3));
        assert_eq!(parse(None).unwrap(), None);
    }
}

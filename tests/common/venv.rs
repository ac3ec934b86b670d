//! The Python venvs `scripts/setup` prepares for the tests, each with pinned packages.

use std::path::PathBuf;

/// lm-evaluation-harness, transformers and tokenizers.
pub fn hf() -> PathBuf {
    python(repairbench::env::HF_VENV, "hf-venv")
}

/// SWE-bench's harness (`swebench`).
pub fn swebench() -> PathBuf {
    python(repairbench::env::SWEBENCH_VENV, "swebench-venv")
}

/// The venv's Python (`$VAR`, else `NAME` in the cache); a missing venv fails the test loudly.
fn python(var: &str, name: &str) -> PathBuf {
    let venv =
        std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| repairbench::env::cache_dir().join(name));
    let python = venv.join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup", python.display());
    python
}

//! The venv `scripts/setup` prepares with pinned lm-evaluation-harness, transformers and
//! tokenizers.

use std::path::PathBuf;

/// Its Python; a missing venv fails the test loudly.
pub fn python() -> PathBuf {
    let venv = std::env::var_os(repairbench::env::HF_VENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| repairbench::env::cache_dir().join("hf-venv"));
    let python = venv.join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup", python.display());
    python
}

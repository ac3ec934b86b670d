//! Errors of the inference core. Each names the file, field or input at fault and what was expected.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model file {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a readable GGUF file (not GGUF, or truncated): {reason}")]
    NotGguf { path: PathBuf, reason: String },
    #[error(
        "{path} is truncated: tensor `{tensor}` needs bytes up to offset {needed}, but the file has {actual} bytes"
    )]
    Truncated { path: PathBuf, tensor: String, needed: u64, actual: u64 },
    #[error(
        "{path}: unsupported model architecture `{architecture}` (general.architecture); supported: llama, mistral, qwen2"
    )]
    UnsupportedArchitecture { path: PathBuf, architecture: String },
    #[error(
        "{path}: tensor `{tensor}` has unsupported quantization {dtype}; supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, F16, F32"
    )]
    UnsupportedQuantization { path: PathBuf, tensor: String, dtype: String },
    #[error("{path}: GGUF metadata key `{key}` is missing or not {expected}")]
    Metadata { path: PathBuf, key: String, expected: &'static str },
    #[error("{path}: tensor `{tensor}` is missing")]
    MissingTensor { path: PathBuf, tensor: String },
    #[error("{path}: tensor `{tensor}` has shape {actual:?}, expected {expected:?}")]
    TensorShape { path: PathBuf, tensor: String, actual: Vec<usize>, expected: Vec<usize> },
    #[error("{path}: {what}")]
    Unsupported { path: PathBuf, what: String },
    #[error("{path}: cannot build the tokenizer: {what}")]
    Tokenizer { path: PathBuf, what: String },
    #[error("tokenization failed: {0}")]
    Encode(String),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the continuation `{0}` adds no token to its context")]
    EmptyContinuation(String),
    #[error("{what} has {tokens} tokens, more than the model's context length {max}")]
    ContextTooLong { what: String, tokens: usize, max: usize },
    #[error(
        "{path}: the model has no chat template (tokenizer.chat_template), so a chat prompt cannot be built"
    )]
    NoChatTemplate { path: PathBuf },
    #[error("{path}: rendering the chat template (tokenizer.chat_template) failed")]
    ChatTemplate {
        path: PathBuf,
        #[source]
        source: minijinja::Error,
    },
    #[error("a batch of {rows} rows for {sequences} sequences is empty or names a sequence it lacks")]
    Batch { rows: usize, sequences: usize },
    /// A batched decode step failed; every job in it fails with the step's message.
    #[error("a batched decode step failed: {0}")]
    Step(String),
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("cannot obtain the model file")]
    Source(#[from] super::source::SourceError),
    #[error("tensor computation failed")]
    Compute(#[from] candle_core::Error),
    #[error(transparent)]
    Setting(#[from] crate::env::BadVariable),
    #[error("the model server")]
    Remote(#[from] super::openai::RemoteError),
    #[error("cannot encode the chat messages as JSON")]
    ChatJson(#[source] serde_json::Error),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// The first line of a candle error: candle appends a backtrace when `RUST_BACKTRACE` is set,
/// which belongs in no user-facing message.
pub fn candle_reason(err: &candle_core::Error) -> String {
    err.to_string().lines().next().unwrap_or_default().to_string()
}

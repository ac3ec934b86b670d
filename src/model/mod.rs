//! The inference core: one local model that generates text and scores continuations.
//!
//! Everything that talks to a model (code repair, HumanEval, MMLU, ...) goes through the
//! [`LanguageModel`] trait, so an OpenAI-compatible backend can be added beside the local
//! candle engine without touching its callers.

mod attention;
pub mod batch;
pub mod chat;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod kernels;
pub mod openai;
pub mod quantize;
pub mod sampling;
pub mod source;
mod team;
pub mod tokenizer;
pub mod transformer;

use serde::{Deserialize, Serialize};

pub use engine::{Engine, PositionLogprob};
pub use error::ModelError;
pub use sampling::Sampling;
pub use source::DEFAULT_MODEL;

/// One message of a chat prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// What the model is asked to continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    /// Raw text, tokenized as is (BOS added only if the model's metadata asks for it).
    Text(String),
    /// Messages rendered through the model's chat template, with the generation prompt added.
    Chat(Vec<ChatMessage>),
    /// Token ids, read as they are (nothing added): a client that tokenized the text itself,
    /// as lm-evaluation-harness does.
    Tokens(Vec<u32>),
}

/// A request for one or more sampled continuations of one prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Generation ends before the first occurrence of any of these strings.
    pub stop: Vec<String>,
    /// Number of sequences; they share the prompt's KV cache. Sequence `i` samples with
    /// seed `sampling.seed + i`, so one sequence's text does not depend on `n`.
    pub n: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model produced an end-of-sequence token.
    Eos,
    /// A stop string was produced (the text ends before it).
    Stop,
    /// `max_tokens` was reached.
    Length,
}

/// One generated sequence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
}

/// The result of a [`GenerateRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerateOutput {
    /// The exact text the model saw (after chat templating).
    pub prompt_text: String,
    pub prompt_tokens: usize,
    pub sequences: Vec<Generation>,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
}

/// Log-likelihood of `continuation` given `context`. An empty context scores the continuation
/// as a whole document: every token after the model's BOS, or, for a model without one, every
/// token after the first (which nothing predicts). Every backend follows that rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScoreRequest {
    pub context: String,
    pub continuation: String,
    /// Which tokens are the continuation's when one spans the two texts.
    #[serde(default)]
    pub boundary: Boundary,
}

impl ScoreRequest {
    /// A request with the default boundary rule (lm-evaluation-harness's).
    pub fn new(context: impl Into<String>, continuation: impl Into<String>) -> Self {
        Self { context: context.into(), continuation: continuation.into(), boundary: Boundary::default() }
    }
}

/// Where a scored continuation's tokens begin. The two rules differ only where a token spans
/// the end of the context and the start of the continuation (see the README's "Agreement with
/// lm-evaluation-harness" for a worked example).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Boundary {
    /// lm-evaluation-harness's: the context's trailing whitespace moves to the continuation,
    /// the context is encoded alone, and the continuation is the tokens of context +
    /// continuation after as many as the context has. The model reads the context's own
    /// tokens, then those.
    #[default]
    LmEval,
    /// llama.cpp-based harnesses': the continuation starts at the first token where the tokens
    /// of context + continuation differ from the context's; the model reads context +
    /// continuation as one encoding.
    FirstDifference,
}

impl Boundary {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LmEval => "lm-eval",
            Self::FirstDifference => "first-difference",
        }
    }

    /// `lm-eval` or `first-difference`.
    pub fn parse_name(text: &str) -> Result<Self, String> {
        [Self::LmEval, Self::FirstDifference]
            .into_iter()
            .find(|b| b.as_str() == text)
            .ok_or_else(|| format!("expected lm-eval or first-difference, not `{text}`"))
    }

    /// The tokens the model reads (context's, then continuation's) and how many of them are
    /// the context's; `encode` turns a text into tokens as a prompt (BOS included).
    pub fn split<T: Clone + PartialEq, E>(
        self,
        context: &str,
        continuation: &str,
        encode: impl Fn(&str) -> Result<Vec<T>, E>,
    ) -> Result<(Vec<T>, usize), E> {
        match self {
            Self::LmEval => {
                // Python's `str.rstrip()`: every trailing whitespace character.
                let kept = context.trim_end();
                let moved = format!("{}{continuation}", &context[kept.len()..]);
                let context_tokens = encode(kept)?;
                let whole = encode(&format!("{kept}{moved}"))?;
                let context_len = context_tokens.len();
                let mut tokens = context_tokens;
                tokens.extend(whole.into_iter().skip(context_len));
                Ok((tokens, context_len))
            }
            Self::FirstDifference => {
                let context_tokens = encode(context)?;
                let whole = encode(&format!("{context}{continuation}"))?;
                let context_len = context_tokens.iter().zip(&whole).take_while(|(a, b)| a == b).count();
                Ok((whole, context_len))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub id: u32,
    pub text: String,
    pub logprob: f64,
    /// The whole next-token distribution at this position, summarized; only a backend that
    /// sees every logit (the local engine) has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moments: Option<LogprobMoments>,
}

/// Mean and standard deviation of `log p(z)` over the next-token distribution `p` at one
/// position (Min-K%++'s normalizers).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogprobMoments {
    pub mean: f64,
    pub std: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreOutput {
    /// The continuation's tokens: those of context+continuation after the context's.
    pub tokens: Vec<TokenLogprob>,
    pub sum_logprob: f64,
    /// Whether every continuation token is the argmax at its position.
    pub is_greedy: bool,
}

/// What is known about a loaded model, recorded in every manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The source as the user gave it (path, `hf:...`, `pip:...`).
    pub source: String,
    pub path: std::path::PathBuf,
    /// The weights file's hash; for a served model, what stands for it (see
    /// `openai::served_identity`).
    pub sha256: String,
    pub architecture: String,
    pub name: Option<String>,
    pub parameters: u64,
    /// Quantization of the bulk of the weights (e.g. `Q4_1`).
    pub quantization: String,
    pub context_length: usize,
    pub vocab_size: usize,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
    /// A served model (`openai:URL`): the backend, URL, model id and what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<serde_json::Value>,
}

/// The inference core's interface. Implementations must be deterministic: the same request
/// gives the same output on every run.
pub trait LanguageModel: Send {
    fn info(&self) -> &ModelInfo;
    fn generate(&mut self, request: &GenerateRequest) -> error::Result<GenerateOutput>;
    /// Generates for several requests, outputs in request order. A backend may run them
    /// together (batched decoding, concurrent HTTP requests); each output is what
    /// [`LanguageModel::generate`] gives for that request alone.
    fn generate_many(&mut self, requests: &[GenerateRequest]) -> Vec<error::Result<GenerateOutput>> {
        requests.iter().map(|r| self.generate(r)).collect()
    }
    /// Scores each request; requests sharing a context prefix reuse its KV cache.
    fn score(&mut self, requests: &[ScoreRequest]) -> error::Result<Vec<ScoreOutput>>;
    /// Renders chat messages through the model's template (with the generation prompt).
    fn render_chat(&self, messages: &[ChatMessage]) -> error::Result<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Greedy longest match over a small vocabulary, so that a merge across the context's end
    /// can be arranged: `ab` alone is `a b`, but `abc` is `a bc`.
    fn encode(text: &str) -> Result<Vec<&'static str>, String> {
        const VOCAB: [&str; 6] = [" c", "bc", "a", "b", "c", " "];
        let mut rest = text;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let piece = VOCAB
                .iter()
                .filter(|v| rest.starts_with(**v))
                .max_by_key(|v| v.len())
                .ok_or(format!("no token for {rest:?}"))?;
            out.push(*piece);
            rest = &rest[piece.len()..];
        }
        Ok(out)
    }

    #[test]
    fn lm_eval_moves_the_contexts_trailing_whitespace_and_keeps_its_own_tokens() {
        // The space moves to the continuation: the context is `a`, the continuation ` c`.
        let (tokens, context_len) = Boundary::LmEval.split("a ", "c", encode).unwrap();
        assert_eq!((tokens, context_len), (vec!["a", " c"], 1));
        // A merge across the end: the model reads the context's own `a b`, and the
        // continuation is what follows as many tokens of `abc` (`a bc`) as the context has:
        // nothing. First-difference scores `bc` after `a` instead.
        assert_eq!(Boundary::LmEval.split("ab", "c", encode).unwrap(), (vec!["a", "b"], 2));
        assert_eq!(Boundary::FirstDifference.split("ab", "c", encode).unwrap(), (vec!["a", "bc"], 1));
        // Where no token spans the end, both rules agree.
        for boundary in [Boundary::LmEval, Boundary::FirstDifference] {
            assert_eq!(boundary.split("a", " c", encode).unwrap(), (vec!["a", " c"], 1));
        }
    }

    #[test]
    fn the_rule_names_parse_back() {
        for boundary in [Boundary::LmEval, Boundary::FirstDifference] {
            assert_eq!(Boundary::parse_name(boundary.as_str()), Ok(boundary));
        }
        assert!(Boundary::parse_name("last").unwrap_err().contains("lm-eval or first-difference"));
    }
}

//! The local engine: a GGUF model, its tokenizer and chat template behind [`LanguageModel`].

use std::path::Path;
use std::time::Instant;

use candle_core::Tensor;

use super::batch::{BatchEvent, SequenceState};
use super::chat::ChatTemplate;
use super::error::{ModelError, Result};
use super::gguf::GgufFile;
use super::sampling::argmax;
use super::source;
use super::tokenizer::TextTokenizer;
use super::transformer::{Logits, Transformer};
use super::{
    ChatMessage, FinishReason, GenerateOutput, GenerateRequest, LanguageModel, LogprobMoments, ModelInfo,
    Prompt, ScoreOutput, ScoreRequest, TokenLogprob,
};

/// Log-probability of the token at one position, given all tokens before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PositionLogprob {
    /// The token that actually follows.
    pub id: u32,
    /// `log p(id | tokens before)`, from a float64 log-softmax of the float32 logits.
    pub logprob: f64,
    /// The model's most likely token at this position (ties to the lowest id).
    pub argmax: u32,
    /// `log p(argmax | tokens before)`.
    pub argmax_logprob: f64,
}

/// A loaded GGUF model ready to generate and score.
pub struct Engine {
    info: ModelInfo,
    model: Transformer,
    tokenizer: TextTokenizer,
    chat: Option<ChatTemplate>,
    /// Sequences [`LanguageModel::generate_many`] decodes together.
    max_batch: usize,
    /// The KV cache of the last sequence scored and its tokens: a later call whose requests
    /// share its prefix (the same few-shot examples, another variant of the same question)
    /// starts from there. Reuse gives the same bits as computing again (each position's keys
    /// and values depend on the positions before it only), so results do not depend on what
    /// was scored before.
    score_cache: std::sync::Mutex<Option<(super::attention::KvCache, Vec<u32>)>>,
}

/// `log_softmax(row)[id]` in float64.
fn log_softmax_at(row: &[f32], id: u32) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row[id as usize] as f64 - max - sum.ln()
}

/// The mean and standard deviation of `log p(z)` with `z` drawn from the row's own
/// distribution (float64 throughout): what Min-K%++ normalizes a token's log-probability by.
fn logprob_moments(row: &[f32]) -> LogprobMoments {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    let (mut mean, mut square) = (0.0f64, 0.0f64);
    for &v in row {
        let logp = v as f64 - lse;
        let p = logp.exp();
        mean += p * logp;
        square += p * logp * logp;
    }
    LogprobMoments { mean, std: (square - mean * mean).max(0.0).sqrt() }
}

/// Rows of a `[1, t, vocab]` logits tensor.
pub(super) fn logit_rows(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
    Ok(logits.squeeze(0)?.to_vec2::<f32>()?)
}

impl Engine {
    /// Loads a model from a source: a local path, `hf:OWNER/REPO/FILE` or
    /// `pip:PACKAGE/PATH-IN-WHEEL` (see [`source::resolve`]).
    pub fn load(source: &str) -> Result<Self> {
        let resolved = source::resolve(source)?;
        Self::from_resolved(&resolved.path, source, resolved.sha256)
    }

    /// Loads the GGUF file at `path`; `source` is recorded in [`ModelInfo::source`].
    pub fn from_path(path: &Path, source: &str) -> Result<Self> {
        Self::from_resolved(path, source, None)
    }

    fn from_resolved(path: &Path, source: &str, sha256: Option<String>) -> Result<Self> {
        let started = Instant::now();
        // candle's ops run on rayon's global pool, and our kernels' team takes its size from
        // it: size it once from REPAIRBENCH_THREADS (an error only means it was already built).
        let threads = crate::env::threads()?;
        super::kernels::KernelPath::chosen()?;
        let _ = rayon::ThreadPoolBuilder::new().num_threads(threads).build_global();
        let mut file = GgufFile::open(path)?;
        let config = file.config()?;
        let tokenizer = TextTokenizer::load(&file)?;
        let model = Transformer::load(&mut file)?;
        let chat_template = file.get_str("tokenizer.chat_template").map(str::to_string);
        let chat = match &chat_template {
            Some(t) => Some(ChatTemplate::new(
                t,
                path.to_path_buf(),
                tokenizer.bos_token.as_deref(),
                tokenizer.eos_token.as_deref(),
            )?),
            None => None,
        };
        let sha256 = match sha256 {
            Some(s) => s,
            None => source::sha256_file(path)
                .map_err(|source| ModelError::Open { path: path.to_path_buf(), source })?,
        };
        let info = ModelInfo {
            source: source.to_string(),
            path: path.to_path_buf(),
            sha256,
            architecture: config.architecture_name.clone(),
            name: file.get_str("general.name").map(str::to_string),
            parameters: file.parameter_count(),
            quantization: file.dominant_quantization(),
            context_length: config.context_length,
            vocab_size: config.vocab_size,
            bos_token: tokenizer.bos_token.clone(),
            eos_token: tokenizer.eos_token.clone(),
            add_bos: tokenizer.add_bos,
            chat_template,
            served: None,
        };
        tracing::info!(path = %path.display(), secs = started.elapsed().as_secs_f64(), "model loaded");
        Ok(Self {
            info,
            model,
            tokenizer,
            chat,
            max_batch: super::batch::DEFAULT_BATCH,
            score_cache: std::sync::Mutex::new(None),
        })
    }

    /// Sets how many sequences [`LanguageModel::generate_many`] decodes together.
    pub fn set_max_batch(&mut self, max_batch: usize) {
        self.max_batch = max_batch.max(1);
    }

    /// Writes the model's tokenizer as Hugging Face's files into `dir` (see
    /// [`TextTokenizer::export`]), with the model's chat template and context length.
    pub fn export_tokenizer(&self, dir: &std::path::Path) -> Result<()> {
        self.tokenizer.export(dir, self.info.chat_template.as_deref(), self.info.context_length)
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The forward pass, for callers (benchmarks) that drive it directly.
    pub fn transformer(&self) -> &Transformer {
        &self.model
    }

    fn check_ids(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.model.config.vocab_size;
        match tokens.iter().find(|&&t| t as usize >= vocab) {
            Some(&id) => Err(ModelError::TokenOutOfRange { id, vocab }),
            None => Ok(()),
        }
    }

    fn check_length(&self, what: &str, tokens: usize) -> Result<()> {
        let max = self.model.config.context_length;
        if tokens > max {
            return Err(ModelError::ContextTooLong { what: what.to_string(), tokens, max });
        }
        Ok(())
    }

    /// Log-probability of each token after the first given the tokens before it, computed by
    /// feeding `tokens` in chunks of `chunk` tokens (`usize::MAX`: one pass; 1: token by token).
    /// Entry `i` is about `tokens[i + 1]`. This is what a fidelity check compares with
    /// llama.cpp's per-token log-probs.
    pub fn logprobs_for_tokens(&self, tokens: &[u32], chunk: usize) -> Result<Vec<PositionLogprob>> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        self.check_ids(tokens)?;
        self.check_length("the token sequence", tokens.len())?;
        let mut cache = self.model.new_cache(tokens.len());
        let mut out = Vec::with_capacity(tokens.len() - 1);
        let inputs = &tokens[..tokens.len() - 1];
        for piece in inputs.chunks(chunk.max(1)) {
            let start = cache.len();
            let rows = logit_rows(&self.model.forward(piece, &mut cache, Logits::All)?)?;
            for (i, row) in rows.iter().enumerate() {
                let id = tokens[start + i + 1];
                let best = argmax(row);
                out.push(PositionLogprob {
                    id,
                    logprob: log_softmax_at(row, id),
                    argmax: best,
                    argmax_logprob: log_softmax_at(row, best),
                });
            }
        }
        Ok(out)
    }

    /// Raw logits `[position][vocab]` for every position of `tokens`, in one pass.
    pub fn logits_for_tokens(&self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        self.check_ids(tokens)?;
        self.check_length("the token sequence", tokens.len())?;
        let mut cache = self.model.new_cache(tokens.len());
        logit_rows(&self.model.forward(tokens, &mut cache, Logits::All)?)
    }

    /// The prompt's text (after chat templating) and its tokens.
    pub fn prompt_tokens(&self, prompt: &Prompt) -> Result<(String, Vec<u32>)> {
        let text = match prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Chat(messages) => self.render_chat_text(messages)?,
            Prompt::Tokens(ids) => {
                if ids.is_empty() {
                    return Err(ModelError::EmptyPrompt);
                }
                self.check_ids(ids)?;
                return Ok((self.tokenizer.decode(ids)?, ids.clone()));
            }
        };
        if text.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let ids = self.tokenizer.encode_prompt(&text)?;
        if ids.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        Ok((text, ids))
    }

    fn render_chat_text(&self, messages: &[ChatMessage]) -> Result<String> {
        match &self.chat {
            Some(t) => t.render(messages),
            None => Err(ModelError::NoChatTemplate { path: self.info.path.clone() }),
        }
    }

    /// Generates `request.n` sequences; see [`GenerateRequest`].
    pub fn generate_text(&self, request: &GenerateRequest) -> Result<GenerateOutput> {
        self.generate_text_with(request, &mut |_, _| {})
    }

    /// [`Self::generate_text`], calling `on_text(sequence, text so far)` after every token (a
    /// server streams from it).
    pub fn generate_text_with(
        &self,
        request: &GenerateRequest,
        on_text: &mut dyn FnMut(usize, &str),
    ) -> Result<GenerateOutput> {
        let mut result = None;
        let mut source = std::iter::once((0, request.clone()));
        self.generate_continuous(request.n, &mut source, &mut |event| match event {
            BatchEvent::Text { seq, text, .. } => on_text(seq, text),
            BatchEvent::Done { result: r, .. } => result = Some(r),
        });
        result.expect("the job reports once")
    }

    /// Records a sampled token and decides whether the sequence ends.
    pub(super) fn push_token(
        &self,
        s: &mut SequenceState,
        token: u32,
        stop: &[String],
        max_new: usize,
    ) -> Result<()> {
        if self.tokenizer.stop_ids.contains(&token) {
            s.tokens.push(token);
            s.finish = Some(FinishReason::Eos);
            return Ok(());
        }
        s.tokens.push(token);
        s.text = self.tokenizer.decode(&s.tokens)?;
        if let Some(cut) = stop.iter().filter(|x| !x.is_empty()).filter_map(|x| s.text.find(x.as_str())).min()
        {
            s.text.truncate(cut);
            s.finish = Some(FinishReason::Stop);
        } else if s.tokens.len() >= max_new {
            s.finish = Some(FinishReason::Length);
        }
        Ok(())
    }

    /// Scores requests; those sharing a token prefix reuse its KV cache (the cache is rewound
    /// to the shared prefix instead of recomputed).
    pub fn score_requests(&self, requests: &[ScoreRequest]) -> Result<Vec<ScoreOutput>> {
        struct Item {
            tokens: Vec<u32>,
            /// Tokens belonging to the context.
            context_len: usize,
        }
        let mut items = Vec::with_capacity(requests.len());
        for r in requests {
            let (full, context_len) =
                r.boundary.split(&r.context, &r.continuation, |text| self.tokenizer.encode_prompt(text))?;
            // No context token (an empty context, no BOS): the text is scored as a document,
            // from its second token, since nothing predicts the first.
            let context_len = context_len.max(1);
            if context_len >= full.len() {
                return Err(ModelError::EmptyContinuation(r.continuation.clone()));
            }
            self.check_length("context + continuation", full.len())?;
            items.push(Item { tokens: full, context_len });
        }
        // Neighbours in token order share the longest prefixes.
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|&a, &b| items[a].tokens.cmp(&items[b].tokens));
        let capacity = items.iter().map(|i| i.tokens.len()).max().unwrap_or(1);
        let kept = self.score_cache.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (mut cache, mut cached) = match kept {
            Some((cache, tokens)) if cache.capacity() >= capacity => (cache, tokens),
            _ => (self.model.new_cache(capacity), Vec::new()),
        };
        let mut results: Vec<Option<ScoreOutput>> = vec![None; items.len()];
        for idx in order {
            let item = &items[idx];
            let shared = cached.iter().zip(&item.tokens).take_while(|(a, b)| a == b).count();
            // The logits at the last context position are needed, so that position is rerun.
            let reuse = shared.min(item.context_len - 1);
            cache.truncate(reuse);
            let inputs = &item.tokens[reuse..item.tokens.len() - 1];
            let rows = logit_rows(&self.model.forward(inputs, &mut cache, Logits::All)?)?;
            cached.truncate(reuse);
            cached.extend_from_slice(inputs);
            let mut tokens = Vec::new();
            let mut is_greedy = true;
            for pos in item.context_len..item.tokens.len() {
                let id = item.tokens[pos];
                let row = &rows[pos - 1 - reuse];
                is_greedy &= argmax(row) == id;
                tokens.push(TokenLogprob {
                    id,
                    text: self.tokenizer.decode(&[id])?,
                    logprob: log_softmax_at(row, id),
                    moments: Some(logprob_moments(row)),
                });
            }
            let sum_logprob = tokens.iter().map(|t| t.logprob).sum();
            results[idx] = Some(ScoreOutput { tokens, sum_logprob, is_greedy });
        }
        *self.score_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((cache, cached));
        Ok(results.into_iter().map(|r| r.expect("every request scored")).collect())
    }
}

impl LanguageModel for Engine {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateOutput> {
        self.generate_text(request)
    }

    fn generate_many(&mut self, requests: &[GenerateRequest]) -> Vec<Result<GenerateOutput>> {
        self.generate_batched(requests, self.max_batch)
    }

    fn score(&mut self, requests: &[ScoreRequest]) -> Result<Vec<ScoreOutput>> {
        self.score_requests(requests)
    }

    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        self.render_chat_text(messages)
    }
}

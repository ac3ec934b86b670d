//! The OpenAI-compatible endpoints: requests, responses and errors in OpenAI's shapes.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::batcher::{Batcher, JobEvent};
use super::Served;
use crate::model::{
    ChatMessage, Engine, FinishReason, GenerateRequest, Generation, LanguageModel, ModelError, Prompt,
    Sampling,
};

/// An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}`.
pub struct ApiError {
    status: StatusCode,
    message: String,
    code: Option<&'static str>,
    param: Option<&'static str>,
}

impl ApiError {
    fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), code: None, param }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = if self.status.is_client_error() { "invalid_request_error" } else { "server_error" };
        let body =
            json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}});
        (self.status, Json(body)).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::invalid(format!("the request body is not the JSON expected: {}", rejection.body_text()), None)
    }
}

impl From<ModelError> for ApiError {
    fn from(error: ModelError) -> Self {
        match error {
            ModelError::ContextTooLong { what, tokens, max } => Self {
                status: StatusCode::BAD_REQUEST,
                message: format!(
                    "This model's maximum context length is {max} tokens; {what} needs {tokens}. Shorten the prompt or lower max_tokens."
                ),
                code: Some("context_length_exceeded"),
                param: None,
            },
            e @ (ModelError::EmptyPrompt | ModelError::NoChatTemplate { .. } | ModelError::Encode(_)) => {
                Self::invalid(e.to_string(), None)
            }
            // A prompt of token ids the client chose.
            e @ ModelError::TokenOutOfRange { .. } => Self::invalid(e.to_string(), Some("prompt")),
            e => Self {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: crate::error_chain(&e),
                code: None,
                param: None,
            },
        }
    }
}

pub async fn not_found() -> ApiError {
    ApiError { status: StatusCode::NOT_FOUND, message: "no such endpoint".into(), code: None, param: None }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(one) => vec![one],
            Self::Many(many) => many,
        }
    }
}

/// What both endpoints share: the model, sampling and limits.
#[derive(Debug, Deserialize)]
struct Common {
    model: Option<String>,
    max_tokens: Option<usize>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    n: Option<usize>,
    seed: Option<u64>,
    stop: Option<OneOrMany>,
    #[serde(default)]
    stream: bool,
}

impl Common {
    fn check(&self, served: &Served) -> Result<(), ApiError> {
        if let Some(model) = self.model.as_deref().filter(|m| *m != served.id) {
            return Err(ApiError {
                status: StatusCode::NOT_FOUND,
                message: format!("The model `{model}` does not exist; this server serves `{}`.", served.id),
                code: Some("model_not_found"),
                param: Some("model"),
            });
        }
        if !(1..=16).contains(&self.n.unwrap_or(1)) {
            return Err(ApiError::invalid("n must be between 1 and 16", Some("n")));
        }
        if self.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return Err(ApiError::invalid("temperature must be between 0 and 2", Some("temperature")));
        }
        if self.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
            return Err(ApiError::invalid("top_p must be in (0, 1]", Some("top_p")));
        }
        Ok(())
    }

    fn request(&self, prompt: Prompt, default_max: usize) -> GenerateRequest {
        GenerateRequest {
            prompt,
            max_tokens: self.max_tokens.unwrap_or(default_max),
            sampling: Sampling {
                temperature: self.temperature.unwrap_or(1.0),
                top_k: None,
                top_p: self.top_p.filter(|p| *p < 1.0),
                seed: self.seed.unwrap_or(0),
            },
            stop: self.stop.clone().map(OneOrMany::into_vec).unwrap_or_default(),
            n: self.n.unwrap_or(1),
        }
    }
}

/// `/v1/completions`' prompt: text, texts, token ids, or lists of token ids (OpenAI's four
/// forms; lm-evaluation-harness sends ids it tokenized itself).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum PromptInput {
    Text(OneOrMany),
    Tokens(Vec<u32>),
    ManyTokens(Vec<Vec<u32>>),
}

impl PromptInput {
    fn into_vec(self) -> Vec<Prompt> {
        match self {
            Self::Text(texts) => texts.into_vec().into_iter().map(Prompt::Text).collect(),
            Self::Tokens(ids) => vec![Prompt::Tokens(ids)],
            Self::ManyTokens(many) => many.into_iter().map(Prompt::Tokens).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    prompt: PromptInput,
    #[serde(default)]
    echo: bool,
    logprobs: Option<usize>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    messages: Vec<ChatMessage>,
    max_completion_tokens: Option<usize>,
    #[serde(flatten)]
    common: Common,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id(prefix: &str) -> String {
    format!("{prefix}-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn finish_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Length => "length",
        FinishReason::Eos | FinishReason::Stop => "stop",
    }
}

/// Runs `work` on the engine off the async threads.
async fn with_engine<T: Send + 'static>(
    served: &Arc<Served>,
    work: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let engine = served.engine.clone();
    tokio::task::spawn_blocking(move || work(&engine)).await.map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("the engine failed: {e}"),
        code: None,
        param: None,
    })?
}

pub async fn models(State(served): State<Arc<Served>>) -> Json<Value> {
    let info = served.engine.info().clone();
    Json(json!({"object": "list", "data": [{
        "id": served.id, "object": "model", "created": 0, "owned_by": "repairbench",
        "context_length": info.context_length,
        "meta": {
            "n_ctx_train": info.context_length, "n_vocab": info.vocab_size, "n_params": info.parameters,
            "architecture": info.architecture, "quantization": info.quantization, "sha256": info.sha256,
        },
    }]}))
}

/// The tokens' text pieces and character offsets into the text they decode to.
fn pieces(engine: &Engine, ids: &[u32]) -> Result<(Vec<String>, Vec<usize>), ModelError> {
    let tokenizer = engine.tokenizer();
    // A BOS the tokenizer added is not part of the prompt's text.
    let skip = usize::from(tokenizer.add_bos && ids.first().is_some_and(|id| Some(*id) == tokenizer.bos_id));
    let lead = tokenizer.decode(&ids[..skip])?.chars().count();
    let mut texts = Vec::with_capacity(ids.len());
    let mut offsets = Vec::with_capacity(ids.len());
    for i in 0..ids.len() {
        texts.push(tokenizer.decode(&ids[i..=i])?);
        offsets.push(tokenizer.decode(&ids[..i])?.chars().count().saturating_sub(lead));
    }
    Ok((texts, offsets))
}

/// OpenAI's legacy `logprobs` block for the prompt (when echoed) and the generated tokens.
fn logprobs_block(
    engine: &Engine,
    prompt: &[u32],
    generated: &[u32],
    echo: bool,
) -> Result<Value, ModelError> {
    let all: Vec<u32> = prompt.iter().chain(generated).copied().collect();
    let positions = if all.len() > 1 { engine.logprobs_for_tokens(&all, usize::MAX)? } else { Vec::new() };
    let (texts, offsets) = pieces(engine, &all)?;
    let first = if echo { 0 } else { prompt.len() };
    let (mut tokens, mut values, mut tops, mut starts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let base = if echo { 0 } else { offsets.get(prompt.len()).copied().unwrap_or(0) };
    for i in first..all.len() {
        tokens.push(json!(texts[i]));
        starts.push(json!(offsets[i] - base.min(offsets[i])));
        match i.checked_sub(1).and_then(|p| positions.get(p)) {
            Some(p) => {
                values.push(json!(p.logprob));
                let best = engine.tokenizer().decode(&[p.argmax])?;
                tops.push(json!({ best: p.argmax_logprob }));
            }
            None => {
                values.push(Value::Null);
                tops.push(Value::Null);
            }
        }
    }
    Ok(json!({"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": starts}))
}

/// Generated tokens that are part of the text (not the end-of-sequence token).
fn text_tokens<'a>(engine: &Engine, generation: &'a Generation) -> &'a [u32] {
    match generation.tokens.split_last() {
        Some((last, rest)) if engine.tokenizer().stop_ids.contains(last) => rest,
        _ => &generation.tokens,
    }
}

pub async fn completions(
    State(served): State<Arc<Served>>,
    body: Result<Json<CompletionRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    request.common.check(&served)?;
    if request.common.stream {
        return Err(ApiError::invalid("stream is supported on /v1/chat/completions only", Some("stream")));
    }
    if request.logprobs.is_some_and(|k| k > 1) {
        return Err(ApiError::invalid(
            "logprobs: this server returns the top 1 alternative at most",
            Some("logprobs"),
        ));
    }
    let prompts = request.prompt.clone().into_vec();
    if prompts.is_empty() {
        return Err(ApiError::invalid("prompt is empty", Some("prompt")));
    }
    let mut prepared = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let generate = request.common.request(prompt, 16);
        let (prompt, ids) = served.engine.prompt_tokens(&generate.prompt)?;
        let max = served.engine.info().context_length;
        if ids.len() + generate.max_tokens > max {
            return Err(ModelError::ContextTooLong {
                what: format!("the prompt ({} tokens) with max_tokens {}", ids.len(), generate.max_tokens),
                tokens: ids.len() + generate.max_tokens,
                max,
            }
            .into());
        }
        prepared.push((prompt, ids, generate));
    }
    // Every prompt's generation joins the batch at once.
    let pending: Vec<_> = prepared
        .iter()
        .map(|(_, _, generate)| {
            (generate.max_tokens > 0).then(|| served.batcher.submit(generate.clone(), false))
        })
        .collect();
    let mut generated = Vec::with_capacity(prepared.len());
    for ((prompt, ids, generate), events) in prepared.into_iter().zip(pending) {
        let generations = match events {
            Some(events) => Batcher::finished(events).await?.sequences,
            None => {
                let empty =
                    Generation { text: String::new(), tokens: Vec::new(), finish: FinishReason::Length };
                vec![empty; generate.n]
            }
        };
        generated.push((prompt, ids, generations));
    }
    let id = served.id.clone();
    // Log-probabilities are a forward over prompt and generation, off the async threads.
    let result = with_engine(&served, move |engine| {
        let (mut choices, mut prompt_tokens, mut completion_tokens) = (Vec::new(), 0, 0);
        for (prompt, ids, generations) in generated {
            prompt_tokens += ids.len();
            for generation in generations {
                completion_tokens += text_tokens(engine, &generation).len();
                // Every generated token has its log-probability, an end-of-sequence one too:
                // clients that score an echoed prompt (lm-evaluation-harness) drop the last
                // entry as the generated one.
                let logprobs = match request.logprobs {
                    Some(_) => logprobs_block(engine, &ids, &generation.tokens, request.echo)?,
                    None => Value::Null,
                };
                let text = if request.echo {
                    format!("{prompt}{}", generation.text)
                } else {
                    generation.text.clone()
                };
                choices.push(json!({
                    "text": text, "index": choices.len(), "logprobs": logprobs,
                    "finish_reason": finish_reason(generation.finish),
                }));
            }
        }
        Ok(json!({
            "id": next_id("cmpl"), "object": "text_completion", "created": now(), "model": id,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }))
    })
    .await?;
    Ok(Json(result))
}

/// The part of `text` that can be sent now: not a prefix of a stop string still growing, and
/// not a half-decoded character.
fn settled(text: &str, stops: &[String]) -> usize {
    let mut end = text.trim_end_matches('\u{fffd}').len();
    for stop in stops.iter().filter(|s| !s.is_empty()) {
        for k in (1..stop.len()).rev() {
            if stop.is_char_boundary(k) && text[..end].ends_with(&stop[..k]) {
                end -= k;
                break;
            }
        }
    }
    end
}

pub async fn chat_completions(
    State(served): State<Arc<Served>>,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    request.common.check(&served)?;
    if request.messages.is_empty() {
        return Err(ApiError::invalid("messages is empty", Some("messages")));
    }
    let mut generate = request.common.request(Prompt::Chat(request.messages.clone()), usize::MAX);
    if let Some(max) = request.max_completion_tokens {
        generate.max_tokens = max;
    }
    let (id, created, model) = (next_id("chatcmpl"), now(), served.id.clone());
    if request.common.stream {
        if generate.n != 1 {
            return Err(ApiError::invalid("stream supports n = 1 only", Some("n")));
        }
        return Ok(stream_chat(&served, generate, id, created, model).await?.into_response());
    }
    let output = served.batcher.generate(generate).await?;
    let completion: usize = output.sequences.iter().map(|g| g.tokens.len()).sum();
    let choices: Vec<Value> = output
        .sequences
        .iter()
        .enumerate()
        .map(|(i, g)| {
            json!({"index": i, "message": {"role": "assistant", "content": g.text},
                   "logprobs": null, "finish_reason": finish_reason(g.finish)})
        })
        .collect();
    Ok(Json(json!({
        "id": id, "object": "chat.completion", "created": created, "model": model, "choices": choices,
        "usage": {"prompt_tokens": output.prompt_tokens, "completion_tokens": completion,
                  "total_tokens": output.prompt_tokens + completion},
    }))
    .into_response())
}

/// Server-sent events as the text grows: a role chunk, content deltas, a chunk with the
/// finish reason, then `[DONE]`. The prompt is checked before the stream starts, so a
/// prompt too long is still a 400.
async fn stream_chat(
    served: &Arc<Served>,
    generate: GenerateRequest,
    id: String,
    created: u64,
    model: String,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let checked = generate.prompt.clone();
    with_engine(served, move |engine| {
        let (_, ids) = engine.prompt_tokens(&checked)?;
        let max = engine.info().context_length;
        if ids.len() >= max {
            return Err(ModelError::ContextTooLong {
                what: "the prompt".into(),
                tokens: ids.len(),
                max: max - 1,
            }
            .into());
        }
        Ok(())
    })
    .await?;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let chunk = move |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let _ = sender.send(chunk(json!({"role": "assistant", "content": ""}), Value::Null));
    let stops = generate.stop.clone();
    let mut job = served.batcher.submit(generate, true);
    tokio::spawn(async move {
        let mut sent = 0usize;
        while let Some(event) = job.recv().await {
            match event {
                JobEvent::Text { text, .. } => {
                    let end = settled(&text, &stops);
                    if end > sent && text.is_char_boundary(sent) {
                        let _ = sender.send(chunk(json!({"content": &text[sent..end]}), Value::Null));
                        sent = end;
                    }
                }
                JobEvent::Done(Ok(output)) => {
                    let generation = &output.sequences[0];
                    let rest = generation.text.get(sent..).unwrap_or_default();
                    if !rest.is_empty() {
                        let _ = sender.send(chunk(json!({"content": rest}), Value::Null));
                    }
                    let _ = sender.send(chunk(json!({}), json!(finish_reason(generation.finish))));
                }
                JobEvent::Done(Err(e)) => {
                    let _ = sender
                        .send(json!({"error": {"message": crate::error_chain(&e), "type": "server_error"}}));
                }
            }
        }
    });
    let events = futures_util::stream::unfold((receiver, false), |(mut receiver, done)| async move {
        if done {
            return None;
        }
        match receiver.recv().await {
            Some(value) => Some((Ok(Event::default().data(value.to_string())), (receiver, false))),
            None => Some((Ok(Event::default().data("[DONE]")), (receiver, true))),
        }
    });
    Ok(Sse::new(events))
}

#[cfg(test)]
mod tests {
    #[test]
    fn streamed_text_holds_back_a_growing_stop_string_and_half_characters() {
        let stops = vec!["\nEND".to_owned()];
        assert_eq!(super::settled("def f():\n    return 1\nEN", &stops), "def f():\n    return 1".len());
        assert_eq!(super::settled("abc", &stops), 3);
        assert_eq!(super::settled("caf\u{fffd}", &[]), 3);
    }
}

//! A model behind an OpenAI-compatible API (vLLM, llama.cpp's server, a company gateway,
//! `repairbench serve`), selected with `--model openai:BASE_URL`.
//!
//! Chat prompts go to `/chat/completions`, raw text to `/completions`. Log-likelihoods come
//! from `/completions` with `echo` and `logprobs`, as lm-evaluation-harness's
//! local-completions asks for them: the prompt's own tokens with their log-probabilities and
//! character offsets. A server that refuses `echo` (llama.cpp's server does) but tokenizes text
//! (`/tokenize` beside `/v1`, as llama.cpp's server and vLLM have) is scored by forcing: for
//! each continuation token, the tokens before it are sent as the prompt with `max_tokens: 1`,
//! `logprobs` and a `logit_bias` that makes that token the one generated, and the server
//! reports its log-probability under the model's unbiased distribution. A server with neither
//! is refused with an error naming both capabilities. Sequence `i` of a request is asked for alone with seed `seed + i`, the local
//! engine's rule, so a sequence's text does not depend on `n`. Requests run `concurrency` at a
//! time; a 429 or 5xx is retried ([`crate::http`]); each request has a deadline.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    ChatMessage, FinishReason, GenerateOutput, GenerateRequest, Generation, LanguageModel, ModelError,
    ModelInfo, Prompt, ScoreOutput, ScoreRequest, TokenLogprob,
};
use crate::http::Secret;

/// How to reach the server.
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// The served model's id; default: the first of `/models`.
    pub served_model: Option<String>,
    pub api_key: Option<Secret>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Deadline of one request.
    pub timeout: Duration,
}

impl Default for RemoteSettings {
    fn default() -> Self {
        Self { served_model: None, api_key: None, concurrency: 4, timeout: Duration::from_secs(600) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{url}")]
    Transport {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("{url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("{url}: the response is not the JSON expected: {what}")]
    Shape { url: String, what: String },
    #[error(
        "{url}: the server does not return {capability}, which log-likelihood scoring needs (lm-evaluation-harness's local-completions needs it too)"
    )]
    MissingCapability { url: String, capability: &'static str },
    #[error("{url}: the server lists no model")]
    NoModel { url: String },
}

/// The server: its base URL, the HTTP agent and the key.
struct Connection {
    base: String,
    agent: ureq::Agent,
    api_key: Option<Secret>,
}

/// How log-likelihoods are obtained from this server (found on the first scoring call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scoring {
    /// `/completions` with `echo` and `logprobs`.
    Echo,
    /// `/tokenize`, then one forced token per `/completions` call.
    Forced,
}

/// A served model.
pub struct OpenAiModel {
    connection: Connection,
    model: String,
    concurrency: usize,
    info: ModelInfo,
    scoring: Option<Scoring>,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("base", &self.connection.base)
            .field("model", &self.model)
            .finish()
    }
}

impl OpenAiModel {
    /// Connects to `base` (`http://127.0.0.1:8080/v1`): lists its models, picks the served one
    /// and records what the server says about it.
    pub fn connect(base: &str, settings: RemoteSettings) -> Result<Self, RemoteError> {
        let base = base.trim_end_matches('/').to_owned();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(settings.timeout))
            .build()
            .into();
        let connection = Connection { base: base.clone(), agent, api_key: settings.api_key.clone() };
        let models = connection.call("/models", None)?;
        let listed: Vec<&Value> = models["data"].as_array().map(|d| d.iter().collect()).unwrap_or_default();
        let model = match &settings.served_model {
            Some(name) => name.clone(),
            None => listed
                .first()
                .and_then(|m| m["id"].as_str())
                .ok_or_else(|| RemoteError::NoModel { url: format!("{base}/models") })?
                .to_owned(),
        };
        let entry =
            listed.iter().find(|m| m["id"] == model.as_str()).copied().cloned().unwrap_or(Value::Null);
        // What servers put there differs: llama.cpp's `meta.n_ctx_train`, ours `context_length`,
        // vLLM's `max_model_len`.
        let context_length = ["/meta/n_ctx_train", "/context_length", "/max_model_len"]
            .iter()
            .find_map(|p| entry.pointer(p).and_then(Value::as_u64))
            .unwrap_or(0) as usize;
        let info = ModelInfo {
            source: format!("openai:{base}"),
            path: base.clone().into(),
            sha256: served_identity(&model, &entry),
            architecture: "served (OpenAI-compatible API)".into(),
            name: Some(model.clone()),
            parameters: entry.pointer("/meta/n_params").and_then(Value::as_u64).unwrap_or(0),
            quantization: "unknown".into(),
            context_length,
            vocab_size: entry.pointer("/meta/n_vocab").and_then(Value::as_u64).unwrap_or(0) as usize,
            bos_token: None,
            eos_token: None,
            add_bos: false,
            chat_template: None,
            served: Some(json!({"backend": "openai", "url": base, "model": model, "models": models})),
        };
        Ok(Self { connection, model, concurrency: settings.concurrency, info, scoring: None })
    }
}

/// What stands for a served model's weights in fingerprints: their hash when the server
/// reports it (`repairbench serve` does, as `meta.sha256`), else `served:` and the hash of the
/// model's id and what the server lists about it, less its `created` time (which some servers
/// set to now). Weights swapped under the same id and listing go unseen then; the manifest says
/// which it was.
fn served_identity(model: &str, entry: &Value) -> String {
    let reported = entry.pointer("/meta/sha256").and_then(Value::as_str);
    if let Some(hash) = reported.filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())) {
        return hash.to_ascii_lowercase();
    }
    let mut listed = entry.clone();
    if let Some(fields) = listed.as_object_mut() {
        fields.remove("created");
    }
    let described = json!({"id": model, "listed": listed});
    format!("served:{}", crate::digest::sha256_hex(described.to_string()))
}

impl Connection {
    /// GET `path` under the base URL, or POST `body` to it; the JSON answer.
    fn call(&self, path: &str, body: Option<&Value>) -> Result<Value, RemoteError> {
        self.call_url(format!("{}{path}", self.base), body)
    }

    /// The server's root: the base URL without its trailing `/v1`.
    fn root(&self) -> &str {
        self.base.strip_suffix("/v1").unwrap_or(&self.base)
    }

    fn call_url(&self, url: String, body: Option<&Value>) -> Result<Value, RemoteError> {
        let transport = |source| RemoteError::Transport { url: url.clone(), source: Box::new(source) };
        let mut response = crate::http::with_retries(&url, 5, || {
            let auth = self.api_key.as_ref().map(|k| format!("Bearer {}", k.expose()));
            match body {
                Some(body) => {
                    let mut request = self.agent.post(&url).header("Content-Type", "application/json");
                    if let Some(auth) = &auth {
                        request = request.header("Authorization", auth);
                    }
                    request.send(body.to_string().as_bytes())
                }
                None => {
                    let mut request = self.agent.get(&url);
                    if let Some(auth) = &auth {
                        request = request.header("Authorization", auth);
                    }
                    request.call()
                }
            }
        })
        .map_err(transport)?;
        let status = response.status().as_u16();
        let mut text = String::new();
        response
            .body_mut()
            .as_reader()
            .take(256 << 20)
            .read_to_string(&mut text)
            .map_err(|e| transport(ureq::Error::Io(e)))?;
        if !(200..300).contains(&status) {
            let body = text.trim().chars().take(400).collect();
            return Err(RemoteError::Status { url, status, body });
        }
        serde_json::from_str(&text).map_err(|e| RemoteError::Shape { url, what: e.to_string() })
    }
}

impl OpenAiModel {
    /// Runs `jobs` at most `concurrency` at a time, results in order.
    fn concurrently<T: Send, R: Send>(
        &self,
        jobs: Vec<T>,
        run: impl Fn(T) -> Result<R, RemoteError> + Sync,
    ) -> Vec<Result<R, RemoteError>> {
        let width = self.concurrency.max(1);
        let mut results: Vec<Option<Result<R, RemoteError>>> = (0..jobs.len()).map(|_| None).collect();
        let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>().into_iter());
        let slots = std::sync::Mutex::new(&mut results);
        std::thread::scope(|scope| {
            for _ in 0..width {
                scope.spawn(|| loop {
                    let Some((i, job)) = queue.lock().unwrap_or_else(|e| e.into_inner()).next() else {
                        break;
                    };
                    let result = run(job);
                    slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
                });
            }
        });
        results.into_iter().map(|r| r.expect("every job ran")).collect()
    }

    /// A request's output from its sequences' responses (sequence `i` sampled with seed+i).
    fn output(
        &self,
        request: &GenerateRequest,
        done: Vec<(Generation, Value)>,
        started: Instant,
    ) -> Result<GenerateOutput, ModelError> {
        let usage = |key: &str| done.iter().map(|(_, u)| u[key].as_u64().unwrap_or(0)).max().unwrap_or(0);
        let completion: u64 = done.iter().map(|(_, u)| u["completion_tokens"].as_u64().unwrap_or(0)).sum();
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        Ok(GenerateOutput {
            prompt_text: match &request.prompt {
                Prompt::Text(text) => text.clone(),
                Prompt::Chat(messages) => self.render_chat(messages)?,
                // The server alone knows the text of its token ids.
                Prompt::Tokens(_) => String::new(),
            },
            prompt_tokens: usage("prompt_tokens") as usize,
            sequences: done.into_iter().map(|(g, _)| g).collect(),
            prefill_tok_s: 0.0,
            decode_tok_s: completion as f64 / seconds,
        })
    }

    fn generate_one(&self, request: &GenerateRequest, seed: u64) -> Result<(Generation, Value), RemoteError> {
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens,
            "temperature": request.sampling.temperature,
            "seed": seed,
            "n": 1,
        });
        if let Some(top_p) = request.sampling.top_p {
            body["top_p"] = json!(top_p);
        }
        if let Some(top_k) = request.sampling.top_k {
            body["top_k"] = json!(top_k);
        }
        if !request.stop.is_empty() {
            body["stop"] = json!(request.stop);
        }
        let (path, pointer) = match &request.prompt {
            Prompt::Chat(messages) => {
                body["messages"] = json!(messages);
                ("/chat/completions", "/choices/0/message/content")
            }
            Prompt::Text(text) => {
                body["prompt"] = json!(text);
                ("/completions", "/choices/0/text")
            }
            Prompt::Tokens(ids) => {
                body["prompt"] = json!(ids);
                ("/completions", "/choices/0/text")
            }
        };
        let response = self.connection.call(path, Some(&body))?;
        let url = format!("{}{path}", self.connection.base);
        let text = response
            .pointer(pointer)
            .and_then(Value::as_str)
            .ok_or_else(|| RemoteError::Shape { url: url.clone(), what: format!("no {pointer}") })?
            .to_owned();
        // OpenAI's "stop" covers both an end-of-sequence token and a stop string: it is taken
        // for a stop string when the request had any.
        let finish = match response.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
            Some("length") => FinishReason::Length,
            _ if !request.stop.is_empty() => FinishReason::Stop,
            _ => FinishReason::Eos,
        };
        Ok((Generation { text, tokens: Vec::new(), finish }, response["usage"].clone()))
    }

    fn score_one(&self, request: &ScoreRequest) -> Result<ScoreOutput, RemoteError> {
        let url = format!("{}/completions", self.connection.base);
        let prompt = format!("{}{}", request.context, request.continuation);
        let body = json!({
            "model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "echo": true, "logprobs": 1,
        });
        let response = self.connection.call("/completions", Some(&body))?;
        let missing = |capability| RemoteError::MissingCapability { url: url.clone(), capability };
        let logprobs = response.pointer("/choices/0/logprobs").filter(|l| !l.is_null());
        let logprobs = logprobs.ok_or(missing("prompt log-probabilities (`echo` with `logprobs`)"))?;
        let field = |name: &str| logprobs[name].as_array().cloned();
        let (tokens, values, offsets) = match (field("tokens"), field("token_logprobs"), field("text_offset"))
        {
            (Some(t), Some(v), Some(o)) => (t, v, o),
            _ => return Err(missing("`tokens`, `token_logprobs` and `text_offset` of the echoed prompt")),
        };
        let tops = field("top_logprobs").unwrap_or_default();
        let (context_chars, prompt_chars) =
            (request.context.chars().count() as u64, prompt.chars().count() as u64);
        let mut out = ScoreOutput { tokens: Vec::new(), sum_logprob: 0.0, is_greedy: true };
        for (i, token) in tokens.iter().enumerate() {
            let offset = offsets.get(i).and_then(Value::as_u64).unwrap_or(u64::MAX);
            if offset < context_chars || offset >= prompt_chars {
                continue;
            }
            let Some(logprob) = values.get(i).and_then(Value::as_f64) else {
                // Nothing predicts the prompt's first token (a BOS token, or the text's own
                // first token for a model without one).
                if i == 0 {
                    continue;
                }
                return Err(missing("a log-probability for every echoed prompt token"));
            };
            let text = token.as_str().unwrap_or_default().to_owned();
            if let Some(top) = tops.get(i).and_then(Value::as_object) {
                let best = top.values().filter_map(Value::as_f64).fold(f64::NEG_INFINITY, f64::max);
                out.is_greedy &= top.contains_key(&text) || logprob >= best - 1e-6;
            }
            out.sum_logprob += logprob;
            out.tokens.push(TokenLogprob { id: 0, text, logprob, moments: None });
        }
        if out.tokens.is_empty() {
            return Err(missing("character offsets that place the continuation's tokens (`text_offset`)"));
        }
        Ok(out)
    }
}

impl OpenAiModel {
    /// The server's tokens for `text`, special tokens (BOS) added as for a text prompt.
    fn tokenize(&self, text: &str) -> Result<Vec<u64>, RemoteError> {
        let url = format!("{}/tokenize", self.connection.root());
        let body = json!({"content": text, "add_special": true});
        let response = self.connection.call_url(url.clone(), Some(&body))?;
        response["tokens"]
            .as_array()
            .and_then(|t| t.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
            .ok_or_else(|| RemoteError::Shape { url, what: "no `tokens` array of ids".into() })
    }

    /// Forced scoring (see the module's documentation): the continuation's tokens are told
    /// from the context's by the request's boundary rule, as the local engine does.
    fn score_forced(&self, request: &ScoreRequest) -> Result<ScoreOutput, RemoteError> {
        let url = format!("{}/completions", self.connection.base);
        let shape = |what: String| RemoteError::Shape { url: url.clone(), what };
        let (full, context_len) =
            request.boundary.split(&request.context, &request.continuation, |text| self.tokenize(text))?;
        let context_len = context_len.max(1);
        if context_len >= full.len() {
            return Err(shape(format!("the continuation {:?} adds no token", request.continuation)));
        }
        let mut out = ScoreOutput { tokens: Vec::new(), sum_logprob: 0.0, is_greedy: true };
        for pos in context_len..full.len() {
            let target = full[pos];
            let body = json!({
                "model": self.model, "prompt": &full[..pos], "max_tokens": 1, "temperature": 0,
                "logprobs": 1, "logit_bias": {target.to_string(): 100},
                // llama.cpp's server: evaluate the whole prompt in one batched pass. From its
                // prompt cache it would re-evaluate only the last token, alone, whose attention
                // it computes in f16: log-probs then depend on which request came first.
                "cache_prompt": false,
            });
            let response = self.connection.call("/completions", Some(&body))?;
            let logprobs = &response["choices"][0]["logprobs"];
            // llama.cpp's shape (`content: [{id, token, logprob, top_logprobs}]`) or OpenAI's
            // legacy one (`tokens`, `token_logprobs`, `top_logprobs: [{token: logprob}]`).
            let (id, text, logprob, best) = if let Some(first) = logprobs.pointer("/content/0") {
                let best = first.pointer("/top_logprobs/0/logprob").and_then(Value::as_f64);
                (
                    first["id"].as_u64(),
                    first["token"].as_str().map(str::to_owned),
                    first["logprob"].as_f64(),
                    best,
                )
            } else {
                let best = logprobs
                    .pointer("/top_logprobs/0")
                    .and_then(Value::as_object)
                    .map(|m| m.values().filter_map(Value::as_f64).fold(f64::NEG_INFINITY, f64::max));
                let text = logprobs.pointer("/tokens/0").and_then(Value::as_str).map(str::to_owned);
                (Some(target), text, logprobs.pointer("/token_logprobs/0").and_then(Value::as_f64), best)
            };
            let logprob = logprob.ok_or_else(|| shape("no log-probability for the forced token".into()))?;
            if id != Some(target) {
                return Err(shape(format!("logit_bias did not force token {target} (got {id:?})")));
            }
            out.is_greedy &= best.is_none_or(|b| logprob >= b - 1e-6);
            out.sum_logprob += logprob;
            out.tokens.push(TokenLogprob {
                id: target as u32,
                text: text.unwrap_or_default(),
                logprob,
                moments: None,
            });
        }
        Ok(out)
    }

    /// Which way this server scores: echo if it answers with prompt log-probabilities (then
    /// with the probe's own score), else forcing if it tokenizes, else an error naming both.
    fn scoring_mode(&self, probe: &ScoreRequest) -> Result<(Scoring, Option<ScoreOutput>), RemoteError> {
        let echo_refused = match self.score_one(probe) {
            Ok(scored) => return Ok((Scoring::Echo, Some(scored))),
            Err(e @ (RemoteError::Transport { .. } | RemoteError::NoModel { .. })) => return Err(e),
            Err(e) => e,
        };
        match self.tokenize("a") {
            Ok(_) => {
                tracing::info!(server = %self.connection.base, reason = %echo_refused, "scoring by forced tokens");
                Ok((Scoring::Forced, None))
            }
            Err(_) => Err(RemoteError::MissingCapability {
                url: format!("{}/completions", self.connection.base),
                capability: "prompt log-probabilities (`echo` with `logprobs`), nor a `/tokenize` endpoint for forced scoring",
            }),
        }
    }
}

impl LanguageModel for OpenAiModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateOutput, ModelError> {
        self.generate_many(std::slice::from_ref(request)).remove(0)
    }

    /// Every sequence of every request is one HTTP request; they run `concurrency` at a time.
    fn generate_many(&mut self, requests: &[GenerateRequest]) -> Vec<Result<GenerateOutput, ModelError>> {
        let started = Instant::now();
        let jobs: Vec<(usize, u64)> = requests
            .iter()
            .enumerate()
            .flat_map(|(r, req)| {
                (0..req.n.max(1) as u64).map(move |i| (r, req.sampling.seed.wrapping_add(i)))
            })
            .collect();
        let mut done = self.concurrently(jobs, |(r, seed)| self.generate_one(&requests[r], seed)).into_iter();
        requests
            .iter()
            .map(|request| {
                let sequences: Result<Vec<_>, RemoteError> = done.by_ref().take(request.n.max(1)).collect();
                self.output(request, sequences?, started)
            })
            .collect()
    }

    fn score(&mut self, requests: &[ScoreRequest]) -> Result<Vec<ScoreOutput>, ModelError> {
        let Some(first) = requests.first() else { return Ok(Vec::new()) };
        // The first call finds the mode; an echo probe's score is kept, not asked for again.
        let (mode, probed) = match self.scoring {
            Some(mode) => (mode, None),
            None => {
                let (mode, probed) = self.scoring_mode(first)?;
                self.scoring = Some(mode);
                if let Some(served) = self.info.served.as_mut() {
                    served["scoring"] = json!(match mode {
                        Scoring::Echo => "echo",
                        Scoring::Forced => "forced",
                    });
                }
                (mode, probed)
            }
        };
        let rest = if probed.is_some() { &requests[1..] } else { requests };
        let results = self.concurrently(rest.iter().collect(), |r| match mode {
            Scoring::Echo => self.score_one(r),
            Scoring::Forced => self.score_forced(r),
        });
        Ok(probed.into_iter().map(Ok).chain(results).collect::<Result<_, _>>()?)
    }

    /// The server applies its own chat template; records keep the messages as JSON.
    fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, ModelError> {
        serde_json::to_string(messages).map_err(ModelError::ChatJson)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_model_is_named_by_its_reported_hash_or_its_listing() {
        let hash = "ab".repeat(32);
        let ours = json!({"id": "m", "created": 0, "meta": {"sha256": hash}});
        assert_eq!(served_identity("m", &ours), hash);
        let other = json!({"id": "m", "created": 1, "owned_by": "llamacpp", "meta": {"n_params": 7}});
        let later = json!({"id": "m", "created": 2, "owned_by": "llamacpp", "meta": {"n_params": 7}});
        let bigger = json!({"id": "m", "created": 2, "owned_by": "llamacpp", "meta": {"n_params": 8}});
        let named = served_identity("m", &other);
        assert!(named.starts_with("served:") && named.len() == "served:".len() + 64, "{named}");
        assert_eq!(named, served_identity("m", &later), "the listing time does not count");
        assert_ne!(named, served_identity("m", &bigger));
        assert_ne!(named, served_identity("n", &other));
        let not_a_hash = json!({"id": "m", "meta": {"sha256": "x"}});
        assert!(served_identity("m", &not_a_hash).starts_with("served:"));
    }
}

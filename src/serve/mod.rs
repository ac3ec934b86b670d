//! `repairbench serve`: our engine behind an OpenAI-compatible HTTP API, so harnesses that
//! speak it (lm-evaluation-harness's local-completions, inspect, SWE-bench's inference
//! scripts, the `openai` client) can evaluate a GGUF model through repairbench's engine.
//!
//! Endpoints: `/v1/models`, `/v1/completions` (`echo`, `logprobs`, `n`, `seed`, `stop`,
//! `max_tokens`, `temperature`, `top_p`) and `/v1/chat/completions` (the GGUF chat template;
//! `stream` as server-sent events). Bad requests get OpenAI-style error bodies with 4xx codes.
//! Generations of concurrent requests are decoded together in one continuous batch (see
//! [`batcher`]); log-probabilities are computed beside it.

mod api;
mod batcher;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::model::Engine;

/// The served model and the id clients call it by.
pub struct Served {
    pub engine: Arc<Engine>,
    pub batcher: batcher::Batcher,
    pub id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the server stopped")]
    Serve(#[source] std::io::Error),
    #[error("loading model {model}")]
    Model {
        model: String,
        #[source]
        source: Box<crate::model::ModelError>,
    },
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
}

/// `repairbench serve`: loads the model from `source` (a GGUF path, `hf:` or `pip:`) and
/// serves it on `addr` until the process is stopped (see [`serve`]).
pub fn serve_model(
    source: &str,
    max_batch: usize,
    addr: &str,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let engine = Engine::load(source)
        .map_err(|e| ServeError::Model { model: source.to_owned(), source: Box::new(e) })?;
    let runtime = tokio::runtime::Runtime::new().map_err(ServeError::Runtime)?;
    runtime.block_on(serve(engine, max_batch.max(1), addr, on_listening))
}

/// The routes, for a listener or a test.
pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/v1/models", get(api::models))
        .route("/v1/completions", post(api::completions))
        .route("/v1/chat/completions", post(api::chat_completions))
        .fallback(api::not_found)
        .with_state(served)
}

/// Serves `engine` on `addr` until the process is stopped, decoding up to `max_batch`
/// sequences together; `on_listening` gets the bound address (port 0 picks a free one).
pub async fn serve(
    engine: Engine,
    max_batch: usize,
    addr: &str,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let info = crate::model::LanguageModel::info(&engine).clone();
    let id = info.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| {
        info.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into())
    });
    let engine = Arc::new(engine);
    let batcher = batcher::Batcher::start(engine.clone(), max_batch);
    let served = Arc::new(Served { engine, batcher, id });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })?;
    let local = listener.local_addr().map_err(|source| ServeError::Bind { addr: addr.to_owned(), source })?;
    tracing::info!(%local, model = %served.id, "serving");
    on_listening(local);
    axum::serve(listener, router(served)).await.map_err(ServeError::Serve)
}

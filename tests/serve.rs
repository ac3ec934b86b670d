//! `repairbench serve` and the `openai:` backend against each other, with the real default
//! model: the backend's generations and log-likelihoods through the server equal the local
//! engine's; the MMLU fixture picks the same answers both ways; the official `openai` Python
//! client (from the package index) works against the server, streaming included; bad requests
//! get OpenAI-style 4xx error bodies.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::serve::Server;
use repairbench::model::openai::{OpenAiModel, RemoteSettings};
use repairbench::model::{
    ChatMessage, Engine, GenerateRequest, LanguageModel, Prompt, Sampling, ScoreRequest,
};
use repairbench::suites::{evaluate, load_suite, EvalOptions, SampleRecord};

fn engine() -> Engine {
    Engine::load(repairbench::model::DEFAULT_MODEL).expect("the default model")
}

#[test]
fn the_openai_backend_through_serve_matches_the_local_engine() {
    let server = Server::start();
    let mut local = engine();
    let mut remote = OpenAiModel::connect(&server.base, RemoteSettings::default()).unwrap();
    let served = remote.info().served.clone().unwrap();
    assert_eq!(served["backend"], "openai");
    assert_eq!(
        served["models"]["data"][0]["meta"]["quantization"], "Q4_1",
        "the manifest records the server's report"
    );
    assert_eq!(remote.info().context_length, local.info().context_length);
    // Fingerprints name a served model by the weights the server reports.
    assert_eq!(remote.info().sha256, local.info().sha256);

    // Greedy and seeded sampling, raw and chat, give the same text.
    let requests = [
        GenerateRequest {
            prompt: Prompt::Text("def fibonacci(n):\n".into()),
            max_tokens: 24,
            sampling: Sampling::GREEDY,
            stop: vec!["\ndef".into()],
            n: 1,
        },
        GenerateRequest {
            prompt: Prompt::Chat(vec![ChatMessage::new("user", "Name a colour.")]),
            max_tokens: 16,
            sampling: Sampling { temperature: 0.8, top_k: None, top_p: Some(0.9), seed: 7 },
            stop: Vec::new(),
            n: 2,
        },
    ];
    for request in &requests {
        let (here, there) = (local.generate(request).unwrap(), remote.generate(request).unwrap());
        let texts = |o: &repairbench::model::GenerateOutput| {
            o.sequences.iter().map(|s| s.text.clone()).collect::<Vec<_>>()
        };
        assert_eq!(texts(&here), texts(&there), "{:?}", request.prompt);
        assert_eq!(here.prompt_tokens, there.prompt_tokens);
    }

    // Log-likelihoods through echo + logprobs.
    let scores = [
        ScoreRequest::new("The capital of France is", " Paris"),
        ScoreRequest::new("Question: What is 7 times 8?\nAnswer:", " B"),
        // A boundary no token spans: where one does, engines split it differently.
        ScoreRequest::new("def add(a, b):", "\n    return a + b\n"),
    ];
    let (here, there) = (local.score(&scores).unwrap(), remote.score(&scores).unwrap());
    for ((a, b), request) in here.iter().zip(&there).zip(&scores) {
        assert_eq!(a.tokens.len(), b.tokens.len(), "{request:?}");
        assert!(
            (a.sum_logprob - b.sum_logprob).abs() < 1e-6,
            "{request:?}: {} vs {}",
            a.sum_logprob,
            b.sum_logprob
        );
        assert_eq!(a.is_greedy, b.is_greedy, "{request:?}");
    }

    // The MMLU-layout fixture: per-choice log-likelihoods agree and the answers are the same.
    let suite = load_suite("mmlu").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = |model: &mut dyn LanguageModel, name: &str| -> Vec<SampleRecord> {
        let mut opts = EvalOptions::new(dir.path().join(name));
        opts.data = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu"));
        opts.shots = Some(1);
        evaluate(&suite, &opts, Some(model), None).unwrap();
        std::fs::read_to_string(dir.path().join(name).join("samples.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (here, there) = (run(&mut local, "local"), run(&mut remote, "served"));
    assert_eq!(here.len(), 5);
    for (a, b) in here.iter().zip(&there) {
        for (x, y) in a.choices.iter().zip(&b.choices) {
            assert!((x.loglikelihood - y.loglikelihood).abs() < 0.05, "{}: {x:?} vs {y:?}", a.doc_id);
        }
        assert_eq!(a.scores["acc"], b.scores["acc"], "{}", a.doc_id);
    }
}

fn post(base: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut response =
        agent.post(&format!("{base}{path}")).header("Content-Type", "application/json").send(body).unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}")))
}

#[test]
fn bad_requests_get_openai_error_bodies() {
    let server = Server::start();
    let cases = [
        ("/completions", r#"{"prompt": 3}"#, 400, None),
        ("/completions", r#"{"prompt": "hi", "max_tokens": 100000}"#, 400, Some("context_length_exceeded")),
        ("/completions", r#"{"prompt": "hi", "model": "gpt-9"}"#, 404, Some("model_not_found")),
        ("/completions", r#"{"prompt": "hi", "n": 0}"#, 400, None),
        // Token-id prompts are checked against the vocabulary; an empty one is no prompt.
        ("/completions", r#"{"prompt": [4294967295]}"#, 400, None),
        ("/completions", r#"{"prompt": [[1, 2], []]}"#, 400, None),
        ("/completions", r#"{"prompt": [1, "a"]}"#, 400, None),
        ("/chat/completions", r#"{"messages": []}"#, 400, None),
        (
            "/chat/completions",
            r#"{"messages": [{"role": "user", "content": "hi"}], "temperature": 5}"#,
            400,
            None,
        ),
    ];
    for (path, body, status, code) in cases {
        let (got, value) = post(&server.base, path, body);
        assert_eq!(got, status, "{path} {body}: {value}");
        assert_eq!(value["error"]["type"], "invalid_request_error", "{value}");
        assert!(value["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{value}");
        if let Some(code) = code {
            assert_eq!(value["error"]["code"], code, "{value}");
        }
    }
    // A prompt of token ids is read as it is: the echo gives a log-probability for each id and
    // for the generated token (tests/lm_eval.rs shows why an end-of-sequence one must be there).
    let (got, value) = post(
        &server.base,
        "/completions",
        r#"{"prompt": [[504, 3537], [504]], "max_tokens": 1, "echo": true, "logprobs": 1}"#,
    );
    assert_eq!(got, 200, "{value}");
    for (choice, ids) in value["choices"].as_array().unwrap().iter().zip([2, 1]) {
        assert_eq!(choice["logprobs"]["token_logprobs"].as_array().unwrap().len(), ids + 1, "{choice}");
        assert!(choice["logprobs"]["token_logprobs"][0].is_null(), "{choice}");
    }
    let long = "word ".repeat(9000);
    let (got, value) = post(
        &server.base,
        "/chat/completions",
        &serde_json::json!({"messages": [{"role": "user", "content": long}], "stream": true}).to_string(),
    );
    assert_eq!((got, value["error"]["code"].as_str()), (400, Some("context_length_exceeded")), "{value}");
}

/// The official client, installed from the package index into the cache once.
fn openai_client() -> PathBuf {
    let target = repairbench::env::cache_dir().join("test-tools/openai-python");
    if !target.join("openai").is_dir() {
        let installed = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
            .arg(&target)
            .arg("openai>=1.40,<3")
            .status()
            .expect("python3 with pip (scripts/setup)");
        assert!(installed.success(), "pip install openai");
    }
    target
}

#[test]
fn the_official_openai_client_works_against_serve() {
    let site = openai_client();
    let server = Server::start();
    let script = r#"
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = client.models.list().data[0].id
done = client.completions.create(model=model, prompt="def add(a, b):\n", max_tokens=12, temperature=0)
assert done.choices[0].text and done.usage.prompt_tokens > 0, done
scored = client.completions.create(model=model, prompt="The capital of France is Paris", max_tokens=0, echo=True, logprobs=1)
lp = scored.choices[0].logprobs
assert lp.token_logprobs[0] is None and all(v < 0 for v in lp.token_logprobs[1:]), lp
chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0)
text = chat.choices[0].message.content
parts = []
for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == text, (parts, text)
try:
    client.completions.create(model=model, prompt="hi", max_tokens=100000)
    raise SystemExit("no error for a prompt past the context")
except Exception as e:
    assert getattr(e, "status_code", None) == 400, e
print("ok", repr(text))
"#;
    let run = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&server.base)
        .env("PYTHONPATH", &site)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.starts_with("ok "), "{stdout}");
}

/// A server that answers `/models` and `/completions` but, like many, without prompt
/// log-probabilities: scoring is refused with an error naming that capability.
#[test]
fn a_server_without_prompt_logprobs_is_refused_by_name() {
    let base = common::serve::plain_server();
    let mut model = OpenAiModel::connect(&base, RemoteSettings::default()).unwrap();
    assert_eq!(model.info().name.as_deref(), Some("plain"));
    let error = model.score(&[ScoreRequest::new("a", " b")]).expect_err("no prompt log-probabilities");
    let text = repairbench::error_chain(&error);
    assert!(text.contains("prompt log-probabilities") && text.contains("/completions"), "{text}");
}

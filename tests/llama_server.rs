//! The `openai:` backend against llama.cpp's own server (`llama-server`, built by
//! scripts/build-llama-cpp, started here on a loopback port with the default model):
//! generation works end to end, and the MMLU-layout fixture's per-choice log-likelihoods agree
//! with our engine's and pick the same answers. llama-server refuses `echo`, so this also
//! exercises forced scoring (see src/model/openai.rs).

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use repairbench::model::openai::{OpenAiModel, RemoteSettings};
use repairbench::model::{
    ChatMessage, Engine, FinishReason, GenerateRequest, LanguageModel, Prompt, Sampling,
};
use repairbench::suites::{evaluate, load_suite, EvalOptions, SampleRecord};

struct LlamaServer {
    child: Child,
    base: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_llama_server() -> LlamaServer {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(common::llama::llama_bin().join("llama-server"))
        .arg("-m")
        .arg(common::llama::default_model_path())
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "-t",
            "2",
            "-c",
            "4096",
            "--parallel",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llama-server starts");
    let server = LlamaServer { child, base: format!("http://127.0.0.1:{port}/v1") };
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready =
            agent.get(&format!("http://127.0.0.1:{port}/health")).call().is_ok_and(|r| r.status() == 200);
        if ready {
            return server;
        }
        assert!(Instant::now() < deadline, "llama-server did not become healthy within 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn generation_and_mmlu_through_llama_server() {
    let server = start_llama_server();
    let mut remote = OpenAiModel::connect(&server.base, RemoteSettings::default()).unwrap();
    let served = remote.info().served.clone().unwrap();
    assert_eq!(served["url"], server.base.as_str());
    assert!(remote.info().context_length > 0, "llama-server reports its model's context: {served}");

    // Generation end to end, chat and raw text, with a stop string.
    let chat = GenerateRequest {
        prompt: Prompt::Chat(vec![ChatMessage::new(
            "user",
            "Write a Python function that adds two numbers.",
        )]),
        max_tokens: 32,
        sampling: Sampling::GREEDY,
        stop: Vec::new(),
        n: 1,
    };
    let out = remote.generate(&chat).unwrap();
    assert!(!out.sequences[0].text.trim().is_empty(), "{out:?}");
    assert!(out.prompt_tokens > 5, "{out:?}");
    let raw = GenerateRequest {
        prompt: Prompt::Text("def fibonacci(n):\n".into()),
        max_tokens: 48,
        stop: vec!["else".into()],
        ..chat
    };
    let out = remote.generate(&raw).unwrap();
    let text = &out.sequences[0].text;
    assert!(text.contains("return") && !text.contains("else"), "{text:?}");
    assert_eq!(out.sequences[0].finish, FinishReason::Stop, "{text:?}");
    // Our engine's greedy text for the same prompt is the same.
    let local_text = Engine::load(repairbench::model::DEFAULT_MODEL).unwrap().generate_text(&raw).unwrap();
    assert_eq!(&local_text.sequences[0].text, text);

    // The MMLU-layout fixture through both.
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
    let mut local = Engine::load(repairbench::model::DEFAULT_MODEL).unwrap();
    let (here, there) = (run(&mut local, "local"), run(&mut remote, "llama-server"));
    assert_eq!(remote.info().served.as_ref().unwrap()["scoring"], "forced", "llama-server refuses echo");
    assert_eq!(here.len(), 5);
    // Forced scoring asks llama-server for a whole batched pass per position (cache_prompt
    // false), so its figures equal llama.cpp's batched evaluation of context + choice
    // (scripts/llama-logprobs.cpp, n_batch 512). The noise floor for ours is llama.cpp's own
    // batched-versus-token-by-token spread on the same choices (as in tests/llama_cpp_quants.rs).
    let dir_texts = tempfile::tempdir().unwrap();
    let (mut ours_vs_server, mut server_vs_batched, mut spread) = (Vec::new(), Vec::new(), Vec::new());
    for (a, b) in here.iter().zip(&there) {
        for (i, (x, y)) in a.choices.iter().zip(&b.choices).enumerate() {
            assert_eq!(x.tokens, y.tokens, "{}: the same continuation tokens", a.doc_id);
            let text = dir_texts.path().join(format!("{}-{i}.txt", a.doc_id.replace('/', "_")));
            std::fs::write(&text, format!("{}{}", a.prompt, x.continuation)).unwrap();
            let model = common::llama::default_model_path();
            let choice = |n_batch| {
                let eval = common::llama::llama_logprobs(&model, &text, n_batch);
                eval.next_logprob[eval.next_logprob.len() - x.tokens..].iter().sum::<f64>()
            };
            let (batched, single) = (choice(512), choice(1));
            ours_vs_server.push((x.loglikelihood - y.loglikelihood).abs());
            server_vs_batched.push((y.loglikelihood - batched).abs());
            spread.push((batched - single).abs());
        }
        assert_eq!(a.scores["acc"], b.scores["acc"], "{}", a.doc_id);
        assert_eq!(a.extracted, b.extracted, "{}: the same chosen answers", a.doc_id);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    println!(
        "per-choice log-likelihood over {} choices (mean |Δ|, max): ours vs llama-server {:.4}, {:.4}; \
         llama-server vs llama.cpp batched {:.4}, {:.4}; llama.cpp batched vs token-by-token {:.4}, {:.4}",
        ours_vs_server.len(),
        mean(&ours_vs_server),
        max(&ours_vs_server),
        mean(&server_vs_batched),
        max(&server_vs_batched),
        mean(&spread),
        max(&spread)
    );
    assert!(mean(&server_vs_batched) < 1e-3, "llama-server scores as llama.cpp's batched pass");
    let ours = mean(&ours_vs_server);
    let limit = mean(&spread).max(0.05) * 1.05;
    assert!(ours <= limit, "ours vs llama-server {ours:.4} nats > {limit:.4}");
}

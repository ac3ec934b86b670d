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

/// `probe contamination --method mink` scores the same tokens of each text through our
/// engine, `repairbench serve` (echo) and llama-server (forced scoring), and the per-item
/// Min-K% values agree: exactly through our server (the same engine), within the tolerance
/// the MMLU comparison above allows for llama.cpp.
#[test]
fn min_k_agrees_across_the_engine_our_server_and_llama_server() {
    use repairbench::probe::{probe, Method, ProbePlan, ProbeSummary, SetSource};
    let dir = tempfile::tempdir().unwrap();
    let texts = |name: &str, lines: &[&str]| {
        let path = dir.path().join(name);
        let body: Vec<String> = lines
            .iter()
            .enumerate()
            .map(|(i, t)| serde_json::json!({"id": format!("{name}{i}"), "text": t}).to_string())
            .collect();
        std::fs::write(&path, body.join("\n")).unwrap();
        path
    };
    let target = texts(
        "seen",
        &[
            "The quick brown fox jumps over the lazy dog.",
            "def add(a, b):\n    return a + b\n",
            "Water boils at 100 degrees Celsius at sea level.",
        ],
    );
    let control = texts(
        "unseen",
        &[
            "dog lazy the over jumps fox brown quick The.",
            "b return add(a, :\n    + a def b)",
            "level sea at Celsius boils 100 at degrees Water.",
        ],
    );
    let run = |model: &mut dyn LanguageModel, name: &str| -> ProbeSummary {
        let plan = ProbePlan {
            method: Method::MinK { k: 20 },
            target: SetSource::Texts(target.clone()),
            control: SetSource::Texts(control.clone()),
            limit: None,
            out: dir.path().join(name),
            force: false,
        };
        probe(&plan, model, &mut repairbench::report::ConsoleProgress::new()).unwrap()
    };
    let ours = run(&mut Engine::load(repairbench::model::DEFAULT_MODEL).unwrap(), "engine");
    let served = {
        let server = common::serve::Server::start();
        run(&mut OpenAiModel::connect(&server.base, RemoteSettings::default()).unwrap(), "serve")
    };
    let llama = {
        let server = start_llama_server();
        run(&mut OpenAiModel::connect(&server.base, RemoteSettings::default()).unwrap(), "llama-server")
    };
    let mut deltas = Vec::new();
    for (key, a) in &ours.records {
        let (b, c) = (&served.records[key], &llama.records[key]);
        assert_eq!(
            (a.tokens, b.tokens, c.tokens),
            (a.tokens, a.tokens, a.tokens),
            "{key}: the same tokens scored"
        );
        assert!(a.tokens > 5, "{key}");
        assert!((a.values["min_k"] - b.values["min_k"]).abs() < 1e-9, "{key}: {a:?} {b:?}");
        // Min-K%++ needs whole distributions, which only the engine has.
        assert!(a.values.contains_key("min_k_plus_plus") && !c.values.contains_key("min_k_plus_plus"));
        deltas.push((a.values["min_k"] - c.values["min_k"]).abs());
    }
    let mean = deltas.iter().sum::<f64>() / deltas.len() as f64;
    let max = deltas.iter().copied().fold(0.0, f64::max);
    println!("min_k over {} texts, ours vs llama-server: mean |Δ| {mean:.4}, max {max:.4}", deltas.len());
    assert!(mean <= 0.05 * 1.05, "mean |Δ| {mean:.4} nats");
    let auroc = |s: &ProbeSummary| s.separations.iter().find(|x| x.statistic == "min_k").unwrap().auroc;
    assert_eq!(auroc(&ours), auroc(&llama));
}

//! `repairbench model info|generate|score` as a user runs them, on the default model.

use std::process::{Command, Output};

fn repairbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_repairbench")).args(args).output().expect("the binary runs")
}

fn json_stdout(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

fn keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().expect("an object").keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn info_reports_the_default_model() {
    let out = repairbench(&["model", "info"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in
        ["architecture:   llama", "quantization:   Q4_1", "context length: 8192", "sha256:", "<|im_start|>"]
    {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let info = json_stdout(&repairbench(&["model", "info", "--json"]));
    assert_eq!(info["architecture"], "llama");
    assert_eq!(info["source"], repairbench::model::DEFAULT_MODEL);
    assert_eq!(info["sha256"].as_str().unwrap().len(), 64);
    assert!(info["parameters"].as_u64().unwrap() > 100_000_000);
}

#[test]
fn generate_json_has_exactly_the_documented_fields() {
    let out = repairbench(&[
        "model",
        "generate",
        "--prompt",
        "def add(a, b):\n    return",
        "--max-tokens",
        "4",
        "--json",
    ]);
    let value = json_stdout(&out);
    assert_eq!(keys(&value), ["decode_tok_s", "generated_tokens", "prefill_tok_s", "prompt_tokens", "text"]);
    assert_eq!(value["generated_tokens"], 4);
    assert!(value["text"].as_str().unwrap().starts_with(" a + b"), "{value}");
    assert!(value["prefill_tok_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn generate_chat_with_seeded_sampling() {
    let args = [
        "model",
        "generate",
        "--prompt",
        "Name a color.",
        "--chat",
        "--max-tokens",
        "5",
        "--temperature",
        "0.8",
        "--top-k",
        "20",
        "--top-p",
        "0.9",
        "--seed",
        "5",
        "--json",
    ];
    let a = json_stdout(&repairbench(&args));
    let b = json_stdout(&repairbench(&args));
    assert_eq!(a["text"], b["text"]);
    assert!(a["prompt_tokens"].as_u64().unwrap() > 10, "the chat template adds the system turn: {a}");
}

#[test]
fn score_json_lists_continuation_tokens() {
    let out = repairbench(&[
        "model",
        "score",
        "--context",
        "The capital of France is",
        "--continuation",
        " Paris",
        "--json",
    ]);
    let value = json_stdout(&out);
    assert_eq!(keys(&value), ["is_greedy", "sum_logprob", "tokens"]);
    let tokens = value["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 1);
    assert_eq!(keys(&tokens[0]), ["id", "logprob", "text"]);
    assert_eq!(tokens[0]["text"], " Paris");
    let logprob = tokens[0]["logprob"].as_f64().unwrap();
    assert!(logprob < 0.0 && logprob > -3.0, "{value}");
    assert_eq!(value["sum_logprob"].as_f64().unwrap(), logprob);
}

#[test]
fn bad_input_exits_1_with_a_message() {
    let out = repairbench(&["model", "info", "/nonexistent/model.gguf"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model.gguf") && stderr.contains("does not exist"), "{stderr}");

    let out = repairbench(&["model", "generate", "--prompt", ""]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("prompt is empty"));

    let out = repairbench(&["model", "info", "hf:only-owner"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hf:OWNER/REPO/FILE"));
}

#[test]
fn quantize_writes_a_model_of_the_target_type_that_scores_close_to_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let score = |model: &str| -> f64 {
        let out = json_stdout(&repairbench(&[
            "model",
            "score",
            model,
            "--context",
            "def add(a, b):\n    return",
            "--continuation",
            " a + b",
            "--json",
        ]));
        out["sum_logprob"].as_f64().unwrap_or_else(|| panic!("sum_logprob in {out}"))
    };
    let source = score(repairbench::model::DEFAULT_MODEL);
    for (to, tolerance) in [("q8_0", 0.25), ("q4_0", 2.0)] {
        let path = dir.path().join(format!("{to}.gguf"));
        let out = repairbench(&["model", "quantize", "--to", to, "--out", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let info = json_stdout(&repairbench(&["model", "info", path.to_str().unwrap(), "--json"]));
        assert_eq!(info["quantization"], to.to_uppercase(), "{info}");
        let requantized = score(path.to_str().unwrap());
        // Q8_0 keeps nearly all of Q4_1's values; Q4_0 rounds them again, so it may drift more.
        assert!((requantized - source).abs() < tolerance, "{to}: {requantized} vs {source}");
    }
    let refused = repairbench(&["model", "quantize", "--to", "q2_k", "--out", "/dev/null"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a quantization repairbench runs"));
}

/// The whole model on every kernel path this CPU runs, forced with REPAIRBENCH_KERNEL_PATH:
/// the same log-probabilities to the bit (printed JSON numbers round-trip exactly). The test
/// names the paths it compared in its output (`--nocapture`), and a CPU without AVX2 fails it
/// rather than leaving the vector paths unrun.
#[test]
fn every_kernel_path_scores_the_same_bits() {
    use repairbench::model::kernels::KernelPath;
    let paths = KernelPath::available();
    assert!(paths.contains(&KernelPath::Avx2), "this test needs a CPU with AVX2/FMA/F16C");
    let context = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n";
    let mut scores = Vec::new();
    for path in &paths {
        let run = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_repairbench"))
                .args(args)
                .env(repairbench::env::KERNEL_PATH, path.name())
                .output()
                .unwrap()
        };
        let info = run(&["model", "info"]);
        assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
        let text = String::from_utf8_lossy(&info.stdout);
        assert!(text.contains(&format!("kernel path {path:?}")), "{path:?} was not the path in use:\n{text}");
        let score =
            run(&["model", "score", "--context", context, "--continuation", "    return a + b\n", "--json"]);
        scores.push((path, json_stdout(&score)));
    }
    eprintln!(
        "kernel paths compared on the whole model: {:?}",
        scores.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let (first, expected) = &scores[0];
    assert!(expected["tokens"].as_array().is_some_and(|t| t.len() > 3), "{expected}");
    for (path, got) in &scores[1..] {
        assert_eq!(got, expected, "{path:?} against {first:?}");
    }

    let bad = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["model", "info"])
        .env(repairbench::env::KERNEL_PATH, "avx9")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success()
            && stderr.contains("REPAIRBENCH_KERNEL_PATH=avx9: expected avx512, avx2 or scalar"),
        "{stderr}"
    );
}

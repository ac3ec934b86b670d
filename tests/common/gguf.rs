//! Small GGUF files written here.

use candle_core::quantized::gguf_file::{self, Value};

/// A SentencePiece-style (`llama`) vocabulary with byte fallback and no weights: `hello`
/// merges by score, BOS `<s>` is prepended by default.
pub fn write_spm_gguf(dir: &std::path::Path) -> std::path::PathBuf {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    // Higher score = merged earlier.
    for (piece, score) in [
        ("▁", -100.0),
        ("h", -100.0),
        ("e", -100.0),
        ("l", -100.0),
        ("o", -100.0),
        ("ll", -5.0),
        ("he", -5.5),
        ("llo", -6.0),
        ("▁h", -10.0),
        ("hello", -4.0),
        ("▁hello", -3.0),
    ] {
        tokens.push(piece.into());
        types.push(1);
        scores.push(score);
    }
    let array = |v: Vec<Value>| Value::Array(v);
    let metadata = [
        ("general.architecture", Value::String("llama".into())),
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", array(tokens.iter().map(|t| Value::String(t.clone())).collect())),
        ("tokenizer.ggml.token_type", array(types.iter().map(|&t| Value::I32(t)).collect())),
        ("tokenizer.ggml.scores", array(scores.iter().map(|&s| Value::F32(s)).collect())),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
    ];
    let path = dir.join("spm.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    gguf_file::write(&mut file, &refs, &[]).unwrap();
    path
}

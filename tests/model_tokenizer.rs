//! Tokenizers built from GGUF metadata: the real SmolLM2 vocabulary (byte-level BPE) and a small
//! SentencePiece-style vocabulary written to a GGUF file here.

use std::sync::OnceLock;

use candle_core::quantized::gguf_file::{self, Value};
use repairbench::model::gguf::GgufFile;
use repairbench::model::source;
use repairbench::model::tokenizer::TextTokenizer;
use repairbench::model::DEFAULT_MODEL;

fn smollm2() -> &'static TextTokenizer {
    static TOKENIZER: OnceLock<TextTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let resolved = source::resolve(DEFAULT_MODEL).expect("default model resolves");
        TextTokenizer::load(&GgufFile::open(&resolved.path).unwrap()).unwrap()
    })
}

#[test]
fn code_round_trips_exactly() {
    let t = smollm2();
    for text in [
        "def f(x):\n\treturn x  # tab-indented\r\n",
        "fn main() {\n    println!(\"héllo, wörld — ✓\");\n}\n",
        "emoji 😀🚀 and CJK 漢字 and   spaces\t\t\n\n\n",
        "  leading spaces, trailing newline\n",
        "<|im_start|>user\nhi<|im_end|>\n",
    ] {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "ids {ids:?}");
    }
}

#[test]
fn special_tokens_encode_as_single_ids() {
    let t = smollm2();
    // Ids as llama.cpp's tokenizer gives them for this model.
    assert_eq!(t.encode("<|im_start|>system").unwrap(), vec![1, 9690]);
    assert_eq!(t.encode("<|im_end|>").unwrap(), vec![2]);
    assert_eq!(t.eos_id, Some(2));
    assert_eq!(t.stop_ids, vec![2]);
    assert!(!t.add_bos);
    assert_eq!(t.encode_prompt("Hi").unwrap(), t.encode("Hi").unwrap());
}

#[test]
fn digits_are_split_one_by_one() {
    let t = smollm2();
    let ids = t.encode("12345").unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
    let pieces: Vec<String> = ids.iter().map(|&i| t.decode(&[i]).unwrap()).collect();
    assert_eq!(pieces, ["1", "2", "3", "4", "5"]);
    // No prefix space is invented: "Hello" at the start is one token without "Ġ".
    let hello = t.encode("Hello").unwrap();
    assert_eq!(hello.len(), 1);
    assert_eq!(t.token_piece(hello[0]).as_deref(), Some("Hello"));
}

/// A tiny SentencePiece-style GGUF (`tokenizer.ggml.model = "llama"`).
fn write_spm_gguf(dir: &std::path::Path) -> std::path::PathBuf {
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
    let metadata = vec![
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

#[test]
fn sentencepiece_vocabulary_merges_by_score_and_falls_back_to_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_spm_gguf(dir.path());
    let t = TextTokenizer::load(&GgufFile::open(&path).unwrap()).unwrap();
    let id = |piece: &str| t.token_id(piece).unwrap();
    assert_eq!(t.encode("hello").unwrap(), vec![id("▁hello")]);
    assert_eq!(t.encode("hello hello").unwrap(), vec![id("▁hello"), id("▁hello")]);
    // "é" is not in the vocabulary: its UTF-8 bytes are used.
    assert_eq!(t.encode("hé").unwrap(), vec![id("▁h"), id("<0xC3>"), id("<0xA9>")]);
    for text in ["hello", "hé hello", "hello  hé\n"] {
        assert_eq!(t.decode(&t.encode(text).unwrap()).unwrap(), text);
    }
    // llama-style vocabularies prepend BOS by default.
    assert!(t.add_bos);
    assert_eq!(t.encode_prompt("hello").unwrap(), vec![1, id("▁hello")]);
}

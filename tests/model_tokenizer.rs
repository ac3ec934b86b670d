//! Tokenizers built from GGUF metadata: the real SmolLM2 vocabulary (byte-level BPE) and a small
//! SentencePiece-style vocabulary written to a GGUF file here.

use std::sync::OnceLock;

mod common;

use common::gguf::write_spm_gguf;

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

#[test]
fn tokenizer_json_beside_the_model_is_preferred() {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let model = source::resolve(DEFAULT_MODEL).unwrap().path;
    let gguf = GgufFile::open(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let linked = dir.path().join("model.gguf");
    std::os::unix::fs::symlink(&model, &linked).unwrap();
    // The same vocabulary, but a pre-tokenizer that adds a prefix space: "Hello" becomes "ĠHello".
    let vocab: tokenizers::models::bpe::Vocab = gguf
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect();
    let merges = gguf
        .get_str_array("tokenizer.ggml.merges")
        .unwrap()
        .into_iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect();
    let mut json =
        tokenizers::Tokenizer::new(BPE::builder().vocab_and_merges(vocab, merges).build().unwrap());
    json.with_pre_tokenizer(Some(ByteLevel::new(true, true, true)));
    json.with_decoder(Some(ByteLevel::new(true, true, true)));
    json.save(dir.path().join("tokenizer.json"), false).unwrap();

    let t = TextTokenizer::load(&GgufFile::open(&linked).unwrap()).unwrap();
    let ids = t.encode("Hello").unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(t.token_piece(ids[0]).as_deref(), Some("ĠHello"));
    // BOS/EOS still come from the GGUF metadata.
    assert_eq!(t.eos_id, Some(2));
}
